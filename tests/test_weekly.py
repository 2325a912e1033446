"""Weekly report: ISO-week arithmetic, the comparison of two report models, its three formats,
and the CLI end to end on simulated logs (a healthy week, then a week with a memory leak)."""

from __future__ import annotations

import json
from datetime import date
from zoneinfo import ZoneInfo

import pytest
from fixtures.html_checks import parse_page
from fixtures.report_models import XSS_MESSAGE, build_model

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.model.weekly import (
    compare_models,
    default_week,
    parse_week,
    previous_week,
    week_bounds,
)
from dslogs.analyzer.render.weekly import render_weekly
from dslogs.analyzer.usecases.weekly import newest_log_day

UTC = ZoneInfo("UTC")


def test_parse_week_accepts_iso_weeks_and_rejects_others():
    assert parse_week("2026-W48") == (2026, 48)
    assert parse_week("2026w05") == (2026, 5)
    for bad in ("2026-48", "W48", "2026-W54", "2025-W53"):  # 2025 has 52 ISO weeks
        with pytest.raises(UsageError, match="--week"):
            parse_week(bad)
    assert parse_week("2026-W53") == (2026, 53)  # 2026 has 53


def test_previous_week_and_bounds_cross_years_and_zones():
    assert previous_week(2026, 49) == (2026, 48)
    assert previous_week(2027, 1) == (2026, 53)
    start, end = week_bounds(2026, 48, ZoneInfo("Asia/Shanghai"))
    assert start.isoformat() == "2026-11-23T00:00:00+08:00"
    assert end.isoformat() == "2026-11-30T00:00:00+08:00"


def test_default_week_is_the_last_full_week():
    assert default_week(date(2026, 12, 6)) == (2026, 49)  # a Sunday: its own week is complete
    assert default_week(date(2026, 12, 7)) == (2026, 49)  # Monday of W50: W50 has just begun
    assert default_week(date(2026, 12, 3)) == (2026, 48)  # mid-week: the week before


def test_newest_log_day_reads_file_names(tmp_path):
    for name in ("ds15b_20261129.jsonl", "ds15b_20261206.1.jsonl.gz", "ds15b_20261201.jsonl"):
        (tmp_path / "h").mkdir(exist_ok=True)
        (tmp_path / "h" / name).write_bytes(b"")
    assert newest_log_day(Selection.build([str(tmp_path)])) == date(2026, 12, 6)


def _two_weeks():
    this, prev = build_model(seed=7), build_model(seed=3)
    by_stage = {s["stage"]: s for s in prev["stages"]}
    by_stage["prefill"]["p95_ms"] = round(by_stage["prefill"]["p95_ms"] / 1.5, 3)  # +50 % this week
    by_stage["decode"]["p50_ms"] = round(by_stage["decode"]["p50_ms"] * 1.1, 3)  # −9 %: steady
    by_stage["queue"]["p95_ms"] = round(by_stage["queue"]["p95_ms"] * 2, 3)  # −50 %: improved
    prev["findings"] = [f for f in prev["findings"] if f["rule"] != "oom"]
    prev["findings"].append({"rule": "slow_ttft", "severity": "warning", "scope": "global", "session_ids": [],
                             "hosts": [], "value": 1200, "threshold": 1000, "unit": "ms",
                             "message": "ttft p50 1200 ms", "fix": "…"})
    prev["requests"]["errors"] = 0
    # each model stands for a whole week (a day-long side would get no verdicts: too_partial)
    this["window"].update(first_event="2026-11-30T00:03:00+00:00", last_event="2026-12-06T23:59:00+00:00")
    prev["window"].update(first_event="2026-11-23T00:03:00+00:00", last_event="2026-11-29T23:59:00+00:00")
    return this, prev


def test_compare_flags_regressions_new_and_resolved_findings():
    this, prev = _two_weeks()
    w = compare_models(this, prev, (2026, 49), UTC)
    assert w["week"] == "2026-W49" and w["previous_week"] == "2026-W48"
    stages = {s["stage"]: s for s in w["stages"]}
    assert stages["prefill"]["p95_change_pct"] == 50.0 and stages["prefill"]["regression"]
    assert stages["decode"]["p50_verdict"] == "steady" and not stages["decode"]["regression"]
    assert stages["queue"]["p95_verdict"] == "improved"
    assert w["regressions"] == 1
    assert [f["rule"] for f in w["findings"]["new"]] == ["oom"]
    assert [f["rule"] for f in w["findings"]["resolved"]] == ["slow_ttft"]
    assert {f["rule"] for f in w["findings"]["persisting"]} == {f["rule"] for f in this["findings"]} - {"oom"}
    traffic = {t["key"]: t for t in w["traffic"]}
    assert traffic["errors"]["this"] == 1 and traffic["errors"]["previous"] == 0
    assert traffic["sessions_affected"]["this"] == 3
    assert w["this"]["first_day"] == "2026-11-30" and w["this"]["last_day"] == "2026-12-06"


def test_compare_against_an_empty_previous_week():
    w = compare_models(build_model(), {}, (2026, 49), UTC)
    assert not w["previous"]["has_data"]
    assert len(w["findings"]["new"]) == len(build_model()["findings"])
    assert all(s["p50_verdict"] == "n/a" for s in w["stages"])
    assert "nothing to compare" in render_weekly(w, "md")


def test_formats_json_md_html():
    this, prev = _two_weeks()
    w = compare_models(this, prev, (2026, 49), UTC)
    assert json.loads(render_weekly(w, "json"))["regressions"] == 1
    md = render_weekly(w, "md")
    assert "# dslogs weekly report 2026-W49" in md and "| **prefill** |" in md and "+50.0 % **▲**" in md
    assert "<script>" not in md  # log text is inert in Markdown too
    html = render_weekly(w, "html")
    page = parse_page(html)
    assert XSS_MESSAGE in page.texts
    assert len(page.scripts) == 2  # the JSON block and the page script; no Vega bundle needed
    assert "window.vegaEmbed=" not in html
    assert html.count('class="regression"') >= 1
    assert "<svg" in html  # the static p95 chart
    with pytest.raises(UsageError):
        render_weekly(w, "pdf")


# -- end to end ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_weeks_of_logs(tmp_path_factory):
    pytest.importorskip("dslogs.analyzer.ingest.logs")
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("weeks")
    simulate(root / "w48", scenarios=["healthy"], days=7, seed=1, fmt="v1", events=40000, hosts=1, start="2026-11-23")
    simulate(root / "w49", scenarios=["memory_leak"], days=7, seed=2, fmt="v1", events=40000, hosts=1, start="2026-11-30")
    return root


def test_cli_weekly_defaults_to_the_last_full_week(two_weeks_of_logs, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["report", "weekly", str(two_weeks_of_logs), "--tz", "UTC", "--no-cache"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "dslogs-weekly-2026-W49.html"
    assert out.is_file() and result.output.strip().endswith("dslogs-weekly-2026-W49.html")
    result = runner.invoke(app, ["report", "weekly", str(two_weeks_of_logs), "--tz", "UTC", "--no-cache",
                                 "--week", "2026-W49", "--format", "json"])
    assert result.exit_code == 0, result.output
    w = json.loads(result.stdout)
    assert w["this"]["has_data"] and w["previous"]["has_data"]
    assert w["this"]["requests"] > 0 and w["previous"]["requests"] > 0
    assert "memory_leak" in {f["rule"] for f in w["findings"]["new"]}
    assert "memory_leak" not in {f["rule"] for f in w["findings"]["resolved"]}
    assert "memory_leak" in render_weekly(w, "md")


def test_cli_weekly_rejects_a_bad_week(two_weeks_of_logs):
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    result = CliRunner().invoke(app, ["report", "weekly", str(two_weeks_of_logs), "--week", "48"])
    assert result.exit_code == 2
    assert "--week '48'" in result.output
