"""Every environment variable dslogs reads, and every time-zone name, either works or is one
line and exit 2: POSIX TZ strings as containers set them, zone names zoneinfo accepts and DuckDB
does not, and sizes given in the wrong form."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import zone_name
from tests.ingest_lines import legacy_turn, v1_request, write_lines


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("envlogs")
    lines = []
    for i in range(3):
        lines += v1_request(f"s{i}", f"r{i}", datetime(2026, 11, 23, 10, i))
    write_lines(root / "ds15b_20261123.jsonl", lines)
    # a naive (legacy) timestamp: its instant depends on the zone
    write_lines(root / "legacy_20261123.jsonl", legacy_turn("L1", datetime(2026, 11, 23, 12, 0), 100.0, 50.0),
                legacy_style=True)
    return root


def _ok(r):
    assert r.exit_code == 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _one_line(r, *words):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("dslogs: error: "), r.output
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(("tz", "name"), [("UTC0", "UTC"), ("CST-8", "Etc/GMT-8"), ("EST5", "Etc/GMT+5"),
                                          ("EST5EDT,M3.2.0,M11.1.0", "EST5EDT"), ("EST5EDT", "EST5EDT"),
                                          (":Asia/Shanghai", "Asia/Shanghai"), ("Asia/Shanghai", "Asia/Shanghai")])
def test_posix_tz_strings_map_to_the_zone_they_describe(monkeypatch, tz, name):
    monkeypatch.setenv("TZ", tz)
    assert zone_name(None) == name


def test_tz_as_a_zone_file(monkeypatch):
    if not Path("/etc/localtime").exists():
        pytest.skip("no /etc/localtime")
    monkeypatch.setenv("TZ", ":/etc/localtime")
    monkeypatch.delenv("TZ")
    expected = zone_name(None)
    monkeypatch.setenv("TZ", ":/etc/localtime")
    assert zone_name(None) == expected


@pytest.mark.parametrize("tz", ["UTC0", "CST-8", "EST5EDT,M3.2.0,M11.1.0", ":/etc/localtime"])
@pytest.mark.parametrize("command", ["analyze", "query", "session"])
def test_every_command_runs_under_a_posix_tz(logs, tmp_path, tz, command):
    args = {"analyze": ["analyze", str(logs), "--no-cache", "--format", "json", "--out", str(tmp_path / "r.json")],
            "query": ["query", str(logs), "SELECT count(*) FROM events", "--no-cache"],
            "session": ["session", str(logs), "s1", "--no-cache"]}[command]  # fmt: skip
    _ok(CliRunner().invoke(app, args, env={"TZ": tz}))


def test_cst_minus_8_reads_naive_times_as_utc_plus_8(logs, tmp_path):
    out = tmp_path / "r.json"
    _ok(CliRunner().invoke(app, ["query", str(logs), "SELECT min(ts) FILTER (WHERE session_id = 'L1') AS t FROM events",
                                 "--no-cache", "--format", "json", "--out", str(out)], env={"TZ": "CST-8"}))
    text = out.read_text(encoding="utf-8")
    assert "12:00:00" in text and "+08" in text, text


@pytest.mark.parametrize("tz", ["Nowhere/City", "IST-5:30", "XYZ3ABC,M1.1.0,M2.1.0", ":/nonexistent/zone"])
def test_a_tz_no_zone_matches_is_one_line(logs, tmp_path, tz):
    r = CliRunner().invoke(app, ["analyze", str(logs), "--no-cache", "--format", "json",
                                 "--out", str(tmp_path / "r.json")], env={"TZ": tz})  # fmt: skip
    _one_line(r, "TZ=", "--tz")


@pytest.mark.parametrize(("tz", "name"), [("right/UTC", "UTC"), ("posix/Asia/Shanghai", "Asia/Shanghai"),
                                          ("posixrules", None), ("localtime", None), ("", None)])
def test_zone_names_zoneinfo_accepts_work(logs, tmp_path, monkeypatch, tz, name):
    monkeypatch.delenv("TZ", raising=False)
    if tz in ("posixrules", "localtime") and not (Path("/usr/share/zoneinfo") / tz).exists():
        pytest.skip(f"no zoneinfo/{tz} here")
    resolved = zone_name(tz)
    if name is not None:
        assert resolved in (name, "Etc/" + name), resolved
    out = tmp_path / "r.json"
    _ok(CliRunner().invoke(app, ["analyze", str(logs), "--no-cache", "--format", "json", "--tz", tz, "--out", str(out)]))
    assert json.loads(out.read_text(encoding="utf-8"))["ingest"]["events"] > 0


@pytest.mark.parametrize("tz", ["Factory/../../etc/passwd", "/etc/localtime", "Nowhere/City", "A" * 300])
def test_a_bad_tz_name_is_one_line(logs, tz):
    with pytest.raises(UsageError):
        zone_name(tz)
    _one_line(CliRunner().invoke(app, ["analyze", str(logs), "--no-cache", "--tz", tz]), "--tz")


@pytest.mark.parametrize("value", ["abc", "0", "1KB", "32MB", "-1GB", "101%", ""])
def test_a_bad_memory_limit_is_one_line(logs, tmp_path, value):
    for args in (["analyze", str(logs), "--no-cache", "--format", "json", "--out", str(tmp_path / "r.json")],
                 ["query", str(logs), "SELECT 1", "--no-cache"]):  # fmt: skip
        _one_line(CliRunner().invoke(app, args, env={"DSLOGS_MEMORY_LIMIT": value}), "DSLOGS_MEMORY_LIMIT")


@pytest.mark.parametrize("value", ["2GB", "900MiB", "64MB", "50%"])
def test_a_good_memory_limit_works(logs, value):
    _ok(CliRunner().invoke(app, ["query", str(logs), "SELECT count(*) FROM events", "--no-cache"],
                           env={"DSLOGS_MEMORY_LIMIT": value}))  # fmt: skip


def test_threads_setting_is_checked(logs):
    _one_line(CliRunner().invoke(app, ["query", str(logs), "SELECT 1", "--no-cache"], env={"DSLOGS_THREADS": "many"}),
              "DSLOGS_THREADS")


@pytest.mark.parametrize(("value", "works"), [("1.5", True), ("200M", True), ("200MiB", True), ("abc", False),
                                              ("0", False), ("-3", False)])
def test_frame_budget(logs, monkeypatch, value, works):
    import dslogs

    monkeypatch.setenv("DSLOGS_FRAME_BUDGET_MB", value)
    if works:
        with dslogs.open(str(logs), use_cache=False) as opened:
            assert len(opened.requests) == 4
    else:
        with pytest.raises(UsageError, match=r"^DSLOGS_FRAME_BUDGET_MB="):
            dslogs.open(str(logs), use_cache=False)


def test_progress_delay_typo_does_not_stop_a_run(logs, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "DSLOGS_PROGRESS_DELAY": "abc", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "dslogs", "query", str(logs), "SELECT 1 AS x", "--no-cache"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
