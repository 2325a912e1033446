"""``dslogs.open``: the logs as DataFrames, relations and sandboxed queries, and their report."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from dslogs.analyzer.core.errors import UsageError, one_line
from dslogs.analyzer.core.views import VIEWS

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from dslogs._capacity import Capacity
    from dslogs._report import Report
    from dslogs.analyzer.ingest import LogSet

# The most Arrow data a whole view may fetch before the API stops and points to ``relation``.
# Fetching and converting it peaked at about 4.4 times its size over a 190 MB process
# (bench/api_memory.py: one day of events, ~147 MiB of Arrow, 831 MB), so a view at the limit
# stays near 1.1 GB, within the command line's 1.5 GB goal.
# DSLOGS_FRAME_BUDGET_MB changes it (MiB, read when a view is fetched); a value set here wins.
FRAME_BUDGET_BYTES: int | None = None
ROWS_PER_BATCH = 100_000


def frame_budget() -> int:
    """The byte budget of one view's DataFrame: FRAME_BUDGET_BYTES, else DSLOGS_FRAME_BUDGET_MB
    (MiB, a decimal allowed, an M/MB/MiB suffix tolerated; default 200); UsageError otherwise."""
    if FRAME_BUDGET_BYTES is not None:
        return FRAME_BUDGET_BYTES
    raw = os.environ.get("DSLOGS_FRAME_BUDGET_MB", "200")
    text = raw.strip()
    for suffix in ("MiB", "MB", "M", "mib", "mb", "m"):
        if text.endswith(suffix):
            text = text[: -len(suffix)].strip()
            break
    try:
        mib = float(text)
    except ValueError:
        mib = -1.0
    if not 0 < mib < 2**40:
        from dslogs.analyzer.core.textsafe import visible

        raise UsageError(f"DSLOGS_FRAME_BUDGET_MB={visible(raw)!r}: expected a number of MiB above 0, "
                         f"such as 200 or 1.5")
    return int(mib * 2**20)


class Logs:
    """Trace logs opened for a window: ``dslogs.open(...)`` returns one.

    The logs are read once, into DuckDB (the same cache as the command line), when opened.
    ``events``, ``requests`` and ``sessions`` are pandas DataFrames of the views that
    ``dslogs query`` reads, computed on first access and kept; ``relation(view)`` gives the
    DuckDB relation instead, for data too big for a DataFrame. Every SQL run here goes through
    the read-only sandbox of ``dslogs query``.

    Safe to share between threads for reading: one lock orders every use of the one DuckDB
    connection (a DuckDB connection answers one statement at a time; two threads on it got each
    other's rows), so threads take turns. A ``relation`` is the exception: it runs on the
    connection when it is fetched, so fetch it in the thread that made it, or make one per
    thread."""

    def __init__(self, paths: Any, *, since: Any = None, until: Any = None,
                 tz: Any = None, thresholds: str | os.PathLike[str] | None = None,
                 engine: str = "duckdb", cache: str | os.PathLike[str] | None = None,
                 use_cache: bool = True, session_attr: str | None = None, prom_servers: str = "auto") -> None:
        from dslogs.analyzer.core.selection import Selection
        from dslogs.analyzer.engines.registry import ENGINE_MODULES

        if engine not in ENGINE_MODULES:
            raise UsageError(f"unknown engine {engine!r}; valid: {', '.join(ENGINE_MODULES)}")
        # built once, as the command line builds it: a bad since/until or a typo in the
        # thresholds file fails here, before any log is read
        self.selection = Selection.build(paths, since=since, until=until, tz=tz,
                                         session_attr=session_attr, thresholds_file=thresholds,
                                         cache=cache, use_cache=use_cache, engine=engine,
                                         prom_servers=prom_servers)
        frame_budget()  # a bad DSLOGS_FRAME_BUDGET_MB is said now, not at the first DataFrame
        self.paths = list(self.selection.paths)
        self.since, self.until, self.tz = since, until, tz
        self.thresholds_file = self.selection.thresholds_file
        self.engine = engine
        self.cache = self.selection.cache
        self.use_cache = use_cache
        self.session_attr = session_attr
        self.thresholds: dict[str, Any] = self.selection.threshold_tables()
        self._db: LogSet | None = None
        self._frames: dict[str, pd.DataFrame] = {}
        self._lock = threading.RLock()
        self._open()

    # -- the connection ---------------------------------------------------------------------

    def _open(self) -> LogSet:
        with self._lock:
            return self._open_locked()

    def _open_locked(self) -> LogSet:
        if self._db is None:
            from dslogs.analyzer import ingest

            # as `dslogs query` opens them: the views computed as far as each query needs
            db = ingest.open(self.selection, materialize=False)
            ingest.lock_down(db.con)
            self._db = db
        return self._db

    def close(self) -> None:
        """Release the DuckDB connection (DataFrames already computed stay)."""
        with self._lock:
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
        with self._lock:
            return dict(self._open().ingest)

    @property
    def files(self) -> list[str]:
        with self._lock:
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
        if not isinstance(view, str) or view not in VIEWS:
            raise UsageError(f"unknown view {view!r}; valid: {', '.join(VIEWS)}")
        with self._lock:
            relation: duckdb.DuckDBPyRelation = self._open().con.table(view)
        return relation

    def query(self, sql: str, **params: Any) -> pd.DataFrame:
        """One SQL statement over the views, read-only (as ``dslogs query``), as a DataFrame.
        Parameters are named in the SQL as ``$name``: ``logs.query("... WHERE host = $h", h="a")``."""
        from dslogs._extras import need

        need("pandas", "Logs.query")
        from dslogs.analyzer.ingest import user_cursor

        if not isinstance(sql, str):
            raise UsageError(f"query: sql is {type(sql).__name__}, expected one SQL statement as a str")
        with self._lock:
            return _frame(user_cursor(self._open(), sql, params=params or None))

    def session(self, id_or_prefix: str, timeline: bool = False) -> pd.DataFrame:
        """One session's events in time order (``timeline``: one row per request, as
        ``dslogs session`` prints it); a unique prefix of the id is enough."""
        from dslogs._extras import need

        need("pandas", "Logs.session")
        from dslogs.analyzer.ingest import execute, resolve_session, session_sql

        if not isinstance(id_or_prefix, str):
            raise UsageError(f"session: id_or_prefix is {type(id_or_prefix).__name__} {id_or_prefix!r}, "
                             f"expected a session id or a prefix of one (str)")
        with self._lock:
            db = self._open()
            session_id = resolve_session(db, id_or_prefix)
            return _frame(execute(db, session_sql(timeline), [session_id]))

    def _view(self, view: str) -> pd.DataFrame:
        with self._lock:
            return self._view_locked(view)

    def _view_locked(self, view: str) -> pd.DataFrame:
        if view not in self._frames:
            from dslogs._extras import need

            need("pandas", f"Logs.{view}")
            pa = need("pyarrow", f"Logs.{view}")
            db = self._open()
            # fetched in batches and counted as they come, so a view too big for a DataFrame is
            # refused before it is all in memory
            budget = frame_budget()
            reader = db.con.sql(f"SELECT * FROM {view}").to_arrow_reader(ROWS_PER_BATCH)
            batches: list[Any] = []
            size = 0
            for batch in reader:
                size += batch.nbytes
                if size > budget:
                    raise UsageError(
                        f"logs.{view} is more than {budget / 2**20:,.1f} MiB of data "
                        f"(stopped after {sum(b.num_rows for b in batches):,} rows), too big for "
                        f"a DataFrame here: use logs.relation({view!r}) to filter or aggregate in "
                        f"DuckDB first, or narrow the window (since/until); "
                        f"DSLOGS_FRAME_BUDGET_MB raises the limit")
                batches.append(batch)
            table = pa.Table.from_batches(batches, schema=reader.schema)
            del batches
            # DuckDB's own conversion, as for query(): the same dtypes as `.df()` on the view
            self._frames[view] = _frame(db.con.from_arrow(table))
        return self._frames[view]

    # -- the diagnosis ----------------------------------------------------------------------

    def report(self) -> Report:
        """The diagnosis (``dslogs analyze``) of these logs and window, as a ``Report``."""
        from dslogs._report import Report
        from dslogs.analyzer.usecases.analyze import analyze
        from dslogs.analyzer.usecases.deploys import report_deploys

        # analyze opens the logs (and their cache file) on the selection's engine itself: this
        # connection lets go of the cache first, and is opened again when next needed.
        with self._lock:
            self.close()
            return Report(analyze(self.selection, report_deploys))

    def capacity(self) -> Capacity:
        """How many requests in flight the service holds (``dslogs capacity``), as a ``Capacity``."""
        from dslogs._capacity import Capacity
        from dslogs.analyzer.usecases.analyze import capacity

        with self._lock:
            self.close()  # as report(): capacity opens the logs (and their cache file) itself
            return Capacity(capacity(self.selection))

    def deploys(self) -> dict[str, Any]:
        """The deploys in these logs (``dslogs deploys``): the model ``dslogs.deploys/1``, a dict
        whose ``deploys`` lists each with what changed and its verdict against the one before."""
        from dslogs.analyzer.usecases.deploys import deploys

        self.close()  # as report(): each deploy's window is opened by the diff itself
        model: dict[str, Any] = deploys(self.selection)
        return model


def _frame(cur: Any) -> pd.DataFrame:
    """An executed statement's rows as a DataFrame (DuckDB's own conversion, with timestamps in
    the logs' zone); an error is one line."""
    import duckdb

    try:
        return cur.df()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {one_line(exc, every_line=True, limit=500)}") from None
