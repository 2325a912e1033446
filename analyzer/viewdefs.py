"""The views over the store: ``events`` (the run's files in the window, plus compacted datasets),
``requests`` and ``sessions`` (their SQL: ``analyzer/views/*.sql``), and the cached derived
tables (requests_all, sessions_all) reused while the run's files are unchanged.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from analyzer import cache as cache_mod
from analyzer.catalogue import FileStats
from analyzer.columns import EVENT_COLUMNS, sql_literal

VIEWS_DIR = Path(__file__).resolve().parent / "views"


@cache
def view_sql(name: str) -> str:
    return (VIEWS_DIR / f"{name}.sql").read_text(encoding="utf-8")


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
    stored = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'derived_key'").fetchall()
    if stored and stored[0][0] == key:
        return True
    if readonly or (changed and not materialize):
        return False
    define_views(con, store, run, lo, hi, materialize=False, derived=False)
    con.execute(f"CREATE OR REPLACE TABLE {store}.requests_all AS SELECT * FROM requests")
    con.execute(
        f"CREATE OR REPLACE TABLE {store}.sessions_all AS {view_sql('sessions').replace('FROM requests', f'FROM {store}.requests_all')}"
    )
    con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES ('derived_key', ?)", [key])
    for name in ("sessions", "requests", "events"):
        con.execute(f"DROP VIEW IF EXISTS {name}")
    return True


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
        con.executemany(
            "INSERT INTO _dslogs_run_files VALUES (?, ?)", [(f.file_id, f.display) for f in run]
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
    if derived:
        con.execute(f"CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM {store}.requests_all")
        con.execute(f"CREATE OR REPLACE TEMP VIEW sessions AS SELECT * FROM {store}.sessions_all")
        return
    kind = "TABLE" if materialize else "VIEW"
    con.execute(f"CREATE OR REPLACE TEMP {kind} requests AS {view_sql('requests')}")
    con.execute(f"CREATE OR REPLACE TEMP {kind} sessions AS {view_sql('sessions')}")
