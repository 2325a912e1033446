"""The background writer: turns queued event tuples into JSONL lines and appends them.

The caller's thread only appends ``(ts, stage, duration_ms, fields)`` to a ``collections.deque``
(measured cheaper than ``queue.SimpleQueue.put``: bench/collector_overhead.py). This thread wakes
every ``poll_s`` (0.1 s; at most 1 s), drains the deque, formats timestamps and encodes JSON,
groups lines by local date and appends each group with one ``os.write`` under the directory
lock (collector/files.py). It never raises: failures count the lines as dropped and print one
line to stderr per outage.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import time
from collections import deque

from dslogs_collector.files import LogFiles, gzip_file, remove_stale_tmp
from dslogs_collector.schema import SCHEMA_VERSION
from dslogs_collector.values import (
    HARD,
    LOG_EVENT_DEFAULT,
    MAX_EVENT_BYTES,
    MAX_KEY_CHARS,
    MAX_STR_CHARS,
    NORMAL,
    NOTHING,
    PLAIN,
    RESERVED,
    cut_str,
    rename_reserved,
    safe,
    safe_duration,
    safe_fields,
)

MAX_BATCH = 20_000  # events per write: bounds the memory of one batch
MAX_ERROR_MSG = 300
MAX_CACHED_STAGES = 1000  # stage names whose line head is cached (an app could invent many)
MAX_FLAT_DICT = 32  # a dict field with at most this many plain values takes the fast path
_MS3 = [f"{i:03d}" for i in range(1000)]


class Flush:
    """A marker put in the queue by ``flush()``; set once everything before it is written."""

    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()


def _not_plain(o):
    # The fast path takes plain values only; anything else goes through collector/values.py.
    raise TypeError(type(o).__name__)


def _json_default(o):
    return safe(o)


_plain_types = PLAIN.issuperset


def _flat_values(values) -> bool:
    """Plain values, or small dicts of plain values (generate's ``params``): what the fast
    path's C encoder may take without a long stall (no big or deep container)."""
    for v in values:
        c = v.__class__
        if c is dict:
            if len(v) > MAX_FLAT_DICT or not _plain_types(map(type, v.values())):
                return False
        elif c not in PLAIN:
            return False
    return True


_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_json_default
).encode
try:  # the C encoder made once: JSONEncoder.encode builds a new one per call (~1 µs here)
    from json.encoder import c_make_encoder as _c_make_encoder
    from json.encoder import encode_basestring as _c_basestring
except ImportError:  # pragma: no cover - no C accelerator
    _c_make_encoder = None
_fast_chunks = (
    _c_make_encoder(None, _not_plain, _c_basestring, None, ":", ",", False, False, False)
    if _c_make_encoder is not None else None
)
# Encodes what collector/values.py made safe (no NaN, str keys, plain types) without building an
# encoder per call.
_safe_chunks = (
    _c_make_encoder(None, _json_default, _c_basestring, None, ":", ",", False, False, False)
    if _c_make_encoder is not None else None
)
_encode_ascii = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=_json_default
).encode


class TsFormatter:
    """RFC 3339 local time with milliseconds and offset; one localtime() per second."""

    __slots__ = ("_sec", "_base", "_off", "_date")

    def __init__(self):
        self._sec = None

    def parts(self, sec: int) -> tuple[str, str, str]:
        """(``YYYY-MM-DDTHH:MM:SS``, ``+HH:MM``, ``YYYYMMDD``) of local second ``sec``."""
        if sec != self._sec:
            lt = time.localtime(sec)
            off = lt.tm_gmtoff or 0
            sign = "+" if off >= 0 else "-"
            off = abs(off)
            self._sec = sec
            self._base = time.strftime("%Y-%m-%dT%H:%M:%S", lt)
            self._off = f"{sign}{off // 3600:02d}:{off % 3600 // 60:02d}"
            self._date = time.strftime("%Y%m%d", lt)
        return self._base, self._off, self._date

    def __call__(self, t: float) -> tuple[str, str]:
        total_ms = math.floor(t * 1000.0 + 0.5)  # nearest ms: 0.1 s after midnight is .100
        sec, ms = divmod(total_ms, 1000)
        base, off, date = self.parts(sec)
        return f"{base}.{ms:03d}{off}", date


class Writer:
    """Owns the queue's consumer side, the files and the counters."""

    def __init__(self, queue: deque, *, log_dir: str, prefix: str, max_bytes: int, gzip_closed: bool,
                 clock, host: str | None = None, poll_s: float = 0.1, health_interval_s: float = 60.0,
                 write=os.write, stderr=None):
        self.queue = queue
        self.files = LogFiles(log_dir, prefix, max_bytes, write=write)
        # No line longer than this (bytes, newline included): an oversized event is cut down.
        self.line_limit = min(MAX_EVENT_BYTES, self.files.max_bytes)
        # The fast path's bodies stay under this many characters (6 bytes each at worst, a lone
        # surrogate's JSON escape), which also means no string in them is over MAX_STR_CHARS.
        self._fast_chars = min(MAX_STR_CHARS, (self.line_limit - 1024) // 6)
        self.gzip_closed = gzip_closed
        self.clock = clock
        self.host = host or socket.gethostname()
        self.poll_s = min(max(poll_s, 0.001), 1.0)  # "flush at least every second"
        self.health_interval_s = health_interval_s
        self._stderr = stderr
        self.written = 0
        self.dropped_write = 0  # lines lost to I/O errors (queue overflow is counted by the Tracer)
        self.bytes_written = 0
        self.received = 0  # events taken off the queue (each ends up written or dropped_write)
        self.heartbeats = 0  # this writer's own `collector` lines (also written or dropped_write)
        self.max_queued = 0
        self.dropped_queue = lambda: 0  # the Tracer's overflow counter, read for health events
        self._fmt = TsFormatter()
        self._failing = False
        self._said: set[str] = set()
        self._next_health = 0.0
        self._gzip_jobs: deque[str] = deque()
        self._gzip_thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._set_identity()
        self.thread = self._start()

    def _set_identity(self) -> None:
        self.pid = os.getpid()
        self._idpart = f'"host":{_encode(self.host)},"pid":{self.pid}'
        self._mids: dict[str, str] = {}  # stage -> '<offset>","stage":"<stage>","host":…,"pid":…'
        self._mids_off = None

    def _start(self) -> threading.Thread:
        t = threading.Thread(target=self._run, name="dslogs-writer", daemon=True)
        t.start()
        return t

    # -- control (any thread) --------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> bool:
        self._stopping = True
        self._wake.set()
        if self.thread is threading.current_thread():
            return False
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def after_fork(self) -> None:
        """Forked child: no writer thread survived; start one with fresh identity and fds."""
        self.files.after_fork()
        self._wake = threading.Event()
        self._stopping = False
        self._gzip_jobs = deque()
        self._gzip_thread = None
        self.written = self.dropped_write = self.bytes_written = self.max_queued = 0
        self.received = self.heartbeats = 0
        self._next_health = 0.0
        self._set_identity()
        self.thread = self._start()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._health()  # a start heartbeat: this process began writing here
        except Exception:
            pass
        self._sweep_tmp()
        while True:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            stopping = self._stopping
            try:
                self._drain()
                if self.clock() >= self._next_health or stopping:
                    self._health()
            except Exception as e:  # never let the thread die
                self._report(f"writer error: {type(e).__name__}: {e}", key=type(e).__name__)
            if stopping:
                break
        self._finish_gzip()
        self.files.close()

    def _drain(self) -> None:
        q = self.queue
        n = len(q)
        if n > self.max_queued:
            self.max_queued = n
        while q:
            items = []
            markers = []
            pop = q.popleft
            try:
                for _ in range(MAX_BATCH):
                    item = pop()
                    if item.__class__ is tuple:
                        items.append(item)
                    else:
                        markers.append(item)
            except IndexError:
                pass
            if items:
                self.received += len(items)
                self._write_items(items)
            for m in markers:
                m.done.set()

    def _line(self, ts, stage, dur, fields) -> tuple[str | None, str]:
        """One line for any input (the slow path): odd values, reserved names, NaN, objects,
        oversized events. Returns (None, date) when not even a cut-down line fits."""
        try:
            ts = float(ts)
            if not math.isfinite(ts):
                raise ValueError
        except Exception:  # event_at() with a bad timestamp: now
            ts = time.time()
        tstr, date = self._fmt(ts)
        # type(), not .__class__: a stage object whose attribute access raises must not cost
        # the event (safe() writes it as its <TypeName>)
        if type(stage) is not str or len(stage) > MAX_KEY_CHARS:
            s = safe(stage, (MAX_KEY_CHARS, 8, 1))
            stage = s if type(s) is str else _encode(s)
        head = f'{{"v":{SCHEMA_VERSION},"ts":"{tstr}","stage":{_encode(stage)},{self._idpart}'
        fields = rename_reserved(fields) if fields.__class__ is dict else {"fields_": fields}
        if dur is not None:
            num, extra = safe_duration(dur)
            if extra is NOTHING:
                if num is None:
                    head += ',"duration_ms":null'
                elif num.__class__ is float:
                    head += f',"duration_ms":{num:.3f}'
                else:
                    head += f',"duration_ms":{num}'
            else:  # not a number: kept under another name
                name = "duration_ms_"
                while name in fields:
                    name += "_"
                fields[name] = extra
        limit = self.line_limit
        text = self._join(head, safe_fields(fields, NORMAL))
        if _utf8_len(text) <= limit:
            return text, date
        cut = safe_fields(fields, HARD)
        cut[_free_name(cut, "truncated")] = True
        text = self._join(head, cut)
        if _utf8_len(text) <= limit:
            return text, date
        ids = {k: cut_str(str(fields[k]), 128) for k in ("session_id", "request_id") if fields.get(k) is not None}
        ids[_free_name(ids, "truncated")] = True
        text = self._join(head, ids)
        if _utf8_len(text) <= limit:
            return text, date
        return None, date

    @staticmethod
    def _join(head: str, fields: dict) -> str:
        if not fields:
            return head + "}\n"
        body = "".join(_safe_chunks(fields, 0)) if _safe_chunks is not None else _encode(fields)
        return f"{head},{body[1:]}\n"

    def _write_items(self, items: list) -> None:
        """Encode and append. The loop inlines the common case (int/float/no duration, no
        reserved field names, plain str/int/float/bool/None values, a short body) with the
        line's head cached per second and stage: ~2x faster than calling ``_line`` per event."""
        groups: dict[str, list[str]] = {}
        bad = 0
        line = self._line
        chunks = _fast_chunks
        parts = self._fmt.parts
        mids = self._mids
        reserved_free = RESERVED.isdisjoint
        plain_types = _plain_types
        flat_values = _flat_values
        fast_chars = self._fast_chars
        isfinite = math.isfinite
        floor = math.floor
        join = "".join
        ms3 = _MS3
        default_dur = LOG_EVENT_DEFAULT
        cur_sec = None
        head = ""
        lines: list[str] = []
        for item in items:
            ts, stage, dur, fields = item
            try:
                if (dur is None or dur is default_dur) and fields:
                    # positional-only signature: duration_ms= arrives among the fields
                    if "duration_ms" in fields:
                        dur = fields.pop("duration_ms")
                    elif dur is default_dur:
                        dur = -1
                elif dur is default_dur:
                    dur = -1
                sec, ms = divmod(floor(ts * 1000.0 + 0.5), 1000)
                if sec != cur_sec:
                    base, off, date = parts(sec)
                    if off != self._mids_off:  # DST or TZ change: the cached heads are stale
                        mids.clear()
                        self._mids_off = off
                    head = f'{{"v":{SCHEMA_VERSION},"ts":"{base}.'
                    cur_sec = sec
                    lines = groups.get(date)
                    if lines is None:
                        lines = groups[date] = []
                mid = mids.get(stage) if stage.__class__ is str else None
                if (mid is not None and fields and chunks is not None and reserved_free(fields)
                        and (dur is None or dur.__class__ is int
                             or (dur.__class__ is float and isfinite(dur)))
                        and (plain_types(map(type, fields.values())) or flat_values(fields.values()))):
                    try:
                        body = join(chunks(fields, 0))
                    except Exception:  # NaN, a non-str key
                        body = None
                    if body is not None and len(body) <= fast_chars:
                        if dur is None:
                            lines.append(f"{head}{ms3[ms]}{mid},{body[1:]}\n")
                        elif dur.__class__ is int:
                            lines.append(f'{head}{ms3[ms]}{mid},"duration_ms":{dur},{body[1:]}\n')
                        else:  # 3 decimals (µs); '%.3f' is ~2.5x cheaper than repr(round())
                            lines.append(f'{head}{ms3[ms]}{mid},"duration_ms":{dur:.3f},{body[1:]}\n')
                        continue
                if (mid is None and stage.__class__ is str and len(stage) <= 100
                        and len(mids) < MAX_CACHED_STAGES):
                    mids[stage] = f'{self._mids_off}","stage":{_encode(stage)},{self._idpart}'
            except Exception:
                pass
            try:
                text, date = line(ts, stage, dur, fields)
            except Exception:
                text = None
            if text is None:
                bad += 1
                continue
            group = groups.get(date)
            if group is None:
                group = groups[date] = []
            group.append(text)
        if bad:
            self.dropped_write += bad
            self._report(f"{bad} events could not be written as JSON within {self.line_limit} bytes "
                         "and were dropped (counted; further ones are only counted)", key="encode")
        for date, group in groups.items():
            if group:
                self._append(date, group)

    def _append(self, date: str, lines: list[str]) -> None:
        files = self.files
        try:
            try:
                n = files.append(date, lines)
            except UnicodeEncodeError:  # lone surrogates: \u-escape them (nothing written yet)
                lines = [_reencode_ascii(x) for x in lines]
                n = files.append(date, lines)
        except OSError as e:
            # Part of a batch split by a rotation may be on disk: count exactly that as written.
            done = files.done_lines
            self.written += done
            self.bytes_written += files.done_bytes
            self.dropped_write += len(lines) - done
            self._report(f"cannot write logs to {files.dir!r} ({e.strerror or e}); "
                         "events are dropped and counted until it works again")
            self._failing = True
            self._collect_closed()
            return
        self.written += len(lines)
        self.bytes_written += n
        if self._failing:
            self._failing = False
            self._report(f"writing logs to {files.dir!r} works again", once=False)
        self._collect_closed()

    def _sweep_tmp(self) -> None:
        """Stale gzip temporaries of dead processes (collector/files.remove_stale_tmp): at the
        start, and at each rotation for those too fresh to judge at the start."""
        n = remove_stale_tmp(self.files.dir, self.files.prefix)
        if n:
            self._report(f"removed {n} unfinished gzip file(s) of processes that no longer exist "
                         f"from {self.files.dir!r}", key="stale_tmp")

    def _collect_closed(self) -> None:
        if self.files.closed_files:
            self._sweep_tmp()
            if self.gzip_closed:
                self._gzip_jobs.extend(self.files.closed_files)
                self._kick_gzip()
            self.files.closed_files.clear()

    def _health(self) -> None:
        self._next_health = self.clock() + self.health_interval_s
        ts = self.clock()
        dropped = self.dropped_queue() + self.dropped_write
        fields = {"queued": self.max_queued, "written": self.written, "dropped": dropped,
                  "bytes_written": self.bytes_written}
        self.max_queued = len(self.queue)
        self.heartbeats += 1
        text, date = self._line(ts, "collector", None, fields)
        if text is None:  # pragma: no cover - a line of four ints always fits
            self.dropped_write += 1
            return
        self._append(date, [text])

    def _report(self, msg: str, once: bool = True, key: str | None = None) -> None:
        """One stderr line per outage (``once``), or per ``key`` ever: never one per event."""
        if key is not None:
            if key in self._said:
                return
            self._said.add(key)
        elif once and self._failing:
            return
        try:
            (self._stderr or sys.stderr).write(f"dslogs collector: {msg}\n")
        except Exception:
            pass

    # -- gzip of rotated files, on its own thread (10 MB takes ~0.3 s) ---------------------
    def _kick_gzip(self) -> None:
        t = self._gzip_thread
        if t is None or not t.is_alive():
            self._gzip_thread = threading.Thread(target=self._gzip_loop, name="dslogs-gzip", daemon=True)
            self._gzip_thread.start()

    def _gzip_loop(self) -> None:
        while self._gzip_jobs:
            path = self._gzip_jobs.popleft()
            try:
                gzip_file(path)
            except Exception as e:
                self._report(f"cannot gzip {path!r}: {e}", key="gzip")

    def _finish_gzip(self) -> None:
        t = self._gzip_thread
        if t is not None:
            t.join(30)
        if self._gzip_jobs:  # queued after that thread's last look
            self._gzip_loop()


def _utf8_len(text: str) -> int:
    """Bytes on disk: UTF-8, a lone surrogate as its 6-byte JSON escape."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "backslashreplace"))


def _free_name(fields: dict, name: str) -> str:
    while name in fields:
        name += "_"
    return name


def _reencode_ascii(line: str) -> str:
    try:
        line.encode("utf-8")
        return line
    except UnicodeEncodeError:
        return _encode_ascii(json.loads(line)) + "\n"
