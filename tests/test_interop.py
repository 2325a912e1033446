"""Source formats other than our own: OTLP/JSON traces written by the OpenTelemetry SDK's own
OTLP encoder (tests/otlp_helpers.py), vLLM-shaped ``llm_request`` spans and generic GenAI
spans; files in no known format named by what they look like."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")

from otlp_helpers import Recorder, genai_call, vllm_workload, write_vllm  # noqa: E402

from dslogs.analyzer.core.thresholds import defaults  # noqa: E402
from dslogs.analyzer.ingest import formats  # noqa: E402
from dslogs.analyzer.ingest.logs import open_logs  # noqa: E402
from dslogs.analyzer.usecases.analyze import build_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _pct(values, q):
    """Linear interpolation between closest ranks (DuckDB's quantile_cont)."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if q != 50 else statistics.median(values)


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dslogs", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vllm")
    reqs = vllm_workload(400, overload_from=300, abort_every=20)
    # two files: a plain .json and a gzipped one, 100 spans a line
    write_vllm(folder / "otel-traces.json", reqs[:250], per_line=100)
    write_vllm(folder / "otel-traces-2.json.gz", reqs[250:], per_line=100)
    db = open_logs([str(folder)], use_cache=False)
    try:
        model = build_report(db, defaults())
        rows = db.con.execute(
            "SELECT request_id, ttft_ms, e2e_ms, queue_ms, prefill_ms, decode_ms, is_error, inflight, "
            "max_new_tokens, finish_reason FROM requests").fetchall()  # fmt: skip
    finally:
        db.close()
    return reqs, model, rows


def test_vllm_spans_every_request_and_figures(vllm_run):
    reqs, model, rows = vllm_run
    assert model["ingest"]["bad_lines"] == 0
    assert model["ingest"]["formats"] == {"otlp:vllm": model["ingest"]["events"]}
    assert model["requests"]["count"] == len(reqs) == len(rows)
    lat = model["requests"]
    for key, own in (("ttft_ms", [r.ttft * 1000 for r in reqs]), ("e2e_ms", [r.e2e * 1000 for r in reqs])):
        assert lat[key]["p50"] == pytest.approx(_pct(own, 50), rel=0.02), key
    stages = {s["stage"]: s for s in model["stages"]}
    for stage, own in (("queue", [r.queued for r in reqs]), ("prefill", [r.prefill for r in reqs]),
                       ("decode", [r.decode for r in reqs])):  # fmt: skip
        assert stages[stage]["p95_ms"] == pytest.approx(_pct([x * 1000 for x in own], 95), rel=0.03), stage
    aborted = {r.request_id for r in reqs if r.finish_reason == "abort"}
    assert aborted and {r[0] for r in rows if r[6]} == aborted
    assert lat["errors"] == len(aborted)
    # finish reasons come from the JSON-encoded string; max_tokens is the request's limit
    by_id = {r[0]: r for r in rows}
    for r in reqs[:20]:
        assert by_id[r.request_id][9] == r.finish_reason
        assert by_id[r.request_id][8] == r.max_tokens


def test_vllm_overload_found_and_unavailable_checks_named(vllm_run):
    _reqs, model, _rows = vllm_run
    assert "queue_wait" in {f["rule"] for f in model["findings"]}
    items = {c["id"]: c for c in model["checklist"]}
    for cid in ("tokenize_p50", "format_p50", "reserved_band", "gpu_util_peak", "kv_cache_size"):
        assert items[cid]["status"] == formats.NOT_AVAILABLE, cid
    assert items["ttft_p50"]["status"] in ("PASS", "FAIL")
    rules = {r["rule"]: r for r in model["rules"]}
    assert "not available for this source" in rules["slow_tokenize"]["reason"]
    # vLLM spans never carry the reasoning block: no "0 %" share is quoted for them
    note = items["short_prompt_e2e_p50"].get("note") or ""
    assert "median reasoning share" not in note
    assert "reasoning share not available for this source" in note


def test_inflight_from_overlapping_spans(tmp_path):
    from otlp_helpers import VllmRequest

    # three requests: 0-10 s, 2-4 s, 5-6 s; the third arrives while the first runs: 2 in flight
    reqs = [VllmRequest(f"r{i}", 1_796_000_000.0 + a, 0.0, 0.1, d - 0.1, 10, 20)
            for i, (a, d) in enumerate([(0, 10), (2, 2), (5, 1)])]  # fmt: skip
    write_vllm(tmp_path / "t.json", reqs)
    with open_logs([str(tmp_path)], use_cache=False) as db:
        got = dict(db.con.execute("SELECT request_id, inflight FROM requests").fetchall())
    assert got == {"r0": 1, "r1": 2, "r2": 2}


def test_genai_spans_errors_oom_sessions(tmp_path):
    rec = Recorder({"service.name": "chat-app", "host.name": "cpu-1", "process.pid": 77})
    t = 1_796_000_000.0
    base = {"gen_ai.operation.name": "text_generation", "gen_ai.system": "huggingface",
            "gen_ai.request.model": "tiny-qwen2"}  # fmt: skip
    genai_call(rec, t, 1.2, attrs={**base, "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 40,
                                   "gen_ai.request.max_tokens": 64, "gen_ai.conversation.id": "conv-a",
                                   "gen_ai.response.finish_reasons": ("stop",)})  # fmt: skip
    genai_call(rec, t + 2, 0.3, attrs={**base, "gen_ai.conversation.id": "conv-a"},
               error=ValueError("max_new_tokens must be positive"))
    try:
        import torch

        oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except (ImportError, AttributeError):  # torch absent: the same type name and message
        oom = type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory. Tried to allocate 2.00 GiB")
    genai_call(rec, t + 3, 0.5, attrs={**base, "gen_ai.conversation.id": "conv-b"}, error=oom)
    # spans with no token counts (OpenLLMetry's) still count as requests
    genai_call(rec, t + 4, 0.8, attrs={**base, "gen_ai.conversation.id": "conv-b"})
    # a span of no GenAI work (an HTTP handler) is not a request
    span = rec.tracer.start_span("GET /", start_time=int(t * 1e9), attributes={"http.method": "GET"})
    span.end(end_time=int((t + 5) * 1e9))
    rec.write(tmp_path / "traces.json")
    with open_logs([str(tmp_path)], use_cache=False) as db:
        model = build_report(db, defaults())
        reqs = db.con.execute(
            "SELECT session_id, status, error_type, e2e_ms, output_len, finish_reason FROM requests ORDER BY start_ts"
        ).fetchall()
    assert model["ingest"]["formats"].keys() == {"otlp:genai"}
    assert len(reqs) == 4
    assert [r[0] for r in reqs] == ["conv-a", "conv-a", "conv-b", "conv-b"]
    assert [r[1] for r in reqs] == ["ok", "error", "error", "ok"]
    assert reqs[1][2] == "ValueError" and reqs[2][2] == "OutOfMemoryError"
    assert reqs[0][3] == pytest.approx(1200, abs=1) and reqs[0][4] == 40 and reqs[0][5] == "stop"
    assert "oom" in {f["rule"] for f in model["findings"]}
    assert model["requests"]["errors"] == 2


def test_session_attr_names_the_session(tmp_path):
    rec = Recorder({"service.name": "x"})
    genai_call(rec, 1_796_000_000.0, 1.0, attrs={"gen_ai.system": "hf", "app.chat_id": "c-9"})
    rec.write(tmp_path / "t.json")
    with open_logs([str(tmp_path)], use_cache=False, session_attr="app.chat_id") as db:
        assert db.con.execute("SELECT session_id FROM requests").fetchall() == [("c-9",)]


def test_genai_time_per_output_token_is_the_requests_tpot(tmp_path):
    """gen_ai.server.time_per_output_token (seconds) with the output tokens gives the decode
    time, so TPOT is the span's own; a span without it has none (never a guess)."""
    rec = Recorder({"service.name": "x", "host.name": "h"})
    genai_call(rec, 1_796_000_000.0, 3.0, attrs={"gen_ai.system": "hf", "gen_ai.usage.output_tokens": 101,
                                                 "gen_ai.server.time_to_first_token": 0.25,
                                                 "gen_ai.server.time_per_output_token": 0.0275})
    genai_call(rec, 1_796_000_005.0, 2.0, attrs={"gen_ai.system": "hf", "gen_ai.usage.output_tokens": 50})
    rec.write(tmp_path / "t.json")
    with open_logs([str(tmp_path)], use_cache=False) as db:
        rows = db.con.execute("SELECT output_len, tpot_ms, ttft_ms, e2e_ms FROM requests ORDER BY output_len DESC").fetchall()
    assert rows[0][0] == 101 and rows[0][1] == pytest.approx(27.5) and rows[0][2] == pytest.approx(250)
    assert rows[0][3] == pytest.approx(3000)  # end-to-end stays the span's duration
    assert rows[1][0] == 50 and rows[1][1] is None


def test_discovery_takes_otlp_json_not_other_json(tmp_path):
    write_vllm(tmp_path / "traces.json", vllm_workload(5))
    (tmp_path / "report.json").write_text(json.dumps({"schema": "dslogs.report/1", "findings": []}))
    from dslogs.analyzer.ingest.discovery import discover

    assert [Path(f.display).name for f in discover([str(tmp_path)]).files] == ["traces.json"]


@pytest.mark.parametrize(
    "name, content, looks",
    [
        ("README.jsonl", "# dslogs\n\nAn offline log analyser.\n", "text (Markdown or similar)"),
        ("metrics.jsonl", '{"resourceMetrics":[]}\n', "OTLP/JSON metrics"),
        ("rows.jsonl", "a,b,c\n1,2,3\n4,5,6\n", "CSV"),
        ("arr.jsonl", '[{"stage": "input"}]\n', "a JSON array"),
        ("prom.jsonl", "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n", "Prometheus"),
    ],
)
def test_unknown_format_exits_2_naming_it(tmp_path, name, content, looks):
    (tmp_path / name).write_text(content)
    res = _cli("analyze", str(tmp_path / name), "--format", "json", "--no-cache")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    line = [ln for ln in res.stderr.splitlines() if name in ln]
    assert len(line) == 1 and looks in line[0], res.stderr


def test_no_log_files_lists_accepted_names(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    res = _cli("analyze", str(tmp_path), "--format", "json", "--no-cache")
    assert res.returncode == 2 and "*.jsonl" in res.stderr and ".json" in res.stderr


def test_sniff_registry():
    assert formats.sniff(b'{"resourceSpans":[{"resource":{}}]}\n').name == "otlp_traces"
    assert formats.sniff(b'{"v":1,"ts":"2026-01-01T00:00:00Z","stage":"input"}\n').name == "v1"
    assert formats.sniff(b'{"timestamp":"2026-01-01T00:00:00","stage":"input"}\n').name == "legacy"
    assert formats.sniff(b"hello\n") is None
    gz = gzip.compress(b'{"resourceSpans":[]}\n')
    assert formats.sniff(gz) is None  # sniff takes inflated bytes: head_bytes inflates


def test_session_attr_on_every_command_that_opens_logs(tmp_path):
    rec = Recorder({"service.name": "chat", "host.name": "cpu-1"})
    for i, chat in enumerate(["c-9", "c-9", "c-7"]):
        genai_call(rec, 1_796_000_000.0 + 3 * i, 1.0, attrs={"gen_ai.system": "hf", "app.chat_id": chat})
    rec.write(tmp_path / "t.json")
    named = ("--session-attr", "app.chat_id")
    plain = json.loads(_cli("analyze", str(tmp_path), "--format", "json", "--no-cache").stdout)
    assert plain["sessions"] == []
    res = _cli("analyze", str(tmp_path), "--format", "json", "--no-cache", *named)
    assert res.returncode == 0, res.stderr
    by_id = {s["session_id"]: s["requests"] for s in json.loads(res.stdout)["sessions"]}
    assert by_id == {"c-9": 2, "c-7": 1}
    res = _cli("session", str(tmp_path), "c-9", "--format", "jsonl", "--no-cache", *named)
    assert res.returncode == 0, res.stderr
    assert {json.loads(line)["session_id"] for line in res.stdout.splitlines()} == {"c-9"}
    res = _cli("query", str(tmp_path), "SELECT count(DISTINCT session_id) FROM requests", "--format", "csv",
               "--no-cache", *named)  # fmt: skip
    assert res.stdout.strip().splitlines()[-1] == "2"
    res = _cli("diff", str(tmp_path), str(tmp_path), "--format", "json", "--no-cache", *named)
    assert res.returncode == 0, res.stderr
    for command in (["analyze"], ["capacity"], ["report", "weekly"], ["diff"], ["query"], ["session"]):
        assert "--session-attr" in _cli(*command, "--help").stdout, command
    # the Python API takes the same attribute for its frames, report, capacity and diff
    pytest.importorskip("pandas")
    import dslogs

    with dslogs.open(str(tmp_path), use_cache=False, session_attr="app.chat_id") as logs:
        assert sorted(logs.sessions["session_id"]) == ["c-7", "c-9"]
        assert {s["session_id"]: s["requests"] for s in logs.report().model["sessions"]} == by_id
        assert [p.requests for p in logs.capacity().processes] == [3]
    cli_diff = json.loads(_cli("diff", str(tmp_path), str(tmp_path), "--format", "json", "--no-cache", *named).stdout)
    api_diff = dslogs.diff(str(tmp_path), str(tmp_path), session_attr="app.chat_id").model
    volatile = {"generated_at", "dslogs_version"}
    assert {k: v for k, v in api_diff.items() if k not in volatile} == {k: v for k, v in cli_diff.items() if k not in volatile}


@pytest.fixture(scope="module", params=["openlit", "openllmetry"])
def thirdparty(request, tmp_path_factory):
    """Spans written by openlit or OpenLLMetry around a tiny Qwen2 (tests/thirdparty_traces.py)."""
    pytest.importorskip("transformers")
    pytest.importorskip("openlit" if request.param == "openlit" else "opentelemetry.instrumentation.transformers")
    out = tmp_path_factory.mktemp(request.param) / "traces.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OTEL_SDK_DISABLED="false")
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "thirdparty_traces.py"), request.param, str(out)],
                         capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    made = json.loads(res.stdout.strip().splitlines()[-1])
    assert made["errors"] == {"ValueError": 1, "OutOfMemoryError": 1}
    with open_logs([str(out)], use_cache=False) as db:
        model = build_report(db, defaults())
        rows = db.con.execute(
            "SELECT status, error_type, input_len, output_len, inflight FROM requests ORDER BY start_ts").fetchall()
    return request.param, made, model, rows


def test_thirdparty_spans_one_request_each_errors_and_estimates(thirdparty):
    which, made, model, rows = thirdparty
    assert model["ingest"]["bad_lines"] == 0
    assert len(rows) == made["calls"] == model["requests"]["count"]
    assert model["requests"]["errors"] == 2
    assert sorted(r[1] for r in rows if r[0] == "error") == ["OutOfMemoryError", "ValueError"]
    assert "oom" in {f["rule"] for f in model["findings"]}
    # four calls at once: the last of them arrived with the other three in flight
    assert max(r[4] for r in rows) == 4
    estimated = [n for n in model["notes"] if n["id"] == "estimated_tokens"]
    if which == "openlit":
        assert set(model["ingest"]["formats"]) == {"otlp:openlit"}
        assert len(estimated) == 1 and "estimates" in estimated[0]["message"]
        assert all(r[2] and r[3] for r in rows if r[0] == "ok")  # counted (from characters)
    else:  # OpenLLMetry sets no token counts: requests and errors all the same
        assert set(model["ingest"]["formats"]) == {"otlp:genai"}
        assert not estimated and all(r[2] is None and r[3] is None for r in rows)
