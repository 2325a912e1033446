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
    assert rows and all(r[2] == "< 1 min" and r[3] == "—" for r in rows), rows[:2]
    assert "a slope fitted to seconds and scaled to a minute is unreliable" in html
    sessions = _table_after(html, 'id="sessions-table"')
    assert all(r[5] == "< 1 min" for r in sessions)


def test_drilldowns_say_under_a_minute_where_the_tables_do(run):
    import re

    model, _ = run("run1")
    assert all(s["slope_ok"] is False for s in model["sessions"])  # one rule, in the model
    html = _html(model)
    slopes = re.findall(r"<dt>reserved slope</dt><dd>(.*?)</dd>", html, re.S)
    assert slopes and all("&lt; 1 min" in d and "MiB/min" not in d for d in slopes), slopes[:2]


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
    assert "The report keeps per-turn readings for at most 12 sessions (flagged ones first)" in html
    assert "8 of the 12 sessions with per-turn readings drawn: the " in html


def test_sessions_table_columns_share_one_format(run):
    model, _ = run("run1")
    rows = _table_after(_html(model), 'id="sessions-table"')
    for col in [c for c in range(5, len(rows[0]) - 1) if "×" not in rows[0][c]]:  # judged: as the cards
        values = [r[col].split(" (")[0] for r in rows if r[col] not in ("—", "< 1 min")]
        decimals = {len(v.split(".")[1]) if "." in v else 0 for v in values}
        assert len(decimals) <= 1, (col, values)


def test_zero_errors_beside_retried_ooms_says_so_once_everywhere(run):
    from html import unescape

    model, _ = run("run2")  # 6 CUDA OOMs with num_beams=5, each retried greedy: no request failed
    note = "0 failed · 6 OOM retried"
    assert model["requests"]["errors"] == 0 and model["requests"]["errors_note"] == note
    oom = next(s for s in model["sessions"] if "oom" in s["findings"])
    assert oom["errors_note"] == note
    assert all(s["errors_note"] is None for s in model["sessions"] if s is not oom)
    html = unescape(_html(model))
    assert f'<div class="k">errors</div><div class="v">{note}</div>' in html
    assert f"<dt>errors</dt><dd>{note}</dd>" in html
    rows = _table_after(html, 'id="sessions-table"')
    assert [r[3] for r in rows if r[3] == note] == [note], rows[:2]
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
