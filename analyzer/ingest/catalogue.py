"""The file catalogue: what the store knows of each log file (``FileStats``, in
``dslogs.analyzer.ingest.filestats``; the ``files`` table) and the load plan, which of this run's files are reused from the cache, renamed (same
content fingerprint), skipped as copies, read, or dropped; and the records written after reading.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from dslogs.analyzer.ingest import cache as cache_mod
from dslogs.analyzer.ingest.discovery import Discovery, LogFile
from dslogs.analyzer.ingest.filestats import SAMPLES_PER_FILE, FileStats


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
    tails: list[FileStats] = field(default_factory=list)  # grown files: only their new bytes


def plan(
    con, store: str, found: Discovery, zone: str, readonly: bool, workdir: Path | None = None
) -> Plan:
    """The load plan of ``found`` against the store's file records; renamed files' records are
    updated in place (their rows are already there). With ``workdir`` (a cache that can be
    written), a file that grew is read from a copy of its new bytes (``Plan.tails``)."""
    known = {row[1]: row for row in con.execute(
        f"SELECT file_id, path, size, mtime_ns, fingerprint, tz, legacy_rows FROM {store}.files"
    ).fetchall()}  # fmt: skip
    ends = {}
    if workdir is not None and store == "dslogs_cache" and not readonly:
        ends = {r[0]: r[1:] for r in con.execute(
            f"SELECT file_id, read_end, lines, frag, end_hash FROM {store}.file_ends").fetchall()}  # fmt: skip
    tails: list[FileStats] = []
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
        tail = None
        if rec and rec[0] in ends and (rec[6] == 0 or rec[5] == zone):
            tail = grown(lf, resolved, rec, ends[rec[0]], workdir, next_id)
        if tail is not None:
            fp = tail.fingerprint
            if fp not in prints_in_run and by_print.get(fp, rec)[0] == rec[0]:
                # Grown: its rows so far stay; the new bytes are read under a new id for now
                # (the slow path numbers a file's rows by id), then given the file's id.
                next_id += 1
                tails.append(tail)
                run.append(stats_from(lf, resolved, rec[0], fp))
                claimed.add(rec[0])
                prints_in_run[fp] = lf.display
                continue
            Path(tail.path).unlink(missing_ok=True)
        # Without a cache nothing is skipped as a copy: only a cache can show the rows are there.
        scan: dict = {}
        if tail is not None:
            fp = tail.fingerprint  # (its scan is not kept: read whole, it is read whole again)
        else:
            fp = cache_mod.fingerprint(lf.path, scan) if store == "dslogs_cache" else None
        if fp and fp in prints_in_run:
            duplicates += 1
            skipped.append({"file": lf.display, "reason": f"same content as {prints_in_run[fp]}"})
            continue
        other = by_print.get(fp) if fp else None
        if other and other[0] not in claimed and (other[6] == 0 or other[5] == zone):
            # Renamed by rotation or gzipped: the rows are already there.
            if rec and rec[0] != other[0]:
                dropped_ids.append(rec[0])
            # its bad lines' samples name the file as it is now shown (as a read of it would)
            (samples,) = con.execute(
                f"SELECT samples FROM {store}.files WHERE file_id = ?", [other[0]]
            ).fetchall()[0]
            renamed_samples = [{**x, "file": lf.display} for x in json.loads(samples or "[]")]
            con.execute(
                f"UPDATE {store}.files SET path = ?, display = ?, size = ?, mtime_ns = ?, samples = ? "
                "WHERE file_id = ?",
                [resolved, lf.display, lf.size, lf.mtime_ns,
                 json.dumps(renamed_samples, ensure_ascii=False), other[0]],
            )  # fmt: skip
            known.pop(other[1], None)
            run.append(stats_from(lf, resolved, other[0], fp))
            claimed.add(other[0])
            renamed += 1
            prints_in_run[fp] = lf.display
            continue
        if rec:
            dropped_ids.append(rec[0])
        stats = FileStats(next_id, resolved, lf.display, lf.size, lf.mtime_ns, fp, tz=zone)
        stats.scan = scan if scan.get("size") == lf.size else None
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
    return Plan(run, to_read, next_id, skipped, dropped_ids, reused, renamed, duplicates, tails)


# -- grown files ----------------------------------------------------------------------------------
#
# A live log (today's file, the collector appending) is read once whole, then on each later run
# only from where the last read stopped: the offset after its last complete line (``read_end``).
# ``file_ends`` keeps, per file, that offset, its lines before it (the tail's line numbers go on
# from there), what became of an unterminated last line (``frag``) and a hash of the file's last
# END_CHECK bytes. A file is taken as grown when it is plain, larger, and both its first 64 KiB
# (the fingerprint's head hash) and its END_CHECK bytes before the old end are unchanged: a log
# is only appended to, and a file rotated, truncated or written anew differs in its head (its
# first event) or at the old end. Anything else is read whole, as a changed file always was.
#
# The unterminated last line (a writer caught mid-line) is read as the whole read reads it: a
# bad line ("truncated line at end of file"), or a row when it happens to be whole JSON. The
# tail read starts at that line again, so the bad line is taken back (``record_tails``); a
# row cannot be taken back by line, so such a file (frag 2) is read whole when it grows.

END_CHECK = 4096
FRAG_NONE, FRAG_BAD, FRAG_ROW = 0, 1, 2


def grown(
    lf: LogFile, resolved: str, rec, end, workdir: Path | None, temp_id: int
) -> FileStats | None:
    """The tail of ``lf`` past its record ``rec``'s read_end as a FileStats read from a copy in
    ``workdir`` (``grow`` describes the record it extends); None when it must be read whole."""
    read_end, lines, frag, end_hash = end
    old_size, old_fp = rec[2], rec[4]
    if (workdir is None or lf.display.endswith(".gz") or lf.size <= old_size or not old_fp
            or frag not in (FRAG_NONE, FRAG_BAD) or end_hash is None):  # fmt: skip
        return None
    try:
        _v, _length, old_crc, head_hash = old_fp.split(":")
        crc = int(old_crc, 16)
    except ValueError:
        return None
    out = workdir / f"tail-{temp_id}.jsonl"
    try:
        with open(resolved, "rb") as src:
            head = src.read(cache_mod.FINGERPRINT_BYTES)
            if hashlib.sha1(head[: min(len(head), old_size)]).hexdigest() != head_hash:
                return None
            if _end_digest(src, old_size) != end_hash:
                return None
            src.seek(read_end)
            todo, pos, lfs, last_lf = lf.size - read_end, read_end, 0, -1
            with open(out, "wb") as dst:
                while todo > 0 and (chunk := src.read(min(todo, 1 << 20))):
                    if pos + len(chunk) > old_size:  # the CRC goes on from the old content's
                        crc = zlib.crc32(chunk[max(0, old_size - pos) :], crc)
                    if n := chunk.count(b"\n"):
                        lfs += n
                        last_lf = pos + chunk.rfind(b"\n")
                    dst.write(chunk)
                    pos += len(chunk)
                    todo -= len(chunk)
            if todo:  # shrank meanwhile: read it whole
                out.unlink(missing_ok=True)
                return None
            new_end_hash = _end_digest(src, lf.size)
    except OSError:
        out.unlink(missing_ok=True)
        return None
    new_fp = cache_mod.fingerprint_text(lf.size, crc, head)
    tail = FileStats(temp_id, str(out), lf.display, lf.size - read_end, lf.mtime_ns, new_fp)
    tail.line_base = lines
    tail.grow = {
        "file_id": rec[0], "size": lf.size, "old_frag": frag, "old_lines": lines,
        "read_end": last_lf + 1 if last_lf >= 0 else read_end, "lines": lines + lfs,
        "end_hash": new_end_hash,
    }  # fmt: skip
    return tail


def _end_digest(src, size: int) -> str | None:
    """SHA-1 of the END_CHECK bytes before offset ``size`` of the open file ``src``; None when
    fewer can be read (the file shrank)."""
    start = max(0, size - END_CHECK)
    src.seek(start)
    data = src.read(size - start)
    return hashlib.sha1(data).hexdigest() if len(data) == size - start else None


def _frag(path: str, read_end: int, size: int, lines: int, f: FileStats) -> int:
    """What the read made of the bytes after the last LF: nothing (none, or blank), a bad line,
    or (else) a row."""
    if read_end >= size:
        return FRAG_NONE
    if f.last_bad == lines + 1:
        return FRAG_BAD
    try:
        with open(path, "rb") as src:
            src.seek(read_end)
            rest = src.read(size - read_end)
    except OSError:
        return FRAG_ROW
    return FRAG_NONE if len(rest) == size - read_end and not rest.strip() else FRAG_ROW


def _end_hash(path: str, size: int) -> str | None:
    try:
        with open(path, "rb") as src:
            return _end_digest(src, size)
    except OSError:
        return None


def record_ends(con, store: str, to_read: list[FileStats]) -> None:
    """``file_ends`` of files just read whole, when a tail read can go on from them: plain, read
    by a cache, and unchanged from before the fingerprint's pass to after the read (a file that
    grew meanwhile was read further than its record says: it is read whole when it changes)."""
    rows = []
    for f in to_read:
        if f.scan is None or f.unreadable or f.display.endswith(".gz"):
            continue
        try:
            st = os.stat(f.path)
        except OSError:
            continue
        if st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
            continue
        end_hash = _end_hash(f.path, f.size)
        lines, read_end = f.scan["lines"], f.scan["read_end"]
        rows.append(
            [f.file_id, read_end, lines, _frag(f.path, read_end, f.size, lines, f), end_hash]
        )
    if rows:
        con.executemany(f"INSERT OR REPLACE INTO {store}.file_ends VALUES (?, ?, ?, ?, ?)", rows)


def record_tails(con, store: str, tails: list[FileStats]) -> list[str]:
    """Give the tails' rows their file's id and extend the file's record: rows, time span, bad
    lines (the unterminated last line the previous read counted bad is read again in the tail:
    taken back) and its first samples, size, mtime, fingerprint, file_ends. The legacy sessions
    the tails hold."""
    legacy: list[str] = []
    for t in tails:
        g = t.grow
        n, leg, t0, t1 = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE source_format = 'legacy'), min(ts), max(ts) "
            f"FROM {store}.events WHERE file_id = ?", [t.file_id]).fetchall()[0]  # fmt: skip
        if leg:
            legacy += [r[0] for r in con.execute(
                f"SELECT DISTINCT session_id FROM {store}.events WHERE file_id = ? "
                "AND source_format = 'legacy' AND session_id IS NOT NULL", [t.file_id]).fetchall()]  # fmt: skip
        con.execute(
            f"UPDATE {store}.events SET file_id = ? WHERE file_id = ?", [g["file_id"], t.file_id]
        )
        bad, samples, unreadable = con.execute(
            f"SELECT bad_lines, samples, unreadable FROM {store}.files WHERE file_id = ?", [g["file_id"]]
        ).fetchall()[0]  # fmt: skip
        kept = json.loads(samples or "[]")
        if g["old_frag"] == FRAG_BAD:
            bad -= 1
            kept = [s for s in kept if s.get("line") != g["old_lines"] + 1]
        kept = (kept + t.samples)[:SAMPLES_PER_FILE]
        con.execute(
            f"UPDATE {store}.files SET size = ?, mtime_ns = ?, fingerprint = ?, rows = rows + ?, "
            "legacy_rows = legacy_rows + ?, bad_lines = ?, samples = ?, unreadable = ?, "
            "first_ts = least(first_ts, ?::TIMESTAMPTZ), last_ts = greatest(last_ts, ?::TIMESTAMPTZ) "
            "WHERE file_id = ?",
            [g["size"], t.mtime_ns, t.fingerprint, n, leg, bad + t.bad_lines,
             json.dumps(kept, ensure_ascii=False), unreadable or t.unreadable, t0, t1, g["file_id"]],
        )  # fmt: skip
        if t.unreadable:
            con.execute(f"DELETE FROM {store}.file_ends WHERE file_id = ?", [g["file_id"]])
        else:
            frag = _frag(t.path, g["read_end"] - (g["size"] - t.size), t.size, g["lines"], t)
            con.execute(
                f"INSERT OR REPLACE INTO {store}.file_ends VALUES (?, ?, ?, ?, ?)",
                [g["file_id"], g["read_end"], g["lines"], frag, g["end_hash"]],
            )
        Path(t.path).unlink(missing_ok=True)
    return legacy


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
    con.execute(f"DELETE FROM {store}.file_ends WHERE list_contains(?, file_id)", [dropped_ids])
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
    rows = [[f.file_id, str(f.path), f.display, f.size, f.mtime_ns, f.fingerprint, zone, f.rows, f.legacy_rows,
             f.bad_lines, json.dumps(f.samples, ensure_ascii=False), f.unreadable, f.first_ts, f.last_ts]
            for f in to_read]  # fmt: skip
    # one statement of columns, not a statement a file (executemany: milliseconds each)
    types = ("INTEGER", "VARCHAR", "VARCHAR", "BIGINT", "BIGINT", "VARCHAR", "VARCHAR", "BIGINT", "BIGINT",
             "BIGINT", "VARCHAR", "VARCHAR", "TIMESTAMPTZ", "TIMESTAMPTZ")  # fmt: skip
    con.execute(
        f"INSERT INTO {store}.files SELECT " + ", ".join(f"unnest(CAST(? AS {t}[]))" for t in types),
        [list(col) for col in zip(*rows, strict=True)],
    )
    return [r[0] for r in con.execute(
        f"SELECT DISTINCT session_id FROM {store}.events WHERE list_contains(?, file_id) "
        "AND source_format = 'legacy' AND session_id IS NOT NULL",
        [[f.file_id for f in to_read if f.legacy_rows]]).fetchall()]  # fmt: skip
