"""The file catalogue: what the store knows of each log file (``FileStats``, the ``files``
table) and the load plan, which of this run's files are reused from the cache, renamed (same
content fingerprint), skipped as copies, read, or dropped; and the records written after reading.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime

from analyzer import cache as cache_mod
from analyzer.discovery import Discovery, LogFile


@dataclass
class FileStats:
    file_id: int
    path: str  # resolved
    display: str
    size: int
    mtime_ns: int
    fingerprint: str | None
    rows: int = 0
    legacy_rows: int = 0
    bad_lines: int = 0
    samples: list[dict] = field(default_factory=list)
    unreadable: str | None = None  # why the file (or its tail) could not be read
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    tz: str | None = None


def stats_from(lf: LogFile, resolved: str, file_id: int, fp: str | None) -> FileStats:
    return FileStats(file_id, resolved, lf.display, lf.size, lf.mtime_ns, fp)


@dataclass
class Plan:
    """Which files this run reads, reuses and drops (``plan``)."""

    run: list[FileStats]  # files of this run (read now or from the cache)
    to_read: list[FileStats]
    next_id: int
    skipped: list[dict]
    dropped_ids: list[int]
    reused: int = 0
    renamed: int = 0
    duplicates: int = 0


def plan(con, store: str, found: Discovery, zone: str, readonly: bool) -> Plan:
    """The load plan of ``found`` against the store's file records; renamed files' records are
    updated in place (their rows are already there)."""
    known = {row[1]: row for row in con.execute(
        f"SELECT file_id, path, size, mtime_ns, fingerprint, tz, legacy_rows FROM {store}.files"
    ).fetchall()}  # fmt: skip
    by_print = {row[4]: row for row in known.values() if row[4]}
    # Ids are never reused (the cached requests/sessions are keyed by them): a counter in meta.
    counter = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'next_file_id'").fetchall()
    next_id = 1 + max([row[0] for row in known.values()], default=0)
    if counter:
        next_id = max(next_id, int(counter[0][0]))
    run: list[FileStats] = []  # files of this run (read now or from the cache)
    to_read: list[FileStats] = []
    reused = renamed = duplicates = 0
    dropped_ids: list[int] = []
    claimed: set[int] = set()
    prints_in_run: dict[str, str] = {}
    skipped: list[dict] = [
        {"file": f.display, "reason": "outside the window"} for f in found.pruned
    ]
    # Named or found but not readable as a log (FIFO, socket, broken link, unreadable folder...).
    skipped += [{"file": name, "reason": why} for name, why in found.unreadable]
    for lf in found.files:
        resolved = str(lf.path.resolve())
        rec = known.get(resolved)
        if rec and rec[2] == lf.size and rec[3] == lf.mtime_ns and (rec[6] == 0 or rec[5] == zone):
            run.append(stats_from(lf, resolved, rec[0], rec[4]))
            claimed.add(rec[0])
            reused += 1
            if rec[4]:
                prints_in_run[rec[4]] = lf.display
            continue
        # Without a cache nothing is skipped as a copy: only a cache can show the rows are there.
        fp = cache_mod.fingerprint(lf.path) if store == "dslogs_cache" else None
        if fp and fp in prints_in_run:
            duplicates += 1
            skipped.append({"file": lf.display, "reason": f"same content as {prints_in_run[fp]}"})
            continue
        other = by_print.get(fp) if fp else None
        if other and other[0] not in claimed and (other[6] == 0 or other[5] == zone):
            # Renamed by rotation or gzipped: the rows are already there.
            if rec and rec[0] != other[0]:
                dropped_ids.append(rec[0])
            con.execute(
                f"UPDATE {store}.files SET path = ?, display = ?, size = ?, mtime_ns = ? WHERE file_id = ?",
                [resolved, lf.display, lf.size, lf.mtime_ns, other[0]],
            )
            known.pop(other[1], None)
            run.append(stats_from(lf, resolved, other[0], fp))
            claimed.add(other[0])
            renamed += 1
            prints_in_run[fp] = lf.display
            continue
        if rec:
            dropped_ids.append(rec[0])
        stats = FileStats(next_id, resolved, lf.display, lf.size, lf.mtime_ns, fp, tz=zone)
        next_id += 1
        run.append(stats)
        to_read.append(stats)
        if fp:
            prints_in_run[fp] = lf.display
    # Records of files gone from disk (and of files replaced above) are dropped.
    for path, rec in known.items():
        if rec[0] in claimed or rec[0] in dropped_ids:
            continue
        if not os.path.exists(path):
            dropped_ids.append(rec[0])
    if readonly:
        # Everything is cached (checked when attaching); a reader leaves stale records alone.
        dropped_ids = []
    return Plan(run, to_read, next_id, skipped, dropped_ids, reused, renamed, duplicates)


def drop(con, store: str, dropped_ids: list[int]) -> list[str]:
    """Delete the rows and records of ``dropped_ids``; the legacy sessions they touched (whose
    request ids are then numbered again)."""
    if not dropped_ids:
        return []
    legacy_sessions = [r[0] for r in con.execute(
        f"SELECT DISTINCT session_id FROM {store}.events WHERE list_contains(?, file_id) "
        "AND source_format = 'legacy' AND session_id IS NOT NULL", [dropped_ids]).fetchall()]  # fmt: skip
    con.execute(f"DELETE FROM {store}.events WHERE list_contains(?, file_id)", [dropped_ids])
    con.execute(f"DELETE FROM {store}.files WHERE list_contains(?, file_id)", [dropped_ids])
    return legacy_sessions


def record(
    con, store: str, to_read: list[FileStats], zone: str, next_id: int, readonly: bool
) -> list[str]:
    """Write the records of the files just read (rows, legacy rows, time span, bad lines); the
    legacy sessions they hold."""
    if not to_read:
        return []
    if not readonly:
        con.execute(
            f"INSERT OR REPLACE INTO {store}.meta VALUES ('next_file_id', ?)", [str(next_id)]
        )
    counts = {fid: (n, leg, t0, t1) for fid, n, leg, t0, t1 in con.execute(
        f"SELECT file_id, count(*), count(*) FILTER (WHERE source_format = 'legacy'), min(ts), max(ts) "
        f"FROM {store}.events WHERE list_contains(?, file_id) GROUP BY file_id",
        [[f.file_id for f in to_read]]).fetchall()}  # fmt: skip
    for f in to_read:
        f.rows, f.legacy_rows, f.first_ts, f.last_ts = counts.get(f.file_id, (0, 0, None, None))
    con.executemany(
        f"INSERT INTO {store}.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [[f.file_id, f.path, f.display, f.size, f.mtime_ns, f.fingerprint, zone, f.rows, f.legacy_rows,
          f.bad_lines, json.dumps(f.samples, ensure_ascii=False), f.unreadable, f.first_ts, f.last_ts]
         for f in to_read],
    )  # fmt: skip
    return [r[0] for r in con.execute(
        f"SELECT DISTINCT session_id FROM {store}.events WHERE list_contains(?, file_id) "
        "AND source_format = 'legacy' AND session_id IS NOT NULL",
        [[f.file_id for f in to_read if f.legacy_rows]]).fetchall()]  # fmt: skip
