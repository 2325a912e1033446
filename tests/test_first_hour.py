"""A new user's edges: every one says what happened (empty windows, healthy data, CPU hosts,
session prefixes, progress, the cache)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from analyzer.cli import app

HEALTHY = "sample_logs/healthy"


def test_empty_window_says_where_the_data_is():
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--since", "2027-01-01", "--tz", "UTC",
                                   "--format", "json", "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stderr.splitlines() if "no events in the window" in ln]
    assert len(warnings) == 1
    line = warnings[0]
    assert "2 log file(s)" in line and "2026-11-24 00:02:00" in line and "--since 2026-11-24" in line
    model = json.loads(res.stdout)
    assert model["notes"][0]["id"] == "empty_window"
    # the hint is a window that does hold the data
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--since", "2026-11-24", "--tz", "UTC",
                                   "--format", "json", "--no-cache"])  # fmt: skip
    assert json.loads(res.stdout)["ingest"]["events"] > 0
    assert "no events in the window" not in res.stderr


def test_empty_window_before_the_data_suggests_until():
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--until", "2026-01-01", "--tz", "UTC",
                                   "--format", "md", "--no-cache"])  # fmt: skip
    assert "--until 2026-11-25 would include them" in res.stderr
    assert "> **Note:** no events in the window" in res.stdout


def _analyze_json(*args: str) -> dict:
    res = CliRunner().invoke(app, ["analyze", *args, "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_sample_healthy_passes_every_checklist_item_and_fires_nothing():
    model = _analyze_json(HEALTHY)
    assert {c["id"]: c["status"] for c in model["checklist"]} == {c["id"]: "PASS" for c in model["checklist"]}
    assert model["findings"] == []


def test_make_demo_diagnoses_one_service():
    import re
    from pathlib import Path

    make = Path("Makefile").read_text()
    folder = re.search(r"^DEMO_LOGS \?= (\S+)$", make, re.M).group(1)
    assert "$(DEMO_LOGS) --out dslogs-report.html" in make
    model = _analyze_json(folder)
    assert len(model["hosts"]) == 1 and 1 <= len(model["findings"]) <= 2
