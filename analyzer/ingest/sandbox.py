"""Ad hoc SQL (``dslogs query``) runs read-only by default: a query must never change the logs or the cache.

What the user's SQL can reach, in two layers:

1. The statement: exactly one, and a query (``SELECT``, ``WITH``, ``FROM``, ``DESCRIBE``,
   ``SHOW``, ``SUMMARIZE``, ``EXPLAIN``). Writes, ``ATTACH``/``DETACH``, ``SET``, ``PRAGMA``,
   ``CALL``, ``INSTALL``/``LOAD`` and several statements are refused with one line before DuckDB
   runs anything. ``--allow-files`` adds ``COPY`` (to export a result).
2. The connection, after the logs are loaded: ``enable_external_access=false`` (no file, URL
   or database outside what is already open; only the spill folder stays allowed),
   ``autoinstall_known_extensions=false``, ``autoload_known_extensions=false`` (no extension
   reaches for the network or the disk), then ``lock_configuration=true`` so the query cannot
   turn any of it back on. ``--allow-files`` keeps external access on (read_json, read_csv,
   COPY ... TO); extensions stay off and the configuration stays locked.

Why this works with external access off: the views never read files at query time. ingest
loads every event into a table first (the cache file or memory; Parquet datasets into a
temporary table), and the cache is attached ``READ_ONLY`` once loading is done, so the views
are over tables of databases that are already attached. (The other way, ``allowed_paths`` for
every log file, would also let a query read those files raw, and would have to be kept in step
with discovery.)
"""

from __future__ import annotations

import duckdb

from analyzer.core.errors import UsageError

_QUERY_TYPES = {"SELECT", "EXPLAIN"}
_FILE_TYPES = {"COPY"}


def _type_name(statement) -> str:
    return str(statement.type).rsplit(".", 1)[-1].upper()


def check_statement(con: duckdb.DuckDBPyConnection, sql: str, allow_files: bool = False) -> None:
    """UsageError (one line) unless ``sql`` is exactly one statement of an allowed kind."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise UsageError(f"SQL error: {text[:500]}") from None
    if not statements:
        raise UsageError('empty SQL: try "SELECT stage, count(*) FROM events GROUP BY stage"')
    if len(statements) > 1:
        raise UsageError(f"one SQL statement per query, got {len(statements)}: run them one at a time")
    kind = _type_name(statements[0])
    allowed = _QUERY_TYPES | (_FILE_TYPES if allow_files else set())
    if kind not in allowed:
        hint = "; --allow-files permits COPY" if kind in _FILE_TYPES else ""
        raise UsageError(
            f"dslogs query is read-only: a {kind} statement is not allowed "
            f"(one SELECT over events, requests, sessions{hint})"
        )


def lock_down(con: duckdb.DuckDBPyConnection, allow_files: bool = False) -> None:
    """Switch the connection to the sandbox (see the module docstring); cannot be undone."""
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


def run_user_query(db, sql: str, allow_files: bool = False):
    """One user statement over the opened logs, in the sandbox. Returns a QueryResult."""
    from analyzer.ingest.logs import run_query

    if not sql or not sql.strip():
        raise UsageError('empty SQL: try "SELECT stage, count(*) FROM events GROUP BY stage"')
    check_statement(db.con, sql, allow_files)
    lock_down(db.con, allow_files)
    return run_query(db, sql)
