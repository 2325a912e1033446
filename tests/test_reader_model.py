"""The report model of three real-app runs an on-call reader was given (tests/fixtures/reader_run*:
the Gradio and Streamlit apps of tests/e2e with a tiny Qwen2 on CPU, faults injected per session,
truth.json naming them): what the reader tripped on must not be in the model. run1: Gradio, 16
sessions x 5 turns, beams (num_beams=2) in one session and OOMs with num_beams=5 in another;
run2: Gradio, OOMs with num_beams=5 then a greedy retry; run3: Streamlit, 10 users taking
turns. Each report takes about two seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core import textsafe

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache: dict[str, tuple[dict, dict]] = {}

    def get(name: str) -> tuple[dict, dict]:
        if name not in cache:
            d = FIXTURES / f"reader_{name}"
            out = tmp_path_factory.mktemp(name) / "report.json"
            res = CliRunner().invoke(app, ["analyze", str(d), "--format", "json", "--no-cache", "-q", "--out", str(out)])
            assert res.exit_code == 0, res.output
            cache[name] = (json.loads(out.read_text(encoding="utf-8")),
                           json.loads((d / "truth.json").read_text(encoding="utf-8")))
        return cache[name]

    return get


def _finding(model: dict, rule: str) -> dict | None:
    return next((f for f in model["findings"] if f["rule"] == rule), None)


def _rule(model: dict, rule: str) -> dict:
    return next(r for r in model["rules"] if r["rule"] == rule)


def test_beam_title_states_each_num_beams_not_the_largest_for_all(run):
    model, truth = run("run1")
    f = _finding(model, "beam_search")
    beams = {s["session_id"]: s["num_beams_max"] for s in f["evidence"]["details"]["sessions"]}
    assert beams == {truth["sid_of"]["s04"]: 5, truth["sid_of"]["s01"]: 2}
    assert "num_beams = 5 in 1 session, 2 in 1 session" in f["message"]


def test_lead_counts_failures_per_session_and_never_twice(run):
    model, truth = run("run1")
    by_rule = {x["rule"]: x for x in model["lead"]}
    oom, beam = by_rule["oom"], by_rule["beam_search"]
    assert oom["failed_requests"] == beam["failed_requests"] == 5
    # all 5 failures are in one of the beam line's two sessions, and they are the oom line's
    assert beam["sessions"] == 2 and beam["failed_sessions"] == 1
    assert beam["same_failures_as"] == oom["rank"] and oom["same_failures_as"] is None
    assert f"the same 5 failed requests as line {oom['rank']} (oom)" in beam["impact"]
    assert "all in 1 session" in beam["impact"] and "5 of 80 requests failed" not in beam["impact"]
    assert "5 of 80 requests failed" in oom["impact"]


def test_no_knee_from_two_measured_levels_over_sparse_ones(run):
    model, _ = run("run1")
    # levels 1-6 hold under 20 requests each: the "knee" at 7 was read from levels 7 and 8 alone
    assert _finding(model, "concurrency_cliff") is None
    r = _rule(model, "concurrency_cliff")
    assert r["status"] == "no_data" and "2 levels with 20+ requests" in r["reason"]


@pytest.mark.parametrize("name", ["run2", "run3"])
def test_ooms_from_beams_are_not_blamed_on_concurrency(run, name):
    model, _ = run(name)
    oom = _finding(model, "oom")
    assert oom is not None  # the OOMs are found, with their session
    assert _finding(model, "oom_at_concurrency") is None
    assert _finding(model, "concurrency_cliff") is None
    assert not any("requests in flight" in (x.get("problem") or "") for x in model["lead"])


def test_format_lines_alone_are_no_request(run):
    model, truth = run("run3")
    # 10 Streamlit users x 4 turns; each session also logged 4 format lines under one drop-in id
    assert model["requests"]["count"] == 40
    assert {s["requests"] for s in model["sessions"]} == {4}
    assert [h["requests"] for h in model["hosts"]] == [40]
    assert len(model["sessions"]) == len(truth["sid_of"]) == 10


# -- the rendered page ---------------------------------------------------------------------------


def _html(model: dict) -> str:
    from dslogs.analyzer.render.report import render_report

    return render_report(model, "html")


def _table_after(html: str, heading: str) -> list[list[str]]:
    import re
    from html import unescape

    part = html[html.index(heading):]
    part = part[: part.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", part, re.S)
    return [[unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in rows[1:]]


def test_no_per_minute_slope_from_seconds_of_readings(run):
    model, _ = run("run1")  # 17 s of logs: a +192 MiB rise read as +3,625 MiB/min
    assert all((s.get("duration_min") or 0) < 1 for s in model["sessions"])
    html = _html(model)
    rows = _table_after(html, "Reserved-memory slope by session")
    assert rows and all(r[2] == "—" and r[3] == "—" for r in rows), rows[:2]
    assert "a slope fitted to seconds and scaled to a minute is unreliable" in html
    sessions = _table_after(html, 'id="sessions-table"')
    assert all(r[5] == "—" for r in sessions)


def test_drilldowns_say_under_a_minute_where_the_tables_do(run):
    import re

    model, _ = run("run1")
    assert all(s["slope_ok"] is False for s in model["sessions"])  # one rule, in the model
    html = _html(model)
    slopes = re.findall(r"<dt>reserved slope</dt><dd>(.*?)</dd>", html, re.S)
    assert slopes and all("not measured (readings span" in d and "MiB/min" not in d and "R²" not in d
                          for d in slopes), slopes[:2]


def test_memory_columns_share_one_format(run):
    model, _ = run("run1")
    rows = _table_after(_html(model), "Reserved-memory slope by session")
    for col in (4,):  # the rise (judged figures read as the finding cards write them)
        values = [r[col].split(" (")[0] for r in rows if r[col] != "—"]
        decimals = {len(v.split(".")[1]) if "." in v else 0 for v in values}
        assert len(decimals) == 1, (col, values)


def test_threshold_reached_says_reaching_counts(run):
    model, _ = run("run1")
    line = next(x for x in model["lead"] if x["rule"] == "high_max_tokens")
    assert line["figure"] == "4,096 tokens (threshold ≥ 4,096 tokens, reaching it counts)"
    assert "threshold <b>≥ 4,096" in _html(model)


def test_per_session_charts_say_which_sessions_they_draw_and_why(run):
    model, _ = run("run1")
    html = _html(model)
    assert "the readings of at most report.timeline_sessions" not in html  # a setting name, unexplained
    assert "8 of the 12 sessions with per-turn readings drawn: the " in html
    # the other 4 of the 16 sessions are accounted for, with the reason
    assert ("4 of the report&#39;s 16 sessions have no per-turn reading here: the report keeps per-turn "
            "readings for at most 12 sessions, those this chart&#39;s own measure ranks first") in html


@pytest.mark.parametrize("name", ["run1", "run2"])
def test_memory_chart_draws_every_session_a_memory_finding_names(run, name):
    """run1's 89fb5ebf and run2's 93002af3 (rss_growth, host-RAM leakers) were not among the 12
    sessions memory_timeline.sql keeps, picked before the findings: the chart left them out. Now
    each session a memory finding names is drawn, at its turns, with the readings of its drill-down,
    and the caption says how many of the report's sessions are drawn."""
    from dslogs.analyzer.render.charts.specs import build_charts
    from dslogs.analyzer.rules.registry import MEMORY_RULES

    model, truth = run(name)
    named = {sid for f in model["findings"] if f["rule"] in MEMORY_RULES for sid in f["session_ids"]}
    leaker = {"run1": "89fb5ebf", "run2": "93002af3"}[name]
    assert any(sid.startswith(leaker) for sid in named)
    chart = next(c for c in build_charts(model) if c.id == "memory_timeline")
    drawn = _drawn_sessions(chart.spec)
    assert named <= drawn, named - drawn
    sid = next(s for s in named if s.startswith(leaker))
    points = [r for r in model["series"]["memory_timeline"] if r["session_id"] == sid]
    details = [r for r in model["session_details"][sid] if r.get("reserved_mb") is not None]
    assert [(r["turn_index"], r["reserved_mb"]) for r in points] == [(r["turn_index"], r["reserved_mb"]) for r in details]
    assert len(points) >= 2
    assert f"{len(drawn)} of the report's {model['sessions_total']} sessions drawn." in chart.notes
    assert not any("Named by a finding but not drawn" in n for n in chart.notes)



@pytest.mark.parametrize("name", ["run1", "run2"])
def test_kv_chart_draws_every_session_a_kv_or_memory_finding_names(run, name):
    """The KV chart drew only the sessions kv_growth_timeline.sql keeps (the longest KV, picked
    before the findings): run2's f0e4bfed (rss_growth) was left out. Now it draws each session a
    finding of its rules names that has readings, from the drill-down as the memory chart does;
    run1's 46b38ad1 (oom: every request failed before prefill) has none, and its caption says so."""
    from dslogs.analyzer.render.charts.specs import build_charts
    from dslogs.analyzer.rules.registry import KV_RULES

    model, _ = run(name)
    named = {sid for f in model["findings"] if f["rule"] in KV_RULES for sid in f["session_ids"]}
    with_readings = {sid for sid in named
                     if sum(r.get("kv_seq_len") is not None for r in model["session_details"].get(sid) or []) >= 2}
    chart = next(c for c in build_charts(model) if c.id == "kv_growth")
    drawn = _drawn_sessions(chart.spec)
    assert with_readings <= drawn, with_readings - drawn
    if name == "run2":
        sid = next(s for s in named if s.startswith("f0e4bfed"))
        points = [r for r in model["series"]["kv_growth"] if r["session_id"] == sid]
        details = [r for r in model["session_details"][sid] if r.get("kv_seq_len") is not None]
        assert [(r["turn_index"], r["kv_seq_len"], r["kv_cache_size_mb"]) for r in points] == \
            [(r["turn_index"], r["kv_seq_len"], r["kv_cache_size_mb"]) for r in details]
        assert len(points) >= 2 and sid in drawn
    else:
        oom = next(s for s in named if s.startswith("46b38ad1"))
        assert all(r.get("kv_seq_len") is None for r in model["session_details"][oom])
        assert any(n.startswith("Named by a finding but not drawn (none of its requests in the report's drill-down "
                                "logged a reading of this kind): 46b38ad1 oom") for n in chart.notes), chart.notes
        # the KV query ranks by the longest KV sequence, not by a flag
        assert any("ranks first (the longest KV sequence)" in n for n in chart.notes), chart.notes


def _fixture_events(name: str) -> list[dict]:
    import gzip

    out = []
    for f in sorted((FIXTURES / f"reader_{name}").glob("*.jsonl.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            out += [json.loads(line) for line in fh if line.strip()]
    return out


def test_readings_added_from_the_drill_down_carry_the_time_they_were_taken(run):
    """The readings the model adds for a session a finding names were placed at the request's
    start (the drill-down's start_ts) while the chart's tooltip calls it the reading's time: now
    each is at the time of the reading, as the series' own rows are (the gpu_memory snapshot after
    the request; the request's last KV reading), read here from the fixture's events."""
    from datetime import datetime

    model, _ = run("run2")

    def t(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    events = _fixture_events("run2")
    added = {("memory_timeline", "93002af3"): ("gpu_memory",),
             ("kv_growth", "f0e4bfed"): ("prefill", "kv_cache", "decode", "inference")}
    for (series, prefix), stages in added.items():
        sid = next(s for s in model["session_details"] if s.startswith(prefix))
        points = [r for r in model["series"][series] if r["session_id"] == sid]
        assert len(points) >= 2
        starts = {r["request_id"]: r["start_ts"] for r in model["session_details"][sid]}
        for p in points:
            taken = max(t(e["ts"]) for e in events if e.get("request_id") == p["request_id"] and e.get("stage") in stages
                        and (e.get("reserved_mb") is not None or e.get("kv_seq_len") is not None
                             or e.get("kv_cache_size_mb") is not None))
            assert t(p["ts"]) == taken, (series, p)
            assert t(p["ts"]) > t(starts[p["request_id"]])


def test_drill_down_shows_the_kv_cache_size_not_the_readings_times(run):
    """The drill-down's rows carry the KV cache size of each request (its kv_cache events) and the
    times its readings were taken (for the charts): the table shows the size beside the KV tokens,
    and one time per request, its start."""
    from dslogs.analyzer.render.html import view_model

    model, _ = run("run2")
    drills = view_model(model, fallback_svg=False)["drilldowns"]
    assert drills
    for d in drills:
        assert [c for c in d["columns"] if c.endswith("_ts")] == ["start_ts"], d["columns"]
    cols = next(d["columns"] for d in drills if "kv_seq_len" in d["columns"])
    assert cols.index("kv_cache_size_mb") == cols.index("kv_seq_len") + 1

def test_per_session_chart_names_the_few_sessions_it_leaves_out(run):
    """run3: "8 of the 9 sessions" named none of the one left out; and every session of the
    report is accounted for in the captions (drawn, left out, one reading, none kept)."""
    import re

    from dslogs.analyzer.render.charts.specs import build_charts

    model, _ = run("run3")
    total = model["sessions_total"]
    for c in build_charts(model):
        if c.id not in ("memory_timeline", "kv_growth"):
            continue
        drawn = _drawn_sessions(c.spec)
        text = " ".join(c.notes)
        m = re.search(r"(\d+) of the (\d+) sessions with per-turn readings drawn", text)
        shown, with_readings = (int(m.group(1)), int(m.group(2))) if m else (len(drawn), len(drawn))
        assert shown == len(drawn)
        if with_readings - shown <= 3 and m:
            left = re.search(r"left out: ([0-9a-f, ]+)\.", text)
            assert left and len(left.group(1).split(", ")) == with_readings - shown, text
        single = re.search(r"(\d+) sessions? with a single reading", text)
        none = re.search(r"(\d+) of the report's \d+ sessions (?:has|have) no per-turn reading", text)
        accounted = with_readings + (int(single.group(1)) if single else 0) + (int(none.group(1)) if none else 0)
        assert accounted == total, (c.id, text)


def test_sessions_table_columns_share_one_format(run):
    model, _ = run("run1")
    rows = _table_after(_html(model), 'id="sessions-table"')
    for col in [c for c in range(5, len(rows[0]) - 1) if "×" not in rows[0][c]]:  # judged: as the cards
        values = [r[col].split(" (")[0] for r in rows if r[col] != "—"]
        decimals = {len(v.split(".")[1]) if "." in v else 0 for v in values}
        assert len(decimals) <= 1, (col, values)


def test_zero_errors_beside_retried_ooms_says_so_once_everywhere(run):
    from html import unescape

    model, _ = run("run2")  # 6 CUDA OOMs with num_beams=5, each retried greedy: no request failed
    # the window counts requests answered after a retry, a session its OOMs (none of them failed)
    note, ooms = "0 failed · 6 retried and answered", "0 failed · 6 OOM retried and answered"
    assert model["requests"]["errors"] == 0 and model["requests"]["retried"] == 6
    assert model["requests"]["errors_note"] == note
    oom = next(s for s in model["sessions"] if "oom" in s["findings"])
    assert oom["errors_note"] == ooms
    assert all(s["errors_note"] is None for s in model["sessions"] if s is not oom)
    html = unescape(_html(model))
    assert f'<div class="k">failed requests</div><div class="v">{note}</div>' in html
    assert f"<dt>failed requests</dt><dd>{ooms}</dd>" in html
    rows = _table_after(html, 'id="sessions-table"')
    assert [r[3] for r in rows if r[3] == ooms] == [ooms], rows[:2]
    from dslogs.analyzer.render.report import render_report

    assert f"96 requests ({note}) in" in render_report(model, "md")


def test_rest_of_a_slow_request_is_named_defined_and_said_where_it_dominates(run):
    model, _ = run("run2")  # Gradio: up to ~900 ms outside queue, tokenize, prefill and decode
    slow = model["slow_requests"]
    top = [r for r in slow if r["other_ms"] is not None and r["other_ms"] >= max(
        r.get(k) or 0 for k in ("queue_ms", "tokenize_ms", "prefill_ms", "decode_ms", "other_ms"))
        and r["other_ms"] >= 0.25 * r["e2e_ms"]]
    assert top, [(r["e2e_ms"], r["other_ms"]) for r in slow]
    for r in top:
        assert r["why"][0].startswith("mostly rest: "), r["why"]
        assert "handler time outside the measured stages" in r["why"][0] and "not the model" in r["why"][0]
    assert not any("the app's own work" in w for r in slow for w in r["why"])
    html = _html(model)
    section = html[html.index('id="sec-slow"'):html.index('id="sec-prefill"')]
    assert 'the <a href="#gloss-rest">rest</a> (handler time outside those stages)' in section
    assert '<dt id="gloss-rest">rest</dt>' in html


def _drawn_sessions(spec) -> set:
    """The session ids in a chart spec's inline data, wherever the layers keep it."""
    found: set = set()
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "session_id" and isinstance(v, str):
                found.add(v)
            else:
                found |= _drawn_sessions(v)
    elif isinstance(spec, list):
        for v in spec:
            found |= _drawn_sessions(v)
    return found


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_per_session_chart_captions_count_and_name_the_drawn_sessions_findings_name(run, name):
    import re

    from dslogs.analyzer.render.charts.specs import build_charts

    model, _ = run(name)
    named = {sid for f in model["findings"] for sid in f.get("session_ids") or []}
    checked = 0
    for c in build_charts(model):
        if c.id not in ("memory_timeline", "kv_growth"):
            continue
        drawn = _drawn_sessions(c.spec)
        note = next(n for n in c.notes if "sessions with per-turn readings drawn" in n)
        want = sorted(drawn & named)
        m = re.search(r"drawn: the (\d+) that findings name \(([^)]*)\)", note)
        assert m and int(m.group(1)) == len(want), (c.id, note, want)
        assert sorted(sid for sid in want if sid[:8] in m.group(2)) == want, (c.id, note)
        checked += 1
    assert checked == 2


# -- what the last readers tripped on: queueing taken for the cause, a simulated OOM, host RSS
# missing from Memory, the collector's count one short, process and session RSS apart


def test_no_request_over_the_slo_says_so_and_queue_wait_reads_secondary(run):
    """run1: every completed request met the SLO while queue wait was the largest part of most of
    the slowest: the reader took queueing for the cause of "slow at times" and proposed raising the
    concurrency limit. The lead says, with the figures, that nothing is slow by the SLO and that
    the queue is secondary."""
    model, _ = run("run1")
    assert model["requests"]["slo_missed"] == 0
    assert "slow_requests" not in {x["rule"] for x in model["lead"]}
    checks = {c["id"]: c["message"] for c in model["checked"]}
    assert list(checks) == ["slow_requests", "queue_wait"], checks
    top = model["slow_requests"][0]
    assert "0 of 80 requests" in checks["slow_requests"]
    assert f"the slowest took {top['e2e_ms'] / 1000:.2f} s" in checks["slow_requests"]
    queue = next(s for s in model["stages"] if s["stage"] == "queue")
    assert f"p95 {queue['p95_ms']:.1f} ms, under its 1 s threshold" in checks["queue_wait"]
    assert "secondary" in checks["queue_wait"] and "none of them is over the SLO" in checks["queue_wait"]
    shown = model["slow_requests"][:10]
    largest = sum(1 for r in shown if r["queue_ms"] >= max(r[k] or 0 for k in
                                                          ("tokenize_ms", "prefill_ms", "decode_ms", "other_ms")))
    assert f"the largest part of {largest} of the 10 slowest requests" in checks["queue_wait"]
    html = _html(model)
    lead = html[html.index('id="lead"'):html.index('class="facts"')]
    assert "Checked, not the problem" in lead and 'data-check="queue_wait"' in lead
    slow = html[html.index('id="sec-slow"'):html.index('id="sec-prefill"')]
    assert 'class="note small verdict" data-check="slow_requests"' in slow


def test_a_memory_finding_does_not_own_its_sessions_slow_requests(run):
    """run2: one request missed the SLO waiting 1 s in the queue; it was turn 1 of a host-RAM
    leaker, and the rss_growth line ranked first on it. The slow line names that request's
    session, not every session of the ten slowest."""
    model, truth = run("run2")
    by_rule = {x["rule"]: x for x in model["lead"]}
    assert by_rule["rss_growth"]["slo_missed_requests"] == 0
    slow = by_rule["slow_requests"]
    assert slow["slo_missed_requests"] == model["requests"]["slo_missed"] == 1
    assert slow["session_ids"] == [truth["sid_of"]["s07"]] and slow["sessions"] == 1
    assert "at 2026-12-06" in slow["impact"] and "for 0 s" not in slow["impact"]
    # one request in 96 does not go before the critical findings
    assert slow["severity"] == "info" and slow["rank"] == len(model["lead"])
    assert [x["severity"] for x in model["lead"][:2]] == ["critical", "critical"]
    queue = next(c for c in model["checked"] if c["id"] == "queue_wait")["message"]
    assert "the queue is the largest part of the 1 request over the SLO (the longest wait 1.04 s)" in queue


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_a_simulated_oom_and_its_gpu_sizes_are_pointed_out(run, name):
    model, _ = run(name)
    notes = {n["id"]: n["message"] for n in model["notes"] if isinstance(n, dict)}
    assert "[simulated: 5 beams on a small GPU]" in notes["simulated_error"]
    assert "are real (fix what the oom finding names)" in notes["simulated_error"]
    peak = max(lv["reserved_peak_mb"] for c in model["capacity"] for lv in c["levels"])
    sizes = notes["oom_message_vs_readings"]
    assert "14.75 GiB in total and 13.10 GiB already allocated; the logs carry no GPU total" in sizes
    assert f"at most {peak:,.0f} MiB reserved" in sizes, (peak, sizes)
    assert "a spike inside generate, or not a reading at all" in sizes


@pytest.mark.parametrize("name", ["run1", "run3"])
def test_memory_section_shows_host_rss_where_the_logs_carry_it(run, name):
    """run3 has RSS only in the per-request readings, run1 in process samples too: the Memory
    section shows each session's own kept RSS (the judged figures of the Sessions table) either
    way, the leakers first."""
    from html import unescape

    model, truth = run(name)
    html = unescape(_html(model))
    memory = html[html.index('id="sec-memory"'):html.index('id="sec-kv"')]
    assert 'id="host-rss"' in memory
    rows = _table_after(memory, 'class="rss-sessions"')
    leakers = [truth["sid_of"][k] for k, v in truth["plan"].items() if v == "host_leak"]
    assert {r[0] for r in rows[:len(leakers)]} == set(leakers), rows[:3]
    judged = {s["session_id"]: s["judged"]["rss_growth"] for s in model["sessions"]}
    for r in rows:
        shown = float(r[1].split()[0].replace(",", ""))
        assert shown == pytest.approx(judged[r[0]]["rss_kept_mb"], rel=0.01, abs=0.01), r


def test_process_rss_and_the_sessions_it_names_read_as_one_account(run):
    """run1: the process's RSS rose 539 MiB, the two leakers are credited 408 MiB, and the held
    rise is 128 MiB: the page gave the three apart and the reader could not reconcile them."""
    from html import unescape

    model, _ = run("run1")
    proc = model["processes"][0]
    f = next(f for f in model["findings"] if f["rule"] == "rss_growth")
    kept = sum(s["rss_kept_mb"] for s in f["evidence"]["details"]["sessions"])
    assert proc["sessions_kept"] == 2 and proc["sessions_kept_mb"] == pytest.approx(kept)
    assert proc["slope_ok"] is False
    memory = unescape(_html(model))
    memory = memory[memory.index('id="host-rss"'):memory.index('id="sec-kv"')]
    rise = proc["rss_last_mb"] - proc["rss_first_mb"]
    assert f"(+{rise:,.0f} MiB)" in memory
    assert f"The 2 sessions rss_growth names kept {kept:.1f} MiB of it" in memory
    assert f"the other {rise - kept:.1f} MiB is spread over the other sessions" in memory
    assert 'href="#gloss-held-rise">Held rise</a>: 128.1 MiB' in memory
    assert "RSS slope and R² “—”: not measured" in memory and "1,987" not in memory  # no slope from 17 s


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_collector_written_and_events_read_are_one_count(run, name):
    from html import unescape

    model, _ = run(name)
    events = model["ingest"]["events"]
    (row,) = model["series"]["collector"]
    assert row["written"] + row["processes"] == events
    html = unescape(_html(model))
    assert f"{row['written']:,} + 1 = the {events:,} events read" in html


def test_fix_texts_speak_of_the_stack_and_cite_listed_sections(run):
    """run2 is a Gradio app: its GPU-leak fix names Gradio's per-session state, not Streamlit's;
    every section any fix or message cites is in the page's Sources list."""
    from dslogs.analyzer.render.glossary import citations, source_sections

    listed = {key for _, key, _ in source_sections()}
    model, _ = run("run2")
    fix = _finding(model, "memory_leak")["fix"]
    assert "gr.State" in fix and "st.session_state" not in fix and "cache_resource" not in fix
    for name in ("run1", "run2", "run3"):
        model, _ = run(name)
        for f in model["findings"]:
            for text in (f["fix"], f["message"], f["source"]):
                for m, key, _ in citations(text or ""):
                    assert key and key.removesuffix(" table") in listed, (name, f["rule"], m.group(0))


def test_host_rss_table_names_the_sessions_past_its_rows(run):
    """run1: "6 more sessions keep less" named none of them: they are listed, with what they kept."""
    import re

    model, _ = run("run1")
    html = _html(model)
    m = re.search(r"the other (\d+) sessions \((.*?)\) kept less, at most ([\d.,]+) MiB each", html)
    assert m, "the sessions past the per-session RSS table are named"
    judged = [s for s in model["sessions"] if (s.get("judged") or {}).get("rss_growth")]
    assert int(m.group(1)) == len(judged) - 10
    assert m.group(2).count('class="id"') + m.group(2).count("<a ") >= int(m.group(1))


def test_capacity_counts_say_why_completed_requests_are_fewer(run):
    """run3: the curve said "the logs hold 40 requests", the prediction "36 requests": the 4 failed."""
    model, _ = run("run3")
    c = model["capacity"][0]
    assert "the logs hold 40 requests" in c["needs"]
    assert "the logs hold 36 completed requests (of 40: 4 failed not counted)" in c["service"]["needs"]


@pytest.mark.parametrize("name, says, not_says", [
    ("run2", "No request failed: the app caught each and retried", "the failures are real"),
    ("run3", "still failed as the report counts them, so the failures are real", "retried"),
])
def test_simulated_oom_note_says_failed_or_retried_per_case(run, name, says, not_says):
    """run2's OOMs were retried (status ok, 0 failed); run3's failed: the note words each case."""
    model, _ = run(name)
    note = next(n for n in model["notes"] if n["id"] == "simulated_error")["message"]
    assert says in note and not_says not in note.split("device. ")[1], note


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_a_slope_not_measured_reads_as_such_in_every_table(run, name):
    """Readings under a minute: no duration ("< 1 min") in a MiB/min column, no R² beside a slope
    not given; the reason is said once per table."""
    import re

    html = _html(run(name)[0])
    assert "&lt; 1 min" not in html and "< 1 min" not in html
    assert not re.search(r"not measured \(readings span \d+ s, under 1 min\)[^<]*R²", html)
    assert "not measured (readings span" in html  # the drill-down says it in words
    assert "(—&nbsp;under&nbsp;1&nbsp;min)" in html  # the slope column's header


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_a_short_window_says_once_what_it_cannot_show(run, name):
    """run3 spans 7 s: nothing warned that growth over hours or "slow at times" cannot be judged."""
    import re

    model, _ = run(name)
    notes = [n for n in model["notes"] if n["id"] == "short_window"]
    assert len(notes) == 1 and "cannot be judged from" in notes[0]["message"]
    assert model["notes"][0]["id"] == "short_window"  # first of the notes under the summary
    html = _html(model)
    assert len(re.findall(r"slow at times over a day, cannot be judged", html)) == 1


def test_badges_count_the_ranked_lines_the_lead_shows(run):
    """run2: "0 info" beside a ranked list whose fifth line is info (the slow line, no rule's):
    the badges of both reports count the lead's lines, by severity, and name the extra one."""
    import re

    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run("run2")
    assert any(x["rule"] == "slow_requests" and x["severity"] == "info" and x["finding"] is None
               for x in model["lead"])
    want = {s: sum(1 for x in model["lead"] if x["severity"] == s) for s in ("critical", "warning", "info")}
    assert want["info"] == 1 and sum(want.values()) == len(model["findings"]) + 1
    html = _html(model)
    summary = html.split('<div class="severity-summary">', 1)[1].split("</div>", 1)[0]
    shown = {sev: int(n) for n, sev in re.findall(r'class="badge (?:critical|warning|info)">(\d+) (\w+)</a>', summary)}
    assert shown == want
    assert "(of them, the info slow_requests line is from the request timings, not a rule's finding)" in summary
    md = render_markdown(model)
    line = next(x for x in md.splitlines() if x.startswith("**Ranked lines:**"))
    assert line.startswith(f"**Ranked lines:** {want['critical']} critical, {want['warning']} warning, 1 info")
    assert "the info slow_requests line is from the request timings" in line


@pytest.mark.parametrize("name", ["run1", "run2"])
def test_markdown_leads_with_the_ranked_lines_and_what_was_checked(run, name):
    """The Markdown report had neither the ranked lines nor "Checked, not the problem": both come
    first, from the same model fields, in the lead's order, made safe for Markdown."""
    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run(name)
    assert model["lead"] and model["checked"]
    md = render_markdown(model)
    head = md.index("## What is wrong, for whom, what to change")
    assert head < md.index("## Health checklist") and head < md.index("## Findings")
    body = md[head:md.index("**Ranked lines:**")]
    ranked = [x for x in body.splitlines() if x[:1].isdigit()]
    assert [x.split(" `", 1)[1].split("`", 1)[0] for x in ranked] == [x["rule"] for x in model["lead"]]
    assert [int(x.split(".", 1)[0]) for x in ranked] == [x["rank"] for x in model["lead"]]
    for x in model["lead"]:
        assert f"   - impact: {x['impact']}" in body
        for sid in x["session_ids"]:
            assert sid in body
    checked = body.split("**Checked, not the problem:**", 1)[1]
    assert [x for x in checked.splitlines() if x.startswith("- ")] == [
        "- " + " ".join(textsafe.markdown(c["message"]).split()) for c in model["checked"]]


def test_markdown_lead_lines_are_escaped():
    """A lead line's problem quotes the logs (an error message): no Markdown or HTML survives."""
    from dslogs.analyzer.render.markdown import render_markdown

    model = {"lead": [{"rank": 1, "rule": "oom", "severity": "critical", "finding": 1,
                       "problem": "boom <script>x</script> | *bold*\nnext", "impact": "1 of 2 requests failed",
                       "session_ids": ["s`1"], "figure": "1 OOM"}],
             "checked": [{"id": "queue_wait", "message": "queue <b>fine</b>"}]}
    md = render_markdown(model)
    assert "<script>" not in md and "<b>" not in md and "*bold*" not in md and "s`1" not in md
    line = next(x for x in md.splitlines() if x.startswith("1. "))
    assert "\n" not in line and "next" in line


def test_goodput_beside_nothing_slow_says_failed_requests_count_against_it(run):
    """run3: "Goodput 90.0 %" beside "none over the SLO, 0 of 40": the 4 failed requests."""
    model, _ = run("run3")
    msg = next(c for c in model["checked"] if c["id"] == "slow_requests")["message"]
    assert "(the 4 failed requests are not slow but count against goodput, 90.0 %)" in msg
    assert "Goodput 90.0 % of requests met every SLO: the 4 failed requests count against it as missed" in _html(model)


# -- what the s4b readers tripped on: bars past the axis top, captions the data contradicts


@pytest.mark.parametrize("name", ["run2", "run3"])
def test_count_charts_leave_room_above_the_tallest_bar(run, name):
    """run3's TTFT histogram (and run2's traffic chart and histograms) drew the tallest bar into
    the frame above the last axis label: the y domain stopped at the data's maximum."""
    from dslogs.analyzer.render.charts.specs import build_charts

    model, _ = run(name)
    checked = 0

    def units(spec):
        for key in ("hconcat", "vconcat", "layer"):
            for s in spec.get(key) or []:
                yield from units(s)
        yield spec

    for c in build_charts(model):
        for u in units(c.spec):
            y = (u.get("encoding") or {}).get("y") or {}
            if y.get("field") != "count":
                continue
            values = (u.get("data") or c.spec.get("data") or {}).get("values")
            if values is None:
                ds = c.spec.get("datasets") or {}
                values = next(iter(ds.values()), []) if len(ds) == 1 else None
            top = (y.get("scale") or {}).get("domain", [None, None])[1]
            assert top is not None and (y["scale"].get("nice") is False), (c.id, y)
            if values:
                totals: dict = {}
                for r in values:
                    k = r.get("bucket", r.get("bin_start")) if y.get("stack") else id(r)
                    totals[k] = totals.get(k, 0) + (r.get("count") or 0)
                assert top > max(totals.values()), (c.id, top, max(totals.values()))
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", ["run1", "run2", "run3"])
def test_per_session_chart_captions_are_true_to_the_data(run, name):
    """run1: "not drawn (fewer than two of its readings)" of a session with 5 readings the chart's
    data did not keep; run3: e537222d "left out" while the beam_search finding names it; run2: the
    memory chart's x ran to turn 12 where sessions have 6 requests (an OOM and its retry read twice)."""
    import re

    from dslogs.analyzer.render.charts.specs import build_charts

    model, _ = run(name)
    named = {sid for f in model["findings"] for sid in f.get("session_ids") or []}
    requests = {s["session_id"]: s["requests"] for s in model["sessions"]}
    for c in build_charts(model):
        if c.id not in ("memory_timeline", "kv_growth"):
            continue
        series = model["series"]["memory_timeline" if c.id == "memory_timeline" else "kv_growth"]
        readings = {sid: sum(1 for r in series if r["session_id"] == sid) for sid in named}
        text = " ".join(c.notes)
        for note in c.notes:
            if "single reading" in note and "Named by a finding" in note:
                for short in re.findall(r"([0-9a-f]{8}) [a-z_]+", note.split(":", 1)[1]):
                    sid = next(s for s in named if s.startswith(short))
                    assert readings[sid] == 1, (c.id, note)
        assert "fewer than two" not in text
        drawn = _drawn_sessions(c.spec)
        left = re.search(r"left out: ([^.]*)\.", text)
        for item in (left.group(1).split(", ") if left else []):
            sid = next((s for s in named if s.startswith(item[:8])), None)
            assert sid is None or "(" in item, (c.id, item)  # a named session left out says by which rule
        # a session a finding names is drawn whenever the chart's data holds its trend
        assert {sid for sid in named if readings[sid] >= 2} <= drawn, (c.id, text)
        spec = c.spec if "encoding" in c.spec else c.spec["layer"][0]
        top = spec["encoding"]["x"]["scale"]["domain"][1]
        assert top <= max(2, max(requests[sid] for sid in drawn if sid in requests)), (c.id, top)


def test_a_per_request_mean_reads_as_a_mean(run):
    """run2: "requests keep up to 501.3 MiB … each" was the session's mean (3,008 / 6)."""
    import re

    model, _ = run("run2")
    f = _finding(model, "memory_leak")
    line = next(x for x in model["lead"] if x["rule"] == "memory_leak")
    for text in (f["message"], line["problem"]):
        assert "up to 501.3" not in text
        m = re.search(r"keep ([\d,.]+) MiB of GPU memory each on average \(([\d,.]+) MiB over (\d+) requests", text)
        assert m, text
        mean, total, n = (float(g.replace(",", "")) for g in m.groups())
        assert mean == pytest.approx(total / n, abs=0.05)


# run2 only: in run1 every judged session counts all its requests (none kept from a later turn on)
@pytest.mark.parametrize("name", ["run2"])
def test_per_request_times_requests_says_which_were_not_counted(run, name):
    """run2: "40.4 × 4" for a session with 6 requests, the reason only in a collapsed block whose
    footer read "over the 6 requests listed" under rows marked "not counted"."""
    import re
    from html import unescape

    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run(name)
    html = unescape(_html(model))
    md = render_markdown(model)
    short = [(s, rule, j) for s in model["sessions"] for rule, j in (s.get("judged") or {}).items()
             if j.get("requests_counted") is not None and j["requests_counted"] < s["requests"]]
    assert short
    for s, _rule, j in short:
        n, total, read = j["requests_counted"], s["requests"], j["requests_read"]
        assert n <= read <= total
        want = f"× {n} of {total}; not counted: "
        assert want in html, (s["session_id"], want)
        if s.get("findings"):  # the Markdown report lists the flagged sessions
            assert want in md, (s["session_id"], want)
        if read > n:
            assert f"{want}{read - n} before the turn it started keeping" in html
    # the evidence footer counts the rows it credits, not the rows marked "not counted"
    for m in re.finditer(r"<tbody>((?:(?!<tbody>).)*?)</tbody></table></div>\s*<p class=\"note\">Credited in all: <b>[^<]*</b> "
                         r"over the (?:(\d+) counted of the )?(\d+) requests listed", html, re.S):
        rows = m.group(1).count("<tr>")
        skipped = m.group(1).count(">not counted<")
        assert int(m.group(3)) == rows
        assert int(m.group(2) or rows) == rows - skipped, m.group(0)[-120:]


@pytest.mark.parametrize("name", ["run1", "run2"])
def test_a_judged_figure_below_zero_says_why_where_it_appears(run, name):
    """run1 "-40 (-8 × 5)", run2 "-32 (-5.33 × 6)": a negative leak, unexplained."""
    import re

    from dslogs.analyzer.render.glossary import GLOSSARY
    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run(name)
    html = _html(model)
    cells = re.findall(r'<td class="n"(?: data-v="[^"]*")?>(-[\d,.]+ <span class="muted small">\(-[^<]*\)</span>[^<]*'
                       r'(?:<a [^>]*>[^<]*</a>)?)', html)
    assert cells
    for cell in cells:
        assert 'href="#gloss-below-zero">released more than kept: not a leak</a>' in cell, cell
    assert 'id="gloss-below-zero"' in html and "not a leak" in GLOSSARY["below zero"]
    md = render_markdown(model)
    for line in md.splitlines():
        if re.search(r"\| -[\d,.]+ \(-", line):
            assert "(released more than kept: not a leak)" in line, line


def test_oom_level_not_estimated_reads_as_one_sentence(run):
    """run2: "not estimated (the logs carry no GPU total)(40.8 MiB reserved per request …)"."""
    import re
    from html import unescape

    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run("run2")
    c = next(c for c in model["capacity"] if c.get("mb_per_request") is not None)
    assert c.get("oom_level") is None and not c.get("gpu_total_mb")
    html = re.sub(r"\s+", " ", unescape(_html(model)))
    want = (f"OOM likely from: not estimated: the logs carry no GPU total (memory grows {c['mb_per_request']:.1f} "
            "MiB reserved per request in flight, fit R² ")
    assert want in html and ")(" not in html.split("OOM likely from:")[1][:300]
    assert want in render_markdown(model)


@pytest.mark.parametrize("name", ["run2", "run3"])
def test_an_impact_under_a_minute_starts_at_a_second(run, name):
    """run3: "for 4 s from 2026-12-06 03:00" in a 7 s window: the minute says almost nothing."""
    import re

    model, _ = run(name)
    lines = [x for x in model["lead"] if x.get("minutes") is not None and x["minutes"] < 1 and x.get("since")]
    assert lines
    for x in lines:
        at = re.search(r"(?:from|at) (\d{4}-\d\d-\d\d [\d:]+)", x["impact"])
        assert at and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", at.group(1)), x["impact"]
        assert at.group(1).replace(" ", "T") in x["since"]


def test_reserved_band_says_its_figure_is_what_the_rule_judged(run):
    """run1: "reserved_mb within ±200 MiB … 0.00 MiB" beside sessions whose readings rose 192 MiB:
    the row's figure is the most a session's own requests kept (memory_leak's credited MiB), and
    the row says so where it shows it, in both reports."""
    from dslogs.analyzer.render.markdown import render_markdown

    model, _ = run("run1")
    row = next(c for c in model["checklist"] if c["id"] == "reserved_band")
    judged = [s["judged"]["memory_leak"]["rise_mb"] for s in model["sessions"] if "memory_leak" in (s.get("judged") or {})]
    assert row["value"] == max(judged) == 0
    assert max(s.get("reserved_rise_mb") or 0 for s in model["sessions"]) > 100  # the readings moved
    assert "the most any session's own requests kept" in row["note"]
    assert "no session's requests kept any" in row["note"]
    html = _html(model)
    cell = html.split("reserved_mb within ±200 MiB in every session", 1)[1].split("</td>", 1)[0]
    assert "the most any session&#39;s own requests kept" in cell
    assert "- reserved_mb within ±200 MiB in every session: measured: the most any session's own requests kept" in render_markdown(model)
    # where the rule found a leak the row fails on the same figure, and says what it is
    model2, _ = run("run2")
    row2 = next(c for c in model2["checklist"] if c["id"] == "reserved_band")
    assert row2["status"] == "FAIL" and row2["value"] == 3008
    assert "the most any session's own requests kept" in row2["note"] and "kept any" not in row2["note"]
