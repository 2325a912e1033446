"""The report model dslogs.report/1: its normative keys, JSON round trip, --fail-on levels,
bad report files, the markdown summary; end to end through the real ingest and the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from datetime import UTC, datetime, timedelta

import pytest

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import compute_metrics
from dslogs.analyzer.model.report import (
    SCHEMA,
    build_checklist,
    build_report_from_metrics,
    has_findings_at,
    load_report_json,
    report_to_json,
)
from dslogs.analyzer.render.markdown import render_markdown
from dslogs.analyzer.rules import RULE_IDS
from tests.diag_fixture_db import fixture_connection

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
XSS = "</script><script>alert(1)</script>|`x`"
INGEST = {"files": 2, "events": 100, "bad_lines": 1, "skipped_files": 0,
          "bad_line_samples": [{"file": "a.jsonl", "line": 3, "reason": "truncated"}], "formats": {"v1": 100}}


def _fixture_metrics():
    events, requests = [], []
    for s, sid in enumerate(("healthy", XSS)):
        for k in range(6):
            ts = T0 + timedelta(minutes=2 * k + 30 * s)
            rid = f"{sid}#{k + 1}"
            leak = 250.0 * k if sid == XSS else 0.0
            events += [
                {"ts": ts, "stage": "tokenize", "session_id": sid, "request_id": rid, "host": "gpu-01", "duration_ms": 12.0 + k},
                {"ts": ts, "stage": "prefill", "session_id": sid, "request_id": rid, "host": "gpu-01", "duration_ms": 300.0 + k,
                 "input_len": 100 + 50 * k, "kv_seq_len": 100 + 50 * k},
                {"ts": ts, "stage": "gpu_memory", "session_id": sid, "request_id": rid, "host": "gpu-01", "pid": 1,
                 "reserved_mb": 4200.0 + leak, "allocated_mb": 3500.0, "num_ooms": 0},
                {"ts": ts, "stage": "gpu_sample", "host": "gpu-01", "pid": 1, "gpu_index": 0, "gpu_util_pct": 85.0,
                 "gpu_mem_used_mb": 5000.0, "gpu_mem_total_mb": 24576.0},
            ]
            requests.append({"session_id": sid, "request_id": rid, "host": "gpu-01", "turn_index": k + 1,
                             "start_ts": ts, "end_ts": ts + timedelta(seconds=20), "input_len": 100 + 50 * k,
                             "output_len": 300, "prefill_ms": 300.0 + k, "decode_ms": 12000.0, "ttft_ms": 320.0 + k,
                             "tpot_ms": 40.0, "e2e_ms": 12500.0, "is_error": False, "gpu_wait_pct": 25.0,
                             "gpu_util_pct": 85.0, "num_beams": 1, "max_new_tokens": 2048})
    events.append({"ts": T0 + timedelta(minutes=40), "stage": "error", "session_id": XSS, "host": "gpu-01",
                   "error_type": "OutOfMemoryError", "error_msg": f"CUDA out of memory {XSS}"})
    sessions = [{"session_id": sid, "host": "gpu-01", "requests": 6, "errors": 0, "first_ts": T0 + timedelta(minutes=30 * s),
                 "last_ts": T0 + timedelta(minutes=30 * s + 10), "tpot_p50_ms": 40.0}
                for s, sid in enumerate(("healthy", XSS))]
    con = fixture_connection(events, requests, sessions)
    return compute_metrics(con)


@pytest.fixture(scope="module")
def model():
    return build_report_from_metrics(_fixture_metrics(), INGEST, {"since": None, "until": None}, defaults())


def test_model_has_the_normative_keys(model):
    assert model["schema"] == SCHEMA == "dslogs.report/1"
    for key in ("window", "ingest", "stages", "requests", "sessions", "findings", "generated_at",
                "dslogs_version", "hosts", "checklist", "rules", "errors", "series", "session_details"):
        assert key in model, key
    assert set(model["window"]) >= {"since", "until", "first_event", "last_event"}
    assert set(model["ingest"]) >= {"files", "events", "bad_lines", "skipped_files"}
    for row in model["stages"]:
        assert set(row) == {"stage", "count", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms"}
    assert {"count", "ttft_ms", "tpot_ms", "e2e_ms", "goodput"} <= set(model["requests"])
    for s in model["sessions"]:
        assert {"session_id", "requests", "reserved_slope_mb_per_min", "gpu_wait_pct_p50", "tpot_p50_ms", "findings"} <= set(s)
    for f in model["findings"]:
        assert {"rule", "severity", "session_ids", "value", "threshold", "message", "fix", "scope", "unit",
                "source", "evidence", "hosts"} <= set(f)
        assert set(f["evidence"]) == {"section", "chart", "details"}
    assert [r["rule"] for r in model["rules"]] == list(RULE_IDS)
    assert set(model["series"]) >= {"stage_latency_by_hour", "latency_hist", "prefill_vs_input", "prefill_by_turn",
                                    "gpu_timeline", "gpu_wait_hist", "memory_timeline", "kv_growth",
                                    "errors_timeline", "log_volume", "collector"}


def test_model_findings_and_session_flags(model):
    rules = {f["rule"]: f for f in model["findings"]}
    assert rules["memory_leak"]["session_ids"] == [XSS]
    assert rules["oom"]["session_ids"] == [XSS]
    assert rules["bad_lines"]["severity"] == "info"
    by_id = {s["session_id"]: s for s in model["sessions"]}
    assert by_id["healthy"]["findings"] == []
    assert by_id[XSS]["findings"] == ["memory_leak", "oom"]
    assert model["sessions"][0]["session_id"] == XSS  # flagged first
    status = {r["rule"]: r["status"] for r in model["rules"]}
    assert status["memory_leak"] == "fired" and status["beam_search"] == "pass"
    assert status["rss_growth"] == "no_data" and status["slow_format"] == "no_data"


def test_checklist_items_and_values(model):
    items = {c["id"]: c for c in model["checklist"]}
    assert set(items) == {"tokenize_p50", "prefill_p50", "tpot_p50", "short_prompt_e2e_p50", "ttft_p50",
                          "format_p50", "reserved_band", "gpu_util_peak", "no_oom", "long_prefill_p50", "kv_cache_size"}
    assert items["tokenize_p50"]["status"] == "PASS" and items["tokenize_p50"]["value"] == 14.5
    assert items["reserved_band"]["status"] == "FAIL" and items["reserved_band"]["value"] == 1250.0
    assert items["no_oom"] == {**items["no_oom"], "status": "FAIL", "value": 1}
    assert items["gpu_util_peak"]["status"] == "PASS"
    # 12.5 s for a short prompt, of which the first 16 answer tokens fit 003 §5.2's budget
    e2e = items["short_prompt_e2e_p50"]
    assert e2e["status"] == "PASS" and e2e["value"] < 1200 and "longer than 16 tokens" in e2e["note"]
    for cid in ("format_p50", "long_prefill_p50", "kv_cache_size"):
        assert items[cid]["status"] == "NO DATA" and items[cid]["value"] is None
    assert {c["status"] for c in build_checklist({}, defaults())} == {"NO DATA"}


def test_json_round_trip_is_stable_and_has_no_nan(model, tmp_path):
    text = report_to_json(model)
    assert "NaN" not in text and "Infinity" not in text
    assert report_to_json(json.loads(text)) == text
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    assert load_report_json(path) == json.loads(text)
    assert json.loads(report_to_json({"x": math.nan, "y": [math.inf, 1.23456]})) == {"x": None, "y": [None, 1.235]}


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no such file"),
        ("{not json", ":1: not valid JSON"),
        ("[1, 2]", "$: expected object, got array"),
        ('{"schema": "other/1"}', '$.schema: expected "dslogs.report/1", got "other/1"'),
        ('{"schema": "dslogs.report/1", "window": {}}', '$: missing field "ingest"'),
    ],
)
def test_load_report_json_errors(tmp_path, content, needle):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as exc:
        load_report_json(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_has_findings_at_levels(model):
    assert has_findings_at(model, "critical") and has_findings_at(model, "warning")
    info_only = {"findings": [{"severity": "info"}]}
    assert not has_findings_at(info_only, "warning")
    warn = {"findings": [{"severity": "warning"}, {"severity": "info"}]}
    assert has_findings_at(warn, "warning") and not has_findings_at(warn, "critical")
    with pytest.raises(UsageError):
        has_findings_at(model, "loud")


def test_markdown_summary_escapes_log_strings(model):
    md = render_markdown(model)
    assert md.startswith("# dslogs diagnosis report")
    for heading in ("## Health checklist", "## Findings", "### Critical", "## Stage latency (ms)", "## Requests"):
        assert heading in md
    assert "<script>" not in md and "</script>" not in md
    assert "&lt;script>alert(1)&lt;/script>" in md  # the id is shown, escaped
    assert "| tokenize |" in md
    assert "del outputs" in md  # the fix is printed
    # Every row of a table has the header's column count, despite '|' in log strings.
    tables, current = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            current.append(len(re.findall(r"(?<!\\)\|", line)))
        elif current:
            tables.append(current)
            current = []
    assert len(tables) >= 3
    for counts in tables:
        assert len(set(counts)) == 1, counts


def test_markdown_of_an_empty_model():
    empty = build_report_from_metrics({}, {}, {}, defaults())
    md = render_markdown(empty)
    assert "No rule fired." in md and "No timed stages." in md


# -- end to end: real ingest, the CLI ---------------------------------------------------------

needs_ingest = pytest.mark.skipif(importlib.util.find_spec("dslogs.analyzer.ingest.logs") is None,
                                  reason="dslogs.analyzer.ingest.logs (open_logs) is not there yet")


def _cli(*args):
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@needs_ingest
def test_cli_analyze_json_md_and_fail_on(tmp_path):
    from tests.diag_sim import simulated

    folder, truth = simulated("memory_leak")
    result = _cli("analyze", folder, "--format", "json", "--no-cache")
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)
    assert model["schema"] == SCHEMA
    assert model["ingest"]["events"] == truth["events"]
    leak = [f for f in model["findings"] if f["rule"] == "memory_leak"][0]
    assert set(leak["session_ids"]) == set(truth["scenarios"]["memory_leak"]["sessions"])

    out = tmp_path / "r.md"
    result = _cli("analyze", folder, "--format", "md", "--out", out, "--no-cache", "--fail-on", "critical")
    assert result.exit_code == 1  # memory_leak is critical
    assert out.read_text(encoding="utf-8").startswith("# dslogs diagnosis report")

    healthy, _ = simulated("healthy")
    assert _cli("analyze", healthy, "--format", "json", "--no-cache", "--fail-on", "warning").exit_code == 0


@needs_ingest
def test_cli_thresholds_file_changes_findings_and_rejects_unknown_keys(tmp_path):
    from tests.diag_sim import simulated

    folder, _ = simulated("memory_leak")
    lax = tmp_path / "lax.toml"
    lax.write_text("[memory_leak]\nrise_mb = 100000\n", encoding="utf-8")
    result = _cli("analyze", folder, "--format", "json", "--no-cache", "--thresholds", lax)
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)
    assert "memory_leak" not in {f["rule"] for f in model["findings"]}
    assert model["thresholds"]["memory_leak"]["rise_mb"] == 100000
    bad = tmp_path / "bad.toml"
    bad.write_text("[memory_leak]\nslope = 1\n", encoding="utf-8")
    result = _cli("analyze", folder, "--format", "json", "--no-cache", "--thresholds", bad)
    assert result.exit_code == 2
    assert "memory_leak.slope" in result.output and str(bad) in result.output


@needs_ingest
def test_analyze_reads_the_logs_once(monkeypatch):
    """Every metric runs on the one connection open_logs built; nothing else opens the logs."""
    import dslogs.analyzer.ingest.logs as ingest
    from dslogs.analyzer.usecases.analyze import analyze_logs
    from tests.diag_sim import simulated

    folder, _ = simulated("healthy")
    calls = []
    real = ingest.open_logs

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "open_logs", counting)
    model = analyze_logs([str(folder)], use_cache=False)
    assert len(calls) == 1 and model["requests"]["count"] > 0


def test_spark_engine_missing_is_a_usage_error(monkeypatch):
    import sys

    from dslogs.analyzer.engines.registry import OPENERS
    from dslogs.analyzer.usecases.analyze import analyze_logs

    # an engine module that cannot be imported (as when its dependency is not installed)
    monkeypatch.delitem(OPENERS, "spark", raising=False)
    monkeypatch.setitem(sys.modules, "dslogs.analyzer.engines.spark.driver", None)
    with pytest.raises(UsageError, match=r"--engine spark is not available .*install dslogs-llm\[spark\]"):
        analyze_logs(["nowhere"], engine="spark")
    with pytest.raises(UsageError, match="unknown engine 'presto'; valid: duckdb, spark"):
        analyze_logs(["nowhere"], engine="presto")


@needs_ingest
def test_metrics_do_not_reread_the_files(tmp_path):
    """The queries run on what open_logs loaded: deleting the files afterwards changes nothing."""
    import shutil

    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.usecases.analyze import analyze_logs, build_report
    from tests.diag_sim import simulated

    folder, _ = simulated("oom")
    copy = tmp_path / "logs"
    shutil.copytree(folder, copy)
    db = open_logs([str(copy)], use_cache=False)
    shutil.rmtree(copy)
    model = build_report(db)
    again = analyze_logs([str(folder)], use_cache=False)
    for key in ("stages", "requests", "findings", "checklist", "rules"):
        assert model[key] == again[key], key


# -- the memory timeline shows the sessions the memory findings name ------------------------------


def _memory_timeline_metrics():
    """14 rising sessions (the steeper 8 are leaks), all steeper than the two flat OOM sessions
    (one OOM seen as an error event, one only as a num_ooms rise), and 6 sessions of a single
    snapshot holding ghost memory (NaN slope in DuckDB, which once sorted them first)."""
    events = []
    for s in range(14):
        for k in range(4):
            events.append({"ts": T0 + timedelta(minutes=k), "stage": "gpu_memory", "session_id": f"mild{s:02d}",
                           "host": "h", "pid": 1, "reserved_mb": 4000.0 + 10 * k * (s + 1), "allocated_mb": 3500.0,
                           "num_ooms": 0})
    for s in range(6):
        events.append({"ts": T0 + timedelta(minutes=s), "stage": "gpu_memory", "session_id": f"single{s}",
                       "host": "h", "pid": 1, "reserved_mb": 9000.0, "allocated_mb": 3500.0, "num_ooms": 0})
    for sid in ("oom_err", "oom_counter"):
        for k in range(3):
            events.append({"ts": T0 + timedelta(minutes=k), "stage": "gpu_memory", "session_id": sid, "host": "h",
                           "pid": 2, "reserved_mb": 4100.0, "allocated_mb": 3600.0,
                           "num_ooms": 5 + (k if sid == "oom_counter" else 0)})
    events.append({"ts": T0 + timedelta(minutes=1), "stage": "error", "session_id": "oom_err", "host": "h",
                   "error_type": "OutOfMemoryError", "error_msg": "CUDA out of memory"})
    return compute_metrics(fixture_connection(events))


def test_memory_timeline_has_every_oom_session_and_no_single_snapshot():
    metrics = _memory_timeline_metrics()
    model = build_report_from_metrics(metrics, INGEST, {}, defaults())
    (oom,) = [f for f in model["findings"] if f["rule"] == "oom"]
    assert oom["session_ids"] == ["oom_counter", "oom_err"]
    points: dict[str, int] = {}
    for r in model["series"]["memory_timeline"]:
        points[r["session_id"]] = points.get(r["session_id"], 0) + 1
    assert {"oom_counter", "oom_err"} <= set(points), sorted(points)
    assert min(points.values()) >= 2 and not any(s.startswith("single") for s in points)
    assert len(points) == defaults()["report"]["timeline_sessions"]
    # and the chart draws them: flagged sessions come first among its lines
    from dslogs.analyzer.render.charts.specs import build_charts

    (chart,) = [c for c in build_charts(model) if c.id == "memory_timeline"]
    drawn = {r["session_id"] for r in chart.spec["data"]["values"]}
    assert {"oom_counter", "oom_err"} <= drawn


@needs_ingest
def test_sample_oom_sessions_are_on_the_memory_chart():
    """sample_logs/oom: every session the oom finding names has 5+ snapshots; each is drawn."""
    from pathlib import Path

    from dslogs.analyzer.render.charts.specs import build_charts
    from dslogs.analyzer.usecases.analyze import analyze_logs

    folder = Path(__file__).resolve().parents[1] / "sample_logs" / "oom"
    model = analyze_logs([str(folder)], use_cache=False)
    (oom,) = [f for f in model["findings"] if f["rule"] == "oom"]
    assert len(oom["session_ids"]) == 6
    series = {r["session_id"] for r in model["series"]["memory_timeline"]}
    assert set(oom["session_ids"]) <= series
    (chart,) = [c for c in build_charts(model) if c.id == "memory_timeline"]
    assert set(oom["session_ids"]) <= {r["session_id"] for r in chart.spec["data"]["values"]}
    assert not any("single sample" in n for n in chart.notes)


def test_markdown_gives_the_threshold_its_unit_and_counts_in_the_singular(model):
    md = render_markdown(model)
    leak = md[md.index("**memory_leak**"):]
    assert "threshold 200 MiB" in leak.splitlines()[1], leak.splitlines()[1]
    assert " on 1 host." in md and "1 hosts" not in md


def test_sessions_carry_the_reserved_rise_the_leak_rule_needs(model):
    """memory_leak judges the rise over a session's turns (003 §5.3): a steep but short-lived
    session (rise under 200 MiB) is not a leak, and the memory table shows the rise that says why."""
    from dslogs.analyzer.render.html import render_html

    by_id = {s["session_id"]: s for s in model["sessions"]}
    assert by_id[XSS]["reserved_rise_mb"] == 1250.0 and by_id["healthy"]["reserved_rise_mb"] == 0.0
    page = render_html(model, fallback_svg=False)
    memory = page[page.index('<section id="sec-memory">'):page.index('<section id="sec-kv">')]
    assert "reserved rise MiB (readings)</th>" in memory and "1,250</td>" in memory
    # and what memory_leak judged of it, the same 1,250 over its turns (no before/after readings)
    judged = by_id[XSS]["judged"]["memory_leak"]
    assert (judged["basis"], judged["rise_mb"]) == ("reserved_mb over turns", 1250.0)
    assert "1,250 <span class=\"muted small\">(reserved over turns)</span>" in memory


def test_a_count_of_one_reads_in_the_singular_in_md_and_html():
    """'threshold 1 OOMs' read wrong: count units take the singular for exactly one."""
    from pathlib import Path

    from dslogs.analyzer.render.html import render_html
    from dslogs.analyzer.rules.registry import unit_for
    from dslogs.analyzer.usecases.analyze import analyze_logs

    repo = Path(__file__).resolve().parents[1]
    assert unit_for(1, "OOMs") == "OOM" and unit_for(2, "OOMs") == "OOMs" and unit_for(1.0, "beams") == "beam"
    assert unit_for(1, "ms") == "ms" and unit_for(1, "MiB") == "MiB" and unit_for(1, None) == ""
    model = analyze_logs([str(repo / "sample_logs" / "oom")], use_cache=False)
    oom = next(f for f in model["findings"] if f["rule"] == "oom")
    assert oom["threshold"] == 1 and oom["value"] > 1
    md = render_markdown(model)
    line = md[md.index("**oom**"):].splitlines()[1]
    assert "OOMs, threshold 1 OOM " in line, line
    page = render_html(model, fallback_svg=False)
    assert "threshold <b>1 OOM</b>" in page and "1 OOMs" not in page
