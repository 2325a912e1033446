"""``dslogs.open``: the logs as DataFrames, relations and sandboxed queries, and their report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.core.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from analyzer.ingest.logs import LogDB
    from dslogs._report import Report

VIEWS = ("events", "requests", "sessions")

# The most a DataFrame of a whole view may take, by estimate, before the API refuses it and
# points to ``relation``: with the logs' DuckDB under its own 1 GB limit, a session stays
# within the command line's 1.5 GB goal (bench/api_memory.py measures both).
FRAME_BUDGET_BYTES = int(os.environ.get("DSLOGS_FRAME_BUDGET_MB", "400")) << 20

# Bytes a DataFrame cell takes, by DuckDB type: numbers 8; text is an object column (a pointer
# and a Python str); nested values are Python lists and dicts.
_CELL_BYTES = {"BOOLEAN": 1, "VARCHAR": 90}
_NESTED_BYTES = 400


def _paths(paths: Any) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


class Logs:
    """Trace logs opened for a window: ``dslogs.open(...)`` returns one.

    The logs are read once, into DuckDB (the same cache as the command line), when opened.
    ``events``, ``requests`` and ``sessions`` are pandas DataFrames of the views that
    ``dslogs query`` reads, computed on first access and kept; ``relation(view)`` gives the
    DuckDB relation instead, for data too big for a DataFrame. Every SQL run here goes through
    the read-only sandbox of ``dslogs query``."""

    def __init__(self, paths: Any, *, since: str | None = None, until: str | None = None,
                 tz: str | None = None, thresholds: str | os.PathLike[str] | None = None,
                 engine: str = "duckdb", cache: str | os.PathLike[str] | None = None,
                 use_cache: bool = True) -> None:
        from analyzer.core.thresholds import load_thresholds

        self.paths = _paths(paths)
        self.since, self.until, self.tz = since, until, tz
        self.thresholds_file = os.fspath(thresholds) if thresholds is not None else None
        if engine not in ("duckdb", "spark"):
            raise UsageError(f"unknown engine {engine!r}; valid: duckdb, spark")
        self.engine = engine
        self.cache = Path(cache) if cache is not None else None
        self.use_cache = use_cache
        # a typo in the thresholds file fails before any log is read, as in `dslogs analyze`
        self.thresholds: dict[str, Any] = load_thresholds(self.thresholds_file)
        self._db: LogDB | None = None
        self._frames: dict[str, pd.DataFrame] = {}
        self._open()

    # -- the connection ---------------------------------------------------------------------

    def _open(self) -> LogDB:
        if self._db is None:
            from analyzer.ingest.logs import open_logs
            from analyzer.ingest.sandbox import lock_down

            # as `dslogs query` opens them: the views computed as far as each query needs
            db = open_logs(self.paths, since=self.since, until=self.until, tz=self.tz,
                           cache=self.cache, use_cache=self.use_cache, materialize=False)
            lock_down(db.con)
            self._db = db
        return self._db

    def close(self) -> None:
        """Release the DuckDB connection (DataFrames already computed stay)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> Logs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ingest(self) -> dict[str, Any]:
        """What was read: files, events, bad lines (with samples), skipped files."""
        return dict(self._open().ingest)

    @property
    def files(self) -> list[str]:
        return list(self._open().files)

    def __repr__(self) -> str:
        ingest = self._db.ingest if self._db is not None else {}
        window = f"{self.since or '…'}..{self.until or 'now'}"
        return (f"<dslogs.Logs {', '.join(self.paths)} [{window}]: {ingest.get('events', '?')} events "
                f"in {ingest.get('files', '?')} files>")

    # -- data -------------------------------------------------------------------------------

    @property
    def events(self) -> pd.DataFrame:
        """The events view: one row per trace event (docs/sql.md)."""
        return self._view("events")

    @property
    def requests(self) -> pd.DataFrame:
        """The requests view: one row per request, its stages, latencies and memory."""
        return self._view("requests")

    @property
    def sessions(self) -> pd.DataFrame:
        """The sessions view: one row per session."""
        return self._view("sessions")

    def relation(self, view: str = "requests") -> duckdb.DuckDBPyRelation:
        """The DuckDB relation of a view, to filter and aggregate before fetching
        (``.filter(...)``, ``.aggregate(...)``, ``.df()``, ``.arrow()``)."""
        if view not in VIEWS:
            raise UsageError(f"unknown view {view!r}; valid: {', '.join(VIEWS)}")
        relation: duckdb.DuckDBPyRelation = self._open().con.table(view)
        return relation

    def query(self, sql: str, **params: Any) -> pd.DataFrame:
        """One SQL statement over the views, read-only (as ``dslogs query``), as a DataFrame.
        Parameters are named in the SQL as ``$name``: ``logs.query("... WHERE host = $h", h="a")``."""
        from dslogs._extras import need

        need("pandas", "Logs.query")
        from analyzer.ingest.sandbox import user_cursor

        return _frame(user_cursor(self._open(), sql, params=params or None))

    def session(self, id_or_prefix: str, timeline: bool = False) -> pd.DataFrame:
        """One session's events in time order (``timeline``: one row per request, as
        ``dslogs session`` prints it); a unique prefix of the id is enough."""
        from dslogs._extras import need

        need("pandas", "Logs.session")
        from analyzer.ingest.logs import execute, resolve_session, session_sql

        db = self._open()
        session_id = resolve_session(db, id_or_prefix)
        return _frame(execute(db, session_sql(timeline), [session_id]))

    def _view(self, view: str) -> pd.DataFrame:
        if view not in self._frames:
            from dslogs._extras import need

            need("pandas", f"Logs.{view}")
            from analyzer.ingest.logs import execute

            db = self._open()
            estimate = frame_bytes(db, view)
            if estimate > FRAME_BUDGET_BYTES:
                raise UsageError(
                    f"logs.{view} would take about {estimate / 2**20:,.0f} MiB as a DataFrame "
                    f"(over the {FRAME_BUDGET_BYTES / 2**20:,.0f} MiB budget): use "
                    f"logs.relation({view!r}) to filter or aggregate in DuckDB first, or narrow "
                    f"the window (since/until); DSLOGS_FRAME_BUDGET_MB raises the budget")
            self._frames[view] = _frame(execute(db, f"SELECT * FROM {view}"))
        return self._frames[view]

    # -- the diagnosis ----------------------------------------------------------------------

    def report(self) -> Report:
        """The diagnosis (``dslogs analyze``) of these logs and window, as a ``Report``."""
        from analyzer.model.report import analyze_logs
        from dslogs._report import Report

        # analyze_logs opens the logs (and their cache file) itself: this connection lets go
        # of the cache first, and is opened again when next needed.
        self.close()
        model = analyze_logs(self.paths, since=self.since, until=self.until, tz=self.tz,
                             thresholds_file=self.thresholds_file, cache=self.cache,
                             use_cache=self.use_cache, engine=self.engine)
        return Report(model)

    # logs.capacity() (the capacity section, `dslogs capacity`) goes here, over the same
    # model function as the command, returning a typed object like Report.


def frame_bytes(db: LogDB, view: str) -> int:
    """An estimate of what ``view`` takes as a DataFrame: its rows times the bytes of a row."""
    cols = db.con.execute(f"DESCRIBE {view}").fetchall()
    rows = db.con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]
    per_row = 0
    for _, dtype, *_rest in cols:
        kind = str(dtype)
        if "[" in kind or kind.startswith(("STRUCT", "MAP", "LIST", "JSON")):
            per_row += _NESTED_BYTES
        else:
            per_row += _CELL_BYTES.get(kind, 8)
    return int(rows) * per_row


def _frame(cur: Any) -> pd.DataFrame:
    """An executed statement's rows as a DataFrame (DuckDB's own conversion, with timestamps in
    the logs' zone); an error is one line."""
    import duckdb

    from analyzer.ingest.logs import _sql_error

    try:
        return cur.df()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {_sql_error(exc)}") from None
