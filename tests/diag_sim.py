"""Simulated scenarios shared by the diagnosis tests: each (scenario, format, seed) is simulated
once per test session into a temporary folder and analysed once (real ingest, no cache)."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

from dslogs.analyzer.simulate import simulate
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent
from dslogs.analyzer.usecases.analyze import analyze_logs

SEED = 7
HOSTS = 2
EVENTS = 15_000  # about 7 000 per host: enough sessions for every fault, fast to analyse
_ROOT = Path(tempfile.mkdtemp(prefix="dslogs-diag-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


@cache
def simulated(scenario: str, fmt: str = "v1", seed: int = SEED, hosts: int = HOSTS) -> tuple[Path, dict]:
    out = _ROOT / f"{scenario}-{fmt}-{seed}-{hosts}"
    if scenario in CONCURRENT_SCENARIOS:  # overlapping sessions in one process
        simulate_concurrent(out, scenario, seed=seed)
    else:
        simulate(out, scenarios=[scenario], seed=seed, fmt=fmt, hosts=hosts, events=EVENTS)
    return out, json.loads((out / "truth.json").read_text(encoding="utf-8"))


@cache
def analysed(scenario: str, fmt: str = "v1", seed: int = SEED, hosts: int = HOSTS) -> tuple[dict, dict]:
    out, truth = simulated(scenario, fmt, seed, hosts)
    return analyze_logs([str(out)], use_cache=False), truth
