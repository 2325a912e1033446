"""Trace schema v1 lines (collector/trace_schema_v1.json) for one host: request events, samplers, collector.

Lines are built with f-strings (not json.dumps: ~5x faster) from numbers and ASCII ids only,
so they stay valid JSON; tests validate every line against the schema. Events are gathered in
UTC-hour buckets, sorted by time, and a bucket is written once no later session can reach it.

Samplers (``gpu_sample`` + ``process_sample``) tick at 1 Hz while a request is in flight and
for 10 s after it, and once a minute while the host is idle; the ``collector`` health event
comes once a minute, always. That keeps the 1 Hz view of every request without 170 k idle
lines per host-day.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from functools import cache
from operator import itemgetter
from random import Random

from dslogs.analyzer.simulate.files import RotatingWriter
from dslogs.analyzer.simulate.timefmt import TsFormatter
from dslogs.analyzer.simulate.traffic import (
    CONTEXT_MB,
    GPU_TOTAL_MB,
    KIND_CPU,
    KIND_THROTTLED,
    MS_PER_HOUR,
    NZ,
    Host,
    Req,
    Session,
    Z,
)

TAIL_MS = 10_000  # samplers stay at 1 Hz this long after a request ends
STARVED_OTHER_MB = 18_500.0  # gpu_starved: another process's memory on the GPU
RSS_GROWTH_MB = 420.0
BURST_BYTES_PER_S = 1.3e6  # log_volume: 1.3x the 1 MB/s of 000 §3.2
BURST_LINE_CHARS = 65_000
QUEUE_CAPACITY = 10_000
SLEW_MB = 300.0  # healthy memory never moves faster than this per sampler second
# A debug logger dumping logits: repetitive, so the gzipped files stay small.
DEBUG_PAYLOAD = "logits=tensor([[" + "0., " * ((BURST_LINE_CHARS - 80) // 4) + "]], device='cuda:0')"


_first = itemgetter(0)
_second = itemgetter(1)


def _r(x: float) -> int:
    return int(x + 0.5)


@cache
def _params(beams: int, max_new: int) -> str:
    """generate() arguments of article 003 §2.2 (num_beams and max_new_tokens vary by fault)."""
    return (
        f'{{"num_beams":{beams},"max_new_tokens":{max_new},"temperature":0.6,'
        f'"top_p":0.95,"do_sample":true}}'
    )


class V1Host:
    """Writes one host's stream: feed sessions in arrival order, then call finish()."""

    def __init__(self, host: Host, writer: RotatingWriter | None, rng: Random, *, bad_lines: bool = False):
        self.host = host
        self.w = writer
        self.count_only = writer is None
        self.rng = rng
        self.ts = TsFormatter(host.offset_min)
        self.hid = f'"host":"{host.name}","pid":{host.pid}'
        self.buckets: dict[int, list] = defaultdict(list)
        self.intervals: dict[int, list] = defaultdict(list)
        self.next_bucket = host.start_ms // MS_PER_HOUR
        self.last_bucket = (host.end_ms - 1) // MS_PER_HOUR
        self.phase = 100 + rng.randint(0, 799)  # the sampler thread's ms offset in each second
        self.events = 0
        self.request_events = 0  # count-only: events of requests (linear in the arrival rate)
        self.hour_load: list[tuple[int, int]] = []  # count-only: (seconds, busy seconds) per hour
        self.last_reserved = host.reserved_mb
        self.rss_base = rng.uniform(1230, 1320)
        self.threads = rng.randint(23, 27)
        self.thrash_up = False
        self.faults = host.faults
        self.drop_times: list[int] = []
        self.stats = {
            "gen_util_max": 0.0, "gen_ticks": 0, "mem_pct_max": 0.0, "swing_max_mb": 0.0,
            "starved_ticks": 0, "dropped": 0, "burst_bytes": 0, "burst_minute": None,
            "rss_first": None, "rss_last": None,
        }  # fmt: skip
        self.prev_mem = None
        self.bad_plan = BadLines(self) if bad_lines else None
        self.burst_ms = None
        if "log_volume" in host.faults:
            span = host.end_ms - host.start_ms
            # Mid-morning when the run covers it (traffic is up), else early in the run.
            at = host.start_ms + (10 * MS_PER_HOUR + 20 * 60_000 if span > 11 * MS_PER_HOUR else min(20 * 60_000, span // 3))
            self.burst_ms = -(-at // 60_000) * 60_000  # next whole minute (UTC offsets are whole hours)

    # -- requests --------------------------------------------------------------------------
    def add_session(self, s: Session) -> None:
        self._flush_until(int(s.requests[0].t0))
        buckets, intervals = self.buckets, self.intervals
        for r in s.requests:
            info = (_r(r.t0), _r(r.t_gen), _r(r.t_dec), _r(r.t_mem), r.util, r.reserved, s.kind)
            for b in range(info[0] // MS_PER_HOUR, (info[3] + TAIL_MS) // MS_PER_HOUR + 1):
                intervals[b].append(info)
            if self.count_only:
                n = self._count(r)
                self.events += n
                self.request_events += n
                continue
            lines = self._request_lines(s, r)
            b0 = info[0] // MS_PER_HOUR
            if b0 == info[3] // MS_PER_HOUR:
                buckets[b0].extend(lines)
            else:
                for item in lines:
                    buckets[(item[0] >> 4) // MS_PER_HOUR].append(item)

    @staticmethod
    def _count(r: Req) -> int:
        return 8 if r.status == "error" else (10 if r.error else 9)

    def _request_lines(self, s: Session, r: Req):
        ids = f'"session_id":"{s.sid}","request_id":"{r.rid}",{self.hid}'
        L = r.input_tokens
        a = int(r.t0 + 0.5)
        b = int(r.t_tok + 0.5)
        c = int(r.t_gen + 0.5)
        d = int(r.t_first + 0.5)
        e = int(r.t_dec + 0.5)
        f = int(r.t_fmt + 0.5)
        m = int(r.t_mem + 0.5)
        ta, tb, tc, td, te, tf, tm = self.ts.many(a, b, c, d, e, f, m)
        out = [
            (a << 4, f'{{"v":1,"ts":"{ta}","stage":"input",{ids},"input_len":{r.input_chars}}}'),
            ((b << 4) | 1, f'{{"v":1,"ts":"{tb}","stage":"tokenize",{ids},"duration_ms":{r.tok_ms:.2f},"input_len":{L}}}'),
            ((c << 4) | 2, f'{{"v":1,"ts":"{tc}","stage":"queue",{ids},"duration_ms":{r.queue_ms:.2f}}}'),
            ((c << 4) | 3, f'{{"v":1,"ts":"{tc}","stage":"kv_cache",{ids},"kv_seq_len":{L},"kv_cache_size_mb":{r.kv_mb:.1f}}}'),
            ((d << 4) | 4, f'{{"v":1,"ts":"{td}","stage":"prefill",{ids},"duration_ms":{r.prefill_ms:.2f},"input_len":{L},"kv_seq_len":{L}}}'),
        ]  # fmt: skip
        if r.error:
            o = int(r.t_oom + 0.5)
            etype, emsg, estage = r.error
            out.append(((o << 4) | 5, f'{{"v":1,"ts":"{self.ts(o)}","stage":"error",{ids},"error_type":"{etype}","error_msg":"{emsg}","failed_stage":"{estage}"}}'))  # fmt: skip
        if r.status == "ok":
            out.append(((e << 4) | 6, (
                f'{{"v":1,"ts":"{te}","stage":"decode",{ids},"duration_ms":{r.decode_ms:.2f},"output_len":{r.output_len},'
                f'"reasoning_len":{r.reasoning_len},"cpu_time_ms":{r.cpu_ms:.2f},"gpu_wait_pct":{r.gpu_wait:.1f},'
                f'"gpu_util_pct":{r.util:.1f},"params":{_params(r.beams, r.max_new)}}}'
            )))  # fmt: skip
            out.append(((f << 4) | 7, f'{{"v":1,"ts":"{tf}","stage":"format",{ids},"duration_ms":{r.format_ms:.2f}}}'))
            out.append(((f << 4) | 8, (
                f'{{"v":1,"ts":"{tf}","stage":"request",{ids},"duration_ms":{r.e2e:.2f},"ttft_ms":{r.ttft:.2f},'
                f'"ttfa_ms":{r.ttfa:.2f},"input_len":{L},"output_len":{r.output_len},"reasoning_len":{r.reasoning_len},'
                f'"status":"ok","finish_reason":"{r.finish}"}}'
            )))  # fmt: skip
        else:
            out.append(((f << 4) | 8, (
                f'{{"v":1,"ts":"{tf}","stage":"request",{ids},"duration_ms":{r.e2e:.2f},"ttft_ms":{r.ttft:.2f},'
                f'"input_len":{L},"status":"error","finish_reason":"error"}}'
            )))  # fmt: skip
        out.append(((m << 4) | 9, (
            f'{{"v":1,"ts":"{tm}","stage":"gpu_memory",{ids},"allocated_mb":{r.allocated:.1f},"reserved_mb":{r.reserved:.1f},'
            f'"max_allocated_mb":{r.max_allocated:.1f},"num_ooms":{r.num_ooms},"num_alloc_retries":{r.retries},"gpu_index":0}}'
        )))  # fmt: skip
        return out

    # -- buckets ---------------------------------------------------------------------------
    def _flush_until(self, t: int) -> None:
        while self.next_bucket <= self.last_bucket and (self.next_bucket + 1) * MS_PER_HOUR <= t:
            self._flush(self.next_bucket)
            self.next_bucket += 1

    def finish(self) -> int:
        while self.next_bucket <= self.last_bucket:
            self._flush(self.next_bucket)
            self.next_bucket += 1
        if self.bad_plan is not None and not self.count_only:
            self.bad_plan.finish()
        return self.events

    def _flush(self, b: int) -> None:
        host = self.host
        bstart = b * MS_PER_HOUR
        lo = max(bstart, host.start_ms)
        hi = min(bstart + MS_PER_HOUR, host.end_ms)
        items = self.buckets.pop(b, [])
        ivs = self.intervals.pop(b, [])
        n_samples = self._samplers(bstart, lo, hi, ivs, items)
        phase = self.phase
        first_hb = bstart + phase + 500
        hbs = [t for t in range(first_hb, bstart + MS_PER_HOUR, 60_000) if lo <= t < hi] if self.heartbeats else []
        if self.count_only:
            self.events += n_samples + len(hbs)
            return
        items.sort(key=_first)  # stable: equal keys keep their drawing order
        self._post_sort(items)
        w = self.w
        w.set_date(self.ts.local_date(lo))
        if self.bad_plan is not None:
            self._write_per_line(items, hbs)
        else:
            self._write_segments(items, hbs)
        self.events += len(items) + len(hbs)

    def _write_segments(self, items: list, hbs: list[int]) -> None:
        """Lines between two heartbeats go in as one slice (C-level extend/sum, no per-line
        Python); a slice that would cross max_bytes falls back to line-by-line rotation."""
        w = self.w
        keys = list(map(_first, items))
        texts = list(map(_second, items))
        start = 0
        for hb in [*hbs, None]:
            end = len(texts) if hb is None else bisect_left(keys, hb << 4)
            if end > start:
                seg = texts[start:end]
                seg_bytes = sum(map(len, seg)) + len(seg)
                if w.size + seg_bytes <= w.max_bytes:
                    w.buf.extend(seg)
                    w.size += seg_bytes
                    w.written += len(seg)
                    w.bytes_written += seg_bytes
                else:
                    for line in seg:
                        w.write(line)
                start = end
            if hb is not None:
                w.write(self._heartbeat(hb))

    def _write_per_line(self, items: list, hbs: list[int]) -> None:
        """One line at a time: the bad_lines host inserts broken lines at line counts."""
        w = self.w
        bad = self.bad_plan
        inf = 1 << 62
        hb_iter = iter(hbs)
        hb_next = next(hb_iter, inf)
        for key, line in items:
            ms = key >> 4
            while hb_next <= ms:
                w.write(self._heartbeat(hb_next))
                hb_next = next(hb_iter, inf)
            if w.written >= bad.next_at:
                bad.insert(ms)
            w.write(line)
        while hb_next < inf:
            w.write(self._heartbeat(hb_next))
            hb_next = next(hb_iter, inf)

    heartbeats = True

    def _post_sort(self, items: list) -> None:
        """Hook for writers whose lines may leave the time order (legacy)."""

    def _heartbeat(self, t: int) -> str:
        rng = self.rng
        drops = self.drop_times
        dropped = 0
        # dropped counts events lost before this heartbeat (drop_times is sorted).
        while self._drop_i < len(drops) and drops[self._drop_i] <= t:
            self._drop_i += 1
        dropped = self._drop_i
        queued = rng.randint(QUEUE_CAPACITY - 12, QUEUE_CAPACITY) if self._in_drop_window(t) else rng.randint(0, 4)
        w = self.w
        return (
            f'{{"v":1,"ts":"{self.ts(t)}","stage":"collector","session_id":null,"request_id":null,{self.hid},'
            f'"queued":{queued},"written":{w.written},"dropped":{dropped},"bytes_written":{w.bytes_written}}}'
        )

    _drop_i = 0

    def _in_drop_window(self, t: int) -> bool:
        if "collector_drops" not in self.faults:
            return False
        local = t + self.host.offset_min * 60_000
        return (local // 60_000) % 30 == 7 and (local % 60_000) < 20_000

    # -- samplers --------------------------------------------------------------------------
    def _samplers(self, bstart: int, lo: int, hi: int, ivs: list, items: list) -> int:
        """Append this hour's sampler lines to items; return how many there are."""
        n = 3600
        phase = self.phase
        active = bytearray(n)
        gen: list = [None] * n
        for t0, g0, g1, t1, util, reserved, kind in ivs:
            s0 = max(0, -(-(t0 - bstart - phase) // 1000))
            s1 = min(n - 1, (t1 + TAIL_MS - bstart - phase) // 1000)
            if s1 >= s0:
                active[s0 : s1 + 1] = b"\x01" * (s1 - s0 + 1)
            s0 = max(0, -(-(g0 - bstart - phase) // 1000))
            s1 = min(n - 1, (g1 - bstart - phase) // 1000)
            if s1 >= s0:
                gen[s0 : s1 + 1] = [(util, reserved, kind)] * (s1 - s0 + 1)
        s_lo = max(0, -(-(lo - bstart - phase) // 1000))
        s_hi = min(n - 1, (hi - 1 - bstart - phase) // 1000)
        if s_hi < s_lo:
            return 0
        if self.count_only:
            # Busy seconds before the minute ticks: the calibration's load model needs them.
            self.hour_load.append((s_hi - s_lo + 1, active[s_lo : s_hi + 1].count(1)))
        for s in range(0, n, 60):
            active[s] = 1  # the idle once-a-minute tick
        if self.count_only and not self.faults:
            return 2 * active[s_lo : s_hi + 1].count(1)
        return self._sampler_lines(bstart, s_lo, s_hi, active, gen, items)

    def _sampler_lines(self, bstart, s_lo, s_hi, active, gen, items) -> int:
        host, rng, ts, stats = self.host, self.rng, self.ts, self.stats
        random = rng.random
        faults = self.faults
        count_only = self.count_only
        low = "low_gpu_util" in faults
        thrash = "memory_thrash" in faults
        starved = "gpu_starved" in faults
        rss_growth = "rss_growth" in faults
        drops = "collector_drops" in faults
        other_mb = STARVED_OTHER_MB if starved else 0.0
        span = max(1, host.end_ms - host.start_ms)
        prefix_g = f'","stage":"gpu_sample","session_id":null,"request_id":null,{self.hid},"gpu_index":0,"gpu_util_pct":'
        prefix_p = f'","stage":"process_sample","session_id":null,"request_id":null,{self.hid},"rss_mb":'
        off = host.offset_min * 60_000
        count = 0
        last_reserved = self.last_reserved
        for s in range(s_lo, s_hi + 1):
            if not active[s]:
                continue
            t = bstart + s * 1000 + self.phase + int(random() * 3)
            g = gen[s]
            if g is not None:
                util, reserved, kind = g
                last_reserved = reserved
                u = util + 4 * Z[int(random() * NZ)]
                if kind == KIND_CPU:
                    u = 4 + random() * 12
                if low and u > 58:
                    u = 50 + random() * 8
                if thrash and u < 84:
                    u = 84 + random() * 12
                u = 0 if u < 0 else 99 if u > 99 else u
                mem = self._slew(reserved + CONTEXT_MB + 180 + random() * 120)
                if thrash:
                    self.thrash_up = not self.thrash_up
                    if self.thrash_up:
                        mem += 2600 + random() * 1200
                if kind == KIND_THROTTLED:
                    temp, clock, power = 88 + random() * 3, 885 + int(random() * 120), 70 + random() * 10
                else:
                    temp, clock, power = 55 + u * 0.12 + random() * 2, 1695 + int(random() * 16), 60 + u * 0.85 + random() * 6
                cpu = 99.0 + random() * 1.5 if kind == KIND_CPU else 45 + random() * 25
                stats["gen_ticks"] += 1
                if u > stats["gen_util_max"]:
                    stats["gen_util_max"] = u
            else:
                u = random() * 4
                mem = self._slew(last_reserved + CONTEXT_MB + random() * 20)
                temp, clock, power = 40 + random() * 5, 210 + int(random() * 90), 24 + random() * 8
                cpu = 0.3 + random() * 2.5 if s % 60 == 0 and not self._recent(s, active) else 12 + random() * 18
            mem += other_mb
            pct = mem / GPU_TOTAL_MB * 100
            if pct > stats["mem_pct_max"]:
                stats["mem_pct_max"] = pct
            if starved and u < 20 and pct > 90:
                stats["starved_ticks"] += 1
            if self.prev_mem is not None and g is not None:
                swing = abs(mem - self.prev_mem)
                if swing > stats["swing_max_mb"]:
                    stats["swing_max_mb"] = swing
            self.prev_mem = mem if g is not None else None
            rss = self.rss_base + 3 * Z[int(random() * NZ)]
            if rss_growth:
                rss += RSS_GROWTH_MB * (t - host.start_ms) / span
            if stats["rss_first"] is None:
                stats["rss_first"] = rss
            stats["rss_last"] = rss
            if drops:
                local = t + off
                if (local // 60_000) % 30 == 7 and (local % 60_000) < 20_000:
                    self.drop_times.append(t)
                    self.drop_times.append(t)
                    stats["dropped"] += 2
                    continue
            count += 2
            if count_only:
                continue
            tstr = ts(t)
            key = t << 4
            items.append((key, (
                f'{{"v":1,"ts":"{tstr}{prefix_g}{int(u)},"gpu_mem_util_pct":{int(u * 0.45)},'
                f'"gpu_mem_used_mb":{int(mem)},"gpu_mem_total_mb":{int(GPU_TOTAL_MB)},"power_w":{power:.1f},'
                f'"temp_c":{int(temp)},"sm_clock_mhz":{clock}}}'
            )))  # fmt: skip
            items.append((key | 1, f'{{"v":1,"ts":"{tstr}{prefix_p}{rss:.1f},"cpu_pct":{cpu:.1f},"threads":{self.threads}}}'))
        self.last_reserved = last_reserved
        if self.burst_ms is not None and bstart <= self.burst_ms < bstart + MS_PER_HOUR:
            count += self._burst(items, prefix_p)
        return count

    _level = None

    def _slew(self, target: float) -> float:
        """Process memory moves at most SLEW_MB per second: one process serves every session."""
        level = self._level
        if level is None or abs(target - level) <= SLEW_MB:
            level = target
        else:
            level += SLEW_MB if target > level else -SLEW_MB
        self._level = level
        return level

    @staticmethod
    def _recent(s: int, active: bytearray) -> bool:
        """Was the previous second active (so this minute tick is inside traffic)?"""
        return s > 0 and active[s - 1] == 1

    def _burst(self, items: list, prefix_p: str) -> int:
        """log_volume: one minute of DEBUG dumps at 1.4 MB/s (000 §3.2: >1 MB/s is too much)."""
        n = math.ceil(BURST_BYTES_PER_S * 60 / BURST_LINE_CHARS)
        step = 59_000 // n
        stats = self.stats
        stats["burst_minute"] = self.ts(self.burst_ms)[:16]
        if self.count_only:
            return n
        for i in range(n):
            t = self.burst_ms + 200 + i * step
            rss = self.rss_base + self.rng.gauss(0, 3)
            line = (
                f'{{"v":1,"ts":"{self.ts(t)}{prefix_p}{rss:.1f},"cpu_pct":{100 + self.rng.random() * 40:.1f},'
                f'"threads":{self.threads},"level":"DEBUG","debug":"{DEBUG_PAYLOAD}"}}'
            )
            stats["burst_bytes"] += len(line) + 1
            items.append(((t << 4) | 2, line))
        return n


class BadLines:
    """bad_lines: deliberately broken lines at fixed positions of one host's stream."""

    KINDS = ("truncated", "not_json", "wrong_type", "invalid_utf8")
    AT = (25, 60, 95, 130)
    legacy = False

    def __init__(self, host: V1Host):
        self.h = host
        self.i = 0
        self.records: list[dict] = []
        self.next_at = self.AT[0]

    def insert(self, ms: int) -> None:
        h = self.h
        w = h.w
        kind = self.KINDS[self.i]
        ts = h.ts(ms)
        if kind == "truncated":
            prev = w.buf[-1] if w.buf else '{"v":1,"ts":"' + ts + '","stage":"gpu_sample"}'
            line = prev[: int(len(prev) * 0.55)]
        elif kind == "not_json":
            line = "Traceback (most recent call last):  File app.py, line 88, in <module>"
        elif kind == "wrong_type" and self.legacy:
            line = (
                f'{{"session_id": "unknown", "timestamp": "{ts}", "stage": "gpu_memory", "duration_ms": -1, '
                f'"kv_cache_size_mb": "3412.5 MiB", "reserved_mb": 4200.0}}'
            )
        elif kind == "invalid_utf8" and self.legacy:
            line = (
                f'{{"session_id": "unknown", "timestamp": "{ts}", "stage": "error", "duration_ms": -1, '
                f'"error_type": "UnicodeDecodeError", "error_msg": "提示词解码失败\udce5\udc9c"}}'
            )
        elif kind == "wrong_type":
            line = (
                f'{{"v":1,"ts":"{ts}","stage":"gpu_sample","session_id":null,"request_id":null,{h.hid},'
                f'"gpu_index":0,"gpu_util_pct":"87 %","gpu_mem_used_mb":"4712 MiB"}}'
            )
        else:
            # A cut multi-byte character: bytes E5 9C with the third byte missing.
            line = (
                f'{{"v":1,"ts":"{ts}","stage":"process_sample","session_id":null,"request_id":null,{h.hid},'
                f'"rss_mb":1290.5,"cmdline":"python3 app.py --title \udce5\udc9c"}}'
            )
        self.records.append(w.mark(kind))
        w.write(line)
        self.i += 1
        self.next_at = self.AT[self.i] if self.i < len(self.AT) else 1 << 62

    def finish(self) -> None:
        """The process was killed mid-write: the last line has no end and no newline."""
        w = self.h.w
        last = w.buf[-1] if w.buf else '{"v":1,"stage":"gpu_sample"}'
        self.records.append(w.mark("truncated_eof"))
        w.tail = last[: len(last) // 3]
