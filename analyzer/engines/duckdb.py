"""The DuckDB engine: the contract over one connection holding the views."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import duckdb

from dslogs.analyzer.core import progress
from dslogs.analyzer.core.resources import load_query, memory_limit
from dslogs.analyzer.engines.contract import MetricSource
from dslogs.analyzer.ingest import sql_literal
from dslogs.analyzer.metrics import results
from dslogs.analyzer.metrics.registry import bind
from dslogs.analyzer.metrics.results import (
    _TZ_TYPE,
    KEEP_DB,
    RELEASE_TO,
    _table_chunks,
    held,
    held_bytes,
    limit_less,
    result_rows,
    row_per_session,
    run_metric,
    view_columns,
)
from dslogs.analyzer.metrics.rows import LazyRows


class DuckDBSource:
    """The contract over one DuckDB connection holding the views (``ingest.open_logs``'s LogDB,
    or a bare connection as the tests build)."""

    def __init__(self, con, ingest: dict | None = None, window: dict | None = None, db=None,
                 lazy_rows: int | None = None):  # fmt: skip
        """``lazy_rows``: a table of a row per session or request of more rows than this stays
        in DuckDB (rows.LazyRows; default LAZY_ROWS)."""
        self.con = con
        self.ingest = ingest if ingest is not None else {}
        self.window = window if window is not None else {}
        self.db = db
        self.lazy_rows = results.LAZY_ROWS if lazy_rows is None else lazy_rows
        self._attached = False
        self._bounds: dict[str, float] = {}  # view -> its rows (_rows_bound)
        self._stored: dict[str, str] | None = None  # _stored_sql

    @classmethod
    def of(cls, db) -> DuckDBSource:
        return cls(db.con, db.ingest, db.window, db)

    def columns(self, view: str) -> set[str]:
        return view_columns(self.con, view)

    def time_bounds(self) -> tuple[str | None, str | None]:
        # time_span gives the bounds; kept for the run that follows (it takes no parameters).
        self._span = run_metric(self.con, "time_span", {})
        row = self._span[0] if self._span else {}
        return row.get("first_event"), row.get("last_event")

    def run(self, names: Sequence[str], params: dict[str, object]) -> dict[str, list[dict]]:
        span = getattr(self, "_span", None)
        out = {}
        for name in names:
            if name == "time_span" and span is not None:
                out[name] = span
            elif row_per_session(name) and self._rows_bound(name) > self.lazy_rows:
                out[name] = self._kept(name, params)
            else:
                out[name] = run_metric(self.con, name, params, self._stored_sql(name))
            progress.advance(1)
            if held(out[name]):
                # the table now held in Python: give DuckDB's cache back
                self.release_memory(held_bytes(out.values()))
        if any(held(t) for t in out.values()):
            self.release_memory(held_bytes(out.values()))  # before the rules run in Python
        return out

    def _stored_sql(self, name: str) -> str | None:
        """The SQL of a per-session query that reads the cache's stored rows (session_tables),
        or None; asked once per source, by the first such query (it builds missing tables)."""
        from dslogs.analyzer.ingest import session_tables

        if name not in session_tables.SESSION_QUERIES:
            return None
        if self._stored is None:
            self._stored = session_tables.metric_sql(self.con, self.db, session_tables.SESSION_QUERIES)
        return self._stored.get(name)

    def _rows_bound(self, name: str) -> int:
        """About the most rows a table of a row per session (per request: request_memory_deltas)
        can have: the window's sessions (requests). At most ``lazy_rows`` of them: the table is
        read whole as before, with no table made in DuckDB (0.1 s a run on small logs); a table
        that has more rows all the same is kept as rows.Rows past COMPACT_ROWS, as before."""
        view = "requests" if name == "request_memory_deltas" else "sessions"
        if view not in self._bounds:
            try:
                self._bounds[view] = self.con.execute(f"SELECT count(*) FROM {view}").fetchone()[0]
            except duckdb.Error:  # a connection without the view: keep the table in DuckDB
                self._bounds[view] = math.inf
        return self._bounds[view]

    def _kept(self, name: str, params: dict[str, object]) -> Sequence[dict]:
        """queries/<name>.sql's rows as a table of ``KEEP_DB`` read in chunks (rows.LazyRows),
        or read whole as a list when it has at most ``lazy_rows`` rows (the table dropped)."""
        sql = self._stored_sql(name) or load_query(name).strip().rstrip(";")
        used = bind(name, params, sql)
        if not self._attached:
            self.con.execute(f"ATTACH IF NOT EXISTS {sql_literal(self._keep_path())} AS {KEEP_DB}")
            self._attached = True
        table = f'{KEEP_DB}."{name}"'
        rel = self.con.sql(sql, params=used) if used else self.con.sql(sql)
        # kept as the values it is read as, converted once here rather than at every read: times
        # as ISO text in the run's zone (isoformat(timespec="milliseconds"): DuckDB's %z writes a
        # whole-hour offset as "+08", Python as "+08:00"), NaN and inf as NULL (_finite_column)
        select = []
        for column, duck_type in zip(rel.columns, map(str, rel.types), strict=True):
            quoted = '"' + column.replace('"', '""') + '"'
            if duck_type == _TZ_TYPE:
                select.append(f"regexp_replace(strftime({quoted}, '%Y-%m-%dT%H:%M:%S.%g%z'), "
                              f"'([+-][0-9][0-9])$', '\\1:00') AS {quoted}")  # fmt: skip
            elif duck_type == "DOUBLE":
                select.append(f"CASE WHEN isfinite({quoted}) THEN {quoted} END AS {quoted}")
            else:
                select.append(quoted)
        # a newline after the query: it may end with a comment line
        create = f"CREATE OR REPLACE TABLE {table} AS SELECT {', '.join(select)} FROM (\n{sql}\n)"
        self.con.execute(create, used) if used else self.con.execute(create)
        n = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if n <= self.lazy_rows:
            try:
                return result_rows(self.con.execute(f"SELECT * FROM {table}"))
            finally:
                self.con.execute(f"DROP TABLE {table}")
        desc = self.con.execute(f"SELECT * FROM {table} LIMIT 0").description
        columns, types = [d[0] for d in desc], [str(d[1]) for d in desc]
        (zone,) = self.con.execute("SELECT current_setting('TimeZone')").fetchone()
        chunks = partial(_table_chunks, self.con, table, columns, types, results.CHUNK_ROWS, zone)
        return LazyRows(columns, n, chunks, close=partial(self._drop, table))

    def _keep_path(self) -> str:
        """Where the kept tables live: a database file in the run's temp folder (removed with it)
        when there is one, stored compressed and its blocks dropped from memory without being
        written out (DuckDB reads them back when a rule reads the table); else in memory."""
        tmp = getattr(self.db, "_tmp", None)
        name = getattr(tmp, "name", None)
        if not results.KEEP_ON_DISK or name is None:
            return ":memory:"
        return str(Path(name) / "rows.duckdb")

    def _drop(self, table: str) -> None:
        try:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
        except duckdb.ConnectionException:
            pass  # the connection is closed: the in-memory table went with it

    def release_memory(self, held: int = 0) -> None:
        """Make DuckDB drop the cached blocks of the logs, so peak RSS stays bounded.

        Its buffer pool keeps blocks read up to memory_limit; once a large metric table is in
        Python, that and the cache together would exceed the budget. Lowering the limit for an
        instant evicts them (0.1 s; re-read from the OS page cache when a later query needs them).
        Then the limit is what ingest.open_logs set less ``held``, the bytes of the compact
        tables (rows.Rows) Python holds: DuckDB and those tables share the one budget.
        Only when the logs are in the cache file: an in-memory store would be spilled to disk."""
        if self.db is None or getattr(self.db, "cache_path", None) is None:
            return
        # what ingest.open_logs set (the setting itself reads back rounded, '953.6 MiB')
        limit = limit_less(memory_limit(), held)
        try:
            self.con.execute(f"SET memory_limit = '{RELEASE_TO}'")
        except duckdb.Error:
            pass  # nothing is lost: the limit is restored below
        finally:
            self.con.execute("SET memory_limit = $limit", {"limit": limit})

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def as_source(source) -> MetricSource:
    """A MetricSource as it is, a LogDB or a DuckDB connection wrapped."""
    if hasattr(source, "run") and hasattr(source, "time_bounds"):
        return source
    if hasattr(source, "con") and hasattr(source, "ingest"):
        return DuckDBSource.of(source)
    return DuckDBSource(source)
