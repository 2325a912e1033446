"""Logs that grow while they are read (``dslogs watch``): ``LogTail`` follows the bytes appended
to every file discovery finds, ``LogStream`` holds the last minutes of their events in memory as a
log set whose views (events, requests, sessions) analyze's own queries read.

``LogTail`` reads only appended bytes: one offset per file, a partial last line kept until its
newline arrives. A file is known by its identity (device, inode) and its first bytes: one
replaced, truncated, or truncated and regrown past the old offset between two polls is read
again from its start. It follows rotation (a new ``.N.jsonl`` or ``.jsonl.N`` file is read from
its start) and the gzip of a file it follows: the collector renames ``X.jsonl.gz`` into place and
then removes ``X.jsonl``; once the plain file is gone, the ``.gz`` is decompressed and only the
bytes past the offset already read are used (nothing counted twice, nothing lost). A ``.gz``
whose plain file is still there (``gzip -k``) is a copy and is never read; a ``.gz`` that ends
early is being written and is read again at the next poll, until it is complete or has not
changed for ``GZ_SETTLE_S``.

``LogStream`` reads lines through ingest's own ``Reader`` (the line judge ``analyze`` uses: a line
analyze counts as bad is counted unreadable here), so a frame computed over it uses analyze's
definitions throughout.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dslogs.analyzer.core.errors import DslogsError
from dslogs.analyzer.core.textsafe import visible
from dslogs.analyzer.ingest import catalogue, formats, storage
from dslogs.analyzer.ingest.catalogue import FileStats
from dslogs.analyzer.ingest.discovery import discover, name_sort_key, printable
from dslogs.analyzer.ingest.formats import split_lines
from dslogs.analyzer.ingest.validate import MAX_LINE_BYTES
from dslogs.analyzer.ingest.viewdefs import define_views, view_sql

BACKFILL_BYTES = 32 << 20
MAX_WINDOW_EVENTS = 2_000_000  # beyond it the oldest events leave the window early (memory)
GONE_GRACE_S = 300.0
GZ_SETTLE_S = 30.0  # a .gz that ends early and has not changed this long is read as it is
HEAD_BYTES = 256  # a file's first bytes, its identity beside (dev, inode): they hold the first ts


# -- following files ------------------------------------------------------------------------------


@dataclass
class FileState:
    path: str
    ident: tuple[int, int]  # (st_dev, st_ino)
    offset: int = 0  # bytes of the plain file consumed (complete lines and the pending tail)
    pending: bytes = b""  # a last line without its newline yet
    head: bytes = b""  # the file's first bytes as read (up to HEAD_BYTES)
    oversized: bool = False  # the pending line passed MAX_LINE_BYTES: its rest is skipped
    seen: tuple = ()  # (size, mtime_ns) at the last poll: the head is read again only on a change


def _is_gz(path: str) -> bool:
    return path.endswith(".gz")


@dataclass
class LogTail:
    """Appended lines of the log files under ``paths`` (directories recursive, files, globs),
    found by ``dslogs.analyzer.ingest.discovery`` as ``analyze`` finds them."""

    paths: list[str]
    states: dict[str, FileState] = field(default_factory=dict)
    done_gz: set[str] = field(default_factory=set)
    # A .gz that ended early: (size, mtime_ns, since when unchanged); read again at each poll.
    growing_gz: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    # Followed files that disappeared: their .gz may show up a moment later (the listing that
    # saw the plain file go can predate the rename of its .gz); kept GONE_GRACE_S seconds.
    gone: dict[str, tuple[FileState, float]] = field(default_factory=dict)
    bytes_read: int = 0
    bad_lines: int = 0  # lines over MAX_LINE_BYTES, never held
    warned: set[str] = field(default_factory=set)
    warn: object = None  # callable(str): one line per unreadable path (default: stderr)

    def _warn(self, path: str, why: str) -> None:
        if path in self.warned:
            return
        self.warned.add(path)
        line = f"dslogs watch: {visible(printable(path))}: {visible(why)}; following the other files"
        (self.warn or (lambda m: print(m, file=sys.stderr)))(line)

    def discover(self) -> tuple[list[str], list[str]]:
        try:
            found = discover(list(self.paths))
        except DslogsError:
            return [], []  # nothing there yet (an empty folder): keep polling
        for display, why in found.unreadable:
            self._warn(display, why)
        # a Prometheus snapshot holds no events: analyze reads it for the server-metrics section,
        # a live view of events has nothing to take from it
        files = [f for f in found.files if formats.snapshot_format(f.path, f.display, f.size) is None]
        plain = [f.display for f in files if not f.compressed]
        gz = [f.display for f in files if f.compressed]
        # write order (day, then rotation index): the window then receives lines nearly in time order
        return sorted(plain, key=name_sort_key), sorted(gz, key=name_sort_key)

    def start(self, since_epoch: float | None) -> list[bytes]:
        """Begin tailing. With ``since_epoch``, the lines of files touched since then (the
        window's backfill); other files are followed from their current end."""
        plain, gz = self.discover()
        lines: list[bytes] = []
        self.partial_backfill = False
        for path in plain:
            st = self._stat(path)
            if st is None:
                continue
            state = FileState(path, (st.st_dev, st.st_ino), st.st_size, head=self._head(path, st.st_size))
            self.states[path] = state
            if since_epoch is not None and st.st_mtime >= since_epoch:
                state.offset = max(0, st.st_size - BACKFILL_BYTES)
                self.partial_backfill |= state.offset > 0
                lines += self._read_plain(state, skip_partial=state.offset > 0)
        for path in gz:
            if path[:-3] in self.states:
                self.done_gz.add(path)
                continue  # a copy of a file being followed (gzip -k)
            st = self._stat(path)
            if st is None:
                continue
            if since_epoch is not None and st.st_mtime >= since_epoch:
                lines += self._take_gz(path, 0, b"", st)
            else:
                self.done_gz.add(path)
        return lines

    def _stat(self, path: str):
        try:
            return os.stat(path)
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                self._warn(path, f"cannot read ({exc.strerror or exc})")
            return None

    def _head(self, path: str, upto: int) -> bytes:
        try:
            with open(path, "rb") as fh:
                return fh.read(min(upto, HEAD_BYTES))
        except OSError:
            return b""

    def poll(self) -> list[bytes]:
        """Complete lines appended since the last poll, over every followed file."""
        plain, gz = self.discover()
        lines: list[bytes] = []
        present = set(plain)
        for path in plain:
            st = self._stat(path)
            if st is None:
                present.discard(path)
                continue
            state = self.states.get(path)
            changed = state is not None and state.seen != (st.st_size, st.st_mtime_ns)
            if (state is None or state.ident != (st.st_dev, st.st_ino) or st.st_size < state.offset
                    or (changed and state.head and self._head(path, len(state.head)) != state.head)):  # fmt: skip
                # new (rotation), replaced, truncated, or truncated and regrown: from its start
                state = FileState(path, (st.st_dev, st.st_ino), 0)
                self.states[path] = state
            state.seen = (st.st_size, st.st_mtime_ns)
            if st.st_size > state.offset:
                lines += self._read_plain(state)
        for path in gz:
            if path in self.done_gz:
                continue
            twin = path[:-3]
            if twin in present:
                continue  # still being gzipped, or a `gzip -k` copy: the plain file is the source
            st = self._stat(path)
            if st is None:
                continue
            state = self.states.get(twin)
            if state is None and twin in self.gone:
                state = self.gone[twin][0]
            got = self._take_gz(path, state.offset if state else 0, state.pending if state else b"", st)
            if path in self.done_gz:
                self.states.pop(twin, None)
                self.gone.pop(twin, None)
            lines += got
        now = time.monotonic()
        for path in list(self.states):
            if path not in present and not os.path.exists(path):
                self.gone[path] = (self.states.pop(path), now)
        for path, (_, since) in list(self.gone.items()):
            if now - since > GONE_GRACE_S:
                del self.gone[path]
        return lines

    def _read_plain(self, state: FileState, skip_partial: bool = False) -> list[bytes]:
        try:
            with open(state.path, "rb") as fh:
                fh.seek(state.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        except OSError as exc:  # a folder named x.jsonl.1, no permission, an I/O error
            self._warn(state.path, f"cannot read ({exc.strerror or exc})")
            return []
        if state.offset < HEAD_BYTES and len(state.head) < HEAD_BYTES:
            state.head = (state.head + data)[:HEAD_BYTES] if state.offset == len(state.head) else state.head
        state.offset += len(data)
        self.bytes_read += len(data)
        if skip_partial:
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut >= 0 else b""
        return self._split(state, data)

    def _take_gz(self, path: str, skip: int, pending: bytes, st) -> list[bytes]:
        """The lines of a .gz past ``skip`` decompressed bytes, once it is complete; an
        incomplete one is tried again at later polls (it is still being written)."""
        data, complete = self._read_gz(path, skip)
        if not complete:
            size, mtime, since = self.growing_gz.get(path, (-1, -1, time.monotonic()))
            if (size, mtime) != (st.st_size, st.st_mtime_ns):
                since = time.monotonic()
            self.growing_gz[path] = (st.st_size, st.st_mtime_ns, since)
            if time.monotonic() - since < GZ_SETTLE_S:
                return []
            # unchanged for GZ_SETTLE_S: damaged for good; its lines before the damage count,
            # as analyze keeps them
        self.growing_gz.pop(path, None)
        self.done_gz.add(path)
        self.bytes_read += len(data)
        state = FileState(path, (0, 0), 0, pending)
        lines = self._split(state, data)
        if state.pending.strip() and not state.oversized:
            lines.append(state.pending)  # a closed file's last line may lack its newline
        return lines

    @staticmethod
    def _read_gz(path: str, skip: int) -> tuple[bytes, bool]:
        """The decompressed bytes past ``skip`` and whether the gzip stream is complete; an
        incomplete one gives what it holds up to its end (zlib keeps it, gzip.open does not)."""
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return b"", False
        out: list[bytes] = []
        complete = False
        try:
            while data:  # members one after the other (`cat a.gz b.gz` is one gzip file)
                member = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out.append(member.decompress(data))
                complete = member.eof
                if not complete:
                    break
                data = member.unused_data
        except zlib.error:
            complete = False
        return b"".join(out)[skip:], complete

    def _split(self, state: FileState, data: bytes) -> list[bytes]:
        if not data:
            return []
        data = state.pending + data
        parts = data.split(b"\n")
        state.pending = parts.pop()
        if state.oversized and parts:
            parts.pop(0)  # the rest of the oversized line
            state.oversized = False
        if len(state.pending) > MAX_LINE_BYTES:
            # a line over 16 MiB is damage (validate.LINE_RULES rule 2): counted, never held
            if not state.oversized:
                self.bad_lines += 1
            state.pending, state.oversized = b"", True
        out = []
        for p in parts:
            if len(p) > MAX_LINE_BYTES:
                self.bad_lines += 1
            elif p.strip():
                out.append(p)
        return out


# -- the events of the window -------------------------------------------------------------------

STORE = "memory"  # the in-memory database's own name in DuckDB: the store of ingest.storage


class LogStream:
    """The events of the last ``seconds`` of growing logs, in an in-memory DuckDB: ``add`` reads
    appended lines through ingest's ``Reader`` (analyze's line judge), ``trim`` lets old events go,
    and ``open_views`` defines the views events, requests and sessions over what is held, as
    ``ingest.open`` does over files."""

    def __init__(self, seconds: float, tz: str | None = None):
        import duckdb

        from dslogs.analyzer.core.resources import memory_limit
        from dslogs.analyzer.core.time import zone_name
        from dslogs.analyzer.ingest.columns import sql_literal
        from dslogs.analyzer.ingest.reader import Reader

        self.seconds = seconds
        self.tz = tz
        self.zone = zone_name(tz)
        self._tmp = tempfile.TemporaryDirectory(prefix="dslogs-watch-")
        self.con = duckdb.connect()
        for setting in ("enable_progress_bar = false", f"TimeZone = {sql_literal(self.zone)}",
                        f"temp_directory = {sql_literal(self._tmp.name)}",
                        f"memory_limit = {sql_literal(memory_limit())}", "preserve_insertion_order = true"):  # fmt: skip
            self.con.execute(f"SET {setting}")
        storage.create_store(self.con, STORE)
        self.reader = Reader(self.con, STORE, self.zone, Path(self._tmp.name))
        self.batches: dict = {}  # file_id -> FileStats of a batch of lines still holding events
        self.next_id = 1
        self.total_requests = 0
        self.total_errors = 0  # failed requests
        self.total_error_events = 0
        self.bad_lines = 0
        self.newest: float | None = None
        # Since when the window's events are all there: None means the whole window (the
        # backfill read every file touched within it); later, when it read only their ends.
        self.complete_from: float | None = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.con.close()
        self._tmp.cleanup()

    def add(self, lines: list[bytes]) -> None:
        """Read ``lines`` (complete lines, no newline) through ingest's reader: the line judge
        of analyze, bad lines counted, the events normalised by events.sql."""
        if not lines:
            return
        # lines of a format read by its own statement (OTLP/JSON traces) go to a batch of their
        # own, as analyze reads a file of them
        for batch in split_lines(lines):
            self._add_batch(batch)

    def _add_batch(self, lines: list[bytes]) -> None:
        fid = self.next_id
        self.next_id += 1
        path = Path(self._tmp.name) / f"batch-{fid}.jsonl"
        with open(path, "wb") as out:
            for raw in lines:
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        st = path.stat()
        f = FileStats(fid, str(path), "watch", st.st_size, st.st_mtime_ns, None)
        try:
            self.reader.read([f])
            legacy = catalogue.record(self.con, STORE, [f], self.zone, self.next_id, readonly=False)
            storage.number_legacy_requests(self.con, STORE, legacy)
        finally:
            path.unlink(missing_ok=True)
        self.bad_lines += f.bad_lines
        if not f.rows:
            return
        self.batches[fid] = f
        # Requests and failed requests as the requests view defines them (a request's status is
        # its request event's, else error if it has an error event), each counted in the batch
        # that ends it: the request event's (v1), or the batch holding its lines (the seed logger
        # writes no request event, and a request's lines are written together). The frame's
        # "requests" and "errors" and these totals count the same things; error events (OOMs
        # and other exceptions, retried or not) are a count of their own.
        requests, failed, error_events, newest = self.con.execute(
            f"""WITH b AS (SELECT * FROM {STORE}.events WHERE file_id = ?),
                r AS (SELECT bool_or(stage = 'request') OR bool_or(source_format = 'legacy') AS ends,
                             coalesce(max(CASE WHEN stage = 'request' THEN status END),
                                      CASE WHEN count(CASE WHEN stage = 'error' THEN 1 END) > 0
                                           THEN 'error' ELSE 'ok' END) AS status
                      FROM b WHERE request_id IS NOT NULL GROUP BY session_id, request_id)
            SELECT (SELECT count(*) FROM r WHERE ends),
                   (SELECT count(*) FROM r WHERE ends AND status = 'error'),
                   (SELECT count(*) FROM b WHERE stage = 'error'),
                   (SELECT epoch(max(ts)) FROM b)""", [fid]).fetchone()  # fmt: skip
        self.total_requests += requests
        self.total_errors += failed
        self.total_error_events += error_events
        if newest is not None:
            self.newest = newest if self.newest is None else max(self.newest, newest)

    def trim(self, now: float) -> None:
        """Events older than the window leave the store (and so do batches left empty)."""
        self.con.execute(f"DELETE FROM {STORE}.events WHERE ts < to_timestamp(?)", [now - self.seconds])
        held = self.con.execute(f"SELECT count(*) FROM {STORE}.events").fetchone()[0]
        if held > MAX_WINDOW_EVENTS:
            cut = self.con.execute(f"SELECT ts FROM {STORE}.events ORDER BY ts DESC LIMIT 1 OFFSET ?",
                                   [MAX_WINDOW_EVENTS]).fetchone()[0]  # fmt: skip
            self.con.execute(f"DELETE FROM {STORE}.events WHERE ts <= ?", [cut])
            self.complete_from = max(self.complete_from or 0.0, cut.timestamp())
        alive = {r[0] for r in self.con.execute(f"SELECT DISTINCT file_id FROM {STORE}.events").fetchall()}
        gone = [fid for fid in self.batches if fid not in alive]
        for fid in gone:
            del self.batches[fid]
        if gone:
            self.con.execute(f"DELETE FROM {STORE}.files WHERE list_contains(?, file_id)", [gone])

    def open_views(self, now: float, materialize: bool) -> tuple[dict, dict]:
        """Trim to the window at ``now`` and define the views over what is held (``requests``
        computed once either way: the metric queries read it several times; ``sessions`` only
        with ``materialize``). Returns the log set's ingest block and window, as ``ingest.open``'s."""
        self.trim(now)
        lo = datetime.fromtimestamp(now - self.seconds, UTC)
        for name, kind in self.con.execute(
                "SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE temporary AND table_name IN ('requests', 'sessions') "
                "UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() WHERE temporary "
                "AND view_name IN ('requests', 'sessions')").fetchall():  # fmt: skip
            self.con.execute(f"DROP {kind} {name}")
        define_views(self.con, STORE, list(self.batches.values()), lo, None, materialize=materialize, derived=None)
        if not materialize:
            self.con.execute("DROP VIEW requests")
            self.con.execute(f"CREATE TEMP TABLE requests AS {view_sql('requests')}")
        events = self.con.execute("SELECT count(*) FROM events").fetchone()[0]
        ingest = {"files": len(self.batches), "events": int(events), "bad_lines": 0}
        return ingest, {"since": lo.isoformat(), "until": None}
