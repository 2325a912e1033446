"""OTLP/JSON trace ingest against v1 JSONL ingest, side by side, in requests per CPU-second.

    .venv/bin/python bench/otlp_ingest.py [--requests 50000] [--repeat 3] [--files N]

The same number of requests in both formats, made once into a temporary folder:
- v1: the simulator's healthy scenario (dslogs.analyzer.simulate), about --requests requests;
- OTLP: vLLM-shaped ``llm_request`` spans recorded by the OpenTelemetry SDK and encoded by its
  own OTLP encoder (tests/otlp_helpers.py), 512 spans a line as a Collector's file exporter
  batches them, as many requests as the v1 set holds.
With ``--files N`` each side is spread over N files (OTLP: ``--files`` as many as requests is
one span a file; v1: its lines in order, N parts).
Each side is read by `dslogs query --no-cache "SELECT count(*) FROM requests"` in a child
process (what a user types), the two sides interleaved; the figure is the child's CPU time (user
+ sys, all threads: the steadier figure on a shared machine), best of --repeat. Prints requests per CPU-second for each
and the ratio OTLP / v1 (target >= 0.50).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def cpu_run(args: list[str]) -> tuple[float, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "dslogs", *args], capture_output=True, text=True,
                         env=env, check=True).stdout  # fmt: skip
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", type=int, default=1, help="OTLP files the requests are spread over")
    args = ap.parse_args()
    from otlp_helpers import vllm_workload, write_vllm

    from dslogs.analyzer.simulate import simulate

    with tempfile.TemporaryDirectory(prefix="dslogs-bench-otlp-") as tmp:
        v1 = Path(tmp) / "v1"
        otlp = Path(tmp) / "otlp"
        otlp.mkdir()
        # the simulator's events per request (healthy: ~8 events a request) sets its size
        simulate(v1, ["healthy"], days=1, seed=7, events=args.requests * 8, max_bytes=1 << 40)
        sql = "SELECT count(*) FROM requests"
        _, _, out = cpu_run(["query", str(v1), sql, "--format", "csv", "--no-cache"])
        n_v1 = int(out.strip().splitlines()[-1])
        reqs = vllm_workload(n_v1)
        files = max(1, min(args.files, len(reqs)))
        if files > 1:  # v1 spread over as many files, in order (a request's lines may straddle two)
            lines = [ln for f in sorted(v1.rglob("*.jsonl")) for ln in f.read_bytes().splitlines(keepends=True)]
            for f in v1.rglob("*.jsonl"):
                f.unlink()
            step = -(-len(lines) // files)
            for i in range(files):
                (v1 / f"part-{i:05d}.jsonl").write_bytes(b"".join(lines[i * step : (i + 1) * step]))
        for i in range(files):
            write_vllm(otlp / f"traces-{i:05d}.json", reqs[i::files], per_line=512)
        sizes = {name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for name, p in
                 (("v1", v1), ("otlp", otlp))}  # fmt: skip
        # interleaved (v1, OTLP, v1, OTLP, ...): a change in the machine's load hits both sides
        runs: dict[str, list] = {"v1": [], "otlp": []}
        for _ in range(args.repeat):
            for name, folder in (("v1", v1), ("otlp", otlp)):
                runs[name].append(cpu_run(["query", str(folder), sql, "--format", "csv", "--no-cache"]))
        results = {}
        for name, done in runs.items():
            n = int(done[0][2].strip().splitlines()[-1])
            results[name] = (n, min(r[0] for r in done), min(r[1] for r in done))
        print(f"{'format':<6} {'requests':>9} {'MB':>7} {'CPU s':>7} {'wall s':>7} {'req/CPU-s':>10}")
        for name, (n, cpu, wall) in results.items():
            print(f"{name:<6} {n:>9,} {sizes[name] / 1e6:>7.1f} {cpu:>7.2f} {wall:>7.2f} {n / cpu:>10,.0f}")
        rate = {k: n / cpu for k, (n, cpu, _w) in results.items()}
        ratio = rate["otlp"] / rate["v1"]
        print(f"OTLP ({files} file{'s' if files > 1 else ''}) / v1 requests per CPU-second: {ratio:.2f} (target >= 0.50); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        return 0 if ratio >= 0.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
