"""Reuse of a previous ``analyze``'s report model from the cache file (warm runs).

Without it a warm ``analyze`` over logs the cache already holds would recompute every metric query, the
rules and the model: several times a bare scan of the logs. The model is a pure function of

- the events of this run: the run's cached files (ids, names as shown, sizes, mtimes; a file
  that changed or grew gets a new id, so appending a line changes the key), the window and the
  time zone (``open_logs`` already fingerprints the files);
- the code that turns them into a model: dslogs' version, the cache's ``SCHEMA_VERSION``, and a
  hash of ``queries/*.sql``, ``analyzer/ingest/views/*.sql`` and ``analyzer/*.py`` (an edited query or
  rule in a checkout is new code);
- the thresholds (every value: they feed query parameters, rules and the checklist);
- the stable part of the ingest block (bad lines, skipped files: the ``bad_lines`` rule reads it);
- the one input that moves with the clock: ``future_events`` (naive timestamps ahead of *now*),
  recomputed on every run when there are naive events at all.

``lookup`` builds that key and returns the stored model, with ``generated_at`` and ``ingest`` of
this run; ``store`` keeps a freshly built model under its key (the ``results`` table of the cache
file, the last ``KEEP`` models). Only the DuckDB engine with a cache does this: ``--no-cache``,
Spark and folders of compacted Parquet always compute. A model found is the model that the same
inputs build, so a warm report equals a cold one except ``generated_at`` and the ingest block's
run counters (``seconds``, ``read_files``, ``cached_files``), which describe this run.

With a window (``--since``), ``open_logs`` leaves requests/sessions as views
(``materialize=False``) and ``materialize_derived`` turns them into tables only when the model has
to be computed: a hit never pays for them.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from dslogs.analyzer import __version__
from dslogs.analyzer.ingest import sql_literal, writable_moment

RESULTS_VERSION = 2  # 2: the payload is report_to_json text
KEEP = 8  # models kept per cache file (a sliding window writes one per run; older ones go)
# Ingest keys that describe this run rather than the logs (never part of the key; never stale).
RUN_KEYS = ("seconds", "read_files", "cached_files", "renamed_files", "cache")
_ALIAS = "dslogs_cache"
_last: tuple[dict, str] | None = None  # the model lookup returned and its JSON text
# The model lookup found or store kept, its key, its cache file and the pages kept for it by
# variant (analyzer/render/page_cache.py: the HTML report rendered from it, compressed).
_pages: tuple[dict, str, Path, dict[str, bytes]] | None = None


@cache
def code_digest() -> str:
    """Hash of what turns events into a model: the SQL (metrics, views) and analyzer's modules."""
    from dslogs.analyzer.core.resources import queries_dir

    pkg = Path(__file__).resolve().parents[1]
    files = sorted(queries_dir().glob("*.sql")) + sorted(pkg.rglob("*.sql")) + sorted(pkg.rglob("*.py"))
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(pkg.parent).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _usable(db) -> bool:
    """A DuckDB run with its cache attached and no compacted Parquet (those are not fingerprinted)."""
    if getattr(db, "cache_path", None) is None:
        return False
    tables = db.con.execute(
        "SELECT count(*) FILTER (WHERE table_name = '_dslogs_run_files'), "
        "count(*) FILTER (WHERE table_name = '_dslogs_dataset_events') "
        "FROM duckdb_tables() WHERE temporary"
    ).fetchall()[0]
    return tables[0] == 1 and tables[1] == 0


def _future_events(db, thresholds: dict) -> list:
    """queries/future_events.sql now (it compares naive timestamps with the clock)."""
    if not (db.ingest.get("formats") or {}).get("legacy"):
        return []  # no naive timestamps: the query's answer does not depend on the clock
    from dslogs.analyzer.metrics.results import run_metric

    params = {
        "now": datetime.now(UTC).isoformat(),
        "report_future_margin_min": int(thresholds["report"]["future_margin_min"]),
    }
    return run_metric(db.con, "future_events", params)


def result_key(db, thresholds: dict) -> str | None:
    """The key of the model this run would build; None when results are not reused here."""
    if not _usable(db):
        return None
    from dslogs.analyzer.ingest import SCHEMA_VERSION

    files = db.con.execute(
        f"SELECT r.file_id, r.source_file, f.size, f.mtime_ns, f.rows, f.bad_lines "
        f"FROM _dslogs_run_files AS r JOIN {_ALIAS}.files AS f USING (file_id) ORDER BY r.file_id"
    ).fetchall()
    parts = {
        "results": RESULTS_VERSION,
        "dslogs": __version__,
        "schema": SCHEMA_VERSION,
        "code": code_digest(),
        "files": files,
        "window": db.window,
        "tz": db.tz,
        "thresholds": thresholds,
        "ingest": {k: v for k, v in db.ingest.items() if k not in RUN_KEYS},
        "future_events": _future_events(db, thresholds),
    }
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def lookup(db, key: str | None, ingest: dict) -> dict | None:
    """The model stored under ``key``, completed with this run's ``generated_at`` and ``ingest``
    (the model's ingest block of this run, as report.py builds it)."""
    global _last
    if key is None:
        return None
    import duckdb

    try:
        rows = db.con.execute(
            f"SELECT payload FROM {_ALIAS}.results WHERE key = ?", [key]
        ).fetchall()
    except duckdb.CatalogException:  # a cache no analyze has stored a model in yet
        return None
    if not rows:
        return None
    try:
        text = zlib.decompress(rows[0][0]).decode("utf-8", "surrogateescape")
        model = json.loads(text)
    except (zlib.error, ValueError):
        return None  # damaged: computed again (and stored again)
    model["generated_at"] = datetime.now().astimezone().isoformat(timespec="seconds")
    model["ingest"] = ingest
    dump = lambda v: json.dumps(v, ensure_ascii=False, indent=2, allow_nan=False)  # noqa: E731
    _last = (model, _filled(text, model, dump))
    _remember_pages(model, key, db.cache_path, _fetch_pages(db, key))
    return model


def _filled(text: str, model: dict, dump) -> str:
    """The stored text is report_to_json's with null in two top-level keys (the only lines
    indented by exactly two spaces that start with their names): filled with ``model``'s values
    (``dump``: one value as report_to_json writes it), it is the same text as rendering the whole
    model again, without rendering megabytes of sessions again."""
    for name in ("generated_at", "ingest"):
        value = dump(model[name])
        text = text.replace(
            f'\n  "{name}": null', f'\n  "{name}": ' + value.replace("\n", "\n  "), 1
        )
    return text


def added_to(model: dict, to_json=None) -> None:
    """``model`` (the one ``lookup`` returned or ``store`` kept) got a key computed after it from
    the same logs, thresholds and code as its key: its kept JSON text no longer holds, while a page
    kept for it still does. With ``to_json`` (the report's renderer) it is kept again under its key,
    so that a warm run finds it whole (nothing happens when another process holds the cache)."""
    global _last
    if _last is not None and _last[0] is model:
        _last = None
    if to_json is None or _pages is None or _pages[0] is not model:
        return
    import duckdb

    _, key, path, _ = _pages
    payload = dict(model)
    payload["generated_at"] = None
    payload["ingest"] = None
    text = to_json(payload)
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {sql_literal(path)} AS {_ALIAS}")
        con.execute(f"UPDATE {_ALIAS}.results SET payload = ? WHERE key = ?",
                    [zlib.compress(text.encode("utf-8", "surrogateescape"), 1), key])
        con.execute(f"CHECKPOINT {_ALIAS}")
    except duckdb.Error:
        return  # not kept: the next run computes the addition again
    finally:
        con.close()
    _last = (model, _filled(text, model, lambda v: to_json(v).rstrip("\n")))


def differs(model: dict) -> None:
    """``model`` (the one ``lookup`` returned) was changed into one its key does not store: neither
    its kept text nor its kept pages are its own."""
    global _last, _pages
    if _last is not None and _last[0] is model:
        _last = None
    if _pages is not None and _pages[0] is model:
        _pages = None


def json_text(model: dict) -> str | None:
    """``report_to_json(model)`` for the model ``lookup`` just returned or ``store`` just kept,
    while nobody has changed it (the CLI prints it as it is); None for any other model."""
    if _last is not None and _last[0] is model:
        return _last[1]
    return None


def store(db, key: str | None, model: dict, to_json) -> bool:
    """Keep ``model`` under ``key`` in the cache file, as its JSON text (``to_json``, the report's
    renderer); False when it cannot be written now.

    The cache is attached read-only once ingest is done (user SQL must not change it; other
    dslogs processes may read it meanwhile), so this reattaches it for writing for a moment; a
    lock held by another process just means this model is not kept."""
    global _last
    if key is None:
        return False

    payload = dict(model)
    payload["generated_at"] = None
    payload["ingest"] = None
    text = to_json(payload)
    # the CLI prints this model next: its text from the one just made (0.35 s of a 3.8 s windowed
    # run at 5 M events went into rendering it twice)
    _last = (model, _filled(text, model, lambda v: to_json(v).rstrip("\n")))
    blob = zlib.compress(text.encode("utf-8", "surrogateescape"), 1)
    with writable_moment(db.con, db.cache_path, _ALIAS) as writable:
        if not writable:
            return False
        con = db.con
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {_ALIAS}.results "
            "(key VARCHAR PRIMARY KEY, created TIMESTAMPTZ, payload BLOB)"
        )
        con.execute(f"INSERT OR REPLACE INTO {_ALIAS}.results VALUES (?, now(), ?)", [key, blob])
        con.execute(
            f"DELETE FROM {_ALIAS}.results WHERE key NOT IN "
            f"(SELECT key FROM {_ALIAS}.results ORDER BY created DESC, key LIMIT {KEEP})"
        )
        con.execute(f"CHECKPOINT {_ALIAS}")
        _remember_pages(model, key, db.cache_path, {})
        return True


# -- pages rendered from a model (analyzer/render/page_cache.py keeps them here, by key and variant) --


def _remember_pages(model: dict, key: str, path, pages: dict[str, bytes]) -> None:
    global _pages
    _pages = (model, key, Path(path), pages)


def _fetch_pages(db, key: str) -> dict[str, bytes]:
    import duckdb

    try:
        rows = db.con.execute(
            f"SELECT variant, payload FROM {_ALIAS}.result_pages WHERE key = ?", [key]
        ).fetchall()
    except duckdb.CatalogException:  # no page kept in this cache yet
        return {}
    return {variant: bytes(payload) for variant, payload in rows}


def page_source(model: dict) -> bool:
    """Whether ``model`` is the one ``lookup`` or ``store`` just handled (a page can be kept)."""
    return _pages is not None and _pages[0] is model


def stored_page(model: dict, variant: str) -> bytes | None:
    """The page kept for ``model`` (the model ``lookup`` just returned) under ``variant``."""
    if not page_source(model):
        return None
    return _pages[3].get(variant)


def store_page(model: dict, variant: str, blob: bytes) -> bool:
    """Keep ``blob`` (a page of ``model``, the model ``lookup`` or ``store`` just handled) under
    its key and ``variant``; False when it cannot be written now (another process holds the
    cache, a read-only file). Only pages of models ``results`` still holds are kept, at most ``KEEP``."""
    if not page_source(model):
        return False
    import duckdb

    _, key, path, pages = _pages
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {sql_literal(path)} AS {_ALIAS}")
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {_ALIAS}.result_pages "
            "(key VARCHAR, variant VARCHAR, created TIMESTAMPTZ, payload BLOB, PRIMARY KEY (key, variant))"
        )
        con.execute(
            f"INSERT OR REPLACE INTO {_ALIAS}.result_pages VALUES (?, ?, now(), ?)",
            [key, variant, blob],
        )
        con.execute(
            f"DELETE FROM {_ALIAS}.result_pages WHERE key NOT IN (SELECT key FROM {_ALIAS}.results) "
            f"OR rowid NOT IN (SELECT rowid FROM {_ALIAS}.result_pages "
            f"ORDER BY created DESC, key, variant LIMIT {KEEP})"
        )
        con.execute(f"CHECKPOINT {_ALIAS}")
        pages[variant] = blob
        return True
    except duckdb.Error:
        # another process holds the cache, or it cannot be written (read-only, full disk): the
        # page is already rendered, so it is only not kept (the next run renders it again)
        return False
    finally:
        con.close()


def materialize_derived(con) -> None:
    """requests and sessions as temporary tables (many metric queries read them) when they are
    still views over the events of a window; views over the cache's stored tables stay views."""
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE temporary AND view_name IN ('requests', 'sessions')"
    ).fetchall()
    views = dict(rows)
    if "requests" not in views:
        return
    if "requests_all" in views["requests"] and "_dslogs_inner" not in views["requests"]:
        return  # the stored tables as they are (no window): nothing to compute
    # (a window over them, viewdefs.window_from_derived, selects its sessions: copied once here)
    # sessions reads requests: once requests is a table, sessions is computed from it.
    con.execute("CREATE OR REPLACE TEMP TABLE _dslogs_requests AS SELECT * FROM requests")
    con.execute("CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM _dslogs_requests")
    if "sessions" in views:
        con.execute("CREATE OR REPLACE TEMP TABLE _dslogs_sessions AS SELECT * FROM sessions")
        con.execute("CREATE OR REPLACE TEMP VIEW sessions AS SELECT * FROM _dslogs_sessions")
