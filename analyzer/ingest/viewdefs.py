"""The views over the store: ``events`` (the run's files in the window, plus compacted datasets),
``requests`` and ``sessions`` (their SQL: ``analyzer/ingest/views/*.sql``), and the cached derived
tables (requests_all, sessions_all) reused while the run's files are unchanged.
"""

from __future__ import annotations

from dslogs.analyzer.ingest import cache as cache_mod
from dslogs.analyzer.ingest import session_tables
from dslogs.analyzer.ingest.columns import EVENT_COLUMNS, sql_literal
from dslogs.analyzer.ingest.filestats import FileStats
from dslogs.analyzer.ingest.views import view_sql


def derived_key(run: list[FileStats], lo, hi) -> str | None:
    """What the cached requests/sessions tables were computed from: the run's files, no window."""
    if lo is not None or hi is not None or not run:
        return None
    import hashlib

    ids = ",".join(
        f"{f.file_id}:{f.size}:{f.mtime_ns}" for f in sorted(run, key=lambda f: f.file_id)
    )
    return hashlib.sha1(f"{cache_mod.SCHEMA_VERSION}|{ids}".encode()).hexdigest()


def refresh_derived(
    con, store: str, run, lo, hi, changed: bool, materialize: bool, readonly: bool = False
) -> bool:
    """Keep requests and sessions of this file set in the cache (they cost more than a query):
    built by a run that materialises anyway, or by the first run that finds the files unchanged.
    True when the cached tables match this run."""
    key = derived_key(run, lo, hi)
    if key is None:
        return False
    if session_tables.stored_derived_key(con, store) == key:
        return True
    if readonly or (changed and not materialize):
        return False
    define_views(con, store, run, lo, hi, materialize=False, derived=False)
    con.execute(f"CREATE OR REPLACE TABLE {store}.requests_all AS SELECT * FROM requests")
    con.execute(
        f"CREATE OR REPLACE TABLE {store}.sessions_all AS {view_sql('sessions').replace('FROM requests', f'FROM {store}.requests_all')}"
    )
    con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES ('derived_key', ?)", [key])
    session_tables.drop_all(con, store)  # of the former file set: built again when needed
    for name in ("sessions", "requests", "events"):
        con.execute(f"DROP VIEW IF EXISTS {name}")
    return True


# -- keeping the derived tables in step with new and dropped rows --------------------------------
#
# requests_all/sessions_all hold the views over every cached file (derived_key over all
# records). When rows are added (a grown file's tail, a new file) or dropped, only the rows they
# can change are computed again: each request and session row is a function of its session's
# events (requests without a session: of all of those, one turn_index sequence), and a
# session's RSS slope of its process's samples between its first and last event. So the touched
# sessions are those with an event among the rows, and those whose (host, pid) and time span
# take in a process sample among them; their rows are deleted and computed again from the
# store's events, by the same SQL. Then the key is the one of the records as they now are.


def derived_in_sync(con, store: str) -> bool:
    """True when the cache's derived tables hold the views over every cached file."""
    if store == "memory":
        return False
    stored = session_tables.stored_derived_key(con, store)
    return stored is not None and stored == _records_key(con, store)


def _records_key(con, store: str) -> str | None:
    files = con.execute(f"SELECT file_id, size, mtime_ns FROM {store}.files").fetchall()
    return derived_key(
        [FileStats(fid, "", "", size, mtime, None) for fid, size, mtime in files], None, None
    )


def touch_derived(con, store: str, file_ids: list[int]) -> None:
    """Add the sessions the rows of ``file_ids`` touch to _dslogs_touched (and whether they hold
    a request without a session to _dslogs_touched_free); before those rows are dropped, after
    they are read."""
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _dslogs_touched (session_id VARCHAR)")
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _dslogs_touched_free (n BIGINT)")
    con.execute(
        "CREATE TEMP TABLE IF NOT EXISTS _dslogs_touched_span (t0 TIMESTAMPTZ, t1 TIMESTAMPTZ)"
    )
    if not file_ids:
        return
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _dslogs_touched_rows AS SELECT session_id, request_id, stage, rss_mb, "
        f"host, pid, ts FROM {store}.events WHERE list_contains(?, file_id)", [file_ids])  # fmt: skip
    con.execute(
        "INSERT INTO _dslogs_touched_free SELECT count(*) FROM _dslogs_touched_rows "
        "WHERE session_id IS NULL AND request_id IS NOT NULL"
    )
    con.execute(
        "INSERT INTO _dslogs_touched_span SELECT min(ts), max(ts) FROM _dslogs_touched_rows"
    )
    con.execute(
        "INSERT INTO _dslogs_touched SELECT DISTINCT session_id FROM _dslogs_touched_rows WHERE session_id IS NOT NULL"
    )
    # the sessions whose RSS slope takes in one of the rows' process samples
    con.execute(
        f"INSERT INTO _dslogs_touched SELECT DISTINCT s.session_id FROM {store}.sessions_all AS s "
        "JOIN (SELECT host, pid, min(ts) AS t0, max(ts) AS t1 FROM _dslogs_touched_rows "
        "      WHERE stage = 'process_sample' AND rss_mb IS NOT NULL GROUP BY host, pid) AS p "
        "ON p.host = s.host AND p.pid = s.pid AND s.first_ts <= p.t1 AND s.last_ts >= p.t0"
    )
    con.execute("DROP TABLE _dslogs_touched_rows")


def update_derived(con, store: str) -> None:
    """Compute the rows of the touched sessions (touch_derived) again from the store's events
    and key the tables by the records as they now are."""
    free = con.execute("SELECT coalesce(sum(n), 0) > 0 FROM _dslogs_touched_free").fetchall()[0][0]
    old_key = session_tables.stored_derived_key(con, store)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _dslogs_touched_ids AS SELECT DISTINCT session_id FROM _dslogs_touched"
    )
    # Their events lie in the rows' span or, for those read before, in the touched sessions'
    # spans in sessions_all (the requests' without a session in requests_all): a ts range the
    # scan prunes by the events' zonemaps (every stored event has a ts: the reader drops those
    # without one as bad lines).
    free_span = (
        f"UNION ALL SELECT min(start_ts), max(end_ts) FROM {store}.requests_all WHERE session_id IS NULL"
        if free
        else ""
    )
    lo, hi = con.execute(
        "SELECT min(t0), max(t1) FROM (SELECT t0, t1 FROM _dslogs_touched_span UNION ALL "
        f"SELECT min(first_ts), max(last_ts) FROM {store}.sessions_all SEMI JOIN _dslogs_touched_ids "
        f"USING (session_id) {free_span})"
    ).fetchall()[0]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _dslogs_grow_events AS SELECT * FROM {store}.events "
        "WHERE ts >= $lo AND ts <= $hi AND (session_id IN (SELECT session_id FROM _dslogs_touched_ids)"
        + (" OR (session_id IS NULL AND request_id IS NOT NULL))" if free else ")"),
        {"lo": lo, "hi": hi},
    )
    # The samples their RSS slopes read: every process sample (whatever its session) of each
    # session's (host, pid) as sessions.sql takes it, within their span (a slope over a span
    # is the same without the samples outside it).
    span = con.execute(
        "SELECT min(ts), max(ts) FROM _dslogs_grow_events WHERE session_id IS NOT NULL"
    ).fetchall()[0]
    con.execute(
        f"INSERT INTO _dslogs_grow_events SELECT * FROM {store}.events WHERE stage = 'process_sample' "
        "AND ts >= $t0 AND ts <= $t1 "
        "AND NOT coalesce(session_id IN (SELECT session_id FROM _dslogs_touched_ids), false) "
        + ("AND NOT (session_id IS NULL AND request_id IS NOT NULL) " if free else "")
        + "AND (host, pid) IN (SELECT min(host), min(pid) FROM _dslogs_grow_events "
        "WHERE session_id IS NOT NULL GROUP BY session_id)",
        {"t0": span[0], "t1": span[1]},
    )
    _derive_temp(con, "_dslogs_grow")
    gone = "session_id IN (SELECT session_id FROM _dslogs_touched_ids)"
    con.execute(
        f"DELETE FROM {store}.requests_all WHERE {gone}"
        + (" OR session_id IS NULL" if free else "")
    )
    con.execute(f"INSERT INTO {store}.requests_all SELECT * FROM _dslogs_grow_requests")
    con.execute(f"DELETE FROM {store}.sessions_all WHERE {gone}")
    con.execute(f"INSERT INTO {store}.sessions_all SELECT * FROM _dslogs_grow_sessions")
    new_key = _records_key(con, store)
    con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES ('derived_key', ?)", [new_key])
    # the stored per-session metric tables: the same sessions' rows, from the same events
    session_tables.update(con, store, old_key, new_key)
    for t in (
        "touched",
        "touched_free",
        "touched_span",
        "touched_ids",
        "grow_events",
        "grow_requests",
        "grow_sessions",
    ):
        con.execute(f"DROP TABLE IF EXISTS _dslogs_{t}")


def define_views(
    con,
    store: str,
    run: list[FileStats],
    lo,
    hi,
    materialize: bool,
    derived: bool | None,
    with_dataset: bool = False,
) -> None:
    """The views events (this run's files in the window, and compacted datasets), requests and
    sessions: temporary tables when ``materialize``, the cached tables when ``derived``."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _dslogs_run_files (file_id INTEGER PRIMARY KEY, source_file VARCHAR)"
    )
    if run:
        con.execute(
            "INSERT INTO _dslogs_run_files SELECT unnest(CAST(? AS INTEGER[])), unnest(CAST(? AS VARCHAR[]))",
            [[f.file_id for f in run], [f.display for f in run]],
        )
    where = []
    if lo is not None:
        where.append(f"e.ts >= {sql_literal(lo.isoformat())}::TIMESTAMPTZ")
    if hi is not None:
        where.append(f"e.ts < {sql_literal(hi.isoformat())}::TIMESTAMPTZ")
    cols = ", ".join("f.source_file" if c == "source_file" else f"e.{c}" for c in EVENT_COLUMNS)
    cond = " WHERE " + " AND ".join(where) if where else ""
    sql = f"SELECT {cols} FROM {store}.events AS e JOIN _dslogs_run_files AS f ON f.file_id = e.file_id{cond}"
    if with_dataset:
        sql += (
            f" UNION ALL SELECT {', '.join(EVENT_COLUMNS)} FROM _dslogs_dataset_events AS e{cond}"
        )
    con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {sql}")
    if not derived and not with_dataset and window_from_derived(con, store, run, lo, hi):
        kind = "TABLE" if materialize else "VIEW"
        for table in ("requests", "sessions"):
            con.execute(f"CREATE OR REPLACE TEMP {kind} {table} AS {_window_select(table, store)}")
        return
    if derived:
        con.execute(f"CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM {store}.requests_all")
        con.execute(f"CREATE OR REPLACE TEMP VIEW sessions AS SELECT * FROM {store}.sessions_all")
        return
    kind = "TABLE" if materialize else "VIEW"
    con.execute(f"CREATE OR REPLACE TEMP {kind} requests AS {view_sql('requests')}")
    con.execute(f"CREATE OR REPLACE TEMP {kind} sessions AS {view_sql('sessions')}")


# -- a window over the cached derived tables ---------------------------------------------------
#
# requests and sessions of a window equal the unwindowed ones (requests_all, sessions_all) for
# every session whose events all lie inside the window: each row is a function of its session's
# events alone (turn_index numbers a session's requests; a session's RSS slope is exact integer
# arithmetic over its process's samples between its first and last event, so it does not depend
# on where the process's samples start). Only the sessions the window's edges cut (and requests
# without a session) are computed again, from the window's events: a sliding window costs the
# copy of the stored rows plus its edges, not a recomputation of every request.


def _window_select(table: str, store: str) -> str:
    """``table`` (requests or sessions) of the window: the stored rows of the sessions inside it,
    then the edge sessions' rows computed from the window's events."""
    return (
        f"SELECT t.* FROM {store}.{table}_all AS t SEMI JOIN _dslogs_inner USING (session_id) "
        f"UNION ALL SELECT * FROM _dslogs_edge_{table}"
    )


def window_from_derived(con, store: str, run: list[FileStats], lo, hi) -> bool:
    """Define _dslogs_inner (sessions wholly inside [lo, hi)) and the edge sessions' requests and
    sessions computed from the window's events, when the cache's derived tables can stand in for
    the rest: they were built from a set of cached files holding this run's, and every file of
    that set outside this run has no event in the window. False (nothing defined) otherwise."""
    if store == "memory" or (lo is None and hi is None) or not run:
        return False
    stored = session_tables.stored_derived_key(con, store)
    if stored is None:
        return False
    files = con.execute(
        f"SELECT file_id, size, mtime_ns, first_ts, last_ts FROM {store}.files"
    ).fetchall()
    built = [FileStats(fid, "", "", size, mtime, None) for fid, size, mtime, _, _ in files]
    # the derived tables were built from every cached file (the last unwindowed run's set)
    if derived_key(built, None, None) != stored:
        return False
    ids = {f.file_id for f in run}
    if not ids <= {f.file_id for f in built}:
        return False
    for fid, _, _, first, last in files:
        if fid in ids or first is None:
            continue
        if (hi is None or first < hi) and (lo is None or last >= lo):
            return False  # a file outside this run has events in the window: its sessions differ
    params = {"lo": lo, "hi": hi}
    inside = "($lo::TIMESTAMPTZ IS NULL OR first_ts >= $lo) AND ($hi::TIMESTAMPTZ IS NULL OR last_ts < $hi)"
    touch = "($hi::TIMESTAMPTZ IS NULL OR first_ts < $hi) AND ($lo::TIMESTAMPTZ IS NULL OR last_ts >= $lo)"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _dslogs_inner AS SELECT session_id FROM {store}.sessions_all WHERE {inside}",
        params,
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _dslogs_edge AS SELECT session_id FROM {store}.sessions_all "
        f"WHERE {touch} AND NOT ({inside})",
        params,
    )
    # The window's events of the edge sessions, of requests without a session, and the process
    # samples the edge sessions' RSS slopes read (of the processes they ran in). Most events are
    # sampler lines, so they are not all copied: the sessions cut by ``lo`` have their events in
    # [lo, the last of their last_ts], those cut only by ``hi`` in [the first of their first_ts,
    # hi), ranges the scan prunes by the events' ts zonemaps (a sample elsewhere in a process's
    # life does not change a slope over the session's time range).
    ranges = con.execute(
        "SELECT max(last_ts) FILTER (WHERE $lo::TIMESTAMPTZ IS NOT NULL AND first_ts < $lo), "
        "min(first_ts) FILTER (WHERE $lo::TIMESTAMPTZ IS NULL OR first_ts >= $lo) "
        f"FROM {store}.sessions_all SEMI JOIN _dslogs_edge USING (session_id)",
        {"lo": lo},
    ).fetchall()[0]
    parts = []
    if ranges[0] is not None:  # cut by lo
        parts.append(("ts >= $lo AND ts <= $a_last", "first_ts < $lo"))
    if ranges[1] is not None:  # cut by hi only
        parts.append(("ts >= $b_first AND ($hi::TIMESTAMPTZ IS NULL OR ts < $hi)",
                      "($lo::TIMESTAMPTZ IS NULL OR first_ts >= $lo)"))  # fmt: skip
    bound = {**params, "a_last": ranges[0], "b_first": ranges[1]}
    selects = [
        "SELECT * FROM events WHERE session_id IS NULL AND request_id IS NOT NULL",
        *(
            f"SELECT * FROM events WHERE {span} AND session_id IN (SELECT session_id FROM "
            f"{store}.sessions_all SEMI JOIN _dslogs_edge USING (session_id) WHERE {which})"
            for span, which in parts
        ),
    ]
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _dslogs_edge_events AS " + " UNION ALL ".join(selects),
        {k: v for k, v in bound.items() if any(f"${k}" in q for q in selects)},
    )
    for span, _ in parts:
        con.execute(
            f"INSERT INTO _dslogs_edge_events SELECT * FROM events WHERE {span} "
            "AND stage = 'process_sample' AND session_id IS NULL AND request_id IS NULL "
            "AND (host, pid) IN (SELECT DISTINCT host, pid FROM _dslogs_edge_events "
            "WHERE session_id IS NOT NULL)",
            {k: v for k, v in bound.items() if f"${k}" in span},
        )
    _derive_temp(con, "_dslogs_edge")
    return True


def _derive_temp(con, prefix: str) -> None:
    """Temp tables ``{prefix}_requests`` and ``{prefix}_sessions``, by the views' own SQL, from
    the events in ``{prefix}_events`` (a grow's touched sessions, a window's edge sessions)."""
    requests = view_sql("requests").replace("FROM events", f"FROM {prefix}_events")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {prefix}_requests AS {requests}")
    sessions = (
        view_sql("sessions")
        .replace("FROM events", f"FROM {prefix}_events")
        .replace("FROM requests", f"FROM {prefix}_requests")
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {prefix}_sessions AS {sessions}")
