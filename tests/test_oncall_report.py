"""The report an on-call engineer reads: what is wrong, for whom, why, what to change.

Each set is read once by ``dslogs analyze --format json`` and rendered as HTML from that JSON:
the recorded Gradio run where 4 of 16 concurrent sessions leak host RAM
(tests/fixtures/gradio_host_leak) and sample_logs folders with beam search with and without
failed beam requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.render.report import render_report

ROOT = Path(__file__).resolve().parent.parent
HOST_LEAK = ROOT / "tests" / "fixtures" / "gradio_host_leak"
SETS = {"gradio_host_leak": HOST_LEAK, "beam_search": ROOT / "sample_logs" / "beam_search",
        "oom_fallback": ROOT / "sample_logs" / "oom_fallback", "queue_wait": ROOT / "sample_logs" / "queue_wait",
        "cpu_only": ROOT / "sample_logs" / "cpu_only"}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oncall")
    cache: dict[str, tuple[dict, str]] = {}

    def get(name: str) -> tuple[dict, str]:
        if name not in cache:
            out = tmp / f"{name}.json"
            res = CliRunner().invoke(app, ["analyze", str(SETS[name]), "--format", "json", "--no-cache", "-q",
                                           "--out", str(out)])
            assert res.exit_code == 0, res.output
            model = json.loads(out.read_text(encoding="utf-8"))
            cache[name] = (model, render_report(model, "html"))
        return cache[name]

    return get


def _finding(model: dict, rule: str, scope: str | None = None) -> dict:
    return next(f for f in model["findings"] if f["rule"] == rule and (scope is None or f["scope"] == scope))


# -- fixes from the evidence ---------------------------------------------------------------------


def test_rss_growth_in_a_few_sessions_points_at_per_session_state(report):
    model, html = report("gradio_host_leak")
    f = _finding(model, "rss_growth", "session")
    assert f["session_count"] == 4
    assert "instantiated again per request" not in f["fix"]
    assert "4 of the 16 sessions" in f["fix"] and "per session" in f["fix"]
    assert "Checked and absent" in f["fix"]
    assert "instantiated again per request" not in html
    # the other sessions keep a little (a reader saw 9-12 MiB beside "the others keep none"): the fix
    # says how little, by the thresholds the rule judged with
    assert "keep none" not in f["fix"]
    assert "the others keep 24 MiB per request or less, or 100 MiB in all or less" in f["fix"]


def test_beam_finding_without_failed_beam_requests_does_not_claim_ooms(report):
    model, _ = report("beam_search")
    f = _finding(model, "beam_search")
    assert not any((s.get("beam_failed_requests") or 0) for s in f["evidence"]["details"]["sessions"])
    assert "OOM" not in f["fix"] and "out of memory" not in f["fix"]
    assert "no beam request failed" in f["fix"]


def test_beam_finding_with_failed_beam_requests_says_how_many(report):
    model, _ = report("oom_fallback")
    f = _finding(model, "beam_search")
    failed = sum(s.get("beam_failed_requests") or 0 for s in f["evidence"]["details"]["sessions"])
    assert failed > 0
    assert f"{failed} beam request" in f["fix"] and "failed (out of memory)" in f["fix"]


# -- slow requests explained ---------------------------------------------------------------------


def _event(end_s: float, stage: str, ms: float, sid: str, rid: str, pid: int = 1, **f) -> str:
    ts = f"2026-12-06T10:00:{end_s:06.3f}+00:00"
    return json.dumps({"v": 1, "ts": ts, "stage": stage, "host": "h", "pid": pid, "duration_ms": ms,
                       "session_id": sid, "request_id": rid, **f})


@pytest.fixture(scope="module")
def overlap_model(tmp_path_factory):
    """Three requests of one process, A [0, 10 s] with B [2, 4 s] and C [3, 6 s] inside it, and D
    [0, 10 s] alone in another process: A shares 4 s (B and C overlap), 0.5 others on average."""
    d = tmp_path_factory.mktemp("overlap")
    lines = [
        _event(1.0, "queue", 1000, "sa", "A"), _event(1.5, "prefill", 500, "sa", "A", input_len=40),
        _event(9.5, "decode", 8000, "sa", "A", output_len=101, params={"num_beams": 4}),
        _event(10.0, "request", 10000, "sa", "A", status="ok", output_len=101),
        _event(3.0, "prefill", 100, "sb", "B"), _event(4.0, "request", 2000, "sb", "B", status="ok"),
        _event(4.0, "prefill", 100, "sc", "C"), _event(6.0, "request", 3000, "sc", "C", status="ok"),
        _event(5.0, "prefill", 100, "sd", "D", pid=2), _event(9.9, "decode", 4800, "sd", "D", pid=2, output_len=49),
        _event(10.0, "request", 10000, "sd", "D", pid=2, status="ok"),
    ]
    (d / "app.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = d / "report.json"
    res = CliRunner().invoke(app, ["analyze", str(d), "--format", "json", "--no-cache", "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text(encoding="utf-8"))


def test_slow_requests_split_their_time_and_count_the_overlap(overlap_model):
    by_id = {r["request_id"]: r for r in overlap_model["slow_requests"]}
    a, d = by_id["A"], by_id["D"]
    assert a["shared_ms"] == pytest.approx(4000, abs=1) and a["others_avg"] == pytest.approx(0.5, abs=0.001)
    assert d["shared_ms"] == 0 and d["others_avg"] == 0  # another process: nothing shared
    assert (a["queue_ms"], a["prefill_ms"], a["decode_ms"]) == (1000, 500, 8000)
    assert a["other_ms"] == pytest.approx(500)
    assert a["num_beams"] == 4
    assert a["why"][0].startswith("decode 8 s (80.0 %) for 101 tokens, 80 ms per token, with num_beams=4")
    assert [r["request_id"] for r in overlap_model["slow_requests"]][:2] in (["A", "D"], ["D", "A"])


def test_slow_requests_section_names_them_with_why(overlap_model):
    html = render_report(overlap_model, "html")
    section = html[html.index('id="sec-slow"'):html.index('id="sec-prefill"')]
    assert "with num_beams=4" in section and "queue ms" in section


def test_queue_wait_is_a_reason_where_it_dominates(report):
    model, _ = report("queue_wait")
    slow = model["slow_requests"]
    assert slow and all(r["queue_ms"] is not None for r in slow[:3])
    waited = [r for r in slow if r["queue_ms"] >= 0.25 * r["e2e_ms"]]
    assert waited and all(any("in the queue" in w for w in r["why"]) for r in waited)
    for r in slow:
        parts = sum(r.get(k) or 0 for k in ("queue_ms", "tokenize_ms", "prefill_ms", "decode_ms", "other_ms"))
        assert parts == pytest.approx(r["e2e_ms"], rel=1e-6) or parts > r["e2e_ms"]


# -- the lead ------------------------------------------------------------------------------------


def test_lead_ranks_problems_by_users_and_links_to_their_evidence(report):
    model, html = report("gradio_host_leak")
    lead = model["lead"]
    assert lead and [x["rank"] for x in lead] == list(range(1, len(lead) + 1))
    rss = next(x for x in lead if x["rule"] == "rss_growth")
    assert rss["sessions"] == 4 and rss["session_share"] == pytest.approx(4 / 16)
    assert rss["impact"].startswith(f"{rss['requests']} of {model['requests']['count']} requests")
    assert "in 4 of 16 sessions" in rss["impact"] and rss["since"] and rss["minutes"] is not None
    assert rss["change"] and "per session" in rss["change"]
    # on the first screen: before the checklist, every link resolving inside the page
    top = html[:html.index('id="sec-checklist"')]
    assert 'id="lead"' in top and "4 of 16 sessions" in top
    import re
    for href in re.findall(r'<li class="lead-line[^>]*>.*?href="#([^"]+)"', top, re.S):
        assert f'id="{href}"' in html


def test_lead_puts_failed_requests_first(report):
    model, _ = report("oom_fallback")
    lead = model["lead"]
    first = lead[0]
    assert first["failed_requests"] > 0 or first["slo_missed_requests"] > 0
    assert all(x["failed_requests"] <= first["failed_requests"] for x in lead)


# -- progress that moves -------------------------------------------------------------------------


def test_bytes_are_reported_while_duckdb_reads_not_after(tmp_path, monkeypatch):
    """A read of one large file advances the bar several times while the statement runs."""
    import duckdb

    from dslogs.analyzer.core import progress

    logs = tmp_path / "big.jsonl"
    line = json.dumps({"v": 1, "ts": "2026-12-06T10:00:00+00:00", "stage": "decode", "duration_ms": 1.5,
                       "session_id": "s", "pad": "x" * 60})
    logs.write_text((line + "\n") * 600_000, encoding="utf-8")
    size = logs.stat().st_size

    class Recorder:
        def __init__(self):
            self.steps = []

        def advance(self, n):
            self.steps.append(n)

    rec = Recorder()
    monkeypatch.setattr(progress, "_current", rec)
    con = duckdb.connect()
    with progress.statement(con, size, interval_s=0.02):
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_json('{logs}', format='newline_delimited')")
    assert sum(rec.steps) == pytest.approx(size)
    partial = [s for s in rec.steps[:-1] if s > 0]
    assert len(partial) >= 2, rec.steps  # moved during the read, not only at its end


def test_each_phase_draws_its_own_measure():
    from rich.progress import Progress

    from dslogs.analyzer.core import progress

    rep = progress._Reporter("analyze")
    try:
        bar: Progress = rep._bar
        measure = bar.columns[2]
        rep.start("reading", 18_600_000, "19 files", "bytes")
        rep.advance(9_300_000)
        assert str(measure.render(bar.tasks[-1])).startswith("9.3/18.6 MB")
        rep.start("computing", 45, "", "queries")
        rep.advance(12)
        assert str(measure.render(bar.tasks[-1])) == "12/45 queries"
        rep.start("indexing", None, "", "")
        assert str(measure.render(bar.tasks[-1])) == ""  # no "0/? bytes" for a step without a count
    finally:
        rep.close()


# -- a page that explains itself offline ---------------------------------------------------------


def test_every_link_opens_inside_the_page_and_no_doc_is_cited_by_path(report):
    import re

    for name in ("gradio_host_leak", "oom_fallback", "beam_search"):
        _, page = report(name)
        html = re.sub(r"<script\b.*?</script>", "", page, flags=re.S)  # the chart library's own code
        ids = set(re.findall(r'\bid="([^"]+)"', html))
        hrefs = re.findall(r'\bhref="([^"]*)"', html)
        assert hrefs
        outside = [h for h in hrefs if not h.startswith("#") and not h.startswith("data:")]
        assert not outside, outside
        missing = sorted({h[1:] for h in hrefs if h.startswith("#") and h[1:] not in ids})
        assert not missing, (name, missing)
        assert "<code>docs/" not in html, name  # a doc path does not open from a file


def test_terms_are_linked_to_their_definition_where_they_appear(report):
    model, html = report("gradio_host_leak")
    _, beam_html = report("beam_search")
    assert 'id="gloss-seed-app"' in html and 'id="gloss-knee"' in html and 'id="gloss-ttfa"' in html
    assert 'id="gloss-queue-wait"' in html and 'id="gloss-slo"' in html
    # the lead's slow-requests line and the findings' texts link the terms they use
    import re

    linked = set(re.findall(r'<a class="term" href="#(gloss-[a-z0-9-]+)"', html + beam_html))
    assert linked and all(f'id="{a}"' in html for a in linked)


def _analyze_json(folder: Path, *options: str) -> dict:
    """The report model ``dslogs analyze FOLDER --format json`` writes (exit 0 checked)."""
    out = folder / "r.json"
    res = CliRunner().invoke(app, ["analyze", str(folder), "--format", "json", "--no-cache", "-q", "--out", str(out),
                                   *options])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text(encoding="utf-8"))


def _cpu_oom_logs(d: Path) -> None:
    lines = []
    for i in range(3):
        sid, rid, end = f"s{i}", f"r{i}", 1.0 + i
        lines.append(_event(end - 0.5, "decode", 400, sid, rid, device="cpu", output_len=10))
        lines.append(_event(end, "request", 500, sid, rid, status="ok", device="cpu"))
    lines.append(json.dumps({"v": 1, "ts": "2026-12-06T10:00:05.000+00:00", "stage": "error", "host": "h", "pid": 1,
                             "session_id": "s9", "request_id": "r9", "device": "cpu",
                             "error_type": "OutOfMemoryError", "error_msg": "CUDA out of memory. Tried to allocate 2 GiB"}))
    (d / "app.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_cuda_oom_on_a_cpu_host_is_pointed_out(tmp_path):
    _cpu_oom_logs(tmp_path)
    model = _analyze_json(tmp_path)
    assert model["no_gpu"]
    note = next(n for n in model["notes"] if n.get("id") == "cuda_on_cpu")
    assert "name CUDA, yet every request ran on the CPU" in note["message"]
    assert "name CUDA, yet every request ran on the CPU" in render_report(model, "html")


def test_a_window_far_longer_than_its_logs_is_pointed_out(tmp_path):
    _cpu_oom_logs(tmp_path)
    model = _analyze_json(tmp_path, "--since", "2026-12-05T11:00:00+00:00", "--until", "2026-12-06T11:00:00+00:00")
    note = next(n for n in model["notes"] if n.get("id") == "window_vs_data")
    assert note["message"].startswith("the window asked spans 1 d, the logs in it only 4 s")


# -- tables and charts that fit the data ---------------------------------------------------------


def test_drilldown_shows_only_columns_with_data_and_one_format_per_column(report):
    import re

    from dslogs.analyzer.render.html import numcol, view_model

    model, html = report("gradio_host_leak")
    drills = view_model(model, fallback_svg=False)["drilldowns"]
    assert drills
    for d in drills:
        for c in d["columns"]:
            assert any(r.get(c) is not None for r in d["rows"]), (d["id"], c)
    # a column of numbers carries one number of decimals in every cell
    for d in drills:
        for c, digits in d["digits"].items():
            cells = [numcol(r.get(c), digits) for r in d["rows"] if r.get(c) is not None]
            decimals = {len(x.split(".")[1]) if "." in x else 0 for x in cells}
            assert len(decimals) == 1, (c, cells)
    # GPU-only fields of a CPU-only source are no columns
    cpu_model, cpu_html = report("cpu_only")
    assert cpu_model["no_gpu"]
    cpu_drills = view_model(cpu_model, fallback_svg=False)["drilldowns"]
    assert cpu_drills
    gpu_fields = {"gpu_wait_pct", "gpu_util_pct", "reserved_mb", "allocated_mb", "reserved_mb_before"}
    assert not any(gpu_fields & set(d["columns"]) for d in cpu_drills)
    assert not re.search(r'data-key="gpu_(wait|util)_pct"', cpu_html)


def test_column_digits_are_one_per_column():
    from dslogs.analyzer.render.html import column_digits, numcol

    rows = [{"a": 40.0, "b": 3, "c": 1200.4, "d": 0.123}, {"a": 40.9, "b": 5, "c": 12.0, "d": 1.5}]
    digits = column_digits(rows, ["a", "b", "c", "d"])
    assert digits == {"a": 1, "b": 0, "c": 0, "d": 2}
    assert [numcol(r["a"], digits["a"]) for r in rows] == ["40.0", "40.9"]
    assert [numcol(r["c"], digits["c"]) for r in rows] == ["1,200", "12"]


def test_per_session_axes_count_the_turns_the_data_has(report):
    from dslogs.analyzer.render.charts.specs import build_charts

    model, _ = report("gradio_host_leak")
    most = max(len(rows) for rows in model["session_details"].values())
    seen = 0
    for c in build_charts(model):
        if c.id in ("kv_growth", "memory_timeline"):
            x = json.loads(json.dumps(c.spec))
            text = json.dumps(x)
            assert "turn in the session" in text
            domain = text[text.index('"domain": [1, '):].split("]")[0]
            top = int(domain.split(",")[1])
            assert top <= most, (c.id, top, most)
            seen += 1
    assert seen


def test_day_axes_show_dates_at_a_month_start():
    from dslogs.analyzer.render.charts.specs import TimeAxis, _time_axis_def

    three_days = TimeAxis(domain=[0, 3 * 86_400_000])
    assert _time_axis_def(three_days)["format"]["month"] == "%b %d"
    assert _time_axis_def(TimeAxis(domain=[0, 3_600_000]))["format"]["month"] == "%b %d"
    half_year = TimeAxis(domain=[0, 180 * 86_400_000])
    assert _time_axis_def(half_year)["format"]["month"] == "%b %Y"


def test_evidence_chart_has_axes_and_says_why_a_turn_is_missing(report):
    import copy

    from dslogs.analyzer.rules.evidence import memory_requests

    rows = [{"request_id": f"r{i}", "turn_index": i, "rss_mb_before": 100.0 * i, "rss_mb_after": 100.0 * i + 40}
            for i in (1, 2, 4)]
    rows.insert(2, {"request_id": "r3", "turn_index": 3})  # no before/after reading
    entry = memory_requests(rows, bases=("rss",))
    assert [r["turn_index"] for r in entry["requests"]] == [1, 2, 4]
    assert entry["missing"] == [{"turn_index": 3, "why": "no before/after reading"}]
    from dslogs.analyzer.render.html import render_html

    model = copy.deepcopy(report("gradio_host_leak")[0])
    f = next(f for f in model["findings"] if (f.get("evidence") or {}).get("requests"))
    f["evidence"]["requests"][0]["missing"] = [{"turn_index": 99, "why": "no before/after reading"}]
    html = render_html(model, fallback_svg=False)
    assert "MiB kept" in html and "turn of the session" in html
    assert "turn 99 (no before/after reading)" in html


def test_failed_requests_and_error_events_each_say_what_they_count(tmp_path):
    """Two requests fail on an OOM and two more hit one, are retried and answered: 4 error events,
    2 failed requests. A reader saw "4 errors" in the header beside "OutOfMemoryError 8" in the
    errors table and took them for one count disagreeing."""
    lines = []
    for i, (sid, status) in enumerate((("f", "error"), ("f", "error"), ("r", "ok"), ("r", "ok"))):
        rid, end = f"q{i}", 1.0 + i
        lines.append(json.dumps({"v": 1, "ts": f"2026-12-06T10:00:{end - 0.5:06.3f}+00:00", "stage": "error",
                                 "host": "h", "pid": 1, "session_id": sid, "request_id": rid,
                                 "error_type": "OutOfMemoryError", "error_msg": "CUDA out of memory"}))
        lines.append(_event(end, "request", 800, sid, rid, status=status))
    (tmp_path / "app.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = _analyze_json(tmp_path)
    req = model["requests"]
    assert (req["errors"], req["retried"]) == (2, 2) and [e["count"] for e in model["errors"]] == [4]
    note = "2 failed · 2 retried and answered"
    assert req["errors_note"] == note
    md = render_report(model, "md")
    assert f"4 requests ({note}) in" in md
    assert "| type | events | sessions |" in md
    oom = next(x for x in model["lead"] if x["rule"] == "oom")
    assert oom["retried_requests"] == 2
    assert "2 of 4 requests failed, all in 1 session; 2 more requests answered after the app caught" in oom["impact"]
    html = render_report(model, "html")
    assert f'<div class="k">failed requests</div><div class="v">{note}</div>' in html


def test_the_header_says_when_requests_ran_beside_the_logs_span(tmp_path):
    """The logs span 30 s, the requests ran 7 s of it: a reader had to rebuild that from the
    drill-down's start times."""
    lines = [json.dumps({"v": 1, "ts": "2026-12-06T10:00:01.000+00:00", "stage": "gpu_memory", "host": "h", "pid": 1,
                         "reserved_mb": 3000.0, "allocated_mb": 3000.0})]
    lines += [_event(10.0 + i, "request", 800, f"s{i}", f"q{i}", status="ok") for i in range(3)]
    lines.append(json.dumps({"v": 1, "ts": "2026-12-06T10:00:31.000+00:00", "stage": "gpu_memory", "host": "h",
                             "pid": 1, "reserved_mb": 3000.0, "allocated_mb": 3000.0}))
    (tmp_path / "app.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = _analyze_json(tmp_path)
    w = model["window"]
    assert w["first_request"].startswith("2026-12-06T10:00:09.2") and w["last_request"].startswith("2026-12-06T10:00:12.0")
    assert "30 s of data" in render_report(model, "md")
    assert "Requests ran from 2026-12-06T10:00:09.2" in render_report(model, "md")
    assert "(3 s of the 30 s)." in render_report(model, "md")
    assert "Requests ran from 2026-12-06 10:00:09 UTC to 2026-12-06 10:00:12 UTC (3 s)." in render_report(model, "html")


def test_at_risk_and_turn_are_defined_where_the_report_uses_them(report):
    """A reader met "8 of 70 requests at risk" in the impact lines and "turn 2" in the memory
    evidence, neither in the glossary."""
    from dslogs.analyzer.render.glossary import GLOSSARY

    model, html = report("gradio_host_leak")
    assert any("at risk" in x["impact"] for x in model["lead"])
    assert GLOSSARY.get("at risk") and GLOSSARY.get("turn")
    assert '<a class="term" href="#gloss-at-risk"' in html and 'id="gloss-at-risk"' in html
    assert "turn 1" in html and 'id="gloss-turn"' in html
    md = render_report(model, "md")
    assert "- **at risk**: in a ranked line's impact" in md and "- **turn**: one request of a session" in md


def test_a_second_line_over_the_same_retried_requests_names_the_first(report):
    """oom and beam_search over the same 5 requests, each answered after a caught OOM: the second
    line says they are line 1's, not "5 more"."""
    model, _ = report("oom_fallback")
    oom = next(x for x in model["lead"] if x["rule"] == "oom")
    beam = next(x for x in model["lead"] if x["rule"] == "beam_search")
    assert oom["retried_requests"] == beam["retried_requests"] == 5
    assert "5 of 252 requests answered after the app caught an error and retried" in oom["impact"]
    assert f"the same 5 requests answered after a caught error and retry as line {oom['rank']}" in beam["impact"]
