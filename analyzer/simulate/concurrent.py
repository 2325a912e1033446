"""Concurrent-serving scenarios: one process serves overlapping sessions.

The main simulator (``traffic.py``) keeps memory per session, as if a process served one session
at a time. Real services run several handlers in one process (Gradio's default concurrency), and
torch reports GPU memory per process: an innocent request that overlaps a leaky one sees the
other's allocation. This module replays that: requests of many sessions overlap in one process,
the process's allocated / reserved GPU memory and its RSS are tracked event by event, and each
request event carries what the collector gives it (collector/request.py): ``device``, ``inflight``,
``*_mb_before`` / ``*_mb_after``, ``attempts``, and the process's completion sequence
(``done_before`` / ``done_seq``, as collector/request.py counts it); error events carry ``params`` and ``device``.

``simulate_concurrent(outdir, name, seed, host_prefix)`` writes ``<outdir>/<host>/ds15b_*.jsonl.gz``
(or article 003's flat legacy file) and a ``truth.json`` in the main simulator's shape, so
``bench/accuracy.py`` scores it the same way. Deterministic: one ``random.Random`` per run, no
clock, gzip without a timestamp.
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.outfile import out_folder
from dslogs.analyzer.simulate.traffic import new_uuid

START = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
WINDOW_S = 40 * 60
WEIGHTS_MB = 3390.0
CHUNK_MB = 512.0  # the caching allocator grows reserved in segments: a high-water step
SAMPLE_EVERY_S = 5
RSS_BASE_MB = 1250.0
SLOTS = 4  # handlers running at once (a Gradio concurrency limit of 4)


@dataclass(frozen=True)
class ConcurrentSpec:
    name: str
    description: str
    rule: str | None
    scope: str  # session | process | host | global
    fmt: str = "v1"
    also_fires: tuple[str, ...] = ()


# ~40 overlapping sessions on a few handler slots: at the busiest moments requests wait seconds
# for a slot, so queue_wait's p95 fires by construction (on a CPU-only host's slower requests,
# with some seeds)
QUEUED = ("queue_wait",)

CONCURRENT_SCENARIOS: dict[str, ConcurrentSpec] = {
    s.name: s
    for s in (
        ConcurrentSpec("concurrent_leak", "one process serves ~36 overlapping sessions; 5 of them keep "
                       "80-140 MiB of allocated GPU memory per request (reserved is per process)",
                       "memory_leak", "session", also_fires=QUEUED),
        ConcurrentSpec("process_leak", "reserved GPU memory of one process climbs ~1.9 GiB while every "
                       "request frees what it allocated: growth no session owns", "memory_leak", "process",
                       also_fires=QUEUED),
        ConcurrentSpec("rss_staircase", "4 of ~40 concurrent sessions keep 40 MiB of host memory per "
                       "request; process RSS rises as a noisy staircase", "rss_growth", "session",
                       also_fires=QUEUED),
        ConcurrentSpec("cpu_only", "a CPU-only host (device cpu, no GPU sampler or memory): healthy, "
                       "gpu_wait_pct ~60 % means nothing there", None, "global", also_fires=QUEUED),
        ConcurrentSpec("oom_fallback", "OOM with num_beams=5, then a greedy retry that succeeds "
                       "(article 003 §3.2's oom_fallback) in some sessions", "oom", "session",
                       also_fires=("beam_search",)),
        ConcurrentSpec("seed_turns", "article 003's logger: reserved_mb climbs > 200 MiB over turns a "
                       "few hundred ms apart in some sessions, ten minutes apart in others",
                       "memory_leak", "session", fmt="legacy"),
        ConcurrentSpec("concurrency_cliff", "a closed-loop load ramp, 1 to 8 clients in steps: service time grows "
                       "with requests in flight along a contention curve past a knee, reserved memory follows the "
                       "requests in flight (nothing kept), OOMs past what the GPU holds; truth.json has the knee and "
                       "the safe level", "concurrency_cliff", "host",
                       also_fires=("oom_at_concurrency", "oom", "memory_thrash")),
        ConcurrentSpec("oom_at_concurrency", "the same ramp on a GPU that holds one request past the knee: OOMs "
                       "at the top in-flight level", "oom_at_concurrency", "host",
                       also_fires=("concurrency_cliff", "oom", "memory_thrash")),
        ConcurrentSpec("capacity_small", "the capacity model over two short steps (1 and 2 clients): too little "
                       "traffic for a recommendation", None, "global"),
    )
}
CAPACITY_SCENARIOS = ("concurrency_cliff", "oom_at_concurrency", "capacity_small")
GPU_TOTAL_MB = 24576.0
CAPACITY_LEVELS = 8  # clients at the last step (a Gradio concurrency_limit of 8: no framework queue)


@dataclass
class CReq:
    sid: str
    rid: str
    turn: int
    t0: float  # seconds since START
    tok: float
    queue: float
    prefill: float
    decode: float
    fmt: float
    output_len: int
    input_len: int
    gpu_wait: float
    util: float | None
    leak_mb: float = 0.0
    rss_leak_mb: float = 0.0
    transient_mb: float = 0.0
    rss_transient_mb: float = 0.0
    oom_beams: int = 0  # > 0: the first attempt ran num_beams=oom_beams and hit an OOM
    failed_s: float = 0.0
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    inflight: int = 1
    done_before: int = 0  # the process's completions before its "before" snapshot (collector/request.py)
    done_seq: int = 0  # its own completion index in the process, 1-based, taken with "after"

    @property
    def start(self) -> float:
        """When the handler began (after the queue wait): the collector's "before" snapshot."""
        return self.t0 + self.queue

    @property
    def end(self) -> float:
        return self.t0 + self.failed_s + self.tok + self.queue + self.prefill + self.decode + self.fmt


def _plan(rng: Random, name: str) -> tuple[list[CReq], dict[str, str | None]]:
    """Every request of the run, and session -> fault (None for healthy). Requests arrive when a
    session's user sends a turn and wait in the queue for one of SLOTS handlers (Gradio's
    concurrency limit), so at most SLOTS run at once in the process."""
    n_sessions = {"concurrent_leak": 36, "process_leak": 37, "rss_staircase": 40, "cpu_only": 24,
                  "oom_fallback": 30}[name]  # fmt: skip
    faulty = set(rng.sample(range(n_sessions), {"concurrent_leak": 5, "rss_staircase": 4,
                                                "oom_fallback": 5}.get(name, 0)))  # fmt: skip
    cpu = name == "cpu_only"
    reqs: list[CReq] = []
    faults: dict[str, str | None] = {}
    arrivals: list[tuple[float, int, str, int, int, int]] = []  # (time, order, sid, turn, turns, oom_turn)
    for i in range(n_sessions):
        sid = new_uuid(rng)
        fault = None
        if i in faulty:
            fault = {"concurrent_leak": "memory_leak", "rss_staircase": "rss_growth", "oom_fallback": "oom"}[name]
        faults[sid] = fault
        oom_turn = rng.randint(1, 3) if fault == "oom" else 0
        heapq.heappush(arrivals, (rng.uniform(0, WINDOW_S * 0.6), i, sid, 1, rng.randint(6, 10), oom_turn))
    slots = [0.0] * SLOTS
    order = n_sessions
    while arrivals:
        t, _, sid, turn, turns, oom_turn = heapq.heappop(arrivals)
        fault = faults[sid]
        k = min(range(SLOTS), key=lambda j: slots[j])
        start = max(t, slots[k])
        out = rng.randint(60, 200) if cpu else rng.randint(100, 360)
        tpot = rng.uniform(85, 115) if cpu else rng.uniform(35, 50)
        r = CReq(
            sid=sid, rid=f"{rng.getrandbits(64):016x}", turn=turn, t0=t,
            tok=rng.uniform(0.01, 0.03), queue=start - t + rng.expovariate(1 / 0.004),
            prefill=rng.uniform(0.15, 0.4) * (2.5 if cpu else 1.0), decode=tpot * (out - 1) / 1000,
            fmt=rng.uniform(0.001, 0.004), output_len=out, input_len=rng.randint(40, 900),
            gpu_wait=rng.uniform(58, 68) if cpu else rng.uniform(18, 38),
            util=None if cpu else rng.uniform(76, 92),
        )
        r.transient_mb = 0.0 if cpu else rng.uniform(15, 60)  # KV cache + activations of a 1.5B model
        r.rss_transient_mb = rng.uniform(5, 25)
        if fault == "memory_leak":
            r.leak_mb = rng.uniform(80, 140)
        if fault == "rss_growth":
            r.rss_leak_mb = 40.0 + rng.uniform(-3, 3)
        if turn == oom_turn:
            r.oom_beams = 5
            r.failed_s = r.prefill * 1.6 + rng.uniform(0.5, 2.0)
        slots[k] = r.end
        reqs.append(r)
        nxt = r.end + rng.uniform(10, 60)
        if turn < turns and nxt < WINDOW_S - 90:
            order += 1
            heapq.heappush(arrivals, (nxt, order, sid, turn + 1, turns, oom_turn))
    reqs.sort(key=lambda r: r.t0)
    return reqs, faults


def _replay(reqs: list[CReq], name: str, rng: Random) -> list[tuple[float, dict]]:
    """Walk start/end events in time order: per-request before/after snapshots of the process,
    in-flight counts, and the state at every sampler tick."""
    cpu = name == "cpu_only"
    frag_per_s = 1950.0 / WINDOW_S if name == "process_leak" else 0.0
    events = [(r.start, 0, i) for i, r in enumerate(reqs)] + [(r.end, 1, i) for i, r in enumerate(reqs)]
    events.sort(key=lambda e: (e[0], -e[1]))  # an end before a start at the same instant
    ticks = [float(s) for s in range(0, WINDOW_S, SAMPLE_EVERY_S)]
    state = {"alloc": WEIGHTS_MB + 40.0, "hw": 0.0, "rss": RSS_BASE_MB, "leaked": 0.0, "rss_leaked": 0.0}
    inflight: set[int] = set()
    done = 0  # completions so far in the process: the collector's completion sequence
    samples: list[tuple[float, dict]] = []

    def snapshot(t: float) -> dict:
        alloc = WEIGHTS_MB + 40.0 + state["leaked"] + sum(reqs[j].transient_mb for j in inflight)
        state["hw"] = max(state["hw"], math.ceil(alloc / CHUNK_MB) * CHUNK_MB)
        rss = RSS_BASE_MB + state["rss_leaked"] + sum(reqs[j].rss_transient_mb for j in inflight)
        out = {"rss_mb": round(rss + rng.gauss(0, 2), 1), "busy": bool(inflight)}
        if not cpu:
            out.update(allocated_mb=round(alloc, 1), reserved_mb=round(state["hw"] + frag_per_s * t, 1))
        return out

    k = 0
    for t, kind, i in events:
        while k < len(ticks) and ticks[k] < t:
            samples.append((ticks[k], snapshot(ticks[k])))
            k += 1
        r = reqs[i]
        if kind == 0:
            r.before = snapshot(t)
            r.done_before = done
            inflight.add(i)
            r.inflight = len(inflight)
        else:
            inflight.discard(i)
            state["leaked"] += r.leak_mb
            state["rss_leaked"] += r.rss_leak_mb
            r.after = snapshot(t)
            done += 1
            r.done_seq = done
    while k < len(ticks):
        samples.append((ticks[k], snapshot(ticks[k])))
        k += 1
    return samples


def _capacity_plan(rng: Random, name: str) -> tuple[list[CReq], dict[str, str | None], dict]:
    """A load driver's ramp: at step c (1..CAPACITY_LEVELS) c clients each send a request, wait for
    its answer and think 0-0.6 s. With c requests running, prefill and TPOT grow by 5 % per extra
    request up to the knee, and past it by c/knee (the GPU is shared) and 10 % per request more
    (fragmentation and GC, 000 §1.3): aggregate throughput rises to the knee, then falls. A
    request's working memory (KV cache, activations) is held while it runs; past oom_level in
    flight the allocator fails half the requests' first attempt (an OOM, then a retry)."""
    small = name == "capacity_small"
    knee = rng.choice((3, 4, 5))
    base_mb = WEIGHTS_MB + 40.0 + 560.0  # weights, the process's own buffers, the allocator's cache
    oom_level = knee + (1 if name == "oom_at_concurrency" else 3)
    # reserved at oom_level in flight: 96.5 % of the GPU, where the allocator starts to fail
    per_req_mb = (0.965 * GPU_TOTAL_MB - base_mb) / oom_level
    step_s = 40.0 if small else 300.0
    levels = 2 if small else min(CAPACITY_LEVELS, oom_level)  # the ramp stops where OOMs start

    def slow(c: int) -> float:
        return (1 + 0.05 * (min(c, knee) - 1)) * (1 if c <= knee else (c / knee) * (1 + 0.1 * (c - knee)))

    reqs: list[CReq] = []
    faults: dict[str, str | None] = {}
    running: list[float] = []  # end times of the requests in flight
    clients: list[tuple[float, int, str, int]] = []  # (next send, client, session, turn)
    order = 0
    t1 = 0.0
    started_ms: set[int] = set()
    for step in range(levels):
        # a step starts once the last one's requests have drained: c clients, never more in flight
        t0 = max(step * step_s, max(running, default=0.0), t1)
        t1 = t0 + step_s
        # the new client of this step joins; every client stops sending at the step's end and
        # the ones of the next step start again from there
        clients = [(t0 + rng.uniform(0, 0.5), i, new_uuid(rng), 1) for i in range(step + 1)]
        for _, _, sid, _ in clients:
            faults[sid] = None
        heapq.heapify(clients)
        while clients:
            t, i, sid, turn = heapq.heappop(clients)
            if t >= t1:
                continue
            running = [e for e in running if e > t]
            c = len(running) + 1
            k = slow(c)
            out = rng.randint(60, 160)
            tpot = rng.uniform(36, 44) * k
            r = CReq(sid=sid, rid=f"{rng.getrandbits(64):016x}", turn=turn, t0=t, tok=rng.uniform(0.01, 0.02),
                     queue=rng.expovariate(1 / 0.003), prefill=rng.uniform(0.12, 0.2) * k,
                     decode=tpot * (out - 1) / 1000, fmt=rng.uniform(0.001, 0.003), output_len=out,
                     input_len=rng.randint(40, 400), gpu_wait=rng.uniform(18, 30), util=min(99.0, 55 + 9 * c))
            # handler starts at least 3 ms apart: the logs stamp milliseconds, and two starts in one
            # stamp cannot be ordered by request_memory_deltas (a tie it reads as "started first")
            while any(int(r.start * 1000) + d in started_ms for d in range(-3, 4)):
                r.queue += 0.003
            started_ms.add(int(r.start * 1000))
            r.transient_mb = per_req_mb
            if c >= oom_level and rng.random() < 0.5:
                r.oom_beams = 1  # the first attempt fails to allocate, the retry succeeds
                r.failed_s = rng.uniform(0.2, 0.6)
            running.append(r.end)
            reqs.append(r)
            order += 1
            heapq.heappush(clients, (r.end + rng.uniform(0, 0.6), i, sid, turn + 1))
    reqs.sort(key=lambda r: r.t0)
    truth = {"knee": knee, "safe_level": min(knee, oom_level - 1), "oom_level": oom_level, "levels": levels,
             "mb_per_request": round(per_req_mb, 1), "gpu_total_mb": GPU_TOTAL_MB,
             "recommendation": not small}
    return reqs, faults, truth


def _capacity_replay(reqs: list[CReq], rng: Random) -> list[tuple[float, dict]]:
    """Reserved memory that follows the requests in flight (weights + each running request's
    working memory, returned to the driver when it ends, as empty_cache does): nothing is kept."""
    events = [(r.start, 0, i) for i, r in enumerate(reqs)] + [(r.end, 1, i) for i, r in enumerate(reqs)]
    events.sort(key=lambda e: (e[0], -e[1]))
    end = max((r.end for r in reqs), default=0.0)
    ticks = [float(s) for s in range(0, int(end) + 1, SAMPLE_EVERY_S)]
    inflight: set[int] = set()
    done = 0
    samples: list[tuple[float, dict]] = []

    def snapshot() -> dict:
        alloc = WEIGHTS_MB + 40.0 + sum(reqs[j].transient_mb for j in inflight)
        return {"rss_mb": round(RSS_BASE_MB + rng.gauss(0, 2), 1), "busy": bool(inflight),
                "allocated_mb": round(alloc, 1), "reserved_mb": round(alloc + 560.0, 1)}

    k = 0
    for t, kind, i in events:
        while k < len(ticks) and ticks[k] < t:
            samples.append((ticks[k], snapshot()))
            k += 1
        r = reqs[i]
        if kind == 0:
            r.before = snapshot()  # counted in flight, nothing allocated yet
            inflight.add(i)
            r.done_before = done
            r.inflight = len(inflight)
        else:
            # generate has returned: its KV cache is free when the collector reads "after"
            inflight.discard(i)
            r.after = snapshot()
            done += 1
            r.done_seq = done
    while k < len(ticks):
        samples.append((ticks[k], snapshot()))
        k += 1
    return samples


def _ts(t: float) -> str:
    return (START + timedelta(seconds=t)).isoformat(timespec="milliseconds")


def _params(beams: int) -> dict:
    return {"num_beams": beams, "max_new_tokens": 2048, "temperature": 0.6, "top_p": 0.95, "do_sample": beams == 1}


def _v1_lines(reqs: list[CReq], samples, name: str, host: str, pid: int) -> list[tuple[float, str]]:
    cpu = name == "cpu_only"
    device = "cpu" if cpu else "cuda:0"
    out: list[tuple[float, dict]] = []
    hid = {"host": host, "pid": pid}
    oom_times = sorted(r.t0 + r.queue + r.tok + r.failed_s for r in reqs if r.oom_beams)
    for r in reqs:
        ids = {"session_id": r.sid, "request_id": r.rid, **hid}

        def ev(t, stage, ids=ids, **kw):
            out.append((t, {"v": 1, "ts": _ts(t), "stage": stage, **ids, **kw}))

        t = r.t0
        ev(t, "input", input_len=r.input_len * 10 // 7)
        # stamped when the wait began, as the collector's queue_wait / request span write it
        ev(t, "queue", duration_ms=round(r.queue * 1000, 2), source="gradio")
        t += r.queue
        t += r.tok
        ev(t, "tokenize", duration_ms=round(r.tok * 1000, 2), input_len=r.input_len)
        if r.oom_beams:
            ev(t + r.prefill * 1.6, "prefill", duration_ms=round(r.prefill * 1600, 2), input_len=r.input_len,
               kv_seq_len=r.input_len)
            t += r.failed_s
            ev(t, "error", error_type="OutOfMemoryError", failed_stage="decode", device=device,
               error_msg="CUDA out of memory. Tried to allocate 2.40 GiB. GPU 0 has a total capacity of 23.68 GiB",
               params=_params(r.oom_beams))
        t += r.prefill
        ev(t, "prefill", duration_ms=round(r.prefill * 1000, 2), input_len=r.input_len, kv_seq_len=r.input_len)
        t += r.decode
        dec = {"duration_ms": round(r.decode * 1000, 2), "output_len": r.output_len,
               "reasoning_len": r.output_len // 2, "cpu_time_ms": round(r.decode * 1000 * (1 - r.gpu_wait / 100), 2),
               "gpu_wait_pct": round(r.gpu_wait, 1), "params": _params(1)}  # fmt: skip
        if r.util is not None:
            dec["gpu_util_pct"] = round(r.util, 1)
        ev(t, "decode", **dec)
        t += r.fmt
        ev(t, "format", duration_ms=round(r.fmt * 1000, 2))
        req = {"duration_ms": round((r.end - r.t0) * 1000, 2),
               "ttft_ms": round((r.failed_s + r.tok + r.queue + r.prefill) * 1000, 2),
               "input_len": r.input_len, "output_len": r.output_len, "reasoning_len": r.output_len // 2,
               "status": "ok", "finish_reason": "stop", "device": device, "inflight": r.inflight,
               "done_before": r.done_before, "done_seq": r.done_seq, "attempts": 2 if r.oom_beams else 1,
               "rss_mb_before": r.before["rss_mb"], "rss_mb_after": r.after["rss_mb"]}  # fmt: skip
        if not cpu:
            req.update(reserved_mb_before=r.before["reserved_mb"], reserved_mb_after=r.after["reserved_mb"],
                       allocated_mb_before=r.before["allocated_mb"], allocated_mb_after=r.after["allocated_mb"])
        ev(r.end, "request", **req)
        if not cpu:
            ev(r.end + 0.002, "gpu_memory", allocated_mb=r.after["allocated_mb"], reserved_mb=r.after["reserved_mb"],
               max_allocated_mb=r.after["reserved_mb"] - 100, gpu_index=0,
               num_ooms=sum(1 for x in oom_times if x <= r.end))  # the process's counter
    for t, s in samples:
        base = {"v": 1, "ts": _ts(t + 0.3), "session_id": None, "request_id": None, **hid}
        if not cpu:
            util = 80 + (t * 7) % 12 if s["busy"] else 2.0
            out.append((t + 0.3, {**base, "stage": "gpu_sample", "gpu_index": 0, "gpu_util_pct": round(util, 1),
                                  "gpu_mem_used_mb": round(s["reserved_mb"] + 480, 1), "gpu_mem_total_mb": 24576}))
        out.append((t + 0.3, {**base, "stage": "process_sample", "rss_mb": s["rss_mb"], "cpu_pct": 60.0, "threads": 24}))
    out.sort(key=lambda x: x[0])
    return [(t, json.dumps(obj, separators=(",", ":"))) for t, obj in out]


class _SeedLog:
    """article 003 §2.2's log_event for one turn: naive local time, duration_ms -1 = unmeasured."""

    def __init__(self, lines: list[str], sid: str, at: datetime):
        self.lines, self.sid, self.at = lines, sid, at

    def __call__(self, dt: float, stage: str, duration: float = -1, **kw) -> None:
        ts = (self.at + timedelta(seconds=dt)).isoformat(timespec="milliseconds")
        self.lines.append(json.dumps({"session_id": self.sid, "timestamp": ts, "stage": stage,
                                      "duration_ms": round(duration, 2), **kw}, ensure_ascii=False))


def _seed_lines(rng: Random) -> tuple[list[str], dict[str, str | None], dict]:
    """Article 003 §2.2's logger (naive Asia/Shanghai time, no host, pid or request id): sessions
    one after another; some sessions' reserved_mb climbs over turns either a few hundred ms apart
    (a scripted client) or ten minutes apart (slope ~10 MiB/min: under 000's 50 MiB/min)."""
    lines: list[str] = []
    faults: dict[str, str | None] = {}
    details: dict = {}
    local0 = START.replace(tzinfo=None) + timedelta(hours=8)
    t = 0.0
    reserved0 = 4200.0
    for i in range(14):
        sid = new_uuid(rng)
        kind = {2: "fast", 6: "slow", 9: "fast", 12: "slow"}.get(i)
        faults[sid] = "memory_leak" if kind else None
        turns = 6
        step = 750.0 if kind == "fast" else 80.0 if kind == "slow" else 0.0
        gap = 0.25 if kind == "fast" else 600.0 if kind == "slow" else rng.uniform(20, 90)
        fast = kind == "fast"
        first = None
        for turn in range(turns):
            log = _SeedLog(lines, sid, local0 + timedelta(seconds=t))
            out = rng.randint(20, 40) if fast else rng.randint(120, 400)
            inf_s = out * 0.04 + 0.05
            alloc = WEIGHTS_MB + 60 + rng.uniform(0, 40)
            reserved = reserved0 + step * turn + 20 * rng.randint(-2, 2)
            first = reserved if first is None else first
            log(0.0, "input", input_len=rng.randint(10, 120))
            log(0.01, "tokenize", rng.uniform(8, 20), input_len=rng.randint(20, 200))
            log(0.02 + inf_s, "inference", inf_s * 1000, output_len=out, cpu_time_ms=round(inf_s * 700, 2),
                gpu_wait_pct=round(rng.uniform(20, 35), 1), gpu_util_pct=round(rng.uniform(75, 90), 1))
            log(0.025 + inf_s, "format")
            log(0.03 + inf_s, "gpu_memory", kv_cache_size_mb=round(alloc, 2), reserved_mb=round(reserved, 2))
            t += 0.03 + inf_s + (gap if turn < turns - 1 else 0)
        if kind:
            details[sid] = {"turn_gap_s": gap, "reserved_rise_mb": round(reserved - first, 1)}
        t += rng.uniform(60, 240)
    return lines, faults, details


def simulate_concurrent(outdir: Path | str, name: str, seed: int = 0, host_prefix: str = "gpu") -> dict:
    """Write one concurrent scenario's logs and truth.json into an empty ``outdir``."""
    if name not in CONCURRENT_SCENARIOS:
        raise UsageError(f"unknown concurrent scenario {name!r}; valid: {', '.join(CONCURRENT_SCENARIOS)}")
    spec = CONCURRENT_SCENARIOS[name]
    outdir = out_folder(outdir, "OUTDIR")
    if any(outdir.iterdir()):
        raise UsageError(f"{outdir}: folder is not empty")
    rng = Random(f"dslogs-concurrent|{seed}|{name}")
    host = f"{host_prefix}-01"
    pid = rng.randint(1200, 64000)
    files: list[str] = []
    if spec.fmt == "legacy":
        lines, faults, details = _seed_lines(rng)
        path = outdir / "ds15b_20261124.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path.name)
        hosts: list[str] = []
        events = len(lines)
        requests = sum(1 for x in lines if '"stage": "input"' in x)
    else:
        capacity = None
        if name in CAPACITY_SCENARIOS:
            reqs, faults, capacity = _capacity_plan(rng, name)
            samples = _capacity_replay(reqs, rng)
        else:
            reqs, faults = _plan(rng, name)
            samples = _replay(reqs, name, rng)
        lines_t = _v1_lines(reqs, samples, name, host, pid)
        folder = outdir / host
        folder.mkdir()
        by_day: dict[str, list[str]] = {}
        for t, line in lines_t:
            by_day.setdefault((START + timedelta(seconds=t)).strftime("%Y%m%d"), []).append(line)
        for day, day_lines in sorted(by_day.items()):
            path = folder / f"ds15b_{day}.jsonl.gz"
            with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
                gz.write(("\n".join(day_lines) + "\n").encode())
            files.append(str(path.relative_to(outdir)))
        hosts = [host]
        events = len(lines_t)
        requests = len(reqs)
        details = {}
        for sid, fault in faults.items():
            if fault:
                mine = [r for r in reqs if r.sid == sid]
                details[sid] = {"requests": len(mine),
                                "leaked_mb": round(sum(r.leak_mb or r.rss_leak_mb for r in mine), 1),
                                "oom_attempts": sum(1 for r in mine if r.oom_beams)}  # fmt: skip
        if capacity is not None:
            # the sessions an OOM hit (the oom rule names them: allowed, not expected)
            details["_capacity"] = {**capacity, "oom_sessions": sorted({r.sid for r in reqs if r.oom_beams})}
        if reqs and name != "cpu_only":
            details["_process"] = {"host": host, "pid": pid, "max_inflight": max(r.inflight for r in reqs),
                                   "reserved_first_mb": reqs[0].before["reserved_mb"],
                                   "reserved_last_mb": max(r.after["reserved_mb"] for r in reqs)}  # fmt: skip
    faulty = sorted(s for s, f in faults.items() if f)
    entry = {
        "rule": spec.rule, "scope": spec.scope, "also_fires": list(spec.also_fires), "description": spec.description,
        "sessions": faulty if spec.scope == "session" else [],
        "hosts": sorted({host} if spec.fmt == "v1" and spec.rule else set()),
        "details": {"sessions": {s: d for s, d in details.items() if not s.startswith("_")}, **(
            {"capacity": details["_capacity"]} if "_capacity" in details else {}), **(
            {"pid": pid} if spec.scope == "process" else {}), **({"process": details["_process"]}
                                                                if "_process" in details else {})},
    }  # fmt: skip
    doc = {
        "seed": seed, "format": spec.fmt, "generator": "dslogs.analyzer.simulate.concurrent",
        "args": {"scenario": name, "seed": seed, "host_prefix": host_prefix},
        "scenarios": {name: entry}, "healthy_sessions": sorted(s for s, f in faults.items() if not f),
        "bad_lines": [], "files": files, "events": events, "requests": requests, "sessions": len(faults),
        "hosts": [{"host": h, "pid": pid, "naive_timestamps": False} for h in hosts],
    }  # fmt: skip
    (outdir / "truth.json").write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    return {"events": events, "files": len(files), "requests": requests, "sessions": len(faults)}


__all__ = ["CONCURRENT_SCENARIOS", "ConcurrentSpec", "simulate_concurrent"]
