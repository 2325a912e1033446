"""Cost per request of the request span's fields, side by side in one run.

Per request the collector now reads, at the span's two edges only: the in-flight counter (a
lock), process RSS (/proc/self/statm), torch's reserved/allocated memory (or the tracer's
memory_probe), and Gradio's queue wait when gradio is imported. Measured on the caller's
thread, median and p99 over many requests, each timed alone:

  * ``event``: the one ``request`` event generate wrote before spans existed (the baseline);
  * ``span``: ``with tracer.request(...)``: open, close, the same event;
  * ``span+probe``: the same with a memory_probe returning two numbers (what e2e uses on CPU);
  * ``generate``: one traced generate of 8 tokens on the tiny random Qwen2 (for scale), if
    torch and transformers are installed.

    .venv/bin/python bench/request_span_overhead.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dslogs_collector import Tracer  # noqa: E402


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn(i)
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def summary(us: list[float]) -> tuple[float, float]:
    us = sorted(us)
    return statistics.median(us), us[int(0.99 * (len(us) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    n = ap.parse_args().requests
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        t = Tracer(Path(d) / "a", queue_size=10 * n)
        probe = Tracer(Path(d) / "b", queue_size=10 * n,
                       memory_probe=lambda: {"reserved_mb": 1024.0, "allocated_mb": 512.0})

        def event(i):
            t.event("request", 12.5, session_id="s", request_id=f"r{i}", status="ok", input_len=12,
                    output_len=8, ttft_ms=3.1)

        def span(i, tracer=t):
            with tracer.request(session_id="s", request_id=f"r{i}") as sp:
                sp.set(input_len=12, output_len=8)

        for name, fn in (("event", event), ("span", span), ("span+probe", lambda i: span(i, probe))):
            timed(fn, 1000)  # warm-up
            rows[name] = summary(timed(fn, n))
        t.close()
        probe.close()
        try:
            from tests.collector_hf_helpers import prompt_ids, tiny_qwen2

            model = tiny_qwen2()
            g = Tracer(Path(d) / "g")
            inputs = prompt_ids()
            rows["generate"] = summary(timed(
                lambda i: g.generate(model, inputs, request_id=f"g{i}", max_new_tokens=8, eos_token_id=None), 50))
            g.close()
        except ImportError:
            pass
    base = rows["event"][0]
    print(f"caller cost per request, {n} requests (µs)")
    print(f"{'':12} {'median':>9} {'p99':>9} {'median vs event':>16}")
    for name, (med, p99) in rows.items():
        print(f"{name:12} {med:9.2f} {p99:9.2f} {med / base:15.1f}x")
    if "generate" in rows:
        added = rows["span"][0] - base
        print(f"added by the span per request: {added:.1f} µs = {added / rows['generate'][0] * 100:.2g} % "
              f"of an 8-token generate on a 2-layer, 32-wide CPU model (real models: far less)")


if __name__ == "__main__":
    main()
