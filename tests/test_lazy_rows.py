"""Per-session / per-request metric tables kept in DuckDB and read a chunk at a time
(rows.LazyRows, duckdb_engine.DuckDBSource._kept: nothing proportional to the sessions
held in Python): they read as the lists they replace, the report built from them is the same
report byte for byte, and what Python holds for them does not grow with the sessions."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines import compute
from dslogs.analyzer.engines import duckdb as duckdb_engine
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics import results
from dslogs.analyzer.metrics.rows import LazyRows
from dslogs.analyzer.simulate import simulate
from tests.model_helpers import uncached_report_text

REPO = Path(__file__).resolve().parents[1]

# every type the per-session queries give: strings with NULLs, doubles with NULL/NaN/inf,
# integers past 32 bits, a sum (HUGEINT), booleans, timestamps in the connection's zone, lists
SQL = """
SELECT 's' || i AS session_id, CASE WHEN i % 3 = 0 THEN NULL ELSE 'gpu-0' || (i % 2) END AS host,
       CASE WHEN i % 5 = 0 THEN NULL WHEN i % 7 = 0 THEN 'nan'::DOUBLE WHEN i % 11 = 0 THEN 'inf'::DOUBLE
            ELSE i / 3.0 END AS x,
       CASE WHEN i > 9000 THEN i * 1000000000 ELSE i END AS n, sum(i) OVER () AS total, i % 2 = 0 AS even,
       CASE WHEN i % 6 = 0 THEN NULL ELSE TIMESTAMPTZ '2026-11-23 10:00:00.123+00' + to_seconds(i) END AS ts
       {extra}
FROM range(0, 10000) t(i) ORDER BY i
"""


def _kept(con, sql: str, size: int) -> LazyRows:
    """``sql``'s rows as DuckDBSource keeps a large per-session table: a table of KEEP_DB."""
    con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {results.KEEP_DB}")
    table = f"{results.KEEP_DB}.t"
    con.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}")
    desc = con.execute(f"SELECT * FROM {table} LIMIT 0").description
    columns, types = [d[0] for d in desc], [str(d[1]) for d in desc]
    n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    (zone,) = con.execute("SELECT current_setting('TimeZone')").fetchone()
    return LazyRows(columns, n, lambda: results._table_chunks(con, table, columns, types, size, zone),
                    close=lambda: con.execute(f"DROP TABLE {table}"))  # fmt: skip


@pytest.mark.parametrize("extra", ["", ", [i, i + 1] AS pair"], ids=["arrow", "cursor"])
def test_lazy_rows_read_as_the_list_they_replace(extra):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Shanghai'")
    sql = SQL.format(extra=extra)
    as_list = results.result_rows(con.execute(sql), compact_rows=10**9)
    rows = _kept(con, sql, 999)
    assert isinstance(as_list, list) and len(rows) == len(as_list) == 10000
    assert list(rows) == as_list and rows == as_list and list(rows) == as_list  # read again
    assert rows[0] == as_list[0] and rows[-1] == as_list[-1] and rows[4097] == as_list[4097]
    assert rows[995:1010] == as_list[995:1010] and rows[::997] == as_list[::997]
    assert rows[9999]["n"] == 9999 * 10**9 and rows[7]["x"] is None and "+08:00" in rows[7]["ts"]
    with pytest.raises(IndexError):
        rows[10000]
    # two reads in progress at once (a rule reading one table inside a pass over another)
    a, b = iter(rows), iter(rows)
    assert [next(a) for _ in range(1500)][-1] == as_list[1499] and next(b) == as_list[0]
    assert next(a) == as_list[1500]
    rows.release()
    with pytest.raises(duckdb.CatalogException):
        list(rows)


def _report(folder: str, lazy_rows: int, monkeypatch, tz: str | None = None) -> str:
    monkeypatch.setattr(results, "LAZY_ROWS", lazy_rows)
    return uncached_report_text(folder, tz)


@pytest.mark.parametrize(
    "folder", sorted(p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir())
)
def test_a_report_from_tables_kept_in_duckdb_is_the_same_report(folder, monkeypatch):
    # every per-session table kept in DuckDB (0) against every one read whole (main's way)
    path = str(REPO / "sample_logs" / folder)
    kept = _report(path, 0, monkeypatch)
    assert kept == _report(path, 10**9, monkeypatch)  # byte for byte
    assert json.loads(kept)["sessions_total"] >= 0


def test_tables_kept_in_duckdb_write_times_in_the_runs_zone(monkeypatch):
    # the chunks are read on a cursor of their own: it must take the run's --tz
    path = str(REPO / "sample_logs" / "memory_leak")
    kept, whole = (_report(path, n, monkeypatch, tz="Asia/Shanghai") for n in (0, 10**9))
    assert kept == whole and "+08:00" in kept


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory) -> dict[int, Path]:
    """Simulated logs of many short healthy sessions, one set with four times the other's."""
    out = {}
    for events in (40_000, 160_000):
        folder = tmp_path_factory.mktemp(f"sessions-{events}")
        simulate(folder, ["healthy"], events=events, max_turns=3, seed=3)
        out[events] = folder
    return out


def _python_bytes(folder: Path, lazy_rows: int) -> tuple[int, int, int]:
    """(sessions, bytes Python holds for the per-session tables once computed, peak bytes while
    every one of them is read through once), by tracemalloc over a real DuckDB run."""
    db = open_logs([str(folder)], use_cache=False)
    try:
        source = duckdb_engine.DuckDBSource.of(db)
        source.lazy_rows = lazy_rows
        gc.collect()
        tracemalloc.start()
        try:
            tables = compute.compute_metrics(source, defaults())
            for name in list(tables):  # only the per-session tables' share is measured
                if not results.row_per_session(name):
                    del tables[name]
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            kept = [t for n, t in tables.items() if results.row_per_session(n)]
            tracemalloc.reset_peak()
            for t in kept:
                for _row in t:
                    pass
            peak = tracemalloc.get_traced_memory()[1] - held
        finally:
            tracemalloc.stop()
        sessions = len(tables["session_summary"])
        results.release_tables(tables)
    finally:
        db.close()
    return sessions, held, peak


def test_python_holds_no_row_per_session_of_the_tables_kept_in_duckdb(two_sizes, monkeypatch):
    import pyarrow  # noqa: F401  (imported before tracing: its modules are not the tables)

    monkeypatch.setattr(results, "CHUNK_ROWS", 64)
    _python_bytes(two_sizes[40_000], 0)  # warm: query and module caches filled once
    small, large = two_sizes[40_000], two_sizes[160_000]
    n1, lazy1, lazy_peak1 = _python_bytes(small, 0)
    n4, lazy4, lazy_peak4 = _python_bytes(large, 0)
    _, eager1, _ = _python_bytes(small, 10**9)  # main's way: every table read whole into Python
    _, eager4, _ = _python_bytes(large, 10**9)
    print(f"sessions {n1} / {n4}: held lazy {lazy1} / {lazy4} B, read peak {lazy_peak1} / {lazy_peak4} B; "
          f"held whole {eager1} / {eager4} B")  # fmt: skip
    assert n4 >= 3.5 * n1 and n1 >= 200, (n1, n4)
    # main's way grows with the sessions: about 2 kB a session over the nine tables
    assert eager4 - eager1 > 500 * (n4 - n1), (eager1, eager4)
    # kept in DuckDB: what Python holds and what a read of every table needs stay the same
    # (a chunk of 64 rows at a time), whatever the sessions
    assert lazy4 - lazy1 < 50 * (n4 - n1), (lazy1, lazy4)
    assert lazy4 < (eager4 - eager1) / 10, (lazy4, eager1, eager4)
    assert max(lazy_peak1, lazy_peak4) < 400_000, (lazy_peak1, lazy_peak4)
    assert lazy_peak4 < 1.5 * lazy_peak1 + 50_000, (lazy_peak1, lazy_peak4)


@pytest.mark.parametrize(
    "zone", ["UTC", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe", "America/St_Johns"]
)
def test_kept_tables_convert_times_and_non_finite_floats_as_python_does(zone, monkeypatch):
    # DuckDBSource keeps a per-session table with its times already ISO text in the run's zone
    # and NaN/inf as NULL (converted once, in DuckDB): exactly what result_rows writes in Python,
    # across DST changes (an hour, or half an hour on Lord Howe), half-hour offsets, sub-millisecond
    # times, NULLs and years before 1970 or after 2038
    sql = """
    SELECT 's' || i AS session_id,
           CASE WHEN i % 9 = 0 THEN NULL
                ELSE TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_microseconds(i * 3_600_000_123 + i % 1000) END AS first_ts,
           CASE WHEN i % 50 = 0 THEN TIMESTAMPTZ '1969-07-20 20:17:40.9999+00'
                WHEN i % 51 = 0 THEN TIMESTAMPTZ '2101-03-01 12:00:00+00'
                ELSE TIMESTAMPTZ '2026-03-08 06:59:59.999+00' + to_seconds(i) END AS last_ts,
           CASE WHEN i % 5 = 0 THEN 'nan'::DOUBLE WHEN i % 7 = 0 THEN '-inf'::DOUBLE
                WHEN i % 11 = 0 THEN NULL ELSE i / 7.0 END AS x
    FROM range(0, 9000) t(i) ORDER BY i
    """  # fmt: skip
    con = duckdb.connect()
    con.execute("SET TimeZone = $zone", {"zone": zone})
    want = results.result_rows(con.execute(sql), compact_rows=10**9)
    monkeypatch.setattr(duckdb_engine, "load_query", lambda name: sql)
    for lazy_rows, kind in ((0, LazyRows), (10**9, list)):
        got = duckdb_engine.DuckDBSource(con, lazy_rows=lazy_rows)._kept("memory_per_session", {})
        assert isinstance(got, kind) and list(got) == want, zone
    assert (
        want[1]["x"] == pytest.approx(1 / 7)
        and want[5]["x"] is None
        and want[9]["first_ts"] is None
    )
