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
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from statistics import NormalDist

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


class Plan:
    """One session's numbers before its turns are drawn, and the draws a fault replaces.

    ``Planner._session`` fills the healthy values, then calls the ``plan`` hook of every global
    and host fault of the run and of the session's own fault (``ScenarioSpec.plan``), which may
    change them: a hook that draws (``rng.uniform``) does so where the fault always drew, so the
    random stream, and the sample logs, stay the same. The per-request hooks (None: the healthy
    draw) each take the request's numbers and ``random`` and draw exactly what they replace."""

    __slots__ = (
        "t_start", "n_turns", "think_cap", "tpot_base", "gw_base", "util_base", "chars_median",
        "reserved_base", "beams", "max_new", "truncate", "leak_step", "max_alloc", "oom", "oom_kind",
        "kind", "util_cap", "prefill_scale", "chars", "output", "tokenize", "queue", "queue_extra",
        "format",
    )  # fmt: skip

    def __init__(self, t_start: float, n_turns: int, tpot_base: float, gw_base: float, util_base: float,
                 chars_median: float, reserved_base: float):  # fmt: skip
        self.t_start, self.n_turns = t_start, n_turns
        self.think_cap = 180_000.0
        self.tpot_base, self.gw_base, self.util_base = tpot_base, gw_base, util_base
        self.chars_median, self.reserved_base = chars_median, reserved_base
        self.beams, self.max_new = 1, 2048
        self.truncate = True  # keep HISTORY_TURNS / HISTORY_TOKENS of history (003 §4.3's fix)
        self.leak_step = 0.0  # reserved MB kept per turn
        self.max_alloc = 0.0
        self.oom = False  # OOMs from the second turn on (OOM_MESSAGES[oom_kind])
        self.oom_kind = 0
        self.kind = KIND_NORMAL
        self.util_cap: float | None = None  # GPU util never above this while serving
        self.prefill_scale = 1.0
        # (turn, random) -> prompt characters, or None for the healthy draw
        self.chars: Callable[[int, Callable[[], float]], float | None] | None = None
        # (random) -> (reasoning tokens, answer tokens)
        self.output: Callable[[Callable[[], float]], tuple[int, int]] | None = None
        # (input tokens, random) -> tokenize ms
        self.tokenize: Callable[[int, Callable[[], float]], float] | None = None
        # (random) -> queue ms, instead of the healthy queue
        self.queue: Callable[[Callable[[], float]], float] | None = None
        # (epoch ms, random) -> queue ms added to the healthy queue
        self.queue_extra: Callable[[float, Callable[[], float]], float] | None = None
        # (answer tokens, random) -> format ms
        self.format: Callable[[int, Callable[[], float]], float] | None = None


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
                 scale: float, sparse: frozenset[str], legacy: bool = False, max_turns: int | None = None,
                 specs: dict | None = None):  # fmt: skip
        self.legacy = legacy
        self.max_turns = max_turns
        self.rng = rng
        self.host = host
        self.session_faults = session_faults
        self.global_faults = global_faults
        self.sparse = sparse
        self.peak_per_ms = PEAK_SESSIONS_PER_HOUR * scale * LOAD_MAX / MS_PER_HOUR
        self.oom_sessions = 0
        # name -> ScenarioSpec (scenarios.SCENARIOS): the faults' hooks
        self.specs = specs or {}
        # the run's and this host's faults act on every session, in the specs' order
        every = [self.specs[n] for n in self.specs if n in global_faults or n in host.faults]
        self.every_plan = [spec.plan for spec in every if spec.plan]
        self.arrival_hooks = [spec.arrivals for spec in every if spec.arrivals]

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
        burst = sorted(t for hook in self.arrival_hooks for t in hook(self, off))
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

    def usual_sessions(self, off: int) -> float:
        """The sessions the load curve expects over the host's window."""
        host = self.host
        per_ms = self.peak_per_ms / LOAD_MAX
        return per_ms * 60_000 * sum(
            load_curve(((m + off) % (24 * MS_PER_HOUR)) / MS_PER_HOUR)
            for m in range(host.start_ms, host.end_ms, 60_000)
        )

    def sessions(self):
        i = 0
        for t in self._arrivals():
            fault = self._fault_for(i)
            i += 1
            state = self.rng.getstate() if fault else None
            session = self._session(t, fault)
            if fault and not _expressed(self.specs[fault].expressed, session):
                # Cut short by the end of the window: not a clear case, so make it healthy.
                self.rng.setstate(state)
                session = self._session(t, None)
            if session.requests:
                yield session

    # -- one session -----------------------------------------------------------------------
    def _session(self, t_start: float, fault: str | None) -> Session:
        rng, host = self.rng, self.host
        s = Session(new_uuid(rng), fault, host)
        n_turns = 1 + min(int(rng.expovariate(1 / 3.2)), 13)
        if self.max_turns and fault is None:
            n_turns = min(n_turns, self.max_turns)
        p = Plan(t_start, n_turns, rng.uniform(34, 52), rng.uniform(18, 38), rng.uniform(76, 92), rng.uniform(40, 110),
                 host.reserved_mb)  # fmt: skip
        for hook in self.every_plan:
            hook(p, rng, self)
        if fault and (hook := self.specs[fault].plan):
            hook(p, rng, self)
        s.kind = p.kind
        n_turns, think_cap, tpot_base, gw_base, util_base = p.n_turns, p.think_cap, p.tpot_base, p.gw_base, p.util_base
        reserved_base, beams, max_new, truncate = p.reserved_base, p.beams, p.max_new, p.truncate
        leak_step, max_alloc, oom_kind = p.leak_step, p.max_alloc, p.oom_kind
        draw_chars, draw_output, draw_tok, draw_queue = p.chars, p.output, p.tokenize, p.queue
        queue_extra, draw_fmt, util_cap, prefill_scale = p.queue_extra, p.format, p.util_cap, p.prefill_scale

        history: list[int] = []
        hist_sum = 0
        t = t_start
        num_ooms = 0
        retries = 0
        # Hot loop: draw with random()/gauss() directly (uniform/lognormvariate cost 2-4x more).
        random, exp, log = rng.random, math.exp, math.log
        end_ms = host.end_ms
        log_chars = log(p.chars_median)
        is_oom = p.oom
        for turn in range(1, n_turns + 1):
            r = Req()
            r.error = r.t_oom = None
            r.status = "ok"
            r.rid = f"{rng.getrandbits(64):016x}"
            r.turn = turn
            r.t0 = t
            # Prompt: characters, then tokens (Chinese-heavy chat: ~0.7 token per character).
            chars = draw_chars(turn, random) if draw_chars else None
            if chars is None:
                chars = min(max(exp(log_chars + 0.9 * Z[int(random() * NZ)]), 2), 900)
            r.input_chars = int(chars)
            prompt_tokens = int(chars * 0.7) + 2
            if truncate:
                while len(history) > HISTORY_TURNS or hist_sum > HISTORY_TOKENS:
                    hist_sum -= history.pop(0)
            r.input_tokens = L = 12 + hist_sum + prompt_tokens

            # Output: reasoning inside <think>...</think>, then the answer.
            if draw_output:
                reasoning, answer = draw_output(random)
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
            if draw_tok:
                tok = draw_tok(L, random)
            else:
                tok = (12 + 0.02 * L) * exp(0.25 * Z[int(random() * NZ)])
            if draw_queue:
                queue = draw_queue(random)
            else:
                queue = -4.0 * log(1.0 - random())
                if random() < 0.03:
                    queue += 50 + 350 * random()
                if queue_extra:
                    queue += queue_extra(t, random)
            prefill = (90 + 0.32 * L + 6e-5 * L * L) * exp(0.12 * Z[int(random() * NZ)]) * prefill_scale
            if beams > 1:
                prefill *= 1.6
            tpot = tpot_base * exp(0.07 * Z[int(random() * NZ)]) + 0.004 * L
            decode = tpot * (output - 1)
            if draw_fmt:
                fmt = draw_fmt(answer, random)
            else:
                fmt = (1.2 + 0.004 * answer) * exp(0.3 * Z[int(random() * NZ)])
            r.tok_ms, r.queue_ms, r.prefill_ms, r.format_ms = tok, queue, prefill, fmt
            r.tpot = tpot

            r.gpu_wait = min(max(gw_base + 4 * Z[int(random() * NZ)], 1), 95)
            util = min(max(util_base + 3 * Z[int(random() * NZ)], 2), 99)
            r.util = util_cap if util_cap is not None and util > util_cap else util
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


def _expressed(check, s: Session) -> bool:
    """Does the session show its fault clearly (its spec's ``expressed``)? A session cut to
    nothing by the end of the window never does."""
    return bool(s.requests) and (check is None or check(s))


def tpot(r: Req) -> float:
    return r.decode_ms / (r.output_len - 1)
