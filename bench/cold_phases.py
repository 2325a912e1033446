"""Where a cold `dslogs analyze --format json` spends its time, per phase (docs/internals.md).

    PYTHONPATH=$PWD .venv/bin/python bench/cold_phases.py [LOGDIR]

Runs the analysis in this process with an empty cache and times each phase (wall and CPU of
the whole process: DuckDB's threads included), then bench/ingest.py's bare scan of the same
files in a child, for the ratios. LOGDIR defaults to bench/data/ingest-1500000/gpu-01.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    logdir = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "bench/data/ingest-1500000/gpu-01")
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="dslogs-cold-")
    from dslogs.analyzer.cli import app
    from dslogs.analyzer.ingest import reader, viewdefs
    from dslogs.analyzer.model import report

    phases: list[tuple[str, float, float]] = []

    def wrap(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            t, c = time.perf_counter(), cpu()
            try:
                return real(*args, **kwargs)
            finally:
                phases.append((label, time.perf_counter() - t, cpu() - c))

        setattr(owner, name, timed)

    wrap(reader.Reader, "read", "read into the cache")
    wrap(viewdefs, "refresh_derived", "requests_all + sessions_all")
    wrap(report, "compute_metrics", "metric queries")
    wrap(report, "build_report_from_metrics", "rules and model")
    t0, c0 = time.perf_counter(), cpu()
    with contextlib.redirect_stdout(io.StringIO()):
        app(["analyze", str(logdir), "--format", "json"], standalone_mode=False)
    total = (time.perf_counter() - t0, cpu() - c0)

    sys.path.insert(0, str(ROOT / "bench"))
    from ingest import BARE, PROBE

    files = sorted(str(p) for p in logdir.rglob("*.jsonl*"))
    out = subprocess.run([sys.executable, "-c", PROBE, "exec", sys.executable, "-c", BARE, *files],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    bare = json.loads(out.strip().splitlines()[-1])
    print(f"{'phase':30} {'wall s':>8} {'cpu s':>8}")
    for label, wall, used in phases:
        print(f"{label:30} {wall:8.2f} {used:8.2f}")
    print(f"{'analyze (after imports)':30} {total[0]:8.2f} {total[1]:8.2f}")
    print(f"{'bare scan (child)':30} {bare['wall']:8.2f} {bare['cpu']:8.2f}")
    print(f"analyze / bare: {total[0] / bare['wall']:.2f}x wall, {total[1] / bare['cpu']:.2f}x cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
