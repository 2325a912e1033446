"""Every CLI value and threshold is validated (issue 13 item 6): out-of-range durations and weeks,
non-finite or negative thresholds are exit 2 with one line; extreme event years do not crash."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.core.errors import UsageError
from analyzer.core.thresholds import load_thresholds
from tests.ingest_lines import v1, write_lines

DSLOGS = [sys.executable, "-m", "analyzer"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vals")
    write_lines(root / "ds15b_20261123.jsonl",
                [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "request", "s", f"r{s}", duration_ms=5.0, status="ok")
                 for s in range(5)])
    return root


def one_line(r, *words):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("dslogs: error:") and "Traceback" not in r.output, r.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize(
    ("opt", "value"),
    [("--since", "99999999d"), ("--since", "99999999999m"), ("--until", "9999999w"),
     ("--since", "999999999999999999999999h"), ("--until", "9999-12-31T23:59:59-05:00"),
     ("--since", "0001-01-01T00:00:00+05:00")],
)
@pytest.mark.parametrize("command", ["query", "analyze"])
def test_out_of_range_durations_are_one_line(logs, command, opt, value):
    args = [command, str(logs), "SELECT 1"] if command == "query" else [command, str(logs), "--format", "json"]
    r = CliRunner().invoke(app, [*args, opt, value, "--no-cache"])
    one_line(r, opt, value, "out of range")


@pytest.mark.parametrize("week", ["9999-W52", "0001-W01"])
def test_out_of_range_weeks_are_one_line(logs, week):
    r = CliRunner().invoke(app, ["report", "weekly", str(logs), "--week", week, "--format", "md", "--no-cache"])
    one_line(r, "--week", week)


@pytest.mark.parametrize(
    ("toml", "key", "why"),
    [
        ("[memory_leak]\nslope_mb_per_min = -inf\n", "memory_leak.slope_mb_per_min", "finite"),
        ("[memory_leak]\nslope_mb_per_min = inf\n", "memory_leak.slope_mb_per_min", "finite"),
        ("[slo]\nttft_ms = nan\n", "slo.ttft_ms", "finite"),
        ("[report]\nmax_sessions = -5\n", "report.max_sessions", "negative"),
        ("[slow_prefill]\np50_ms = -1.0\n", "slow_prefill.p50_ms", "negative"),
        ("[ghost_memory]\nghost_share = 1.5\n", "ghost_memory.ghost_share", "between 0 and 1"),
        ("[gpu_wait]\ngpu_wait_pct = 250\n", "gpu_wait.gpu_wait_pct", "between 0 and 100"),
        ("[rss_growth]\nmin_r2 = -0.1\n", "rss_growth.min_r2", "negative"),
    ],
)
def test_bad_thresholds_are_exit_2_naming_the_key(logs, tmp_path, toml, key, why):
    path = tmp_path / "t.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(UsageError, match=why):
        load_thresholds(path)
    r = CliRunner().invoke(app, ["analyze", str(logs), "--thresholds", str(path), "--format", "json", "--no-cache"])
    one_line(r, key, why)


def test_good_thresholds_still_load(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[memory_leak]\nslope_mb_per_min = 0\n[gpu_wait]\ngpu_wait_pct = 100\n", encoding="utf-8")
    assert load_thresholds(path)["memory_leak"]["slope_mb_per_min"] == 0.0


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_events_in_year_1_and_9999_do_not_crash_the_report(tmp_path, tz):
    lines = []
    for ts in ("0001-01-01T00:00:00.000+00:00", "0001-01-01T00:30:00.000+00:00", "2026-11-23T10:00:00.000+00:00",
               "9999-12-31T23:00:00.000+00:00", "9999-12-31T23:59:59.000+00:00"):
        lines.append(v1(ts, "request", "s", "r" + ts, duration_ms=5.0, status="ok"))
        lines.append(v1(ts, "error", "s", "r" + ts, error_type="E"))
        lines.append(v1(ts, "collector", None, None, written=1))
    write_lines(tmp_path / "logs" / "x.jsonl", lines)
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    for args in (["--out", str(html)], ["--format", "json", "--out", str(js)], ["--format", "md"]):
        r = subprocess.run([*DSLOGS, "analyze", str(tmp_path / "logs"), "--no-cache", "--tz", tz, *args],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert json.loads(js.read_text())["ingest"]["events"] == 15
    r = subprocess.run([*DSLOGS, "render", str(js), "--out", str(tmp_path / "again.html")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
