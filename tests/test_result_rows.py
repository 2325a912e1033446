"""results.result_rows' conversions of a large result: Arrow columns read by numpy from their
buffers (doubles with NaN/inf as None, HUGEINTs, times as ISO text in the run's zone) and row dicts
built by rows.row_maker must give exactly the rows of the cursor path (DuckDB's tuples, datetimes
and ``jsonable``), at every size around ARROW_ROWS and COMPACT_ROWS, without importing pandas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import pytest

from dslogs.analyzer.metrics import results
from dslogs.analyzer.metrics.rows import Rows, build_rows, row_maker

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[1]


def cursor_rows(con, sql: str, params: dict | None = None) -> list[dict]:
    """The reference: every row by DuckDB's cursor (tuples, datetimes, jsonable), as a list."""
    cursor = con.execute(sql, params or {})
    saved = results.ARROW_ROWS, results.COMPACT_ROWS
    results.ARROW_ROWS = results.COMPACT_ROWS = 10**12
    try:
        return list(results.result_rows(cursor))
    finally:
        results.ARROW_ROWS, results.COMPACT_ROWS = saved


def same(got, want) -> None:
    # json text: -0.0 against 0.0, 1 against 1.0 and key order count too
    assert len(got) == len(want)
    assert json.dumps(list(got)) == json.dumps(want)


# every type of the Arrow path: NaN, inf, -inf, -0.0 and NULL doubles; HUGEINT sums (64-bit and
# past); NULLs in each column; times every 7 minutes 13.0137 s across New York's autumn change
MIXED = """
SELECT range AS i,
       CASE range % 11 WHEN 1 THEN 'NaN'::DOUBLE WHEN 2 THEN 'inf'::DOUBLE WHEN 3 THEN '-inf'::DOUBLE
            WHEN 4 THEN NULL WHEN 5 THEN -0.0 ELSE range / 7 END AS d,
       CASE WHEN range % 13 = 0 THEN NULL ELSE CAST(range AS HUGEINT) * 3 END AS h,
       CASE WHEN range = $big THEN CAST(range AS HUGEINT) * 100000000000000000000
            ELSE CAST(range AS HUGEINT) END AS maybe_big,
       CASE WHEN range % 17 = 0 THEN NULL
            ELSE TIMESTAMPTZ '2026-10-31 20:00:00.0005+00' + range * INTERVAL '433013700 microseconds'
       END AS t,
       CASE WHEN range % 19 = 0 THEN NULL ELSE 's' || range END AS s,
       range % 2 = 0 AS b, NULL::UBIGINT AS u
FROM range($n) ORDER BY i
"""


@pytest.mark.parametrize("offset", [-1, 0, 1])
@pytest.mark.parametrize("at", ["arrow", "compact"])
def test_sizes_around_the_thresholds_give_the_cursor_rows(at, offset, monkeypatch):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/New_York'")
    if at == "compact":
        monkeypatch.setattr(results, "COMPACT_ROWS", 3 * results.ARROW_ROWS)  # past a batch
        n = results.COMPACT_ROWS + offset
    else:
        n = results.ARROW_ROWS + offset
    params = {"n": n, "big": -1}
    want = cursor_rows(con, MIXED, params)
    got = results.result_rows(con.execute(MIXED, params))
    same(got, want)
    assert isinstance(got, Rows) == (n > results.COMPACT_ROWS)
    assert {r["t"][-6:] for r in want if r["t"]} == {"-04:00", "-05:00"}  # both offsets
    assert {type(r["h"]) for r in want} == {int, type(None)}


def test_a_hugeint_past_64_bits_in_a_batch_makes_that_column_exact(monkeypatch):
    con = duckdb.connect()
    n = results.ARROW_ROWS + 100
    for big in (results.ARROW_ROWS + 5, n - 1):  # in the Arrow part
        params = {"n": n, "big": big}
        want = cursor_rows(con, MIXED, params)
        got = results.result_rows(con.execute(MIXED, params))
        same(got, want)
        assert got[big]["maybe_big"] == big * 10**20 and type(got[big]["maybe_big"]) is int


def test_hugeint_at_the_64_bit_bounds():
    con = duckdb.connect()
    sql = """
        SELECT range AS i, CASE range % 5
            WHEN 0 THEN CAST(9223372036854775807 AS HUGEINT) WHEN 1 THEN -CAST(9223372036854775808 AS HUGEINT)
            WHEN 2 THEN NULL WHEN 3 THEN -1 ELSE CAST(range AS HUGEINT) END AS h
        FROM range($n) ORDER BY i"""  # fmt: skip
    n = results.ARROW_ROWS * 2
    same(results.result_rows(con.execute(sql, {"n": n})), cursor_rows(con, sql, {"n": n}))
    for past in ("9223372036854775808", "-9223372036854775809"):  # one past each bound
        one = sql.replace("WHEN 3 THEN -1", f"WHEN 3 THEN CAST('{past}' AS HUGEINT)")
        got = results.result_rows(con.execute(one, {"n": n}))
        same(got, cursor_rows(con, one, {"n": n}))
        last = max(i for i in range(n) if i % 5 == 3)  # in the Arrow part
        assert str(got[last]["h"]) == past and last > results.ARROW_ROWS


@pytest.mark.parametrize(
    "zone, start",
    [
        ("America/New_York", "2026-03-07 00:00:00+00"),  # spring change (a skipped local hour)
        ("Europe/Amsterdam", "2026-10-24 12:00:00+00"),  # autumn change (a repeated local hour)
        ("Australia/Lord_Howe", "2026-10-02 12:00:00+00"),  # half an hour, mid-hour in UTC
        ("Asia/Kolkata", "2026-11-23 00:00:00+00"),  # +05:30 all the time
        ("UTC", "2026-11-23 00:00:00+00"),
    ],
)
def test_times_every_few_seconds_across_a_dst_change(zone, start):
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    sql = """
        SELECT CASE WHEN range % 97 = 0 THEN NULL
                    ELSE $start::TIMESTAMPTZ + range * INTERVAL '7013 milliseconds' + INTERVAL '999 microseconds'
               END AS t, range AS i
        FROM range(30000) ORDER BY i"""  # fmt: skip
    want = cursor_rows(con, sql, {"start": start})
    got = results.result_rows(con.execute(sql, {"start": start}))
    same(got, want)
    offsets = {r["t"][23:] for r in want if r["t"]}
    assert len(offsets) == (1 if zone in ("UTC", "Asia/Kolkata") else 2), offsets


def test_times_out_of_numpys_range_and_all_null_columns():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/St_Johns'")
    sql = """
        SELECT range AS i, CASE range % 4
            WHEN 0 THEN TIMESTAMPTZ '1969-12-31 23:59:59.9995+00' + range * INTERVAL '1 microsecond'
            WHEN 1 THEN TIMESTAMPTZ '9998-12-31 20:00:00+00' + range * INTERVAL '1 second'
            WHEN 2 THEN TIMESTAMPTZ '1900-01-01 00:00:00.25+00'
            ELSE TIMESTAMPTZ '2026-11-23 12:00:00+00' END AS t,
            NULL::TIMESTAMPTZ AS never, NULL::DOUBLE AS d, NULL::HUGEINT AS h
        FROM range($n) ORDER BY i"""  # fmt: skip
    n = 2 * results.ARROW_ROWS
    got = results.result_rows(con.execute(sql, {"n": n}))
    same(got, cursor_rows(con, sql, {"n": n}))
    assert got[-1]["never"] is None and got[-1]["d"] is None and got[-1]["h"] is None


def test_an_empty_result_and_one_row():
    con = duckdb.connect()
    sql = "SELECT range AS i, 1.5 AS d, TIMESTAMPTZ '2026-11-23 07:00:00.5+00' AS t FROM range($n)"
    assert results.result_rows(con.execute(sql, {"n": 0})) == []
    same(results.result_rows(con.execute(sql, {"n": 1})), cursor_rows(con, sql, {"n": 1}))


def test_arrow_columns_sliced_from_a_larger_array():
    # a batch's column may start inside its buffers (an offset): values and NULLs read from there
    zone = ZoneInfo("Europe/Amsterdam")
    to_text = results._tz_iso_column(zone)
    doubles = [1.5, None, float("nan"), -0.0, float("inf"), 2.25, None, 3.0, float("-inf"), 4.0]
    us = [1_792_890_000_000_000 + i * 900_000_001 for i in range(10)]  # around 2026-10-25 01:00Z
    us[4] = None
    huge = [None, 1, -(2**63), 2**63 - 1, 5, None, -7, 0, 8, 9]
    tz = pa.timestamp("us", tz="Europe/Amsterdam")
    for lo in range(0, 9):
        d = pa.array(doubles).slice(lo)
        assert results._arrow_column(d, "DOUBLE", None) == results._finite_column(doubles[lo:])
        h = pa.array(huge, pa.decimal128(38, 0)).slice(lo)
        got = results._arrow_column(h, "HUGEINT", None)
        assert got == huge[lo:] and all(type(v) in (int, type(None)) for v in got)
        t = pa.array(us, pa.int64()).view(tz).slice(lo)
        assert results._arrow_column(t, results._TZ_TYPE, to_text) == to_text(us[lo:])
    # other units than DuckDB's microseconds: read as microseconds (ns floored, as a datetime)
    for unit, scale in (("s", 10**6), ("ms", 1000), ("ns", 10**-3)):
        raw = [None if v is None else int(v // scale) if scale > 1 else v * 1000 + 999 for v in us]
        t = pa.array(raw, pa.int64()).view(pa.timestamp(unit, tz="Europe/Amsterdam"))
        want = [None if v is None else int(v * scale) if scale > 1 else v // 1000 for v in raw]
        assert results._arrow_column(t, results._TZ_TYPE, to_text) == to_text(want), unit


def test_row_maker_builds_the_dicts_dict_zip_did():
    names = ["a", "a'b", 'q"uote', "back\\slash", "new\nline", "é", "lambda", "_0", "_1", "a", "", "{x}"]
    values = [list(range(i, i + 5)) for i in range(len(names))]
    want = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
    got = build_rows(names, values)
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # key order; "a" kept first, last value
    assert [sys.getsizeof(r) for r in got] == [sys.getsizeof(r) for r in want]
    assert row_maker(("x", "y"))(1, None) == {"x": 1, "y": None}
    assert build_rows([], []) == [] and build_rows(["x"], [[]]) == []


def test_rows_read_back_through_row_maker():
    table = Rows(["id", "v", "v"], [False, True, True], [True, False, False])
    table.extend([["a", "b", None], [1.0, None, 3.5], [2.0, 2.5, None]])
    table.seal()
    want = [dict(zip(["id", "v", "v"], r, strict=True)) for r in (("a", 1.0, 2.0), ("b", None, 2.5), (None, 3.5, None))]
    assert list(table) == want and table[0:3] == want and table[1] == want[1]


def test_without_numpy_the_cursor_path_is_taken(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))
    results._have_arrow.cache_clear()
    try:
        assert not results._have_arrow()
        monkeypatch.setattr(results, "_arrow_rows", None)  # would fail if called
        con = duckdb.connect()
        params = {"n": results.ARROW_ROWS + 1, "big": -1}
        same(results.result_rows(con.execute(MIXED, params)), cursor_rows(con, MIXED, params))
    finally:
        monkeypatch.undo()
        results._have_arrow.cache_clear()


def test_a_large_result_imports_neither_pandas_nor_pyarrow_compute(tmp_path):
    # pyarrow.compute called with Python scalars makes pyarrow import pandas (0.2 s a run)
    code = textwrap.dedent(f"""
        import json, sys, duckdb
        from dslogs.analyzer.metrics import results
        from dslogs.analyzer.metrics import rows as rows_mod
        con = duckdb.connect()
        con.execute("SET TimeZone = 'Europe/Amsterdam'")
        rows = results.result_rows(con.execute({MIXED!r}, {{"n": 20000, "big": 12000}}))
        assert len(rows) == 20000 and "pyarrow" in sys.modules
        print(json.dumps(sorted(m for m in ("pandas", "pyarrow.compute") if m in sys.modules)))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []
