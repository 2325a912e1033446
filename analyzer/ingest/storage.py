"""The store: where the normalised events live, the cache file (``dslogs_cache``, attached
read-write, or read-only when another dslogs holds it) or memory; its tables (meta, files,
events) and their schema version (``dslogs.analyzer.ingest.cache``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import duckdb

from dslogs.analyzer.core.errors import UsageError, one_line
from dslogs.analyzer.core.textsafe import visible
from dslogs.analyzer.ingest import cache as cache_mod
from dslogs.analyzer.ingest.columns import RAW_COLUMNS, sql_ident, sql_literal
from dslogs.analyzer.ingest.discovery import Discovery
from dslogs.analyzer.ingest.views import view_sql


def empty_raw_sql() -> str:
    cols = ", ".join(f"NULL::{t} AS {sql_ident(k)}" for k, t in RAW_COLUMNS.items())
    return f"SELECT {cols}, NULL::BIGINT AS line_bytes, NULL::INTEGER AS file_id WHERE false"


def create_store(con, store: str) -> None:
    con.execute(f"CREATE TABLE IF NOT EXISTS {store}.meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {store}.files (
            file_id INTEGER PRIMARY KEY, path VARCHAR, display VARCHAR, size BIGINT, mtime_ns BIGINT,
            fingerprint VARCHAR, tz VARCHAR, rows BIGINT, legacy_rows BIGINT, bad_lines BIGINT,
            samples VARCHAR, unreadable VARCHAR, first_ts TIMESTAMPTZ, last_ts TIMESTAMPTZ)"""
    )
    # Where the last read of each plain file stopped (catalogue.grown: a grown file's tail read).
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {store}.file_ends (
            file_id INTEGER PRIMARY KEY, read_end BIGINT, lines BIGINT, frag INTEGER, end_hash VARCHAR)"""
    )
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = 'events'",
        [store],
    ).fetchall()[0][0]
    if not exists:
        con.execute(
            f"CREATE TABLE {store}.events AS WITH dslogs_raw AS ({empty_raw_sql()}) {view_sql('events')}",
            {"tz": "UTC"},
        )
    con.execute(
        f"INSERT OR REPLACE INTO {store}.meta VALUES ('schema_version', ?)",
        [str(cache_mod.SCHEMA_VERSION)],
    )


def _stderr(message: str) -> None:
    sys.stderr.write(f"dslogs: {message}\n")


def attach_cache(
    con, path: Path, found: Discovery, zone: str, explicit: bool = False
) -> str | None:
    """``_attach_cache``; a cache folder or file this user may not read or change (another
    user's, a mode that forbids it) is one line: an error for ``--cache PATH``, else the run
    goes on without a cache."""
    try:
        return _attach_cache(con, path, found, zone, explicit)
    except OSError as exc:
        where = visible(str(exc.filename or path))
        if explicit:
            raise UsageError(f"--cache {where}: {exc.strerror or exc}") from None
        _stderr(f"cache {where}: {exc.strerror or exc}; reading without a cache")
        return None


def _attach_cache(
    con, path: Path, found: Discovery, zone: str, explicit: bool = False
) -> str | None:
    """Attach the cache as ``dslogs_cache``: ``"rw"``, or ``"ro"`` when another dslogs holds it
    only to read and it already has every file of this run; rebuilt on a schema version mismatch.
    None (and one line on stderr) when it cannot be used: the run goes on without a cache.

    ``explicit`` (``--cache PATH``): an existing file there is replaced only when it is proven a
    dslogs cache (``cache.is_dslogs_cache``); anything else (notes, a report, a log, another
    program's database) is a UsageError, and the file is left as it was. The default location
    is dslogs' own folder: a file there that cannot be opened is rebuilt."""
    refuse = (
        f"--cache {path}: exists and is not a dslogs cache; refusing to replace it "
        "(name a new file, or remove it yourself)"
    )
    if os.path.lexists(path) and not path.is_file():
        if explicit:
            raise UsageError(f"--cache {path}: not a regular file")
        _stderr(f"cache {path}: not a regular file; reading without a cache")
        return None
    if explicit and path.is_file() and not _looks_like_duckdb(path):
        # Never handed to DuckDB: a failed ATTACH may still leave a .wal beside the file.
        raise UsageError(refuse)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _stderr(
            f"cache {path}: cannot create its folder ({exc.strerror or exc}); reading without a cache"
        )
        return None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        # DuckDB writes its .wal beside the file: without that, a cache that already holds every
        # file is read as it is; anything else is read without one
        if path.exists() and os.access(path, os.R_OK) and _attach_read_only(con, path, found, zone):
            return "ro"
        _stderr(f"cache {visible(str(path))}: not writable by this user; reading without a cache")
        return None
    for attempt in range(2):
        try:
            con.execute(f"ATTACH {sql_literal(str(path))} AS dslogs_cache")
        except duckdb.Error as exc:
            if cache_mod.is_lock_error(exc):
                if _attach_read_only(con, path, found, zone):
                    return "ro"
                _stderr(
                    f"cache {path} is in use by another dslogs process; reading without a cache"
                )
            elif attempt == 0 and path.exists():
                if explicit and path.stat().st_size > 0:
                    raise UsageError(f"{refuse}: {one_line(exc)}") from None
                # (an empty file holds nothing to lose: `touch cache.duckdb` is fine)
                # Not a DuckDB file, or one of another DuckDB version: start a new one.
                remove_cache(path)
                continue
            else:
                _stderr(f"cache {path}: {one_line(exc)}; reading without a cache")
            return None
        version = cache_version(con)
        if version == "?" and explicit:
            # A DuckDB database of something else: not ours to replace.
            con.execute("DETACH dslogs_cache")
            raise UsageError(refuse)
        if version not in (None, str(cache_mod.SCHEMA_VERSION)):
            con.execute("DETACH dslogs_cache")
            remove_cache(path)
            continue
        return "rw"
    return None


def _looks_like_duckdb(path: Path) -> bool:
    """A DuckDB database file: its main header carries the magic "DUCK" at byte 8 (or it is a
    new, empty file DuckDB may have created and not yet written)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return head == b"" or head[8:12] == b"DUCK"


def cache_version(con) -> str | None:
    """The attached cache's schema version; None for a new (empty) file, '?' for a foreign one."""
    tables = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = 'dslogs_cache'"
    ).fetchall()[0][0]
    tables += con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE database_name = 'dslogs_cache'"
    ).fetchall()[0][0]
    if not tables:
        return None
    try:
        version = con.execute(
            "SELECT value FROM dslogs_cache.meta WHERE key = 'schema_version'"
        ).fetchall()
    except duckdb.Error:
        return "?"
    return version[0][0] if version else "?"


def _attach_read_only(con, path: Path, found: Discovery, zone: str) -> bool:
    """Another process reads the cache: use it read-only if it holds every file unchanged."""
    try:
        con.execute(f"ATTACH {sql_literal(str(path))} AS dslogs_cache (READ_ONLY)")
    except duckdb.Error:
        return False
    ok = cache_version(con) == str(cache_mod.SCHEMA_VERSION)
    if ok:
        known = {r[0]: r[1:] for r in con.execute(
            "SELECT path, size, mtime_ns, tz, legacy_rows FROM dslogs_cache.files").fetchall()}  # fmt: skip
        for f in found.files:
            rec = known.get(str(f.path.resolve()))
            if not rec or rec[0] != f.size or rec[1] != f.mtime_ns or (rec[3] and rec[2] != zone):
                ok = False
                break
    if not ok:
        con.execute("DETACH dslogs_cache")
    return ok


def remove_cache(path: Path) -> None:
    for p in (path, Path(str(path) + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def number_legacy_requests(con, store: str, sessions: list[str]) -> None:
    """Number the requests of legacy ``sessions`` again (their ids follow the session's turns,
    which span files: a file read or dropped renumbers the whole session)."""
    if sessions:
        con.execute(
            view_sql("legacy_request_ids").replace("UPDATE events", f"UPDATE {store}.events").replace(
                "FROM events", f"FROM {store}.events"),
            {"sessions": sorted(set(sessions))},
        )  # fmt: skip


def reattach_read_only(con, path: Path) -> None:
    """The write phase is over: reattach read-only, so user SQL cannot change the cache and
    other dslogs processes can read it while this one runs."""
    con.execute("CHECKPOINT dslogs_cache")
    con.execute("DETACH dslogs_cache")
    con.execute(f"ATTACH {sql_literal(str(path))} AS dslogs_cache (READ_ONLY)")
