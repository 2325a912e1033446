"""Traffic model: chat sessions, their requests and every number a request's events carry.

Numbers come from the seeds: tokenize tens of ms, prefill hundreds of ms growing with the
prompt and the dialogue history (003 §3, §4.3), decode 30-60 ms/token (003 §5.2 allows 130),
R1-style reasoning tokens before ``</think>``, a T4/A10G-class GPU with a 1.5B model in
bf16 (~3.4 GB allocated, ~4.2 GB reserved; 003 §4.1 reports 3.2 GB at start).

The planner only draws numbers; ``v1.py`` and ``legacy.py`` turn them into lines. Memory
counters (``reserved_mb``, ``num_ooms``) are modelled per session so that a fault stays
attributable to the sessions truth.json names, even though PyTorch keeps them per process.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from random import Random
from statistics import NormalDist, median

MS_PER_HOUR = 3_600_000
WEIGHTS_MB = 3390.0  # 1.78 B parameters in bf16
KV_MB_PER_TOKEN = 28 * 2 * 128 * 2 * 2 / 2**20  # layers x kv heads x head dim x (k, v) x bf16
GPU_TOTAL_MB = 24576.0  # A10G, as in article 000 §2.1
CONTEXT_MB = 480.0  # CUDA context, outside PyTorch's allocator
PEAK_SESSIONS_PER_HOUR = 14.0  # default arrival rate at the busiest hour, per host
HISTORY_TURNS = 8  # 003 §4.3 fix: keep the last 8 turns (~1500 tokens)
HISTORY_TOKENS = 1200
MAX_SESSION_MS = 3 * MS_PER_HOUR

# Per-session fault kinds the samplers need to know about.
KIND_NORMAL, KIND_THROTTLED, KIND_CPU = 0, 1, 2


def load_curve(hour: float) -> float:
    """Relative arrival rate by local hour: quiet nights, morning and afternoon peaks."""
    return (
        0.05
        + 0.85 * math.exp(-(((hour - 10.5) / 2.2) ** 2))
        + 1.0 * math.exp(-(((hour - 15.5) / 2.5) ** 2))
        + 0.4 * math.exp(-(((hour - 21.0) / 1.8) ** 2))
    )


LOAD_MAX = 1.12  # >= max of load_curve (checked in tests), the thinning bound

# queue_wait: for a while (a quarter of a short run, at most OVERLOAD_MAX_MS) a burst of users
# outruns the handlers: OVERLOAD_SESSIONS times the run's usual number of sessions arrive in the
# window (a share, so that the queue's tail shows at any traffic level while the median stays
# healthy; Planner._burst). The backlog (the wait a request arriving then meets) builds linearly to
# OVERLOAD_PEAK_MS and drains in the window's last fifth; outside the window the queue is healthy.
OVERLOAD_START = 0.45  # where the window opens, as a fraction of the host's time window
OVERLOAD_SHARE = 0.25
OVERLOAD_MAX_MS = 45 * 60_000
OVERLOAD_SESSIONS = 0.25
OVERLOAD_MIN_SESSIONS = 4
OVERLOAD_TURNS = 2  # the burst's users ask a question or two
OVERLOAD_PEAK_MS = 6000.0


def overload_window(host: Host) -> tuple[float, float]:
    span = host.end_ms - host.start_ms
    a = host.start_ms + OVERLOAD_START * span
    return a, a + min(OVERLOAD_SHARE * span, OVERLOAD_MAX_MS)


def overload_queue_ms(t: float, window: tuple[float, float]) -> float:
    """The backlog's wait at epoch ms ``t`` (0 outside the overload window)."""
    a, b = window
    if not a <= t < b:
        return 0.0
    x = (t - a) / (b - a)
    return OVERLOAD_PEAK_MS * (x / 0.8 if x < 0.8 else (1.0 - x) / 0.2)


@dataclass
class Host:
    index: int
    name: str
    pid: int
    offset_min: int
    start_ms: int  # window start, epoch ms UTC
    end_ms: int
    faults: frozenset[str]
    reserved_mb: float  # the process's steady reserved memory


class Req:
    """One user turn with every drawn number. Times are epoch ms (floats)."""

    __slots__ = (
        "rid", "turn", "t0", "t_tok", "t_gen", "t_first", "t_dec", "t_fmt", "t_mem",
        "input_chars", "input_tokens", "tok_ms", "queue_ms", "prefill_ms", "decode_ms", "format_ms",
        "output_len", "reasoning_len", "tpot", "gpu_wait", "util", "cpu_ms", "beams", "max_new",
        "finish", "error", "allocated", "reserved", "max_allocated", "num_ooms", "retries",
        "kv_len", "kv_mb", "ttft", "ttfa", "e2e", "t_oom", "status",
    )  # fmt: skip


@dataclass
class Session:
    sid: str
    fault: str | None
    host: Host
    requests: list[Req] = field(default_factory=list)
    kind: int = KIND_NORMAL


# Standard normal quantiles: Z[int(random() * NZ)] is a normal draw at ~1/5 of gauss()'s cost.
NZ = 4096
Z = [NormalDist().inv_cdf((i + 0.5) / NZ) for i in range(NZ)]


def new_uuid(rng: Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


OOM_MESSAGES = (
    (
        "OutOfMemoryError",
        "CUDA out of memory. Tried to allocate {gib:.2f} GiB. GPU 0 has a total capacity of 23.68 GiB "
        "of which {free:.2f} GiB is free. Of the allocated memory {alloc:.2f} GiB is allocated by PyTorch.",
    ),
    ("OOMError", "Beam search OOM, fallback to greedy"),  # article 003 §3.2
)


class Planner:
    """Draws one host's sessions in arrival order."""

    def __init__(self, rng: Random, host: Host, session_faults: list[str], global_faults: frozenset[str],
                 scale: float, sparse: frozenset[str], legacy: bool = False, max_turns: int | None = None):
        self.legacy = legacy
        self.max_turns = max_turns
        self.rng = rng
        self.host = host
        self.session_faults = session_faults
        self.global_faults = global_faults
        self.sparse = sparse
        self.peak_per_ms = PEAK_SESSIONS_PER_HOUR * scale * LOAD_MAX / MS_PER_HOUR
        self.oom_sessions = 0

    def _fault_for(self, i: int) -> str | None:
        """Every fourth session (i = 1, 5, 9, ...) carries a fault, round-robin over faults."""
        faults = self.session_faults
        if not faults or i % 4 != 1:
            return None
        slot = i // 4 + self.host.index
        name = faults[slot % len(faults)]
        if name in self.sparse and (slot // len(faults)) % 2 == 1:
            return None
        return name

    def _arrivals(self):
        """Session start times (epoch ms) in order: a thinned Poisson process following the
        day's load curve, plus queue_wait's burst."""
        rng, host = self.rng, self.host
        t = float(host.start_ms)
        off = host.offset_min * 60_000
        random, log = rng.random, math.log
        mean_gap = 1.0 / self.peak_per_ms
        burst = self._burst(off) if "queue_wait" in self.global_faults else []
        while True:
            t -= mean_gap * log(1.0 - random())
            while burst and burst[0] <= t:
                yield burst.pop(0)
            if t >= host.end_ms:
                return
            hour = ((t + off) % (24 * MS_PER_HOUR)) / MS_PER_HOUR
            if random() * LOAD_MAX > load_curve(hour):
                continue
            yield t

    def _burst(self, off: int) -> list[float]:
        """queue_wait: OVERLOAD_SESSIONS times the run's expected sessions (at least
        OVERLOAD_MIN_SESSIONS), spread evenly over the overload window with a jitter."""
        host = self.host
        per_ms = self.peak_per_ms / LOAD_MAX
        usual = per_ms * 60_000 * sum(
            load_curve(((m + off) % (24 * MS_PER_HOUR)) / MS_PER_HOUR)
            for m in range(host.start_ms, host.end_ms, 60_000)
        )
        n = max(round(OVERLOAD_SESSIONS * usual), OVERLOAD_MIN_SESSIONS)
        a, b = overload_window(host)
        step = (b - a) / n
        return [a + (k + self.rng.random()) * step for k in range(n)]

    def sessions(self):
        i = 0
        for t in self._arrivals():
            fault = self._fault_for(i)
            i += 1
            state = self.rng.getstate() if fault else None
            session = self._session(t, fault)
            if fault and not _expressed(session):
                # Cut short by the end of the window: not a clear case, so make it healthy.
                self.rng.setstate(state)
                session = self._session(t, None)
            if session.requests:
                yield session

    # -- one session -----------------------------------------------------------------------
    def _session(self, t_start: float, fault: str | None) -> Session:
        rng, host = self.rng, self.host
        g = self.global_faults
        s = Session(new_uuid(rng), fault, host)
        n_turns = 1 + min(int(rng.expovariate(1 / 3.2)), 13)
        if self.max_turns and fault is None:
            n_turns = min(n_turns, self.max_turns)
        overload = overload_window(host) if "queue_wait" in g else None
        if overload and overload[0] <= t_start < overload[1]:
            n_turns = min(n_turns, OVERLOAD_TURNS)
        think_cap = 180_000.0
        tpot_base = rng.uniform(34, 52)
        gw_base = rng.uniform(18, 38)
        util_base = rng.uniform(76, 92)
        chars_median = rng.uniform(40, 110)
        reserved_base = host.reserved_mb
        beams, max_new = 1, 2048
        truncate = True
        leak_step = 0.0
        max_alloc = 0.0
        oom_kind = 0
        if "low_gpu_util" in host.faults:
            util_base = rng.uniform(32, 48)
        if "memory_thrash" in host.faults:
            util_base = rng.uniform(88, 95)

        if fault == "memory_leak":
            n_turns = rng.randint(7, 12)
            think_cap = 60_000.0
            leak_step = min(rng.uniform(160, 260), 1500.0 / (n_turns - 1))
        elif fault == "ghost_memory":
            reserved_base = 9216.0
            max_alloc = 9050.0 + rng.uniform(0, 100)
        elif fault == "oom":
            n_turns = max(n_turns, rng.randint(3, 6))
            oom_kind = 1 if self.legacy else self.oom_sessions % 2
            self.oom_sessions += 1
        elif fault == "gpu_wait":
            gw_base = rng.uniform(68, 84)
            util_base = rng.uniform(38, 52)
            tpot_base = rng.uniform(60, 85)
        elif fault == "cpu_bound":
            util_base = rng.uniform(7, 14)
            tpot_base = rng.uniform(175, 250)
            gw_base = rng.uniform(4, 10)
            s.kind = KIND_CPU
        elif fault == "kv_cache_bloat":
            n_turns = rng.randint(16, 22)
            think_cap = 60_000.0
            truncate = False
        elif fault == "beam_search":
            beams = 5
            tpot_base = rng.uniform(70, 95)
            util_base = rng.uniform(60, 75)
            reserved_base += 1600.0
        elif fault == "high_max_tokens":
            max_new = rng.choice((4096, 8192))
        elif fault == "long_output":
            n_turns = rng.randint(2, 4)
            max_new = 4000
        elif fault == "slow_decode":
            tpot_base = rng.uniform(155, 215)
            util_base = rng.uniform(84, 94)
            s.kind = KIND_THROTTLED

        history: list[int] = []
        hist_sum = 0
        t = t_start
        num_ooms = 0
        retries = 0
        # Hot loop: draw with random()/gauss() directly (uniform/lognormvariate cost 2-4x more).
        random, exp, log = rng.random, math.exp, math.log
        slow_tok = "slow_tokenize" in g
        slow_ttft = "slow_ttft" in g
        slow_prefill = "slow_prefill" in g
        slow_format = "slow_format" in g
        low_util = "low_gpu_util" in host.faults
        end_ms = host.end_ms
        log_chars = log(chars_median)
        is_bloat = fault == "kv_cache_bloat"
        is_oom = fault == "oom"
        is_long = fault == "long_output"
        for turn in range(1, n_turns + 1):
            r = Req()
            r.error = r.t_oom = None
            r.status = "ok"
            r.rid = f"{rng.getrandbits(64):016x}"
            r.turn = turn
            r.t0 = t
            # Prompt: characters, then tokens (Chinese-heavy chat: ~0.7 token per character).
            if is_bloat:
                chars = min(max(220 * exp(0.4 * Z[int(random() * NZ)]), 100), 450)
            elif is_oom and turn >= 2:
                chars = min(max(600 * exp(0.3 * Z[int(random() * NZ)]), 300), 900)
            else:
                chars = min(max(exp(log_chars + 0.9 * Z[int(random() * NZ)]), 2), 900)
            r.input_chars = int(chars)
            prompt_tokens = int(chars * 0.7) + 2
            if truncate:
                while len(history) > HISTORY_TURNS or hist_sum > HISTORY_TOKENS:
                    hist_sum -= history.pop(0)
            r.input_tokens = L = 12 + hist_sum + prompt_tokens

            # Output: reasoning inside <think>...</think>, then the answer.
            if is_long:
                reasoning = int(2500 + 700 * random())
                answer = int(700 + 300 * random())
            elif is_bloat:
                reasoning = int(min(max(140 * exp(0.5 * Z[int(random() * NZ)]), 30), 400))
                answer = int(80 + 140 * random())
            else:
                reasoning = int(min(max(200 * exp(0.6 * Z[int(random() * NZ)]), 20), 1400))
                answer = int(min(max(110 * exp(0.6 * Z[int(random() * NZ)]), 15), 550))
            output = reasoning + 1 + answer
            finish = "stop"
            if fault is None and random() < 0.01:
                reasoning = int(1500 + 400 * random())
                output = max_new
                answer = output - 1 - reasoning
                finish = "length"
            if output >= max_new:
                output = max_new
                reasoning = min(reasoning, output - 2)
                finish = "length"
            r.output_len, r.reasoning_len, r.finish = output, reasoning, finish

            # Stage durations (ms).
            if slow_tok:
                tok = (150 + 0.12 * L) * exp(0.3 * Z[int(random() * NZ)])
            else:
                tok = (12 + 0.02 * L) * exp(0.25 * Z[int(random() * NZ)])
            if slow_ttft:
                queue = min(max(1400 * exp(0.35 * Z[int(random() * NZ)]), 600), 4000)
            else:
                queue = -4.0 * log(1.0 - random())
                if random() < 0.03:
                    queue += 50 + 350 * random()
                if overload:
                    queue += overload_queue_ms(t, overload) * exp(0.15 * Z[int(random() * NZ)])
            prefill = (90 + 0.32 * L + 6e-5 * L * L) * exp(0.12 * Z[int(random() * NZ)])
            if slow_prefill:
                prefill *= 7.0
            if beams > 1:
                prefill *= 1.6
            tpot = tpot_base * exp(0.07 * Z[int(random() * NZ)]) + 0.004 * L
            decode = tpot * (output - 1)
            if slow_format:
                fmt = 180 * exp(0.35 * Z[int(random() * NZ)])
            elif is_long:
                fmt = 60 + 80 * random()
            else:
                fmt = (1.2 + 0.004 * answer) * exp(0.3 * Z[int(random() * NZ)])
            r.tok_ms, r.queue_ms, r.prefill_ms, r.format_ms = tok, queue, prefill, fmt
            r.tpot = tpot

            r.gpu_wait = min(max(gw_base + 4 * Z[int(random() * NZ)], 1), 95)
            util = min(max(util_base + 3 * Z[int(random() * NZ)], 2), 99)
            r.util = 56.0 if low_util and util > 56.0 else util
            r.beams, r.max_new = beams, max_new
            r.kv_len = L
            r.kv_mb = L * KV_MB_PER_TOKEN * beams

            # Timeline.
            r.t_tok = t_tok = t + 0.3 + 1.2 * random() + tok
            r.t_gen = t_gen = t_tok + queue
            r.t_first = t_first = t_gen + prefill
            oom_now = is_oom and (turn == 2 or (turn > 2 and random() < 0.4))
            if oom_now:
                name, msg = OOM_MESSAGES[oom_kind]
                msg = msg.format(
                    gib=rng.uniform(1.2, 3.5), free=rng.uniform(0.3, 1.4), alloc=rng.uniform(20.1, 21.4)
                )
                r.error = (name, msg, "decode")
                num_ooms += 1
                retries += rng.randint(2, 6)
                r.t_oom = t_first + tpot * int(rng.uniform(0.1, 0.6) * output)
                if oom_kind == 1:
                    # 003 §3.2: catch the OOM and generate again greedily; the answer still comes.
                    t_dec = r.t_oom + rng.uniform(3, 8) + prefill + decode
                else:
                    r.status = "error"
                    r.output_len = r.reasoning_len = None
                    r.finish = "error"
                    t_dec = r.t_oom
                    decode = t_dec - t_first
            else:
                t_dec = t_first + decode
            r.t_dec = t_dec
            r.decode_ms = decode
            if r.status == "error":
                r.format_ms = 0.0
                t_fmt = t_dec + 0.5 + 1.5 * random()
            else:
                t_fmt = t_dec + 0.2 + 0.8 * random() + fmt
            r.t_fmt = t_fmt
            r.t_mem = t_mem = t_fmt + 1.0 + 3.0 * random()
            if t_mem + 11_000 > end_ms or t_mem - t_start > MAX_SESSION_MS:
                break
            r.cpu_ms = (prefill + decode) * (1 - r.gpu_wait / 100)
            r.ttft = t_first - t
            r.ttfa = None if r.status == "error" else r.ttft + tpot * (reasoning + 1)
            r.e2e = t_fmt - t

            # GPU memory after the request (read after the reply is rendered, 003 §4.1).
            r.allocated = WEIGHTS_MB + 15 + 225 * random()
            peak = WEIGHTS_MB + 350 + 0.05 * L + 120 * random() + (beams - 1) * 260
            if peak > max_alloc:
                max_alloc = peak
            reserved = reserved_base + 20 * int(5 * random() - 2.5)
            if leak_step:
                reserved += leak_step * (turn - 1) + 10 * Z[int(random() * NZ)]
            if oom_now:
                max_alloc = max(max_alloc, 21500 + 900 * random())
            r.reserved = reserved
            r.max_allocated = max_alloc
            r.num_ooms = num_ooms
            r.retries = retries
            s.requests.append(r)

            if r.status == "ok":
                history.append(prompt_tokens + answer)
                hist_sum += prompt_tokens + answer
            think = 8_000 - 25_000 * log(1.0 - random())
            t = t_mem + (think if think < think_cap else think_cap)
        return s


def reserved_slope(reqs: list[Req]) -> tuple[float, float]:
    """(slope MB/min, rise MB) of reserved_mb over a session's gpu_memory readings."""
    if len(reqs) < 2:
        return 0.0, 0.0
    xs = [r.t_mem / 60_000 for r in reqs]
    ys = [r.reserved for r in reqs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return (sxy / sxx if sxx else 0.0), max(ys) - min(ys)


def _expressed(s: Session) -> bool:
    """Does the session show its fault clearly over the §6 threshold?"""
    reqs = s.requests
    if not reqs:
        return False
    if s.fault == "memory_leak":
        slope, rise = reserved_slope(reqs)
        return len(reqs) >= 5 and slope > 80 and rise > 400
    if s.fault == "kv_cache_bloat":
        return max(r.kv_len for r in reqs) > 2600
    if s.fault == "oom":
        return any(r.error for r in reqs)
    ok = [r for r in reqs if r.status == "ok" and not r.error]
    if s.fault == "gpu_wait":
        return median(r.gpu_wait for r in reqs) > 66
    if s.fault == "cpu_bound":
        return bool(ok) and median(r.util for r in ok) < 16 and median(_tpot(r) for r in ok) > 150
    if s.fault == "slow_decode":
        return bool(ok) and median(_tpot(r) for r in ok) > 145
    if s.fault == "long_output":
        return any(r.output_len > 3100 for r in ok)
    return True


def _tpot(r: Req) -> float:
    return r.decode_ms / (r.output_len - 1)
