"""Fuzz: environment values, time-zone names, --out targets, terminal text, saved-model notes and
the Python API's argument types. Each case works or is one UsageError line (exit 2): never a
traceback, never a raw control character on the terminal, never a special file replaced.
Bounded by ``max_examples``: about a minute on two cores. Everything it makes lives in its own
temporary folders; environment changes are monkeypatched back.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.resources import memory_limit
from dslogs.analyzer.core.time import zone_name
from tests.ingest_lines import write_requests

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
CLI = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow])
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
GOLD = Path(__file__).resolve().parents[1] / "gold" / "report_model.json"

# POSIX TZ strings and zone names, well-formed and not
TZ_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-:,<>./M_ \x1b"
tz_text = st.one_of(
    st.text(TZ_ALPHABET, max_size=40),
    st.sampled_from(["UTC0", "CST-8", "EST5EDT,M3.2.0,M11.1.0", ":/etc/localtime", "right/UTC",
                     "posix/Asia/Shanghai", "localtime", "posixrules", "", "Etc/GMT+14", "Etc/GMT-15",
                     "<+0530>-5:30", "IST-5:30", "JST-9", "NZST-12NZDT,M9.5.0,M4.1.0/3", "../etc/passwd",
                     "Asia/Shanghai\x00", ":", "::", "UTC-99"]),
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzhard")
    write_requests(root, 4)
    return root


def _duckdb_takes_zone(name: str) -> None:
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = $z", {"z": name})
    finally:
        con.close()


@FAST
@given(value=tz_text)
def test_tz_environment_values(monkeypatch, value):
    if "\x00" in value:
        return  # an environment value cannot hold NUL
    monkeypatch.setenv("TZ", value)
    try:
        name = zone_name(None)
    except UsageError as exc:
        assert "\n" not in str(exc) and "TZ=" in str(exc)
        return
    _duckdb_takes_zone(name)


@FAST
@given(value=tz_text)
def test_tz_option_values(monkeypatch, value):
    monkeypatch.setenv("TZ", "UTC")
    try:
        name = zone_name(value)
    except UsageError as exc:
        assert "\n" not in str(exc) and "--tz" in str(exc)
        return
    _duckdb_takes_zone(name)


@FAST
@given(value=st.one_of(st.text("0123456789.% KMGTBibkmgt-", max_size=12),
                       st.sampled_from(["1GB", "64MB", "900MiB", "50%", "0", "abc", "1KB", "101%", "0%", "1e3GB"])))
def test_memory_limit_values(monkeypatch, value):
    if "\x00" in value:
        return
    monkeypatch.setenv("DSLOGS_MEMORY_LIMIT", value)
    try:
        limit = memory_limit()
    except UsageError as exc:
        assert "DSLOGS_MEMORY_LIMIT=" in str(exc) and "\n" not in str(exc)
        return
    con = duckdb.connect()
    try:
        con.execute("SET memory_limit = $m", {"m": limit})
    finally:
        con.close()


@FAST
@given(value=st.one_of(st.text("0123456789.eE+-MiBb ", max_size=10), st.sampled_from(["1.5", "200M", "nan", "inf"])))
def test_frame_budget_values(monkeypatch, value):
    import dslogs._logs as api_logs

    monkeypatch.setenv("DSLOGS_FRAME_BUDGET_MB", value)
    try:
        budget = api_logs.frame_budget()
    except UsageError as exc:
        assert "DSLOGS_FRAME_BUDGET_MB=" in str(exc)
        return
    assert budget > 0


hostile = st.text(st.sampled_from(list("ab/._-") + ["\x1b", "\x07", "\x9b", "\x08", "\r", "\u202e", "\x00"]),
                  min_size=1, max_size=20)


@CLI
@given(name=hostile, which=st.sampled_from(["analyze", "render", "session", "thresholds", "previous", "cache"]))
def test_terminal_text_from_names_and_environment(logs, tmp_path_factory, name, which):
    if "\x00" in name:
        name = name.replace("\x00", "")
    tmp = tmp_path_factory.mktemp("term")
    bad = str(tmp / f"x{name}")
    args, env = {
        "analyze": (["analyze", bad, "--no-cache"], None),
        "render": (["render", bad + ".json"], None),
        "session": (["session", str(logs), f"z{name}", "--no-cache"], None),
        "thresholds": (["analyze", str(logs), "--no-cache", "--thresholds", bad], None),
        "previous": (["report", "weekly", str(logs), "--week", "2026-W48", "--no-cache", "--format", "md",
                      "--previous", bad], None),
        "cache": (["cache"], {"XDG_CACHE_HOME": bad}),
    }[which]
    r = CliRunner().invoke(app, args, env=env)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert not RAW.search(r.output), r.output


@CLI
@given(kind=st.sampled_from(["fifo", "socket", "link-to-fifo", "input-log", "input-link"]),
       command=st.sampled_from(["analyze", "capacity", "query"]))
def test_out_never_replaces_a_special_file_or_an_input(logs, tmp_path_factory, kind, command):
    tmp = tmp_path_factory.mktemp("out")
    log = next(logs.glob("*.jsonl"))
    before = log.read_bytes()
    target = tmp / "target"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
        s.close()
    elif kind == "link-to-fifo":
        os.mkfifo(tmp / "fifo")
        target.symlink_to(tmp / "fifo")
    elif kind == "input-log":
        target = log
    else:
        target.symlink_to(log)
    mode = os.stat(target).st_mode
    args = {"analyze": ["analyze", str(logs), "--no-cache", "--format", "md", "--out", str(target)],
            "capacity": ["capacity", str(logs), "--no-cache", "--out", str(target)],
            "query": ["query", str(logs), "SELECT 1", "--no-cache", "--out", str(target)]}[command]  # fmt: skip
    r = CliRunner().invoke(app, args)
    # one error line; the run's notes on the logs (a short window, say) may precede it
    lines = [x for x in r.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("dslogs: error: ")]
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert all(x.startswith(("dslogs: note: ", "dslogs: warning: ")) for x in lines if x not in errors), r.output
    assert os.stat(target).st_mode == mode and log.read_bytes() == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


note = st.one_of(st.text(max_size=30), st.fixed_dictionaries({}, optional={
    "level": st.sampled_from(["info", "warning", "x"]), "message": st.text(max_size=30), "id": st.text(max_size=5)}))


@CLI
@given(notes=st.lists(note, max_size=4), bom=st.booleans(), indent=st.sampled_from([None, 1]))
def test_saved_model_notes_and_encodings(tmp_path_factory, notes, bom, indent):
    tmp = tmp_path_factory.mktemp("model")
    model = json.loads(GOLD.read_text(encoding="utf-8"))
    model["notes"] = notes
    path = tmp / "m.json"
    path.write_text(("\ufeff" if bom else "") + json.dumps(model, indent=indent), encoding="utf-8")
    for args in (["render", str(path), "--out", str(tmp / "m.html")], ["diff", str(GOLD), str(path), "--format", "md"]):
        r = CliRunner().invoke(app, args)
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert r.exit_code in (0, 2), r.output
        assert not RAW.search(r.output)


api_value = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.booleans(), st.text(max_size=12),
                      st.dates(), st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
                      st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3)),
                      st.lists(st.integers(), max_size=2))


@CLI
@given(since=api_value, tz=st.one_of(st.none(), st.sampled_from(["UTC", "Asia/Shanghai"]), api_value))
def test_api_arguments(logs, since, tz):
    import dslogs

    try:
        with dslogs.open(str(logs), since=since, tz=tz, use_cache=False) as opened:
            assert len(opened.requests) <= 4
    except UsageError as exc:
        assert "\n" not in str(exc)


def test_dates_and_datetimes_are_the_same_window(logs):
    import dslogs

    a = dslogs.open(str(logs), since=date(2026, 11, 23), tz="UTC", use_cache=False)
    b = dslogs.open(str(logs), since="2026-11-23", tz="UTC", use_cache=False)
    try:
        assert a.selection.since == b.selection.since
    finally:
        a.close()
        b.close()
