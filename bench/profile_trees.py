"""Where a cold and a sliding `analyze --format json` spend their CPU, by phase and by metric
query, for several source trees side by side in one run.

    .venv/bin/python bench/profile_trees.py [--data bench/data/ingest-1500000] [--repeat 3] \
        --tree /tmp/base3d4 --tree .

Every run is a child process (`python -m analyzer` of its tree, cwd and PYTHONPATH the tree)
that wraps the phases where that tree defines them (the module layout changed over time: each
phase names the places it may live) and every metric query (`run_metric`), then runs the CLI in
the same process. Per repeat, the trees alternate (the second repeat starts with the other one):

- cold: an empty cache folder (XDG_CACHE_HOME) of its own;
- sliding: that tree's cache, filled by the cold run, then `--since <end of data - 1 day + k h>`
  (the hourly cron's window, one hour later each run, k = 1, 2, ...: nothing to reuse but the
  cached events and their derived tables).

- bare: bench/ingest.py's bare DuckDB scan of the same files (two fields, stage percentiles);
- pandas (--pandas): the read article 003 suggests, `pandas.read_json(lines=True)` of every file
  and the same percentiles;
- html (--html): cold `analyze --out r.html` (its own empty cache).

Printed: per phase and per query the median CPU-s of each tree and the ratio to the first tree;
the whole process (CPU, wall, peak RSS) likewise; then the issue's ratios for every tree: cold
wall over the pandas read's, cold CPU over the first tree's, sliding CPU over the bare scan's,
HTML over JSON (cold, CPU), and whether its report is the same as the last tree's (less the
run's own lines: generated_at, read time, cache path).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (label, [(module, attribute path)]): the first place a tree defines is wrapped
PHASES = [
    ("read into the cache", [("dslogs.analyzer.ingest.reader", "Reader.read"),
                             ("analyzer.reader", "Reader.read")]),
    ("requests_all + sessions_all", [("dslogs.analyzer.ingest.viewdefs", "refresh_derived"),
                                     ("analyzer.viewdefs", "refresh_derived")]),
    ("derived tables kept for windows", [("dslogs.analyzer.model.result_cache", "materialize_derived"),
                                         ("analyzer.result_cache", "materialize_derived")]),
    ("metric queries", [("dslogs.analyzer.engines.compute", "compute_metrics"),
                        ("analyzer.metrics", "compute_metrics")]),
    ("rules and model", [("dslogs.analyzer.model.report", "build_report_from_metrics"),
                         ("analyzer.report", "build_report_from_metrics")]),
    ("drill-down + evidence", [("dslogs.analyzer.model.report", "with_details"),
                               ("analyzer.report", "with_details")]),
    ("model into the cache (JSON)", [("dslogs.analyzer.model.result_cache", "store"),
                                     ("analyzer.result_cache", "store")]),
]  # fmt: skip
QUERY_AT = [("dslogs.analyzer.engines.duckdb", "run_metric"), ("analyzer.metrics", "run_metric")]

CHILD = r"""
import importlib, json, os, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
phases, queries = {}, {}
def wrap(places, sink, label=None):
    for mod, attr in places:
        try:
            owner = importlib.import_module(mod)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p, None)
        if owner is None or not hasattr(owner, name):
            continue
        real = getattr(owner, name)
        def timed(*a, _real=real, **k):
            c = cpu()
            try:
                return _real(*a, **k)
            finally:
                key = label if label is not None else a[1]
                sink[key] = sink.get(key, 0.0) + cpu() - c
        setattr(owner, name, timed)
        return True
    return False
cfg = json.loads(os.environ["DSLOGS_PROFILE_CFG"])
# a tree without dslogs/analyzer (before the package moved) must not reach the installed dslogs
new = cfg["new_layout"]
def own(places):
    if new:
        return [p for p in places if p[0].startswith("dslogs.")]
    # the same module path under the top-level analyzer package, then the older flat layout
    return [(m.removeprefix("dslogs."), a) for m, a in places]
for label, places in cfg["phases"]:
    wrap(own(places), phases, label)
wrap(own(cfg["query_at"]), queries)
if new:
    from dslogs.analyzer.cli import main
else:
    from analyzer.cli import main
c, w = cpu(), time.perf_counter()
sys.argv = ["dslogs", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
phases["(whole run after imports)"] = cpu() - c
out = {"phases": phases, "queries": queries, "wall": time.perf_counter() - w, "cpu": cpu(),
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
with open(os.environ["DSLOGS_PROFILE_OUT"], "w") as f:
    json.dump(out, f)
"""


PANDAS = """
import sys, pandas as pd
df = pd.concat([pd.read_json(f, lines=True) for f in sys.argv[1:]], ignore_index=True)
print(len(df), df.groupby("stage")["duration_ms"].quantile([0.5, 0.9, 0.95, 0.99]).shape)
"""
VOLATILE = ('"seconds"', '"generated_at"', '"cache"')


def probe(cmd: list[str]) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest import PROBE

    out = subprocess.run([sys.executable, "-c", PROBE, "exec", *cmd], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def stable(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not any(v in line for v in VOLATILE)]


def run_child(tree: Path, args: list[str], home: Path, out: Path) -> dict:
    cfg = json.dumps(
        {
            "phases": PHASES,
            "query_at": QUERY_AT,
            "new_layout": (tree / "dslogs" / "analyzer").exists(),
        }
    )
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": str(home),
           "DSLOGS_PROFILE_OUT": str(out), "DSLOGS_PROFILE_CFG": cfg}  # fmt: skip
    subprocess.run([sys.executable, "-c", CHILD, *args], env=env, check=True, cwd=tree,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return json.loads(out.read_text())


def data_end(files: list[Path]) -> datetime:
    days = sorted({m.group(1) for p in files if (m := re.search(r"_(\d{8})", p.name))})
    last = date(int(days[-1][:4]), int(days[-1][4:6]), int(days[-1][6:]))
    return datetime(last.year, last.month, last.day) + timedelta(days=1)


def table(title: str, trees: list[Path], runs: dict, key: str) -> None:
    names: list[str] = []
    for t in trees:
        for r in runs[t]:
            names += [n for n in r[key] if n not in names]
    med = {
        t: {n: statistics.median(r[key].get(n, 0.0) for r in runs[t]) for n in names} for t in trees
    }
    if key == "queries":
        names.sort(key=lambda n: -max(med[t][n] for t in trees))
    print(f"\n== {title}: median CPU s" + (", ratio to the first tree" if len(trees) > 1 else ""))
    print(f"{'':34}" + "".join(f"{t.name[-14:]:>16}" for t in trees))
    total = {t: 0.0 for t in trees}
    for n in names:
        cells = "".join(f"{med[t][n]:16.3f}" for t in trees)
        base = med[trees[0]][n]
        ratios = "".join(
            f"  {med[t][n] / base:5.2f}x" if base > 0.005 else "      - " for t in trees[1:]
        )
        print(f"{n[:34]:34}{cells}{ratios}")
        if not n.startswith("("):
            for t in trees:
                total[t] += med[t][n]
    print(f"{'(sum of the above)':34}" + "".join(f"{total[t]:16.3f}" for t in trees))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-1500000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slides", type=int, default=1, help="sliding runs per repeat")
    ap.add_argument("--tree", type=Path, action="append", help="source trees (default: this one)")
    ap.add_argument("--pandas", action="store_true", help="time the pandas read too")
    ap.add_argument("--html", action="store_true", help="cold HTML runs too")
    ap.add_argument(
        "--cold-once",
        action="store_true",
        help="one cold run per tree (fills the cache), then only the sliding runs repeat",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest import BARE

    trees = [t.resolve() for t in (args.tree or [ROOT])]
    files = sorted(p for p in args.data.rglob("*.jsonl*"))
    if not files:
        raise SystemExit(f"no logs under {args.data}")
    logdir = files[0].parent
    since0 = data_end(files) - timedelta(days=1)
    work = Path(tempfile.mkdtemp(prefix="dslogs-prof-"))
    analyze = ["analyze", str(logdir), "--format", "json", "--out", str(work / "r.json")]
    cold: dict[Path, list[dict]] = {t: [] for t in trees}
    sliding: dict[Path, list[dict]] = {t: [] for t in trees}
    html: dict[Path, list[dict]] = {t: [] for t in trees}
    bare, pandas, reports = [], [], {}
    try:
        k = 0
        for rep in range(args.repeat):
            bare.append(probe([sys.executable, "-c", BARE, *map(str, files)]))
            if args.pandas:
                pandas.append(probe([sys.executable, "-c", PANDAS, *map(str, files)]))
            order = trees if rep % 2 == 0 else trees[::-1]
            for t in order if rep == 0 or not args.cold_once else ():
                home = work / f"home-{trees.index(t)}"
                if args.html:
                    shutil.rmtree(home, ignore_errors=True)
                    html_args = ["analyze", str(logdir), "--out", str(work / "r.html")]
                    html[t].append(run_child(t, html_args, home, work / "p.json"))
                shutil.rmtree(home, ignore_errors=True)
                cold[t].append(run_child(t, analyze, home, work / "p.json"))
                if rep == 0:
                    reports[t] = stable(work / "r.json")
            for _ in range(args.slides):
                k += 1
                since = (since0 + timedelta(hours=k)).isoformat()
                for t in order:
                    home = work / f"home-{trees.index(t)}"
                    sliding[t].append(
                        run_child(t, [*analyze, "--since", since], home, work / "p.json")
                    )
            print(f"repeat {rep + 1} of {args.repeat} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for case, runs in (("cold", cold), ("sliding --since 1d, one hour later each run", sliding)):
        table(f"{case}, phases", trees, runs, "phases")
        table(f"{case}, metric queries", trees, runs, "queries")
        print(f"\n{case}, whole process (median):")
        base = {
            k: statistics.median(r[k] for r in runs[trees[0]]) for k in ("cpu", "wall", "rss_mb")
        }
        for t in trees:
            m = {k: statistics.median(r[k] for r in runs[t]) for k in ("cpu", "wall", "rss_mb")}
            print(f"  {str(t)[-30:]:30} CPU {m['cpu']:6.2f} s ({m['cpu'] / base['cpu']:.2f}x), "
                  f"wall {m['wall']:6.2f} s ({m['wall'] / base['wall']:.2f}x), "
                  f"peak RSS {m['rss_mb']:5.0f} MB ({m['rss_mb'] / base['rss_mb']:.2f}x)")  # fmt: skip

    def med(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(f"\n== ratios ({len(files)} files, {args.data.name}, median of {args.repeat}; "
          f"bare scan {med(bare, 'cpu'):.2f} CPU-s, {med(bare, 'wall'):.2f} s wall"
          + (f"; pandas read {med(pandas, 'wall'):.2f} s wall, {med(pandas, 'cpu'):.2f} CPU-s" if pandas else "")
          + ")")  # fmt: skip
    for t in trees:
        line = [
            f"cold CPU {med(cold[t], 'cpu') / med(cold[trees[0]], 'cpu'):.2f}x the first tree's (target <= 1)"
        ]
        if pandas:
            line.append(
                f"cold wall {med(cold[t], 'wall') / med(pandas, 'wall'):.2f}x pandas (target <= 0.5)"
            )
        line.append(
            f"sliding CPU {med(sliding[t], 'cpu') / med(bare, 'cpu'):.2f}x bare (target <= 1, goal 0.5)"
        )
        line.append(f"peak RSS cold {max(r['rss_mb'] for r in cold[t]):.0f} MB")
        if html[t]:
            line.append(
                f"HTML {med(html[t], 'cpu') / med(cold[t], 'cpu'):.2f}x JSON CPU cold (target <= 1.3)"
            )
        line.append(
            "report "
            + (
                "the same as the last tree's"
                if reports[t] == reports[trees[-1]]
                else "DIFFERS from the last tree's"
            )
        )
        print(f"  {str(t)[-30:]:30} " + "; ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
