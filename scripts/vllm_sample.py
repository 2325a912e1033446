"""sample_logs/vllm/: a vLLM server as its operator finds it on disk, from the code the tests use.

The story: one vLLM engine serves DeepSeek-R1-Distill-Qwen-1.5B with a small KV cache (the
card is shared, so ``--gpu-memory-utilization`` is low). Traffic is light, then for five minutes
arrivals outpace what the KV cache can hold: requests wait for blocks, ``time_in_queue`` grows to
ten seconds, ``vllm:num_requests_waiting`` rises and the KV cache sits near full; afterwards
the backlog drains. Two clients close their tab mid-answer (``abort``).

- ``otel-traces-*.json[.gz]``: vLLM ``llm_request`` spans as an OTel Collector ``file`` exporter
  writes them (tests/otlp_helpers.py: the OpenTelemetry SDK's own OTLP encoder), rotated at 09:12
  and gzipped by the operator's logrotate.
- ``metrics-<unix>.prom``: ``curl -s host:8000/metrics`` every minute
  (tests/prom_helpers.py: the real prometheus_client with vLLM's names and buckets).

Both writers are the third-party libraries themselves, which the ``test`` extra installs; without
them this folder is left as committed.
"""

from __future__ import annotations

import heapq
import random
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # otlp_helpers, prom_helpers
NEEDS = "opentelemetry-sdk, opentelemetry-exporter-otlp-proto-common and prometheus-client (pip install -e '.[test]')"

START = datetime(2026, 11, 24, 9, 0, tzinfo=UTC).timestamp()
MINUTES = 24
OVERLOAD = (8 * 60, 13 * 60)  # seconds after START
BASE_RATE, OVERLOAD_RATE = 0.2, 1.1  # arrivals per second
KV_TOKENS = 16_384  # the KV cache's capacity in tokens (blocks x block size)
SCRAPE_EVERY = 60
HOST = {"service.name": "vllm", "host.name": "vllm-gpu-01", "process.pid": 3117,
        # the SDK stamps its release and a random instance id; fixed so that the sample's bytes
        # follow neither the installed release nor the run
        "telemetry.sdk.version": "1.45.1", "service.instance.id": "5f0c2a9e-vllm-gpu-01-3117"}  # fmt: skip


def available() -> bool:
    try:
        import otlp_helpers  # noqa: F401
        import prom_helpers  # noqa: F401
    except ImportError:
        return False
    return True


def workload(seed: int) -> list[dict]:
    """Arrivals (Poisson, faster in the overload window) through an engine that admits a waiting
    request, first come first served, once its prompt + output fit in the free KV cache."""
    rng = random.Random(seed)
    reqs, t = [], 0.0
    while True:
        t += rng.expovariate(OVERLOAD_RATE if OVERLOAD[0] <= t < OVERLOAD[1] else BASE_RATE)
        if t >= MINUTES * 60 - 120:  # the last two minutes drain
            break
        prompt = rng.randint(40, 1200)
        max_tokens = rng.choice([1024, 2048, 2048, 2048])
        completion = min(max_tokens, int(rng.lognormvariate(6.4, 0.5)))
        reqs.append({"i": len(reqs), "arrival": t, "prompt": prompt, "completion": completion,
                     "max_tokens": max_tokens, "temperature": 0.6, "top_p": 0.95,
                     "reason": "length" if completion == max_tokens else "stop"})  # fmt: skip
    aborted = rng.sample([r for r in reqs if OVERLOAD[0] <= r["arrival"] < OVERLOAD[1]], 2)
    for r in aborted:  # the client closed the tab halfway through the answer
        r["completion"] //= 2
        r["reason"] = "abort"
    running: list[tuple[float, int]] = []  # (end, kv tokens)
    waiting: deque[dict] = deque()
    used = 0

    def admit(now: float) -> None:
        nonlocal used
        while waiting and used + waiting[0]["prompt"] + waiting[0]["completion"] <= KV_TOKENS:
            r = waiting.popleft()
            need = r["prompt"] + r["completion"]
            r["start"] = now
            r["prefill"] = 0.015 + r["prompt"] * 0.00005 * rng.uniform(0.9, 1.1)
            r["decode"] = r["completion"] * 0.014 * rng.uniform(0.95, 1.05)
            r["end"] = now + r["prefill"] + r["decode"]
            used += need
            heapq.heappush(running, (r["end"], need))

    for r in reqs:
        while running and running[0][0] <= r["arrival"]:
            end, need = heapq.heappop(running)
            used -= need
            admit(end)
        waiting.append(r)
        admit(r["arrival"])
    while running:
        end, need = heapq.heappop(running)
        used -= need
        admit(end)
    for r in reqs:
        r["queued"] = r["start"] - r["arrival"]
    return reqs


def generate(target: Path, seed: int) -> dict:
    """Write the folder and return its truth.json."""
    from otlp_helpers import Recorder, VllmRequest, vllm_request
    from prom_helpers import VllmServer

    reqs = workload(seed)
    target.mkdir(parents=True)
    spans = [VllmRequest(request_id=f"cmpl-{seed:04d}-{r['i']:05d}", arrival=START + r["arrival"],
                         queued=r["queued"], prefill=r["prefill"], decode=r["decode"],
                         prompt_tokens=r["prompt"], completion_tokens=r["completion"],
                         max_tokens=r["max_tokens"], temperature=r["temperature"], top_p=r["top_p"],
                         finish_reason=r["reason"]) for r in reqs]  # fmt: skip
    # the Collector's file exporter rotates: spans ending before the rotation went to the older file
    rotate = START + 12 * 60
    files = []
    for name, part in (("otel-traces-2026-11-24T09-12-00.000.json.gz", [s for s in spans if s.arrival + s.e2e < rotate]),
                       ("otel-traces.json.gz", [s for s in spans if s.arrival + s.e2e >= rotate])):  # fmt: skip
        rec = Recorder(HOST, seed=seed + len(files))
        for s in sorted(part, key=lambda s: s.arrival + s.e2e):  # spans are exported as they end
            vllm_request(rec, s)
        rec.write(target / name, per_line=40)
        files.append(name)

    with mock.patch("time.time", return_value=START - 300):  # the server started 5 min before
        server = VllmServer()
    done = sorted(reqs, key=lambda r: r["end"])
    k = 0
    gauges = []
    for t in range(0, MINUTES * 60 + 1, SCRAPE_EVERY):
        while k < len(done) and done[k]["end"] <= t:
            r = done[k]
            server.finish(r["queued"] + r["prefill"], r["end"] - r["arrival"], r["queued"], r["prompt"],
                          r["completion"], r["reason"])  # fmt: skip
            k += 1
        running = [r for r in reqs if r["start"] <= t < r["end"]]
        waiting = sum(1 for r in reqs if r["arrival"] <= t < r["start"])
        server.running.set(len(running))
        server.waiting.set(waiting)
        server.kv.set(round(sum(r["prompt"] + r["completion"] for r in running) / KV_TOKENS, 4))
        files.append(server.scrape(target, int(START) + t).name)
        gauges.append({"t": int(START) + t, "waiting": waiting, "running": len(running)})

    queued = sorted(r["queued"] * 1000 for r in reqs)
    p95 = queued[min(len(queued) - 1, int(0.95 * len(queued)))]
    return {
        "generator": "scripts/vllm_sample.py",
        "format": "otlp:vllm",
        "seed": seed,
        "start": datetime.fromtimestamp(START, UTC).isoformat(),
        "files": sorted(files),
        "events": len(reqs),  # one llm_request span each
        "requests": len(reqs),
        "snapshots": len(gauges),
        "sessions": 0,
        "healthy_sessions": [],
        "aborted": sorted(s.request_id for s in spans if s.finish_reason == "abort"),
        "hosts": [{"host": HOST["host.name"], "pid": HOST["process.pid"], "faults": ["queue_wait"]}],
        "server_gauges": gauges,
        "scenarios": {
            "queue_wait": {
                "rule": "queue_wait",
                "scope": "global",
                "description": "arrivals outpace the KV cache for five minutes: requests wait for blocks, "
                               "time_in_queue grows to ten seconds and vllm:num_requests_waiting rises, then drains",
                "details": {"queue_p95_ms": round(p95, 3), "max_waiting": max(g["waiting"] for g in gauges),
                            "kv_cache_tokens": KV_TOKENS},
                "sessions": [],
                "hosts": [HOST["host.name"]],
                "also_fires": [],
            }
        },
    }  # fmt: skip
