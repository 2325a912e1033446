"""Fault scenarios: one per rule id (analyzer.rules), plus ``healthy``.

A scenario names the rule it should make fire, the scope it is injected at, and the formats
that can carry it. The traffic model (``traffic.py``) and the writers read these specs; the
numbers each fault uses live next to the code that draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.core.errors import UsageError

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

    @property
    def rule(self) -> str | None:
        return None if self.name == "healthy" else self.name


def _s(name, description, scope, **kw) -> tuple[str, ScenarioSpec]:
    return name, ScenarioSpec(name, description, scope, **kw)


V1_ONLY = ("v1",)

SCENARIOS: dict[str, ScenarioSpec] = dict(
    [
        _s("healthy", "normal traffic only; every rule stays quiet", GLOBAL),
        _s("memory_leak", "reserved_mb climbs every turn (>50 MiB/min, >200 MB) in some sessions", SESSION),
        _s("ghost_memory", "reserved far above allocated (>1 GB, >50 %) in some sessions", SESSION),
        _s("oom", "CUDA OOM errors (OutOfMemoryError/OOMError), num_ooms rising, in some sessions", SESSION),
        _s("gpu_wait", "gpu_wait_pct median > 60 in some sessions (CPU waits on the GPU)", SESSION),
        _s(
            "cpu_bound",
            "gpu_util < 20 % with tpot > 130 ms, CPU at 100 %, in some sessions",
            SESSION,
            also_fires=("slow_decode",),
        ),
        _s(
            "kv_cache_bloat",
            "no history truncation: kv_seq_len passes 2048, prefill grows with turns",
            SESSION,
            sparse=True,
        ),
        _s("beam_search", "generate(num_beams=5) in some sessions", SESSION, formats=V1_ONLY),
        _s("high_max_tokens", "max_new_tokens 4096/8192 in some sessions", SESSION, formats=V1_ONLY),
        _s("long_output", "output_len > 3000 tokens (max_new_tokens 4000) in some sessions", SESSION),
        _s("slow_tokenize", "tokenize p50 ~ 250 ms over the whole run", GLOBAL),
        _s(
            "slow_prefill",
            "prefill 7x slower over the whole run (p50 > 900 ms for short inputs)",
            GLOBAL,
            formats=V1_ONLY,
            also_fires=("slow_ttft",),
        ),
        _s("slow_decode", "tpot 150-220 ms (thermal throttling) in some sessions", SESSION),
        _s(
            "slow_ttft",
            "requests wait 1-2.5 s in the queue over the whole run (ttft p50 > 1 s)",
            GLOBAL,
            formats=V1_ONLY,
            also_fires=("queue_wait",),
        ),
        _s(
            "queue_wait",
            "an overload for a quarter of the run: queue wait builds to ~6 s and drains (p95 > 1 s)",
            GLOBAL,
            formats=V1_ONLY,
        ),
        _s("slow_format", "format p50 ~ 180 ms over the whole run", GLOBAL, formats=V1_ONLY),
        _s(
            "low_gpu_util",
            "one host never gets above ~55 % GPU util while serving",
            HOST,
            formats=V1_ONLY,
            conflicts=("memory_thrash",),
        ),
        _s(
            "gpu_starved",
            "one host: another process holds 18.5 GB, GPU memory > 90 % while util < 20 %",
            HOST,
            formats=V1_ONLY,
            conflicts=("memory_thrash",),
        ),
        _s(
            "memory_thrash",
            "one host: util > 80 % while gpu_mem_used swings ~3 GB per second",
            HOST,
            formats=V1_ONLY,
            conflicts=("low_gpu_util", "gpu_starved"),
        ),
        _s("rss_growth", "one host's process RSS rises ~420 MB linearly over the run", PROCESS, formats=V1_ONLY),
        _s("log_volume", "one host writes ~1.3 MB/s of debug dumps for one minute", HOST, formats=V1_ONLY),
        _s("collector_drops", "one host's collector drops sampler events (dropped > 0)", HOST, formats=V1_ONLY),
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
