"""Simulated scenarios shared by the diagnosis tests: each (scenario, format, seed) is simulated
once per test session into a temporary folder and analysed once (real ingest, no cache); and
each sample_logs/ folder with a truth.json, analysed once per test session for every test file
that judges it."""

from __future__ import annotations

import atexit
import copy
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

from dslogs.analyzer.simulate import simulate
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent
from dslogs.analyzer.usecases.analyze import analyze_logs

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
SAMPLE_DIRS = sorted(p.name for p in SAMPLES.iterdir() if (p / "truth.json").is_file()) if SAMPLES.is_dir() else []
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


@cache
def _sample_model(folder: str) -> dict:
    truth = json.loads((SAMPLES / folder / "truth.json").read_text(encoding="utf-8"))
    tz = "Asia/Shanghai" if truth.get("format") == "legacy" else None
    return analyze_logs([str(SAMPLES / folder)], tz=tz, use_cache=False)


def sample_model(folder: str) -> dict:
    """The report model of sample_logs/<folder> (legacy folders in the zone they were written
    in), a copy of its one analysis: a test may change it."""
    return copy.deepcopy(_sample_model(folder))
