"""Weekly with an empty week: it names the weeks that hold logs, and when the
default (last full) week is empty it shows this week so far."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.usecases.weekly import build_weekly, weeks_with_data


@pytest.fixture(scope="module")
def fresh_logs(tmp_path_factory):
    """Two days of logs, Tuesday and Wednesday of 2026-W49: the last full week (W48) is empty."""
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("fresh")
    simulate(root, days=2, seed=5, start="2026-12-01", hours=30)
    return root


def test_weeks_with_data_from_file_names(fresh_logs):
    assert weeks_with_data(Selection.build([str(fresh_logs)], tz="UTC")) == ["2026-W49"]


def test_default_week_falls_back_to_this_week_so_far(fresh_logs):
    w = build_weekly([str(fresh_logs)], tz="UTC", use_cache=False)
    assert w["week"] == "2026-W49" and w["this"]["has_data"] and w["this"]["requests"] > 0
    assert w["this"]["so_far"] == "2026-12-02"
    assert "2026-W48, the last full week, has no logs; showing 2026-W49 so far" in w["notes"][0]
    assert "Weeks with logs: 2026-W49" in w["notes"][0]


def test_an_explicit_empty_week_says_which_weeks_hold_logs(fresh_logs):
    res = CliRunner().invoke(app, ["report", "weekly", str(fresh_logs), "--week", "2026-W40", "--tz", "UTC",
                                   "--no-cache", "--format", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = res.stdout
    w = json.loads(out)
    assert w["week"] == "2026-W40" and not w["this"]["has_data"]
    assert w["notes"] == ["No logs in 2026-W40. Weeks with logs: 2026-W49; pick one with --week."]
    assert "dslogs: note: No logs in 2026-W40" in res.stderr


def test_empty_week_note_in_md_and_html(fresh_logs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    md = runner.invoke(app, ["report", "weekly", str(fresh_logs), "--tz", "UTC", "--no-cache", "--format", "md"]).stdout
    assert md.startswith("# dslogs weekly report 2026-W49")
    assert "> 2026-W48, the last full week, has no logs; showing 2026-W49 so far" in md
    res = runner.invoke(app, ["report", "weekly", str(fresh_logs), "--tz", "UTC", "--no-cache"])
    assert res.exit_code == 0
    html = (tmp_path / "dslogs-weekly-2026-W49.html").read_text()
    assert 'class="nodata week-note"' in html and "showing 2026-W49 so far" in html


@pytest.mark.parametrize("command", [
    ["report", "weekly", "sample_logs/memory_leak", "--format", "md"],  # its last full week is empty
    ["analyze", "sample_logs/memory_leak", "--format", "json"],
    ["capacity", "sample_logs/memory_leak", "--format", "json"],
    ["query", "sample_logs/memory_leak", "SELECT count(*) AS n FROM events"],
    ["session", "sample_logs/memory_leak", "653f6e4a"],
])  # fmt: skip
def test_an_empty_window_over_the_cache_prints_notes_and_no_engine_error(command, tmp_path, monkeypatch):
    """With the cache on (the default), the empty window's note reads the logs again: the run's
    own connection has let go of the cache file by then, so DuckDB's "already attached" never
    reaches the terminal; every stderr line is dslogs' own note."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    window = [] if command[0] == "report" else ["--since", "2026-11-16", "--until", "2026-11-23T12:00"]
    for run in ("cold", "warm"):
        res = CliRunner().invoke(app, [*command, *window, "--tz", "UTC"])
        assert res.exit_code in (0, 2), res.output  # session: no such session in the empty window
        lines = res.stderr.splitlines()
        assert lines and all(ln.startswith(("dslogs: note:", "dslogs: warning:", "dslogs: error: no events"))
                             for ln in lines), (run, res.stderr)
        assert "Error" not in res.stderr and "attach" not in res.stderr, (run, res.stderr)
    assert any((tmp_path / "xdg" / "dslogs").glob("*.duckdb"))  # the cache was used, not skipped
