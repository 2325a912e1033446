"""The per-session metric tables kept in the cache: ``<query>_all``, the rows of
a session-partitioned metric query over every cached file, beside requests_all/sessions_all.

A window that takes its requests and sessions from the derived tables
(``viewdefs.window_from_derived``) takes such a query's rows of the sessions wholly inside it
(``_dslogs_inner``) from ``<query>_all`` and runs the query only over the edge sessions' events
and requests (``_dslogs_edge_*``), in the query's own ORDER BY: each row is a function of its own
session's events, the same ones inside the window as in the whole cache (viewdefs' comment on
the window). A run without a window over the derived tables reads ``<query>_all`` whole.

Each table is keyed in the cache's meta table (``session_table:<query>``) by the derived tables'
key and the query's text: a new file set (refresh_derived), SCHEMA_VERSION or an edited query
makes it stale. update_derived recomputes the rows of the sessions it touches, as it does
requests_all's. They are built lazily, by the first ``analyze`` that computes its metrics from
the derived tables (``metric_sql``, at a result-cache miss): that run computes these queries over
the derived tables anyway, so building costs it the write of their rows, and a run that never
computes metrics (``dslogs query``, a result-cache hit) never pays for them.

One text per query: the variants run queries/<name>.sql unchanged under CTEs named events,
requests and sessions (``_under``), which shadow the views for every reference in the query
(FROM, JOIN, subqueries), where a text substitution finds only the spellings it looks for.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from functools import cache

from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.ingest.columns import sql_literal

# The metric queries whose rows are one per session (session_id NOT NULL, none without one), each
# a function of that session's events (or requests, or sessions row) alone, with no parameter;
# each ends with ORDER BY output columns ending in session_id (``_order``).
SESSION_QUERIES: tuple[str, ...] = (
    "decode_per_session",  # requests
    "generate_params_per_session",  # requests
    "gpu_wait_per_session",  # requests
    "kv_cache_per_session",  # prefill/kv_cache events of the session
    "memory_per_session",  # gpu_memory events of the session
    "prefill_growth_per_session",  # requests (turn_index: the session's own numbering)
)
# Not these: session_summary (a sort of the sessions view, itself taken from sessions_all: its
# SQL costs 0.05 CPU-s at 92 k sessions, converting its rows 0.55 s; a stored table saves none),
# oom_per_session (a session's num_ooms rises count only in a process that served no
# request with inflight > 1 in the window, another session's; rows without a session, per host),
# request_memory_deltas (pairs of requests of different sessions), slowest_sessions (the
# $report_slowest_sessions slowest of all sessions), session_requests (a drill-down: $session_ids,
# $report_detail_requests).

_META = "session_table:"
_COMMENT = re.compile(r"--[^\n]*")
_ORDER = re.compile(r"\bORDER\s+BY\s+([A-Za-z0-9_,\s]+?)\s*;?\s*\Z", re.IGNORECASE)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\s+(ASC|DESC))?$", re.IGNORECASE)


@cache
def _order(name: str) -> str:
    """The query's final ORDER BY (output columns, ending in session_id: a total order)."""
    sql = _COMMENT.sub("", load_query(name))
    m = _ORDER.search(sql)
    keys = [k.strip() for k in m.group(1).split(",")] if m else []
    if not keys or not all(_KEY.match(k) for k in keys) or keys[-1].split()[0] != "session_id":
        raise ValueError(f"{name}.sql: a session query ends with ORDER BY <columns>, session_id")
    return ", ".join(keys)


def _under(name: str, events: str, requests: str, sessions: str) -> str:
    """queries/<name>.sql over other tables standing for the views events, requests, sessions."""
    return (
        f"WITH events AS NOT MATERIALIZED (SELECT * FROM {events}), "
        f"requests AS NOT MATERIALIZED (SELECT * FROM {requests}), "
        f"sessions AS NOT MATERIALIZED (SELECT * FROM {sessions}) "
        # a newline after the query: it may end with a comment line
        f"SELECT * FROM (\n{load_query(name).strip().rstrip(';')}\n)"
    )


def _tag(derived_key: str, name: str) -> str:
    return hashlib.sha1(f"{derived_key}|{load_query(name)}".encode()).hexdigest()


def stored_derived_key(con, store: str) -> str | None:
    """The key the cache's derived tables were built for (meta 'derived_key'), or None."""
    rows = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'derived_key'").fetchall()
    return rows[0][0] if rows else None


def in_step(con, store: str, derived_key: str | None) -> list[str]:
    """The session queries whose stored table holds the derived tables of ``derived_key``."""
    if derived_key is None:
        return []
    tags = dict(con.execute(
        f"SELECT key, value FROM {store}.meta WHERE starts_with(key, '{_META}')").fetchall())  # fmt: skip
    return [n for n in SESSION_QUERIES if tags.get(_META + n) == _tag(derived_key, n)]


def build(con, store: str, names, derived_key: str) -> None:
    """``<name>_all`` of each query in ``names`` over the cache's events and derived tables."""
    for name in names:
        sql = _under(name, f"{store}.events", f"{store}.requests_all", f"{store}.sessions_all")
        con.execute(f"CREATE OR REPLACE TABLE {store}.{name}_all AS {sql}")
        con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES (?, ?)",
                    [_META + name, _tag(derived_key, name)])  # fmt: skip


def drop_all(con, store: str) -> None:
    """Drop every stored session table (the derived tables were built again)."""
    for name in SESSION_QUERIES:
        con.execute(f"DROP TABLE IF EXISTS {store}.{name}_all")
    con.execute(f"DELETE FROM {store}.meta WHERE starts_with(key, '{_META}')")


def update(con, store: str, old_key: str, new_key: str, prefix: str = "_dslogs_grow") -> None:
    """After viewdefs.update_derived: the rows of the touched sessions (``_dslogs_touched_ids``)
    computed again from ``{prefix}_events``/``_requests``/``_sessions`` (every event of theirs),
    in each table that held the derived tables of ``old_key``; the others dropped."""
    current = in_step(con, store, old_key)
    for name in SESSION_QUERIES:
        if name not in current:
            con.execute(f"DROP TABLE IF EXISTS {store}.{name}_all")
            con.execute(f"DELETE FROM {store}.meta WHERE key = ?", [_META + name])
            continue
        con.execute(f"DELETE FROM {store}.{name}_all "
                    "WHERE session_id IN (SELECT session_id FROM _dslogs_touched_ids)")  # fmt: skip
        sql = _under(name, f"{prefix}_events", f"{prefix}_requests", f"{prefix}_sessions")
        con.execute(f"INSERT INTO {store}.{name}_all SELECT * FROM ({sql}) "
                    "WHERE session_id IN (SELECT session_id FROM _dslogs_touched_ids)")  # fmt: skip
        con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES (?, ?)",
                    [_META + name, _tag(new_key, name)])  # fmt: skip


def _window_sql(name: str, store: str) -> str:
    """The query's rows in a window over the derived tables: the stored rows of the sessions
    wholly inside it, then the query over the edge sessions, in its ORDER BY."""
    edge = _under(name, "_dslogs_edge_events", "_dslogs_edge_requests", "_dslogs_edge_sessions")
    return (
        f"SELECT * FROM (SELECT t.* FROM {store}.{name}_all AS t SEMI JOIN _dslogs_inner "
        f"USING (session_id) UNION ALL SELECT * FROM ({edge}) "
        f"WHERE session_id IN (SELECT session_id FROM _dslogs_edge)) ORDER BY {_order(name)}"
    )


def _whole_sql(name: str, store: str) -> str:
    return f"SELECT * FROM {store}.{name}_all ORDER BY {_order(name)}"


def _mode(con) -> str | None:
    """"window" when this connection's requests/sessions are a window over the cache's derived
    tables (window_from_derived), "whole" when they are those tables; None otherwise."""
    temp = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name IN "
        "('_dslogs_inner', '_dslogs_edge_requests', '_dslogs_edge_sessions', '_dslogs_edge_events')"
    ).fetchall()}  # fmt: skip
    if len(temp) == 4:
        return "window"
    views = dict(con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE temporary AND view_name IN ('requests', 'sessions')"
    ).fetchall())  # fmt: skip
    if "requests_all" in views.get("requests", "") and "sessions_all" in views.get("sessions", ""):
        return "whole"
    return None


def metric_sql(con, db, names) -> dict[str, str]:
    """The SQL each of ``names`` (metric queries) runs as on this connection: the stored rows
    where they can stand in (a window over the derived tables, or those tables themselves), the
    missing tables built first when ``db`` (the run's LogDB) can write the cache; {} when none."""
    wanted = [n for n in SESSION_QUERIES if n in names]
    store = "dslogs_cache"
    if not wanted or (mode := _mode(con)) is None:
        return {}
    key = stored_derived_key(con, store)
    ready = in_step(con, store, key)
    missing = [n for n in wanted if n not in ready]
    if missing and getattr(db, "cache_path", None) is not None:
        if _build_missing(con, db.cache_path, store, missing, key):
            ready = in_step(con, store, key)
    to_sql = _window_sql if mode == "window" else _whole_sql
    return {n: to_sql(n, store) for n in wanted if n in ready}


def _build_missing(con, path, store: str, names, key: str | None) -> bool:
    """Build ``names``' tables in the cache, reattached for writing for the moment; False when it
    cannot be written now or its derived tables changed."""
    with writable_moment(con, path, store) as writable:
        if not writable or key is None or stored_derived_key(con, store) != key:
            return False  # held, or changed meanwhile by another process: this run's window is not of it
        build(con, store, names, key)
        con.execute(f"CHECKPOINT {store}")
        return True


@contextlib.contextmanager
def writable_moment(con, path, store: str) -> Iterator[bool]:
    """The cache file attached as ``store`` for writing for the moment of the with-block, which
    gets False when another process holds it. Other dslogs processes read the cache while this one
    runs, so it is attached read-only the rest of the time, and again after the block."""
    import duckdb

    if not (os.access(os.path.dirname(os.path.abspath(path)), os.W_OK) and os.access(path, os.W_OK)):
        yield False  # DuckDB's .wal could not be written beside it: kept read-only
        return
    quoted = sql_literal(path)
    con.execute(f"DETACH {store}")
    try:
        try:
            con.execute(f"ATTACH {quoted} AS {store}")
        except duckdb.Error:  # another process holds it
            yield False
            return
        yield True
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"DETACH {store}")
        _attach_read_only(con, quoted, store)


def _attach_read_only(con, quoted: str, store: str, wait_s: float = 60.0) -> None:
    """Attach the cache read-only again (the run's views read it). Another dslogs that took it
    for writing in the moment it was detached holds it for its ingest: waited for, then shared."""
    import time

    import duckdb

    deadline = time.monotonic() + wait_s
    while True:
        try:
            con.execute(f"ATTACH {quoted} AS {store} (READ_ONLY)")
            return
        except duckdb.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
