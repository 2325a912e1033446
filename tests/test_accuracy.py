"""Diagnosis accuracy against the simulator's truth.json, end to end (simulate -> open_logs ->
queries -> rules): for every scenario the injected rule fires on exactly the injected sessions or
hosts and no healthy session or host gets a warning or critical finding; percentiles in the
model equal numpy's linear percentiles of the raw lines."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from bench.accuracy import cases, score
from dslogs.analyzer.simulate import SCENARIOS
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS
from tests.diag_sim import SAMPLE_DIRS, SAMPLES, analysed, sample_model, simulated

CASES = cases(None, ("v1", "legacy"))
# End-to-end tests need dslogs.analyzer.ingest.logs (open_logs); the scorer's own tests do not.
needs_ingest = pytest.mark.skipif(importlib.util.find_spec("dslogs.analyzer.ingest.logs") is None,
                                  reason="dslogs.analyzer.ingest.logs (open_logs) is not there yet")


@needs_ingest
@pytest.mark.slow
@pytest.mark.parametrize("scenario, fmt", CASES, ids=[f"{s}-{f}" for s, f in CASES])
def test_scenario_recall_and_precision(scenario, fmt):
    model, truth = analysed(scenario, fmt)
    result = score(model, truth, scenario)
    missed = sorted(result.expected - result.flagged_by_rule)
    assert not missed, f"{scenario}: rule missed {len(missed)} injected items, e.g. {missed[:3]}"
    assert not result.false_positives, f"{scenario}: false positives {result.false_positives[:5]}"
    assert result.recall == 1.0 and result.precision == 1.0
    spec = SCENARIOS.get(scenario) or CONCURRENT_SCENARIOS[scenario]
    if spec.rule:
        assert result.expected, f"{scenario}: the simulation injected nothing to find"
        assert result.status == "fired"


@needs_ingest
def test_every_scenario_names_a_rule_the_analyzer_has():
    model, _truth = analysed("healthy")
    rules = {r["rule"] for r in model["rules"]}
    for name, spec in [*SCENARIOS.items(), *CONCURRENT_SCENARIOS.items()]:
        assert spec.rule is None or spec.rule in rules, name
        for also in spec.also_fires:
            assert also in rules


@needs_ingest
def test_healthy_run_has_no_warning_or_critical_finding():
    model, _truth = analysed("healthy")
    loud = [(f["rule"], f["message"]) for f in model["findings"] if f["severity"] in ("warning", "critical")]
    assert loud == []
    assert all(not s["findings"] for s in model["sessions"])


@needs_ingest
def test_legacy_logs_report_no_data_not_pass():
    model, _truth = analysed("healthy", "legacy")
    status = {r["rule"]: r["status"] for r in model["rules"]}
    for rule in ("slow_prefill", "beam_search", "high_max_tokens", "slow_format", "gpu_starved",
                 "memory_thrash", "rss_growth", "collector_drops", "slow_ttft"):
        assert status[rule] == "no_data", (rule, status[rule])
    # Line sizes come from ingest for any log, and the seed logger writes gpu_util_pct.
    for rule in ("memory_leak", "slow_tokenize", "oom", "gpu_wait", "low_gpu_util", "kv_cache_bloat", "log_volume"):
        assert status[rule] == "pass", (rule, status[rule])
    assert model["requests"]["tpot_is_upper_bound"] is True


def _raw_lines(folder: Path):
    for path in sorted(folder.rglob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)


@needs_ingest
@pytest.mark.parametrize("fmt", ["v1", "legacy"])
def test_model_percentiles_equal_numpy_linear_on_the_raw_lines(fmt):
    model, _truth = analysed("healthy", fmt)
    folder, _ = simulated("healthy", fmt)
    durations: dict[str, list[float]] = {}
    ttft = []
    for e in _raw_lines(folder):
        d = e.get("duration_ms")
        if d is not None and d != -1:
            durations.setdefault(e["stage"], []).append(d)
        if e.get("stage") == "request" and e.get("ttft_ms") is not None:
            ttft.append(e["ttft_ms"])
    stages = {s["stage"]: s for s in model["stages"]}
    assert set(stages) == set(durations)
    for stage, values in durations.items():
        row = stages[stage]
        assert row["count"] == len(values)
        for key, q in (("p50_ms", 50), ("p90_ms", 90), ("p95_ms", 95), ("p99_ms", 99), ("max_ms", 100)):
            assert row[key] == pytest.approx(np.percentile(values, q, method="linear"), abs=1e-3), (stage, key)
    if fmt == "v1":
        p = model["requests"]["ttft_ms"]
        assert p["count"] == len(ttft)
        for key, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
            assert p[key] == pytest.approx(np.percentile(ttft, q, method="linear"), abs=1e-3)




@needs_ingest
@pytest.mark.parametrize("folder", SAMPLE_DIRS)
def test_sample_logs_folders_report_exactly_their_truth(folder):
    truth = json.loads((SAMPLES / folder / "truth.json").read_text(encoding="utf-8"))
    model = sample_model(folder)
    for scenario in truth.get("scenarios") or {"healthy": {}}:
        result = score(model, truth, scenario)
        assert not result.false_positives, (scenario, result.false_positives[:5])
        assert result.recall == 1.0, (scenario, sorted(result.expected - result.flagged_by_rule)[:3])


# -- the scorer itself -------------------------------------------------------------------------


def _finding(rule, scope, severity="warning", sessions=(), hosts=()):
    return {"rule": rule, "scope": scope, "severity": severity, "session_ids": list(sessions), "hosts": list(hosts)}


TRUTH = {
    "format": "v1",
    "healthy_sessions": ["h1", "h2"],
    "hosts": [{"host": "gpu-01", "faults": []}, {"host": "gpu-02", "faults": ["low_gpu_util"]}],
    "scenarios": {
        "cpu_bound": {"rule": "cpu_bound", "scope": "session", "sessions": ["c1", "c2"], "hosts": [],
                      "also_fires": ["slow_decode"]},
        "low_gpu_util": {"rule": "low_gpu_util", "scope": "host", "sessions": [], "hosts": ["gpu-02"],
                         "also_fires": []},
    },
}


def test_score_counts_misses_strays_and_allows_also_fires():
    model = {"rules": [{"rule": "cpu_bound", "status": "fired"}], "findings": [
        _finding("cpu_bound", "session", sessions=["c1"]),
        _finding("slow_decode", "session", sessions=["c1", "c2"]),  # by construction
        _finding("low_gpu_util", "host", hosts=["gpu-02"]),
        _finding("bad_lines", "ingest", severity="info"),  # info of a rule not injected: ignored
    ]}
    r = score(model, TRUTH, "cpu_bound")
    assert (r.recall, r.precision, r.status) == (0.5, 1.0, "fired")
    model["findings"].append(_finding("slow_decode", "session", sessions=["h1"]))
    model["findings"].append(_finding("slow_ttft", "global"))
    r = score(model, TRUTH, "cpu_bound")
    assert r.false_positives == [("slow_decode", ("session", "h1")), ("slow_ttft", ("global", "slow_ttft"))]
    assert r.precision == pytest.approx(1 / 3)
    host = score(model, TRUTH, "low_gpu_util")
    assert host.recall == 1.0 and host.expected == {("host", "gpu-02")}
