"""CPU and wall of every metric query in a warm `analyze` that cannot reuse a stored model,
for one or more source trees side by side in one run.

    .venv/bin/python bench/query_profile.py [--data bench/data/ingest-5000000] [--repeat 2] \
        [--tree /work/main --tree .]

Each tree gets its own cache (filled by one cold run). Then, interleaved tree by tree, runs of
the two cases bench/warm.py times:

- sliding: `--since` one hour later on every run (the cached events and derived tables reused,
  every metric query recomputed over the window);
- recompute: the same files with a new thresholds file each run (no window).

Every run is a child process that runs the CLI with queries timed one by one (CPU = the
process's user + sys over the query, DuckDB's threads included). Per query, the best of
--repeat; the run as a whole (wall, CPU) too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: run_metric wrapped where DuckDBSource.run looks it up (dslogs.analyzer.engines.duckdb), the
# CLI run in this process, the times written to $DSLOGS_QPROFILE as JSON.
CHILD = r"""
import json, os, sys, time
from dslogs.analyzer.engines import duckdb as m
times = {}
inner = m.run_metric
def timed(con, name, params, *rest):
    c, w = time.process_time(), time.perf_counter()
    rows = inner(con, name, params, *rest)
    times[name] = [time.process_time() - c, time.perf_counter() - w]
    return rows
m.run_metric = timed
from dslogs.analyzer.cli import main
c, w = time.process_time(), time.perf_counter()
sys.argv = ["dslogs", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
times["(whole run)"] = [time.process_time() - c, time.perf_counter() - w]
with open(os.environ["DSLOGS_QPROFILE"], "w") as f:
    json.dump(times, f)
"""


def run_child(tree: Path, args: list[str], cache_home: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": str(cache_home),
           "DSLOGS_QPROFILE": str(out)}  # fmt: skip
    subprocess.run([sys.executable, "-c", CHILD, *args], env=env, check=True, cwd=tree,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-5000000")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--tree", type=Path, action="append", help="source trees (default: this one)")
    ap.add_argument("--json", type=Path, help="write the per-query table here too")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    files = sorted(p for p in args.data.rglob("*.jsonl*"))
    if not files:
        raise SystemExit(f"no logs under {args.data}")
    logdir = files[0].parent
    days = sorted({m.group(1) for p in files if (m := re.search(r"_(\d{8})", p.name))})
    first = date(int(days[0][:4]), int(days[0][4:6]), int(days[0][6:]))
    since = datetime(first.year, first.month, first.day, 6)
    work = Path(tempfile.mkdtemp(prefix="dslogs-qprof-"))
    analyze = ["analyze", str(logdir), "--format", "json", "--out", str(work / "r.json")]
    try:
        homes = {t: work / f"cache-{i}" for i, t in enumerate(trees)}
        for t in trees:  # cold: fills the cache (events and derived tables)
            run_child(t, analyze, homes[t], work / "p.json")
        # results[case][tree] = [per-run dicts]
        results: dict[str, dict[Path, list[dict]]] = {"sliding": {}, "recompute": {}}
        for i in range(args.repeat):
            for t in trees:
                moved = since + timedelta(hours=i + 1)
                results["sliding"].setdefault(t, []).append(
                    run_child(
                        t, [*analyze, "--since", moved.isoformat()], homes[t], work / "p.json"
                    )
                )
                th = work / f"th-{i}.toml"
                th.write_text(f"[slo]\nttft_ms = {1000 + i + 1}\n")
                results["recompute"].setdefault(t, []).append(
                    run_child(t, [*analyze, "--thresholds", str(th)], homes[t], work / "p.json")
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = {}
    for case, per_tree in results.items():
        best = {t: {q: [min(r[q][0] for r in runs), min(r[q][1] for r in runs)] for q in runs[0]}
                for t, runs in per_tree.items()}  # fmt: skip
        table[case] = {str(t): b for t, b in best.items()}
        names = sorted(best[trees[0]], key=lambda q: -best[trees[0]][q][0])
        print(
            f"\n== {case} ({len(files)} files, {args.data.name}), best of {args.repeat}: CPU s (wall s)"
        )
        print(f"{'query':32}" + "".join(f"{t.name[-16:]:>20}" for t in trees)
              + ("    after/before CPU" if len(trees) == 2 else ""))  # fmt: skip
        total = {t: 0.0 for t in trees}
        for q in names:
            cells = []
            for t in trees:
                c, w = best[t].get(q, [float("nan")] * 2)
                if q != "(whole run)":
                    total[t] += c
                cells.append(f"{c:9.3f} ({w:6.3f})")
            r = ""
            if len(trees) == 2 and best[trees[0]][q][0] > 0:
                r = f"    {best[trees[1]].get(q, [float('nan')])[0] / best[trees[0]][q][0]:.2f}x"
            print(f"{q:32}" + "".join(f"{c:>20}" for c in cells) + r)
        print(f"{'(sum of queries)':32}" + "".join(f"{total[t]:9.3f}{'':11}" for t in trees))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    print(f"\n{time.strftime('%H:%M:%S')} done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
