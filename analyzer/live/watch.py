"""`dslogs watch`: a live terminal view over log files being written (docs/watch.md).

``LogTail`` reads only appended bytes: one offset per file, a partial last line kept until its
newline arrives. It follows rotation (a new ``.N.jsonl`` file is read from its start) and the
gzip of a file it follows: the collector renames ``X.jsonl.gz`` into place and then removes
``X.jsonl``; once the plain file is gone, the ``.gz`` is decompressed and only the bytes past
the offset already read are used (nothing counted twice, nothing lost). A ``.gz`` whose plain
file is still there (``gzip -k``) is a copy and is never read.

At start the window is filled from what the files already hold (files touched within the
window, at most ``BACKFILL_BYTES`` from the end of each). ``Window`` keeps the parsed events of
the last ``--window`` and computes a frame: requests/s, in flight, errors, TTFT/TPOT/e2e
percentiles, GPU utilisation and memory, reserved memory per process, and the rules firing now
(the analyzer's own rules run on the window's lines every ``RULES_EVERY_S``).
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
import re
import tempfile
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from analyzer.core import format as fmt
from analyzer.core.errors import UsageError
from analyzer.core.time import parse_iso
from analyzer.core.time import zone as tz_zone
from analyzer.ingest.discovery import name_sort_key

BACKFILL_BYTES = 32 << 20
MAX_WINDOW_LINES = 300_000
RULES_EVERY_S = 10.0
GONE_GRACE_S = 300.0
INFLIGHT_STALE_S = 600.0  # a request started this long ago without an end is abandoned
START_STAGES = {"input", "tokenize", "queue", "prefill", "decode", "inference"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str, option: str) -> float:
    """`2s`, `500ms`, `15m`, `1h` (a bare number is seconds) -> seconds."""
    m = _DURATION.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"{option} {text!r}: expected a duration like 2s, 500ms, 15m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


# -- tailing ------------------------------------------------------------------------------------


@dataclass
class FileState:
    path: str
    ino: int
    offset: int = 0  # bytes of the plain file consumed (complete lines and the pending tail)
    pending: bytes = b""  # a last line without its newline yet


@dataclass
class LogTail:
    """Appended lines of the log files under ``paths`` (directories recursive, files, globs)."""

    paths: list[str]
    states: dict[str, FileState] = field(default_factory=dict)
    done_gz: set[str] = field(default_factory=set)
    # Followed files that disappeared: their .gz may show up a moment later (the listing that
    # saw the plain file go can predate the rename of its .gz); kept GONE_GRACE_S seconds.
    gone: dict[str, tuple[FileState, float]] = field(default_factory=dict)
    bytes_read: int = 0
    bad_lines: int = 0

    def discover(self) -> tuple[list[str], list[str]]:
        plain, gz = set(), set()
        for raw in self.paths:
            p = Path(raw)
            if p.is_dir():
                found = [str(f) for f in p.rglob("*.jsonl*")]
            elif p.exists():
                found = [str(p)]
            else:
                found = glob.glob(raw, recursive=True)
            for f in found:
                if f.endswith(".jsonl"):
                    plain.add(f)
                elif f.endswith(".jsonl.gz"):
                    gz.add(f)
        # write order (day, then rotation index): the window then receives lines nearly in time order
        return sorted(plain, key=name_sort_key), sorted(gz, key=name_sort_key)

    def start(self, since_epoch: float | None) -> list[bytes]:
        """Begin tailing. With ``since_epoch``, the lines of files touched since then (the
        window's backfill); other files are followed from their current end."""
        plain, gz = self.discover()
        lines: list[bytes] = []
        for path in plain:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            state = FileState(path, st.st_ino, st.st_size)
            self.states[path] = state
            if since_epoch is not None and st.st_mtime >= since_epoch:
                state.offset = max(0, st.st_size - BACKFILL_BYTES)
                lines += self._read_plain(state, skip_partial=state.offset > 0)
        for path in gz:
            self.done_gz.add(path)
            plain_twin = path[:-3]
            if plain_twin in self.states:
                continue  # a copy of a file being followed (gzip -k)
            try:
                recent = since_epoch is not None and os.stat(path).st_mtime >= since_epoch
            except FileNotFoundError:
                continue
            if recent:
                lines += self._read_gz(path, 0, b"")
        return lines

    def poll(self) -> list[bytes]:
        """Complete lines appended since the last poll, over every followed file."""
        plain, gz = self.discover()
        lines: list[bytes] = []
        present = set(plain)
        for path in plain:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                present.discard(path)
                continue
            state = self.states.get(path)
            if state is None or state.ino != st.st_ino or st.st_size < state.offset:
                # new (rotation), replaced or truncated: read it from its start
                state = FileState(path, st.st_ino, 0)
                self.states[path] = state
            if st.st_size > state.offset:
                lines += self._read_plain(state)
        for path in gz:
            if path in self.done_gz:
                continue
            twin = path[:-3]
            if twin in present:
                continue  # still being gzipped, or a `gzip -k` copy: the plain file is the source
            state = self.states.pop(twin, None)
            if state is None and twin in self.gone:
                state = self.gone.pop(twin)[0]
            self.done_gz.add(path)
            if state is None:
                lines += self._read_gz(path, 0, b"")  # closed and gzipped before we saw it
            else:
                lines += self._read_gz(path, state.offset, state.pending)
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
        state.offset += len(data)
        self.bytes_read += len(data)
        if skip_partial:
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut >= 0 else b""
        return self._split(state, data)

    def _read_gz(self, path: str, skip: int, pending: bytes) -> list[bytes]:
        try:
            with gzip.open(path, "rb") as fh:
                remaining = skip
                while remaining > 0:
                    chunk = fh.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                data = fh.read()
        except (OSError, EOFError, zlib.error):
            return []
        self.bytes_read += len(data)
        state = FileState(path, 0, 0, pending)
        lines = self._split(state, data)
        if state.pending.strip():
            lines.append(state.pending)  # a closed file's last line may lack its newline
        return lines

    @staticmethod
    def _split(state: FileState, data: bytes) -> list[bytes]:
        if not data:
            return []
        data = state.pending + data
        parts = data.split(b"\n")
        state.pending = parts.pop()
        return [p for p in parts if p.strip()]


# -- the window ---------------------------------------------------------------------------------


def _epoch(event: dict, zone=None) -> float | None:
    ts = event.get("ts") or event.get("timestamp")
    if not isinstance(ts, str):
        return None
    try:
        stamp = parse_iso(ts)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        # legacy naive time: --tz, else this machine's zone (as the analyzer reads it)
        stamp = stamp.replace(tzinfo=zone) if zone is not None else stamp.astimezone()
    return stamp.timestamp()


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) and v >= 0 else None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class Window:
    """Events of the last ``seconds``; ``frame(now)`` summarises them."""

    seconds: float
    events: deque = field(default_factory=deque)  # (epoch, event dict, raw line)
    open_requests: dict = field(default_factory=dict)  # request key -> first seen epoch
    finished: dict = field(default_factory=dict)  # request key -> end epoch (an end read before its start)
    total_requests: int = 0
    total_errors: int = 0
    bad_lines: int = 0
    newest: float | None = None
    zone: object = None  # ZoneInfo for naive (legacy) timestamps

    def add(self, lines: list[bytes]) -> None:
        for raw in lines:
            try:
                event = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                self.bad_lines += 1
                continue
            if not isinstance(event, dict):
                self.bad_lines += 1
                continue
            t = _epoch(event, self.zone)
            if t is None:
                self.bad_lines += 1
                continue
            stage = event.get("stage")
            key = (event.get("host"), event.get("pid"), event.get("session_id"), event.get("request_id"))
            if stage in START_STAGES and event.get("request_id") is not None:
                if key not in self.finished:
                    self.open_requests.setdefault(key, t)
            elif stage == "request":
                self.open_requests.pop(key, None)
                self.finished[key] = t
                self.total_requests += 1
            if stage == "error":
                self.total_errors += 1
            self.events.append((t, event, raw))
            self.newest = t if self.newest is None else max(self.newest, t)
        while len(self.events) > MAX_WINDOW_LINES:
            self.events.popleft()

    def trim(self, now: float) -> None:
        cutoff = now - self.seconds
        # events arrive per file in time order; across files nearly so: trim from the left
        while self.events and self.events[0][0] < cutoff:
            self.events.popleft()
        for table in (self.open_requests, self.finished):
            for k, t in list(table.items()):
                if t < now - INFLIGHT_STALE_S:
                    del table[k]

    def frame(self, now: float) -> dict:
        self.trim(now)
        ttft, tpot, e2e = [], [], []
        requests = errors = last_min = 0
        gpus: dict = {}
        procs: dict = {}
        hosts = set()
        cutoff = now - self.seconds
        for t, e, _ in self.events:
            if t < cutoff:
                continue  # an older line behind a newer one from another file
            stage = e.get("stage")
            hosts.add(e.get("host"))
            if stage == "request":
                requests += 1
                last_min += t >= now - 60
                if (v := _num(e.get("ttft_ms"))) is not None:
                    ttft.append(v)
                if (v := _num(e.get("duration_ms"))) is not None:
                    e2e.append(v)
                reserved = _num(e.get("reserved_mb_after"))
                if reserved is not None:
                    procs[(e.get("host"), e.get("pid"))] = (t, reserved, _num(e.get("allocated_mb_after")))
            elif stage == "decode":
                d, n = _num(e.get("duration_ms")), e.get("output_len")
                if d is not None and isinstance(n, int) and n > 1:
                    tpot.append(d / (n - 1))
            elif stage == "inference" and "v" not in e:
                d, n = _num(e.get("duration_ms")), e.get("output_len")
                if d is not None and isinstance(n, int) and n > 0:
                    tpot.append(d / n)  # legacy: an upper bound
            elif stage == "error":
                errors += 1
            elif stage == "gpu_sample":
                gpus[(e.get("host"), e.get("gpu_index"))] = (t, e)
            elif stage == "gpu_memory":
                reserved = _num(e.get("reserved_mb"))
                if reserved is not None:
                    procs[(e.get("host"), e.get("pid"))] = (t, reserved, _num(e.get("allocated_mb")))
        oldest = min((t for t, _, _ in self.events if t >= cutoff), default=None)
        span = min(self.seconds, max(1.0, now - oldest)) if oldest is not None else self.seconds
        return {
            "now": now,
            "window_s": self.seconds,
            "events": len(self.events),
            "hosts": sorted(h for h in hosts if h),
            "requests": requests,
            "requests_per_s": round(requests / span, 3) if oldest is not None else 0.0,
            "requests_per_s_1m": round(last_min / 60.0, 3),
            "inflight": len(self.open_requests),
            "errors": errors,
            "error_rate": round(errors / requests, 4) if requests else None,
            "ttft_ms": {"p50": _pct(ttft, 0.5), "p95": _pct(ttft, 0.95), "count": len(ttft)},
            "tpot_ms": {"p50": _pct(tpot, 0.5), "p95": _pct(tpot, 0.95), "count": len(tpot)},
            "e2e_ms": {"p50": _pct(e2e, 0.5), "p95": _pct(e2e, 0.95), "count": len(e2e)},
            "gpus": [{"host": h, "gpu_index": i, "age_s": round(now - t, 1), "util_pct": _num(e.get("gpu_util_pct")),
                      "mem_used_mb": _num(e.get("gpu_mem_used_mb")), "mem_total_mb": _num(e.get("gpu_mem_total_mb"))}
                     for (h, i), (t, e) in sorted(gpus.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))],  # fmt: skip
            "processes": [{"host": h, "pid": p, "age_s": round(now - t, 1), "reserved_mb": r, "allocated_mb": a}
                          for (h, p), (t, r, a) in sorted(procs.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))],  # fmt: skip
            "newest_event_age_s": round(now - self.newest, 1) if self.newest is not None else None,
            "total_requests": self.total_requests,
            "total_errors": self.total_errors,
            "bad_lines": self.bad_lines,
        }

    def raw_lines(self) -> list[bytes]:
        return [raw for _, _, raw in self.events]


def rules_now(lines: list[bytes], tz: str | None = None) -> list[dict]:
    """The analyzer's rules over the window's lines (a small temporary JSONL, never the logs)."""
    from analyzer.core.errors import DslogsError
    from analyzer.model.report import analyze_logs

    if not lines:
        return []
    with tempfile.TemporaryDirectory(prefix="dslogs-watch-") as tmp:
        path = Path(tmp) / "window.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        try:
            model = analyze_logs([str(path)], tz=tz, use_cache=False)
        except DslogsError:
            return []
    return [{"rule": f.get("rule"), "severity": f.get("severity"), "message": f.get("message"),
             "sessions": f.get("session_count") or len(f.get("session_ids") or [])}
            for f in model.get("findings") or [] if f.get("rule") != "bad_lines"]  # fmt: skip


# -- rendering ----------------------------------------------------------------------------------


def render_frame(frame: dict, rules: list[dict] | None, paths: list[str]):
    """A rich renderable of one frame (log strings shown as plain text, never markup)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    stamp = datetime.fromtimestamp(frame["now"]).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    window_m = frame["window_s"] / 60
    head = Text.assemble(("dslogs watch ", "bold"), (", ".join(paths), ""), f"  ·  {stamp}  ·  window {window_m:g} min")
    age = frame["newest_event_age_s"]
    head.append(f"  ·  newest event {age:g} s ago" if age is not None else "  ·  no events yet")

    top = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("req/s (1 min)", "req/s (window)", "requests", "in flight", "errors", "error rate", "hosts"):
        top.add_column(col, justify="right")
    rate = fmt.share(frame["error_rate"])
    top.add_row(f"{frame['requests_per_s_1m']:.2f}", f"{frame['requests_per_s']:.2f}", str(frame["requests"]),
                str(frame["inflight"]), str(frame["errors"]), rate, Text(", ".join(frame["hosts"]) or "—"))  # fmt: skip

    lat = Table(title="latency over the window (ms)", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("", "p50", "p95", "n"):
        lat.add_column(col, justify="right" if col else "left")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end")):
        p = frame[key]
        lat.add_row(label, fmt.terminal_ms(p["p50"]), fmt.terminal_ms(p["p95"]), str(p["count"]))

    gpu = Table(title="GPU (latest sample)", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("host", "gpu", "util %", "memory used", "age s"):
        gpu.add_column(col, justify="left" if col == "host" else "right")
    for g in frame["gpus"]:
        mem = "—" if g["mem_used_mb"] is None else f"{g['mem_used_mb']:,.0f} / {g['mem_total_mb'] or 0:,.0f} MiB"
        gpu.add_row(Text(str(g["host"])), str(g["gpu_index"]), fmt.terminal_ms(g["util_pct"]), mem, f"{g['age_s']:g}")
    if not frame["gpus"]:
        gpu.add_row("no gpu_sample events in the window", "", "", "", "")

    proc = Table(title="reserved GPU memory per process", title_justify="left", box=None,
                 header_style="bold", pad_edge=False)  # fmt: skip
    for col in ("host", "pid", "reserved MiB", "allocated MiB", "age s"):
        proc.add_column(col, justify="left" if col == "host" else "right")
    for p in frame["processes"]:
        proc.add_row(Text(str(p["host"])), str(p["pid"]), fmt.terminal_ms(p["reserved_mb"]), fmt.terminal_ms(p["allocated_mb"]), f"{p['age_s']:g}")
    if not frame["processes"]:
        proc.add_row("no memory readings in the window", "", "", "", "")

    rule_table = Table(title="rules firing now", title_justify="left", box=None,
                       header_style="bold", pad_edge=False)  # fmt: skip
    for col in ("severity", "rule", "sessions", "message"):
        rule_table.add_column(col, justify="right" if col == "sessions" else "left", overflow="fold")
    if rules is None:
        rule_table.add_row("", "(evaluating…)", "", "")
    elif not rules:
        rule_table.add_row("", "none", "", "")
    for r in rules or []:
        style = {"critical": "bold red", "warning": "yellow"}.get(r["severity"], "")
        rule_table.add_row(Text(str(r["severity"]), style=style), Text(str(r["rule"])), str(r["sessions"] or ""),
                           Text(" ".join(str(r["message"] or "").split())[:160]))  # fmt: skip
    foot = Text(f"since start: {frame['total_requests']} requests, {frame['total_errors']} errors, "
                f"{frame['bad_lines']} unreadable lines · Ctrl-C quits", style="dim")  # fmt: skip
    return Group(head, Text(""), top, Text(""), lat, Text(""), gpu, Text(""), proc, Text(""), rule_table, Text(""), foot)


# -- the command --------------------------------------------------------------------------------


def watch(paths: list[str], interval: str = "2s", window: str = "15m", once: bool = False,
          tz: str | None = None, console=None, max_frames: int | None = None) -> int:
    """Run the live view (or print one frame with ``once``). Returns the exit code."""
    from rich.console import Console
    from rich.live import Live

    interval_s = parse_duration(interval, "--interval")
    window_s = parse_duration(window, "--window")
    for raw in paths:
        if not Path(raw).exists() and not glob.glob(raw, recursive=True):
            raise UsageError(f"{raw}: no such file or directory")
    console = console or Console()
    tail = LogTail(list(paths))

    win = Window(window_s, zone=tz_zone(tz) if tz else None)
    now = time.time()
    win.add(tail.start(now - window_s))
    if once:
        frame = win.frame(time.time())
        console.print(render_frame(frame, rules_now(win.raw_lines(), tz), paths))
        return 0
    rules: list[dict] | None = None
    last_rules = 0.0
    frames = 0
    try:
        with Live(render_frame(win.frame(time.time()), rules, paths), console=console,
                  refresh_per_second=4, screen=False, transient=False) as live:  # fmt: skip
            while max_frames is None or frames < max_frames:
                win.add(tail.poll())
                now = time.time()
                if now - last_rules >= max(RULES_EVERY_S, interval_s):
                    rules = rules_now(win.raw_lines(), tz)
                    last_rules = time.time()
                live.update(render_frame(win.frame(now), rules, paths))
                frames += 1
                time.sleep(interval_s)
    except KeyboardInterrupt:
        console.print("dslogs watch: stopped")
    return 0
