"""Ad hoc SQL (``dslogs query``) runs read-only by default: a query must never change the logs or the cache.

What the user's SQL can reach, in two layers:

1. The statement: exactly one, and a query (``SELECT``, ``WITH``, ``FROM``, ``DESCRIBE``,
   ``SHOW``, ``SUMMARIZE``, ``EXPLAIN`` of one of these: ``EXPLAIN ANALYZE`` runs its statement,
   so what it explains passes the same gate). Writes, ``ATTACH``/``DETACH``, ``SET``, ``PRAGMA``,
   ``CALL``, ``INSTALL``/``LOAD``, ``COPY`` and several statements are refused with one line before
   DuckDB runs anything. Ad hoc SQL writes no file: a result reaches a file through ``--out``, whose
   checks (``core.outfile``) no ``COPY ... TO`` would pass through.
2. The connection, after the logs are loaded: ``enable_external_access=false`` (no file, URL
   or database outside what is already open; only the spill folder stays allowed),
   ``autoinstall_known_extensions=false``, ``autoload_known_extensions=false`` (no extension
   reaches for the network or the disk), then ``lock_configuration=true`` so the query cannot
   turn any of it back on. ``--allow-files`` keeps external access on (read_json, read_csv,
   read_parquet); extensions stay off and the configuration stays locked.

Why this works with external access off: the views never read files at query time. ingest
loads every event into a table first (the cache file or memory; Parquet datasets into a
temporary table), and the cache is attached ``READ_ONLY`` once loading is done, so the views
are over tables of databases that are already attached. (The other way, ``allowed_paths`` for
every log file, would also let a query read those files raw, and would have to be kept in step
with discovery.)
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading

import duckdb

from dslogs.analyzer.core.errors import Interrupted, UsageError, one_line

_QUERY_TYPES = {"SELECT", "EXPLAIN"}
# whitespace and comments, as DuckDB's parser skips them
_GAP = r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
# EXPLAIN [ANALYZE | ANALYSE] [(option, ...)] in front of the statement it explains
_EXPLAIN_PREFIX = re.compile(
    _GAP + r"EXPLAIN\b" + _GAP + r"(?:ANALY[SZ]E\b" + _GAP + r")?"
    + r"""(?:\((?:[^()'"]|'[^']*'|"[^"]*")*\)""" + _GAP + r")?",
    re.IGNORECASE | re.DOTALL,
)


def _type_name(statement) -> str:
    return str(statement.type).rsplit(".", 1)[-1].upper()


def check_statement(con: duckdb.DuckDBPyConnection, sql: str, allow_files: bool = False) -> None:
    """UsageError (one line) unless ``sql`` is exactly one statement of an allowed kind."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {one_line(exc, every_line=True, limit=500)}") from None
    if not statements:
        raise UsageError('empty SQL: try "SELECT stage, count(*) FROM events GROUP BY stage"')
    if len(statements) > 1:
        raise UsageError(f"one SQL statement per query, got {len(statements)}: run them one at a time")
    kind = _type_name(statements[0])
    if kind == "EXPLAIN":
        _check_explained(con, statements[0].query, allow_files)
        return
    if kind == "COPY":
        raise UsageError("dslogs query is read-only: a COPY statement is not allowed (ad hoc SQL writes no "
                         "file; write the result with --out FILE --format csv, json or jsonl)")
    if kind not in _QUERY_TYPES:
        raise UsageError(
            f"dslogs query is read-only: a {kind} statement is not allowed "
            f"(one SELECT over events, requests, sessions)"
        )


def _check_explained(con: duckdb.DuckDBPyConnection, sql: str, allow_files: bool) -> None:
    """EXPLAIN ANALYZE executes the statement it explains (``EXPLAIN ANALYZE CREATE TABLE``
    creates the table): the explained statement must pass the gate on its own. What cannot be
    split off and read as one statement is refused."""
    m = _EXPLAIN_PREFIX.match(sql)
    inner = sql[m.end():] if m else ""
    try:
        statements = con.extract_statements(inner) if inner.strip() else []
    except duckdb.Error:
        statements = []
    if len(statements) != 1:
        raise UsageError("dslogs query is read-only: EXPLAIN is allowed only in front of one SELECT "
                         "over events, requests, sessions")
    check_statement(con, inner, allow_files)


def lock_down(con: duckdb.DuckDBPyConnection, allow_files: bool = False) -> None:
    """Switch the connection to the sandbox (see the module docstring); cannot be undone, and a
    connection already locked stays as it is (a notebook runs many queries on one)."""
    if con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
        return
    if not allow_files:
        spill = con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
        if spill:
            # Sorting or joining beyond memory_limit still spills (allowed before the switch).
            quoted = "'" + str(spill).replace("'", "''") + "'"
            con.execute(f"SET allowed_directories = [{quoted}]")
        con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    con.execute("SET lock_configuration = true")


class SignalStop:
    """SIGINT/SIGTERM handler for a query: while reading the logs it raises ``Interrupted`` at
    once; once ``con`` is set it asks DuckDB to stop the running statement (``interrupt()``),
    and ``run_user_query`` turns the interrupted statement into ``Interrupted``. Nothing is
    written by a query, and the cache is attached read-only, so it stays as it was."""

    def __init__(self):
        self.signum: int | None = None
        self.con: duckdb.DuckDBPyConnection | None = None

    def __call__(self, signum, frame) -> None:
        self.signum = signum
        if self.con is None:
            raise Interrupted(signum, "the query")
        self.con.interrupt()

    def raise_if_stopped(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum, "the query")


@contextlib.contextmanager
def stop_on_signals():
    """A ``SignalStop`` installed for SIGINT and SIGTERM for the block (main thread only: Python
    runs signal handlers there), the previous handlers back after it."""
    stop = SignalStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def user_cursor(db, sql: str, allow_files: bool = False, params: list | dict | None = None):
    """One user statement over the opened logs, in the sandbox: its DuckDB cursor (``dslogs
    query`` fetches rows from it, the Python API a DataFrame)."""
    from dslogs.analyzer.ingest.logs import execute

    if not sql or not sql.strip():
        raise UsageError('empty SQL: try "SELECT stage, count(*) FROM events GROUP BY stage"')
    check_statement(db.con, sql, allow_files)
    lock_down(db.con, allow_files)
    return execute(db, sql, params)


def run_user_query(db, sql: str, allow_files: bool = False, stop: SignalStop | None = None,
                   params: list | dict | None = None):
    """One user statement over the opened logs, in the sandbox. Returns a QueryResult; with
    ``stop``, a signal ends the statement as ``Interrupted``."""
    from dslogs.analyzer.ingest.logs import fetch_result

    if stop is None:
        return fetch_result(user_cursor(db, sql, allow_files, params))
    stop.raise_if_stopped()
    stop.con = db.con
    try:
        result = fetch_result(user_cursor(db, sql, allow_files, params))
    except UsageError:  # DuckDB's "Interrupted!" arrives as an SQL error
        stop.raise_if_stopped()
        raise
    stop.raise_if_stopped()
    return result
