"""Weekly's counts come from SQL, not from the report's capped id lists (over 1,000 sessions, a
finding over 200), its week list from the data, and a side holding a part of its week gets no
regression verdict."""

from __future__ import annotations

import json
from zoneinfo import ZoneInfo

import duckdb
import pytest
from fixtures.report_models import build_model
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.ingest.discovery import discover_log_files
from dslogs.analyzer.model.weekly import compare_models
from dslogs.analyzer.render.weekly import render_weekly
from dslogs.analyzer.usecases.weekly import build_weekly

UTC = ZoneInfo("UTC")


@pytest.fixture(scope="module")
def many_sessions(tmp_path_factory):
    """One day of 2026-W48 with single-turn sessions, a quarter of them using beam search."""
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("many")
    simulate(root, scenarios=["beam_search"], days=1, seed=1, start="2026-11-24", max_turns=1, events=125_000)
    return root


def test_session_counts_are_distinct_sessions_not_capped_lists(many_sessions):
    files = discover_log_files([str(many_sessions)])
    distinct = duckdb.connect().execute(
        "SELECT count(DISTINCT session_id) FROM read_json(?, columns={'session_id': 'VARCHAR'}, "
        "format='newline_delimited', ignore_errors=true)", [files]).fetchone()[0]  # fmt: skip
    assert distinct > 1000
    w = build_weekly([str(many_sessions)], week="2026-W48", tz="UTC", use_cache=False)
    assert w["this"]["sessions"] == distinct
    beam = next(f for f in w["findings"]["new"] if f["rule"] == "beam_search")
    assert beam["sessions"] > 200  # the finding's full count, its id list holds 200
    assert w["this"]["sessions_affected"] >= beam["sessions"]
    # one day of the week: its hours are stated, and no verdicts are given
    assert 20 <= w["this"]["hours"] <= 24 and w["this"]["week_hours"] == 168
    assert w["regressions"] == 0 and any("covers" in n and "no regression verdicts" in n for n in w["notes"])


def test_week_list_from_the_data(many_sessions):
    res = CliRunner().invoke(app, ["report", "weekly", str(many_sessions), "--week", "", "--tz", "UTC", "--no-cache"])
    assert res.exit_code == 0, res.output
    assert res.stdout.split() == ["2026-W48"]


def _week(model: dict, first: str, last: str) -> dict:
    model["window"].update(first_event=first, last_event=last)
    return model


def test_a_partial_previous_week_gets_no_verdict():
    this = _week(build_model(seed=7), "2026-11-30T00:03:00+00:00", "2026-12-06T23:59:00+00:00")
    prev = _week(build_model(seed=3), "2026-11-29T08:00:00+00:00", "2026-11-29T16:00:00+00:00")
    prev["requests"]["errors"] = 0
    for s in prev["stages"]:
        s["p95_ms"] = round((s.get("p95_ms") or 0) / 3, 3)  # this week looks 3x slower
    w = compare_models(this, prev, (2026, 49), UTC)
    assert w["previous"]["hours"] == 8.0 and w["this"]["hours"] > 160
    assert w["regressions"] == 0 and not any(r["regression"] for r in w["stages"])
    assert {r["verdict"] for r in w["traffic"]} <= {"n/a", "too few"}
    assert not any(line.startswith("REGRESSION") for line in w["summary"])
    assert w["notes"] == ["2026-W48 covers 8 h of its 168 h (under 50%): no regression verdicts, "
                          "changes shown as they are."]  # fmt: skip
    md = render_weekly(w, "md")
    assert "regression**" not in md.replace("Regression: a rise", "")
    assert json.loads(render_weekly(w, "json"))["previous"]["hours"] == 8.0


def test_too_few_requests_gets_no_verdict():
    this = _week(build_model(seed=7), "2026-11-30T00:03:00+00:00", "2026-12-06T23:59:00+00:00")
    prev = _week(build_model(seed=3), "2026-11-23T00:03:00+00:00", "2026-11-29T23:59:00+00:00")
    prev["requests"]["count"] = 12
    w = compare_models(this, prev, (2026, 49), UTC)
    assert w["regressions"] == 0 and "holds 12 requests (under 30)" in w["notes"][0]
