"""--since / --until: relative forms, ISO dates and datetimes, zones, errors."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import parse_when, parse_window, zone_name

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "delta"),
    [("30m", timedelta(minutes=30)), ("12h", timedelta(hours=12)), ("1d", timedelta(days=1)),
     ("7d", timedelta(days=7)), ("2w", timedelta(weeks=2)), (" 90s ", timedelta(seconds=90)),
     ("1.5h", timedelta(minutes=90)), ("2W", timedelta(weeks=2))],
)  # fmt: skip
def test_relative(text, delta):
    assert parse_when(text, NOW) == NOW - delta


def test_iso_dates_are_midnight_in_the_zone():
    assert parse_when("2026-11-23", NOW, "Asia/Shanghai") == datetime(2026, 11, 23, tzinfo=ZoneInfo("Asia/Shanghai"))
    assert parse_when("2026-11-23", NOW, "UTC") == datetime(2026, 11, 23, tzinfo=UTC)


def test_iso_datetimes():
    assert parse_when("2026-11-23T10:30", NOW, "Asia/Shanghai") == datetime(2026, 11, 23, 2, 30, tzinfo=UTC)
    assert parse_when("2026-11-23 10:30:00", NOW, "UTC") == datetime(2026, 11, 23, 10, 30, tzinfo=UTC)
    assert parse_when("2026-11-23T10:30:00+08:00", NOW, "UTC") == datetime(2026, 11, 23, 2, 30, tzinfo=UTC)
    assert parse_when("2026-11-23T10:30:00Z", NOW) == datetime(2026, 11, 23, 10, 30, tzinfo=UTC)


def test_words():
    assert parse_when("now", NOW) == NOW
    assert parse_when("today", NOW, "UTC") == datetime(2026, 12, 2, tzinfo=UTC)
    assert parse_when("yesterday", NOW, "UTC") == datetime(2026, 12, 1, tzinfo=UTC)


def test_local_zone_when_none(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert zone_name(None) == "Asia/Tokyo"
    assert parse_when("2026-11-23", NOW) == datetime(2026, 11, 22, 15, tzinfo=UTC)


@pytest.mark.parametrize("text", ["soon", "3 days ago", "12x", "2026-13-01", "", "-1d"])
def test_bad_text_is_a_usage_error_naming_the_forms(text):
    with pytest.raises(UsageError, match="expected 30m, 12h, 1d, 7d, 2w"):
        parse_when(text, NOW)


def test_window_names_the_option_and_rejects_an_empty_window():
    with pytest.raises(UsageError, match=r"^--until 'whenever'"):
        parse_window("1d", "whenever", "UTC", NOW)
    with pytest.raises(UsageError, match="not before --until"):
        parse_window("2026-11-24", "2026-11-23", "UTC", NOW)
    assert parse_window(None, None) == (None, None)
    with pytest.raises(UsageError, match="unknown time zone"):
        zone_name("Nowhere/Land")


def test_the_zone_lists_duckdb_is_the_runs_next_in_memory_connection():
    # one DuckDB started per command, not two: the connection the zone list was read on serves the
    # run's logs once, a fresh one every later call
    import subprocess
    import sys

    code = """
from dslogs.analyzer.core import time as t
assert t.memory_connection() is not None and not t._spare  # no zone read yet: a fresh one
t.zone_name("UTC")
spare = t._spare[0]
first, second = t.memory_connection(), t.memory_connection()
assert first is spare and second is not spare and not t._spare
for con in (first, second):
    assert con.execute("SELECT current_setting('TimeZone') IS NOT NULL, count(*) FROM pg_timezone_names()").fetchone()[1] > 100
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (0,)
"""
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
