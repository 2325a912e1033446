"""Fault scenarios: one per rule id (dslogs.analyzer.rules), plus ``healthy``.

A scenario names the rule it should make fire, the scope it is injected at, the formats that
can carry it, and its fault: hooks the generic traffic model calls (``traffic.Planner``), so a
new scenario is its spec here and nothing elsewhere:

- ``plan(p, rng, planner)``: changes a session's ``traffic.Plan`` before its turns are drawn
  (its numbers, or the per-request draws it replaces). A session fault's runs on its sessions;
  a global fault's on every session of the run, a host fault's on every session of its host,
  before the session's own. A hook draws from ``rng`` only what the fault needs, in a fixed order.
- ``arrivals(planner, offset_ms)``: extra session start times (epoch ms) on each host.
- ``expressed(session)``: does a drawn session show its fault clearly? If not (cut short by the
  end of the window) it is drawn again as a healthy one.
- ``session_detail(session, legacy)`` / ``host_detail(stats)`` / ``run_detail(truth)``: what
  truth.json says about it (session, host/process and global scopes).

The host samplers' faults (GPU utilisation and memory, RSS, the collector) are still drawn by
the writers (``v1.py``), which read ``Host.faults``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from math import exp
from statistics import median

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.simulate.traffic import (
    KIND_CPU,
    KIND_THROTTLED,
    NZ,
    OVERLOAD_MIN_SESSIONS,
    OVERLOAD_SESSIONS,
    OVERLOAD_TURNS,
    Z,
    overload_queue_ms,
    overload_window,
    reserved_slope,
    tpot,
)

# Scopes, as truth.json reports them.
SESSION = "session"  # some sessions carry the fault; the others stay healthy
HOST = "host"  # one host's samplers/collector carry it
PROCESS = "process"  # one host's process (pid)
GLOBAL = "global"  # every request of the run: a p50 rule over all traffic needs that
INGEST = "ingest"  # the files themselves


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    description: str
    scope: str
    formats: tuple[str, ...] = ("v1", "legacy")
    # Other rules the fault makes fire by construction (truth.json "also_fires").
    also_fires: tuple[str, ...] = ()
    # Session faults: only every other candidate slot gets this fault (long sessions).
    sparse: bool = False
    # Host faults that cannot share one host with this one.
    conflicts: tuple[str, ...] = field(default=())
    # The fault's hooks (module docstring); None: no change there.
    plan: Callable | None = None
    arrivals: Callable | None = None
    expressed: Callable | None = None
    session_detail: Callable | None = None
    host_detail: Callable | None = None
    run_detail: Callable | None = None

    @property
    def rule(self) -> str | None:
        return None if self.name == "healthy" else self.name


def p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def p95(values: list[float]) -> float | None:
    """Linear interpolation, as numpy's and DuckDB's quantile_cont."""
    if len(values) < 2:
        return round(values[0], 3) if values else None
    return round(statistics.quantiles(values, n=20, method="inclusive")[18], 3)


def _ok(s) -> list:
    return [r for r in s.requests if r.status == "ok" and not r.error]


def _normal(random) -> float:
    return Z[int(random() * NZ)]


# -- session faults ----------------------------------------------------------------------------


def _leak_plan(p, rng, planner):
    p.n_turns = rng.randint(7, 12)
    p.think_cap = 60_000.0
    p.leak_step = min(rng.uniform(160, 260), 1500.0 / (p.n_turns - 1))


def _leak_expressed(s) -> bool:
    slope, rise = reserved_slope(s.requests)
    return len(s.requests) >= 5 and slope > 80 and rise > 400


def _leak_detail(s, legacy) -> dict:
    slope, rise = reserved_slope(s.requests)
    return {"reserved_slope_mb_per_min": round(slope, 1), "reserved_rise_mb": round(rise, 1)}


def _ghost_plan(p, rng, planner):
    p.reserved_base = 9216.0
    p.max_alloc = 9050.0 + rng.uniform(0, 100)


def _ghost_detail(s, legacy) -> dict:
    reqs = s.requests
    return {"ghost_mb_max": round(max(r.reserved - r.allocated for r in reqs), 1),
            "ghost_share_max": round(max((r.reserved - r.allocated) / r.reserved for r in reqs), 3)}  # fmt: skip


def _oom_chars(turn, random):
    # the second turn on asks for more context, and runs out of memory
    return min(max(600 * exp(0.3 * _normal(random)), 300), 900) if turn >= 2 else None


def _oom_plan(p, rng, planner):
    p.n_turns = max(p.n_turns, rng.randint(3, 6))
    # the two messages of OOM_MESSAGES in turn (legacy: article 003's OOMError only)
    p.oom, p.oom_kind = True, 1 if planner.legacy else planner.oom_sessions % 2
    planner.oom_sessions += 1
    p.chars = _oom_chars


def _oom_detail(s, legacy) -> dict:
    reqs = s.requests
    return {"oom_errors": sum(1 for r in reqs if r.error), "max_num_ooms": max(r.num_ooms for r in reqs),
            "error_types": sorted({"OOMError" if legacy else r.error[0] for r in reqs if r.error})}  # fmt: skip


def _gpu_wait_plan(p, rng, planner):
    p.gw_base = rng.uniform(68, 84)
    p.util_base = rng.uniform(38, 52)
    p.tpot_base = rng.uniform(60, 85)


def _cpu_bound_plan(p, rng, planner):
    p.util_base = rng.uniform(7, 14)
    p.tpot_base = rng.uniform(175, 250)
    p.gw_base = rng.uniform(4, 10)
    p.kind = KIND_CPU


def _cpu_bound_expressed(s) -> bool:
    ok = _ok(s)
    return bool(ok) and median(r.util for r in ok) < 16 and median(tpot(r) for r in ok) > 150


def _decode_detail(s, legacy) -> dict:
    ok = _ok(s)
    if legacy:
        d = {"tpot_upper_bound_p50_ms": p50([(r.t_dec - r.t_gen) / r.output_len for r in ok])}
    else:
        d = {"tpot_p50_ms": p50([r.decode_ms / (r.output_len - 1) for r in ok])}
    d["gpu_util_pct_p50"] = p50([r.util for r in s.requests])
    return d


def _bloat_chars(turn, random):
    return min(max(220 * exp(0.4 * _normal(random)), 100), 450)


def _bloat_output(random):
    reasoning = int(min(max(140 * exp(0.5 * _normal(random)), 30), 400))
    return reasoning, int(80 + 140 * random())


def _bloat_plan(p, rng, planner):
    p.n_turns = rng.randint(16, 22)
    p.think_cap = 60_000.0
    p.truncate = False
    p.chars, p.output = _bloat_chars, _bloat_output


def _bloat_detail(s, legacy) -> dict:
    reqs = s.requests
    return {"max_kv_seq_len": max(r.kv_len for r in reqs), "prefill_first_ms": round(reqs[0].prefill_ms, 1),
            "prefill_last_ms": round(reqs[-1].prefill_ms, 1)}  # fmt: skip


def _beam_plan(p, rng, planner):
    p.beams = 5
    p.tpot_base = rng.uniform(70, 95)
    p.util_base = rng.uniform(60, 75)
    p.reserved_base += 1600.0


def _max_tokens_plan(p, rng, planner):
    p.max_new = rng.choice((4096, 8192))


def _long_output(random):
    return int(2500 + 700 * random()), int(700 + 300 * random())


def _long_format(answer, random):
    return 60 + 80 * random()


def _long_plan(p, rng, planner):
    p.n_turns = rng.randint(2, 4)
    p.max_new = 4000
    p.output = _long_output
    if p.format is None:  # a run-wide slow_format stays the format time
        p.format = _long_format


def _long_detail(s, legacy) -> dict:
    ok = _ok(s)
    return {"max_output_len": max(r.output_len for r in ok) if ok else None}


def _slow_decode_plan(p, rng, planner):
    p.tpot_base = rng.uniform(155, 215)
    p.util_base = rng.uniform(84, 94)
    p.kind = KIND_THROTTLED


def _slow_decode_expressed(s) -> bool:
    ok = _ok(s)
    return bool(ok) and median(tpot(r) for r in ok) > 145


# -- global faults -----------------------------------------------------------------------------


def _stage_p50(metric: str) -> Callable:
    def detail(truth) -> dict:
        return {"applies_to": "every request of the run", f"{metric[:-3]}_p50_ms": p50(truth.stage_values[metric])}

    return detail


def _slow_tokenize(L, random):
    return (150 + 0.12 * L) * exp(0.3 * _normal(random))


def _slow_tokenize_plan(p, rng, planner):
    p.tokenize = _slow_tokenize


def _slow_prefill_plan(p, rng, planner):
    p.prefill_scale = 7.0


def _slow_ttft_queue(random):
    return min(max(1400 * exp(0.35 * _normal(random)), 600), 4000)


def _slow_ttft_plan(p, rng, planner):
    p.queue = _slow_ttft_queue


def _slow_format(answer, random):
    return 180 * exp(0.35 * _normal(random))


def _slow_format_plan(p, rng, planner):
    p.format = _slow_format


def _overload_arrivals(planner, off: int) -> list[float]:
    """OVERLOAD_SESSIONS times the run's expected sessions (at least OVERLOAD_MIN_SESSIONS),
    spread evenly over the overload window with a jitter."""
    n = max(round(OVERLOAD_SESSIONS * planner.usual_sessions(off)), OVERLOAD_MIN_SESSIONS)
    a, b = overload_window(planner.host)
    step = (b - a) / n
    return [a + (k + planner.rng.random()) * step for k in range(n)]


def _overload_plan(p, rng, planner):
    window = overload_window(planner.host)
    if window[0] <= p.t_start < window[1]:
        p.n_turns = min(p.n_turns, OVERLOAD_TURNS)

    def backlog(t, random):
        return overload_queue_ms(t, window) * exp(0.15 * _normal(random))

    p.queue_extra = backlog


def _overload_detail(truth) -> dict:
    return {"applies_to": "requests arriving during the overload window", "queue_p95_ms": p95(truth.queue_ms)}


# -- host faults (their samplers: v1.py) -------------------------------------------------------


def _low_util_plan(p, rng, planner):
    p.util_base = rng.uniform(32, 48)
    p.util_cap = 56.0


def _thrash_plan(p, rng, planner):
    p.util_base = rng.uniform(88, 95)


def _rss_detail(stats) -> dict:
    first, last = stats["rss_first"] or 0.0, stats["rss_last"] or 0.0
    return {"rss_first_mb": round(first, 1), "rss_last_mb": round(last, 1), "rss_rise_mb": round(last - first, 1)}


def _s(name, description, scope, **kw) -> tuple[str, ScenarioSpec]:
    return name, ScenarioSpec(name, description, scope, **kw)


V1_ONLY = ("v1",)

SCENARIOS: dict[str, ScenarioSpec] = dict(
    [
        _s("healthy", "normal traffic only; every rule stays quiet", GLOBAL),
        _s("memory_leak", "reserved_mb climbs every turn (>50 MiB/min, >200 MB) in some sessions", SESSION,
           plan=_leak_plan, expressed=_leak_expressed, session_detail=_leak_detail),
        _s("ghost_memory", "reserved far above allocated (>1 GB, >50 %) in some sessions", SESSION,
           plan=_ghost_plan, session_detail=_ghost_detail),
        _s("oom", "CUDA OOM errors (OutOfMemoryError/OOMError), num_ooms rising, in some sessions", SESSION,
           plan=_oom_plan, expressed=lambda s: any(r.error for r in s.requests), session_detail=_oom_detail),
        _s("gpu_wait", "gpu_wait_pct median > 60 in some sessions (CPU waits on the GPU)", SESSION,
           plan=_gpu_wait_plan, expressed=lambda s: median(r.gpu_wait for r in s.requests) > 66,
           session_detail=lambda s, legacy: {"gpu_wait_pct_p50": p50([r.gpu_wait for r in s.requests])}),
        _s(
            "cpu_bound",
            "gpu_util < 20 % with tpot > 130 ms, CPU at 100 %, in some sessions",
            SESSION,
            also_fires=("slow_decode",),
            plan=_cpu_bound_plan, expressed=_cpu_bound_expressed, session_detail=_decode_detail,
        ),
        _s(
            "kv_cache_bloat",
            "no history truncation: kv_seq_len passes 2048, prefill grows with turns",
            SESSION,
            sparse=True,
            plan=_bloat_plan, expressed=lambda s: max(r.kv_len for r in s.requests) > 2600,
            session_detail=_bloat_detail,
        ),
        _s("beam_search", "generate(num_beams=5) in some sessions", SESSION, formats=V1_ONLY,
           plan=_beam_plan, session_detail=lambda s, legacy: {"num_beams": s.requests[0].beams}),
        _s("high_max_tokens", "max_new_tokens 4096/8192 in some sessions", SESSION, formats=V1_ONLY,
           plan=_max_tokens_plan, session_detail=lambda s, legacy: {"max_new_tokens": s.requests[0].max_new}),
        _s("long_output", "output_len > 3000 tokens (max_new_tokens 4000) in some sessions", SESSION,
           plan=_long_plan, expressed=lambda s: any(r.output_len > 3100 for r in _ok(s)),
           session_detail=_long_detail),
        _s("slow_tokenize", "tokenize p50 ~ 250 ms over the whole run", GLOBAL,
           plan=_slow_tokenize_plan, run_detail=_stage_p50("tokenize_ms")),
        _s(
            "slow_prefill",
            "prefill 7x slower over the whole run (p50 > 900 ms for short inputs)",
            GLOBAL,
            formats=V1_ONLY,
            also_fires=("slow_ttft",),
            plan=_slow_prefill_plan, run_detail=_stage_p50("prefill_ms"),
        ),
        _s("slow_decode", "tpot 150-220 ms (thermal throttling) in some sessions", SESSION,
           plan=_slow_decode_plan, expressed=_slow_decode_expressed, session_detail=_decode_detail),
        _s(
            "slow_ttft",
            "requests wait 1-2.5 s in the queue over the whole run (ttft p50 > 1 s)",
            GLOBAL,
            formats=V1_ONLY,
            also_fires=("queue_wait",),
            plan=_slow_ttft_plan, run_detail=_stage_p50("ttft_ms"),
        ),
        _s(
            "queue_wait",
            "an overload for a quarter of the run: queue wait builds to ~6 s and drains (p95 > 1 s)",
            GLOBAL,
            formats=V1_ONLY,
            plan=_overload_plan, arrivals=_overload_arrivals, run_detail=_overload_detail,
        ),
        _s("slow_format", "format p50 ~ 180 ms over the whole run", GLOBAL, formats=V1_ONLY,
           plan=_slow_format_plan, run_detail=_stage_p50("format_ms")),
        _s(
            "low_gpu_util",
            "one host never gets above ~55 % GPU util while serving",
            HOST,
            formats=V1_ONLY,
            conflicts=("memory_thrash",),
            plan=_low_util_plan, host_detail=lambda st: {"gpu_util_peak_pct": round(st["gen_util_max"], 1)},
        ),
        _s(
            "gpu_starved",
            "one host: another process holds 18.5 GB, GPU memory > 90 % while util < 20 %",
            HOST,
            formats=V1_ONLY,
            conflicts=("memory_thrash",),
            host_detail=lambda st: {"gpu_mem_pct_max": round(st["mem_pct_max"], 1),
                                    "starved_samples": st["starved_ticks"]},
        ),
        _s(
            "memory_thrash",
            "one host: util > 80 % while gpu_mem_used swings ~3 GB per second",
            HOST,
            formats=V1_ONLY,
            conflicts=("low_gpu_util", "gpu_starved"),
            plan=_thrash_plan,
            host_detail=lambda st: {"gpu_mem_swing_max_mb_per_s": round(st["swing_max_mb"], 1),
                                    "gpu_util_min_pct_while_serving": 84},
        ),
        _s("rss_growth", "one host's process RSS rises ~420 MB linearly over the run", PROCESS, formats=V1_ONLY,
           host_detail=_rss_detail),
        _s("log_volume", "one host writes ~1.3 MB/s of debug dumps for one minute", HOST, formats=V1_ONLY,
           host_detail=lambda st: {"burst_minute": st["burst_minute"], "burst_bytes": st["burst_bytes"],
                                   "burst_mb_per_s": round(st["burst_bytes"] / 60 / 1e6, 3)}),
        _s("collector_drops", "one host's collector drops sampler events (dropped > 0)", HOST, formats=V1_ONLY,
           host_detail=lambda st: {"dropped": st["dropped"]}),
        _s(
            "bad_lines",
            "truncated / non-JSON / wrong-typed / invalid UTF-8 lines and an empty file",
            INGEST,
        ),
    ]
)


def normalise(names: list[str], fmt: str) -> list[str]:
    """Validate scenario names for ``fmt``; return them deduplicated, in SCENARIOS order."""
    if fmt not in ("v1", "legacy"):
        raise UsageError(f"unknown format {fmt!r}; valid: v1, legacy")
    wanted = set()
    for name in names:
        if name not in SCENARIOS:
            raise UsageError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}")
        spec = SCENARIOS[name]
        if fmt not in spec.formats:
            legacy_ok = [n for n, s in SCENARIOS.items() if "legacy" in s.formats]
            raise UsageError(
                f"scenario {name!r} cannot be written in the legacy format (article 003's logger has "
                f"no samplers, params, prefill or format timing); legacy supports: {', '.join(legacy_ok)}"
            )
        wanted.add(name)
    ordered = [n for n in SCENARIOS if n in wanted]
    if len(ordered) > 1 and "healthy" in ordered:
        ordered.remove("healthy")
    return ordered or ["healthy"]


def assign_hosts(scenarios: list[str], hosts: int) -> dict[str, int]:
    """Host index for each host/process-scoped scenario.

    Faults go to the last hosts first so ``gpu-01`` stays the healthy reference when there is
    more than one host; scenarios that contradict each other on one GPU get different hosts.
    """
    load = [0] * hosts
    placed: dict[str, int] = {}
    order = list(range(hosts - 1, -1, -1))
    for name in scenarios:
        spec = SCENARIOS[name]
        if spec.scope not in (HOST, PROCESS):
            continue
        candidates = [
            h
            for h in order
            if not any(placed.get(other) == h for other in spec.conflicts)
        ]
        if not candidates:
            clash = [o for o in spec.conflicts if o in placed]
            raise UsageError(
                f"scenarios {name!r} and {clash[0]!r} contradict each other on one GPU; "
                f"use --hosts {hosts + 1} or more"
            )
        if hosts > 1:
            # Keep host 0 free of host faults while another host can take them.
            others = [h for h in candidates if h != 0]
            candidates = others or candidates
        best = min(candidates, key=lambda h: (load[h], order.index(h)))
        placed[name] = best
        load[best] += 1
    return placed
