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

    def __init__(self):
        self.error = None
        self.t_oom = None
        self.status = "ok"


@dataclass
class Session:
    sid: str
    fault: str | None
    host: Host
    requests: list[Req] = field(default_factory=list)
    kind: int = KIND_NORMAL


def new_uuid(rng: Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


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
                 scale: float, sparse: frozenset[str], legacy: bool = False):
        self.legacy = legacy
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

    def sessions(self):
        rng, host = self.rng, self.host
        t = float(host.start_ms)
        off = host.offset_min * 60_000
        i = 0
        while True:
            t += rng.expovariate(self.peak_per_ms)
            if t >= host.end_ms:
                return
            hour = ((t + off) % (24 * MS_PER_HOUR)) / MS_PER_HOUR
            if rng.random() * LOAD_MAX > load_curve(hour):
                continue
            fault = self._fault_for(i)
            i += 1
            state = self.rng.getstate()
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
        t = t_start
        num_ooms = 0
        retries = 0
        for turn in range(1, n_turns + 1):
            r = Req()
            r.rid = f"{rng.getrandbits(64):016x}"
            r.turn = turn
            r.t0 = t
            # Prompt: characters, then tokens (Chinese-heavy chat: ~0.7 token per character).
            if fault == "kv_cache_bloat":
                chars = _clip(rng.lognormvariate(math.log(260), 0.4), 100, 600)
            elif fault == "oom" and turn >= 2:
                chars = _clip(rng.lognormvariate(math.log(600), 0.3), 300, 900)
            else:
                chars = _clip(rng.lognormvariate(math.log(chars_median), 0.9), 2, 900)
            r.input_chars = int(chars)
            prompt_tokens = int(chars * 0.7) + 2
            if truncate:
                while len(history) > HISTORY_TURNS or sum(history) > HISTORY_TOKENS:
                    history.pop(0)
            r.input_tokens = L = 12 + sum(history) + prompt_tokens

            # Output: reasoning inside <think>...</think>, then the answer.
            if fault == "long_output":
                reasoning = int(rng.uniform(2500, 3200))
                answer = int(rng.uniform(700, 1000))
            elif fault == "kv_cache_bloat":
                reasoning = int(_clip(rng.lognormvariate(math.log(140), 0.5), 30, 400))
                answer = int(rng.uniform(80, 220))
            else:
                reasoning = int(_clip(rng.lognormvariate(math.log(200), 0.6), 20, 1400))
                answer = int(_clip(rng.lognormvariate(math.log(110), 0.6), 15, 550))
            output = reasoning + 1 + answer
            finish = "stop"
            if fault is None and rng.random() < 0.01:
                reasoning = int(rng.uniform(1500, 1900))
                output = max_new
                answer = output - 1 - reasoning
                finish = "length"
            if output >= max_new:
                output = max_new
                reasoning = min(reasoning, output - 2)
                finish = "length"
            r.output_len, r.reasoning_len, r.finish = output, reasoning, finish

            # Stage durations (ms).
            if "slow_tokenize" in g:
                tok = (150 + 0.12 * L) * rng.lognormvariate(0, 0.3)
            else:
                tok = (12 + 0.02 * L) * rng.lognormvariate(0, 0.25)
            if "slow_ttft" in g:
                queue = _clip(rng.lognormvariate(math.log(1400), 0.35), 600, 4000)
            else:
                queue = rng.expovariate(1 / 4.0)
                if rng.random() < 0.03:
                    queue += rng.uniform(50, 400)
            prefill = (90 + 0.32 * L + 6e-5 * L * L) * rng.lognormvariate(0, 0.12)
            if "slow_prefill" in g:
                prefill *= 7.0
            if beams > 1:
                prefill *= 1.6
            tpot = tpot_base * rng.lognormvariate(0, 0.07) + 0.004 * L
            decode = tpot * (output - 1)
            if "slow_format" in g:
                fmt = rng.lognormvariate(math.log(180), 0.35)
            elif fault == "long_output":
                fmt = rng.uniform(60, 140)
            else:
                fmt = (1.2 + 0.004 * answer) * rng.lognormvariate(0, 0.3)
            r.tok_ms, r.queue_ms, r.prefill_ms, r.format_ms = tok, queue, prefill, fmt
            r.tpot = tpot

            r.gpu_wait = _clip(gw_base + rng.gauss(0, 4), 1, 95)
            r.util = _clip(util_base + rng.gauss(0, 3), 2, 99)
            if "low_gpu_util" in host.faults:
                r.util = min(r.util, 56.0)
            r.beams, r.max_new = beams, max_new
            r.kv_len = L
            r.kv_mb = L * KV_MB_PER_TOKEN * beams

            # Timeline.
            r.t_tok = t + rng.uniform(0.3, 1.5) + tok
            r.t_gen = r.t_tok + queue
            r.t_first = r.t_gen + prefill
            oom_now = fault == "oom" and (turn == 2 or (turn > 2 and rng.random() < 0.4))
            if oom_now:
                name, msg = OOM_MESSAGES[oom_kind]
                msg = msg.format(gib=rng.uniform(1.2, 3.5), free=rng.uniform(0.3, 1.4), alloc=rng.uniform(20.1, 21.4))
                r.error = (name, msg, "decode")
                num_ooms += 1
                retries += rng.randint(2, 6)
                r.t_oom = r.t_first + tpot * int(rng.uniform(0.1, 0.6) * output)
                if oom_kind == 1:
                    # 003 §3.2: catch the OOM and generate again greedily; the answer still comes.
                    r.t_dec = r.t_oom + rng.uniform(3, 8) + prefill + decode
                else:
                    r.status = "error"
                    r.output_len = r.reasoning_len = None
                    r.finish = "error"
                    r.t_dec = r.t_oom
                    decode = r.t_oom - r.t_first
            else:
                r.t_dec = r.t_first + decode
            r.decode_ms = decode
            if r.status == "error":
                r.format_ms = 0.0
                r.t_fmt = r.t_dec + rng.uniform(0.5, 2.0)
            else:
                r.t_fmt = r.t_dec + rng.uniform(0.2, 1.0) + fmt
            r.t_mem = r.t_fmt + rng.uniform(1.0, 4.0)
            if r.t_mem + 11_000 > host.end_ms or r.t_mem - t_start > MAX_SESSION_MS:
                break
            r.cpu_ms = (prefill + decode) * (1 - r.gpu_wait / 100)
            r.ttft = r.t_first - t
            r.ttfa = None if r.status == "error" else r.ttft + tpot * (reasoning + 1)
            r.e2e = r.t_fmt - t

            # GPU memory after the request (read after the reply is rendered, 003 §4.1).
            r.allocated = WEIGHTS_MB + rng.uniform(15, 240)
            peak = WEIGHTS_MB + 350 + 0.05 * L + rng.uniform(0, 120) + (beams - 1) * 260
            max_alloc = max(max_alloc, peak)
            reserved = reserved_base + 20 * rng.randint(-2, 2)
            if fault == "memory_leak":
                reserved += leak_step * (turn - 1) + rng.gauss(0, 10)
            if oom_now:
                max_alloc = max(max_alloc, 21500 + rng.uniform(0, 900))
            r.reserved = reserved
            r.max_allocated = max_alloc
            r.num_ooms = num_ooms
            r.retries = retries
            s.requests.append(r)

            if r.status == "ok":
                history.append(prompt_tokens + answer)
            think = min(8_000 + rng.expovariate(1 / 25_000), think_cap)
            t = r.t_mem + think
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
    if s.fault in ("gpu_wait", "cpu_bound", "slow_decode"):
        return len(reqs) >= 1
    return True
