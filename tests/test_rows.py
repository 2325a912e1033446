"""Large metric tables kept column by column (analyzer/metrics/rows.py): a Rows reads as
the list of row dicts it replaces, and a report built with every table compact is the report
built from lists, on every folder of sample_logs/."""

from __future__ import annotations

import json
import math
import sys
import tracemalloc
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.engines import duckdb as duckdb_engine
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics import results
from dslogs.analyzer.metrics.rows import Rows
from dslogs.analyzer.model.report import report_to_json
from dslogs.analyzer.usecases.analyze import build_report
from tests.model_helpers import uncached_report_text

REPO = Path(__file__).resolve().parents[1]


def _table(con, sql: str, compact_rows: int):
    return results.result_rows(con.execute(sql), compact_rows=compact_rows)


SQL = """
SELECT 's' || i AS session_id, CASE WHEN i % 3 = 0 THEN NULL ELSE 'gpu-0' || (i % 2) END AS host,
       CASE WHEN i % 5 = 0 THEN NULL WHEN i % 7 = 0 THEN 'nan'::DOUBLE WHEN i % 11 = 0 THEN 'inf'::DOUBLE
            ELSE i / 3.0 END AS x,
       i AS n, i % 2 = 0 AS even, TIMESTAMPTZ '2026-11-23 10:00:00+00' + to_seconds(i) AS ts,
       [i, i + 1] AS pair
FROM range(0, 12000) t(i) ORDER BY i
"""


def test_rows_read_as_the_list_they_replace():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    as_list = _table(con, SQL, compact_rows=10**9)
    rows = _table(con, SQL, compact_rows=100)
    assert isinstance(as_list, list) and isinstance(rows, Rows)
    assert len(rows) == len(as_list) == 12000
    assert rows == as_list and list(rows) == as_list
    assert rows[0] == as_list[0] and rows[-1] == as_list[-1] and rows[4097] == as_list[4097]
    assert rows[10:20] == as_list[10:20] and rows[::997] == as_list[::997]
    # NULL, NaN and inf are None in both; integers, booleans, timestamps and lists keep their types
    assert [rows[i]["x"] for i in (5, 7, 11)] == [None, None, None]
    assert rows[2]["x"] == pytest.approx(2 / 3) and rows[2]["n"] == 2 and rows[2]["even"] is True
    assert rows[1]["ts"] == as_list[1]["ts"] and rows[4]["pair"] == [4, 5]
    with pytest.raises(IndexError):
        rows[12000]
    # session ids and hosts interned: the tables of one run share them
    assert (
        rows[1]["session_id"] is sys.intern("s1") and rows[1]["host"] is rows[5]["host"] == "gpu-01"
    )
    assert all(not math.isnan(r["x"]) for r in rows if r["x"] is not None)
    with pytest.raises(TypeError):
        json.dumps(rows)  # never reaches the model as such (report.py copies what it shows)


def test_rows_are_several_times_smaller_than_row_dicts():
    con = duckdb.connect()
    sql = ("SELECT 'session-' || i AS session_id, 'gpu-01' AS host, i AS requests, "
           + ", ".join(f"(i * {k}.5)::DOUBLE AS v{k}" for k in range(15)) + " FROM range(0, 30000) t(i)")  # fmt: skip

    def traced(limit):
        tracemalloc.start()
        table = _table(con, sql, limit)
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return table, size

    as_list, big = traced(10**9)
    rows, small = traced(100)
    assert rows == as_list
    assert small * 2.5 < big, (small, big)  # 0.3 kB against 1 kB a row here


@pytest.mark.parametrize(
    "folder", sorted(p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir())
)
def test_a_report_from_compact_tables_is_the_same_report(folder, monkeypatch, tmp_path):
    def report(compact: int) -> dict:
        monkeypatch.setattr(results, "COMPACT_ROWS", compact)
        return json.loads(uncached_report_text(REPO / "sample_logs" / folder))

    assert report(0) == report(10**9)


def test_duckdb_cache_released_after_large_tables_and_the_limit_restored(monkeypatch, tmp_path):
    # every table counts as large: a release after each
    monkeypatch.setattr(results, "RELEASE_ROWS", 0)
    seen = []
    real = duckdb_engine.DuckDBSource.release_memory

    def spy(self, held=0):
        real(self, held)
        seen.append(self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0])

    monkeypatch.setattr(duckdb_engine.DuckDBSource, "release_memory", spy)
    db = open_logs([str(REPO / "sample_logs" / "memory_leak")], cache=tmp_path / "c.duckdb")
    try:
        source = duckdb_engine.DuckDBSource.of(db)
        (before,) = db.con.execute("SELECT current_setting('memory_limit')").fetchone()
        model = build_report(source)
        (after,) = db.con.execute("SELECT current_setting('memory_limit')").fetchone()
        assert after == before
        assert db.cache_path is not None and len(seen) > 5 and set(seen) == {before}
    finally:
        db.close()
    assert model["findings"] and any(f["rule"] == "memory_leak" for f in model["findings"])


def test_rows_keep_integers_past_32_bits_nulls_and_timestamps_exactly():
    # integers that outgrow a 4-byte array in a later chunk, NULLs among integers and timestamps,
    # a column of NULLs only: read back as the list gives them (rows.Rows' compact columns)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Shanghai'")
    sql = """
    SELECT 's' || i AS session_id,
           CASE WHEN i > 9000 THEN i * 1000000000 ELSE i END AS big,
           CASE WHEN i % 4 = 0 THEN NULL ELSE i END::INTEGER AS some_null,
           NULL::BIGINT AS all_null,
           CASE WHEN i % 6 = 0 THEN NULL ELSE TIMESTAMPTZ '2026-11-23 10:00:00.123+00' + to_seconds(i) END AS ts,
           NULL::TIMESTAMPTZ AS no_ts
    FROM range(0, 10000) t(i) ORDER BY i
    """
    as_list = _table(con, sql, compact_rows=10**9)
    rows = _table(con, sql, compact_rows=100)
    assert isinstance(rows, Rows) and rows == as_list and list(rows) == as_list
    assert (
        rows[9999]["big"] == 9999 * 10**9
        and rows[8]["some_null"] is None
        and rows[9]["some_null"] == 9
    )
    assert rows[6]["ts"] is None and rows[7]["ts"] == as_list[7]["ts"] and "+08:00" in rows[7]["ts"]
    assert rows[8193:8200] == as_list[8193:8200]
    assert {r["all_null"] for r in rows} == {None} and {r["no_ts"] for r in rows} == {None}


def test_duckdb_memory_limit_from_env_and_spill_folder_removed(monkeypatch, tmp_path):
    # DSLOGS_MEMORY_LIMIT bounds DuckDB; past it a sort spills into the run's own temp folder,
    # which close() removes; the report is the one built with the default limit
    def report(db) -> dict:
        model = build_report(db)
        model.pop("generated_at")
        model["ingest"].pop("seconds")
        model["ingest"].pop("cache")
        return json.loads(report_to_json(model))

    folder = str(REPO / "sample_logs" / "memory_leak")
    db = open_logs([folder], cache=tmp_path / "a.duckdb")
    try:
        want = report(db)
    finally:
        db.close()
    monkeypatch.setenv("DSLOGS_MEMORY_LIMIT", "64MB")
    db = open_logs([folder], cache=tmp_path / "b.duckdb")
    spill = Path(db.con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    try:
        (limit,) = db.con.execute("SELECT current_setting('memory_limit')").fetchone()
        assert limit == "61.0 MiB"
        assert report(db) == want
        # a table past the limit: DuckDB writes it to the temp folder instead of failing
        db.con.execute(
            "CREATE TEMP TABLE big AS SELECT i, i::VARCHAR || 'xxxxxxxxxxxx' AS s FROM range(4000000) t(i)"
        )
        spilled = db.con.execute("SELECT path FROM duckdb_temporary_files()").fetchall()
        assert spilled and all(Path(p).parent == spill for (p,) in spilled)
    finally:
        db.close()
    assert not spill.exists()


def test_limit_less_and_nbytes():
    assert results.limit_less("1GB", 0) == "1GB" and results.limit_less("80%", 10**8) == "80%"
    assert results.limit_less("1GB", 300 * 10**6) == "700MB"
    assert results.limit_less("900MiB", 100 * 10**6) == "843MB"
    assert results.limit_less("1GB", 10**10) == "256MB"  # never under RELEASE_TO
    con = duckdb.connect()
    rows = _table(con, "SELECT 's' || i AS s, i AS n, i / 2 AS x FROM range(0, 5000) t(i)", 100)
    # a pointer per interned string, 4 bytes per integer, 8 per float
    assert rows.nbytes() == 5000 * (8 + 4 + 8)


def test_duckdb_limit_shrinks_by_what_compact_tables_hold(monkeypatch, tmp_path):
    # every table compact and large: after each, DuckDB's limit is the configured one less the
    # bytes of the compact tables held so far (DuckDB and Python share one budget)
    monkeypatch.setattr(results, "COMPACT_ROWS", 0)
    monkeypatch.setattr(results, "RELEASE_ROWS", 0)
    monkeypatch.setenv("DSLOGS_MEMORY_LIMIT", "300MB")
    seen = []
    real = duckdb_engine.DuckDBSource.release_memory

    def spy(self, held=0):
        real(self, held)
        seen.append(
            (held, self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        )

    monkeypatch.setattr(duckdb_engine.DuckDBSource, "release_memory", spy)
    db = open_logs([str(REPO / "sample_logs" / "memory_leak")], cache=tmp_path / "c.duckdb")
    try:
        build_report(duckdb_engine.DuckDBSource.of(db))
    finally:
        db.close()
    assert seen and all(held > 0 for held, _ in seen)
    check = duckdb.connect()
    check.execute("SET memory_limit = '300MB'")
    configured = check.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    for held, limit in seen:
        check.execute("SET memory_limit = $l", {"l": results.limit_less("300MB", held)})
        assert limit == check.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert limit != configured  # came down by what the tables hold
