"""results.result_rows reads a large result as Arrow columns, time columns as epoch microseconds
(a zone offset per hour) instead of DuckDB's tuples of aware datetimes: the rows must be exactly
what the cursor path gives, in any zone, across DST changes and at historical offsets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics import registry, results

ROOT = Path(__file__).resolve().parents[1]
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Europe/Amsterdam", "America/St_Johns",
         "Australia/Lord_Howe"]  # fmt: skip


@pytest.fixture(autouse=True)
def _arrow_from_the_start(monkeypatch):
    # the tests that set ARROW_ROWS to go by Arrow do so whether or not pyarrow is imported yet
    monkeypatch.setattr(results, "ARROW_IMPORT_VALUES", 0)


def reference(con, sql: str, params: dict) -> list[dict]:
    """The cursor path: DuckDB's tuples and datetimes, then isoformat."""
    used = {k: params[k] for k in registry.sql_params(sql)}
    cursor = con.execute(sql, used) if used else con.execute(sql)
    saved = results.ARROW_ROWS
    results.ARROW_ROWS = 10**12
    try:
        return list(results.result_rows(cursor))
    finally:
        results.ARROW_ROWS = saved


@pytest.mark.parametrize("zone", ZONES)
def test_every_metric_query_writes_its_times_as_the_datetimes_did(zone, monkeypatch):
    monkeypatch.setattr(results, "ARROW_ROWS", 1)  # every result past its first row by Arrow
    with open_logs([str(ROOT / "sample_logs" / "mixed")], tz=zone, use_cache=False) as db:
        # one thread: a float aggregate's last bits depend on how threads split the rows, and
        # this compares whole rows
        db.con.execute("SET threads = 1")
        params = registry.parameters(defaults(), "hour")
        checked = 0
        for name in registry.METRIC_QUERIES:
            if name in ("log_volume_over_time", "log_volume_peak_minute") and "line_bytes" not in (
                results.view_columns(db.con, "events")
            ):
                continue
            got = list(results.run_metric(db.con, name, params))
            assert got == reference(db.con, load_query(name), params), name
            checked += any(isinstance(v, str) and "T" in v for r in got for v in r.values())
        assert checked >= 5  # queries with time columns were compared


def test_a_large_result_is_kept_column_by_column_with_the_same_rows(monkeypatch):
    monkeypatch.setattr(results, "COMPACT_ROWS", 3)
    monkeypatch.setattr(results, "ARROW_ROWS", 2)
    with open_logs([str(ROOT / "sample_logs" / "mixed")], tz="Asia/Kolkata", use_cache=False) as db:
        db.con.execute("SET threads = 1")
        params = registry.parameters(defaults(), "hour")
        for name in ("session_summary", "memory_per_session", "stage_percentiles_over_time"):
            got = results.run_metric(db.con, name, params)
            assert not isinstance(got, list) and len(got) > 3  # a rows.Rows
            assert list(got) == list(reference(db.con, load_query(name), params)), name


@pytest.mark.parametrize("zone", ZONES)
def test_times_around_transitions_and_far_from_now(zone, monkeypatch):
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    sql = (
        "SELECT t FROM (SELECT unnest($times)::TIMESTAMPTZ AS t UNION ALL SELECT NULL) "
        "ORDER BY t NULLS LAST"
    )
    times = [
        "1900-01-01 00:00:00.5+00",  # local mean time: offsets with seconds
        "1937-07-01 00:00:00+00",
        "1970-01-01 00:00:00+00",
        "1969-12-31 23:59:59.999999+00",
        "2026-03-08 06:59:59.999+00",  # New York's spring change at 07:00 UTC
        "2026-03-08 07:00:00+00",
        "2026-03-29 00:59:59.9999+00",  # Amsterdam's at 01:00 UTC
        "2026-03-29 01:00:00.0005+00",
        "2026-11-01 05:30:00+00",  # New York's autumn change (a repeated local hour)
        "2026-11-01 06:30:00+00",
        "2026-10-25 00:30:00.123+00",
        "2026-10-25 01:30:00.123+00",
        "2026-10-03 15:15:00+00",  # Lord Howe's half-hour change at 15:30 UTC (mid-hour)
        "2026-10-03 15:45:00+00",
        "2999-12-31 23:59:59.999+00",
    ]
    rel = con.sql(sql, params={"times": times})
    assert str(rel.types[0]) == "TIMESTAMP WITH TIME ZONE"
    from zoneinfo import ZoneInfo

    us = [
        r[0] for r in con.execute(f"SELECT epoch_us(t) FROM ({sql})", {"times": times}).fetchall()
    ]
    got = results._tz_iso_column(ZoneInfo(zone))(us)
    want = [r["t"] for r in reference(con, sql, {"times": times})]
    monkeypatch.setattr(results, "ARROW_ROWS", 1)
    through_arrow = [r["t"] for r in results.result_rows(con.execute(sql, {"times": times}))]
    assert through_arrow == want
    assert got == want and want[-1] is None and len(want) == len(times) + 1


def test_plain_types_through_arrow_equal_the_cursor_rows(monkeypatch):
    monkeypatch.setattr(results, "ARROW_ROWS", 2)
    con = duckdb.connect()
    sql = (
        "SELECT range::INTEGER AS i, sum(range) OVER () AS huge, "
        "CAST(range AS HUGEINT) * 100000000000000000000 AS past_64_bits, "
        "CASE range WHEN 1 THEN 'NaN'::DOUBLE WHEN 2 THEN 'inf'::DOUBLE WHEN 3 THEN NULL "
        "ELSE range / 3 END AS d, range % 2 = 0 AS b, 'x' || range AS s, "
        "NULL::UBIGINT AS u FROM range(6) ORDER BY i"
    )
    rel = con.sql(sql)
    types = [str(t) for t in rel.types]
    assert "HUGEINT" in types and all(t in results._ARROW_TYPES for t in types)
    got = results.result_rows(con.execute(sql))
    want = reference(con, sql, {})
    assert got == want
    assert [type(r["past_64_bits"]) for r in got] == [int] * 6 and got[1]["d"] is None


@pytest.mark.parametrize("zone", ZONES)
def test_a_column_of_recent_times_formatted_by_arrow_reads_the_same(zone, monkeypatch):
    # one offset for the whole column (Arrow writes it), then one crossing a DST change (Python)
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    sql = (
        "SELECT t FROM (SELECT unnest($times)::TIMESTAMPTZ AS t UNION ALL SELECT NULL) "
        "ORDER BY t NULLS FIRST"
    )
    for times in (
        ["2026-11-23 07:00:00+00", "2026-11-23 07:00:00.999999+00", "2026-11-24 23:59:59.0005+00",
         "2026-12-01 00:00:00.001+00", "1970-01-02 00:00:00+00"],
        ["2026-03-08 06:59:59.999+00", "2026-03-29 01:00:00.0005+00", "2026-10-03 15:45:00+00",
         "2026-11-01 06:30:00+00", "2026-06-01 12:00:00+00"],
    ):  # fmt: skip
        want = [r["t"] for r in reference(con, sql, {"times": times})]
        monkeypatch.setattr(results, "ARROW_ROWS", 1)
        got = [r["t"] for r in results.result_rows(con.execute(sql, {"times": times}))]
        monkeypatch.undo()
        assert got == want and len(want) == len(times) + 1


def test_without_pyarrow_the_cursor_path_gives_the_rows(monkeypatch):
    # pyarrow is not one of dslogs' dependencies: a large result is read by the cursor then
    monkeypatch.setattr(results, "ARROW_ROWS", 1)
    monkeypatch.setattr(results, "_have_arrow", lambda: False)
    monkeypatch.setattr(results, "_arrow_rows", None)  # would fail if called
    con = duckdb.connect()
    sql = "SELECT range AS i, TIMESTAMPTZ '2026-11-23 07:00:00.5+00' AS t FROM range(5) ORDER BY i"
    assert results.result_rows(con.execute(sql)) == reference(con, sql, {})


def test_pyarrow_is_imported_only_once_the_cursor_read_its_cost_in_rows():
    # a process that never read ARROW_IMPORT_VALUES values of large results never pays pyarrow's import;
    # past them it goes by Arrow, with the same rows
    code = """
import sys
import duckdb
from dslogs.analyzer.metrics import results
con = duckdb.connect()
sql = "SELECT range AS i, range / 7 AS d, TIMESTAMPTZ '2026-11-23 07:00:00.5+00' + to_seconds(range) AS t FROM range($n) ORDER BY i"
def rows(n):
    return list(results.result_rows(con.execute(sql, {"n": n})))
n = results.ARROW_IMPORT_VALUES // 3  # rows of 3 values
small = rows(results.ARROW_ROWS + n // 2)
assert "pyarrow" not in sys.modules
assert len(small) == results.ARROW_ROWS + n // 2
big = rows(results.ARROW_ROWS + n)
assert "pyarrow" in sys.modules
results.ARROW_ROWS = 10**12
assert big == rows(len(big)) and small == big[:len(small)]
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
