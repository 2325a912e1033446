"""CPU of metrics.result_rows (DuckDB results -> Python row dicts) on the metric tables of a real
window, for one or more source trees side by side in one run.

    .venv/bin/python bench/result_rows.py [--data bench/data/ingest-5000000] \
        [--since 2026-11-23T13:00:00+00:00] [--tz Europe/Berlin] [--repeat 3] [--tree /work/wt/base --tree .]

Once (with this tree's code and its own cache under a temporary XDG_CACHE_HOME unless set): the
logs are opened for the window and every metric query's result is stored as a table of a DuckDB
file (types kept). Then, interleaved tree by tree --repeat times, a child process per tree reads
each table through that tree's ``result_rows`` on a connection in the run's zone: the first pass
(pyarrow and what it imports included, as a run pays them) and the best of three passes after,
per table (CPU-s = user + sys of the process), plus whether pandas got imported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PREPARE = r"""
import sys
from dslogs.analyzer.core import resources
from dslogs.analyzer.engines import duckdb as duckdb_engine
from dslogs.analyzer.metrics import registry
from dslogs.analyzer.metrics import results
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.core.thresholds import defaults
out, since, tz, *paths = sys.argv[1:]
db = open_logs(paths, since=since or None, tz=tz or None)
con = db.con
first, last = duckdb_engine.DuckDBSource.of(db).time_bounds()
params = registry.parameters(defaults(), registry.bucket_for_span(first, last))
con.execute(f"ATTACH '{out}' AS kept")
for name in registry.METRIC_QUERIES:
    sql = resources.load_query(name).strip().rstrip(";")
    used = registry.bind(name, params, sql)
    try:
        con.execute(f'CREATE TABLE kept."{name}" AS SELECT * FROM (\n{sql}\n)', used)
    except Exception as e:  # a query the logs lack a column for
        print(name, "skipped:", str(e).splitlines()[0], file=sys.stderr)
con.execute("DETACH kept")
print(db.tz)
"""

CHILD = r"""
import json, sys, time
c0 = time.process_time()
import duckdb
from dslogs.analyzer.core import resources
from dslogs.analyzer.engines import duckdb as duckdb_engine
from dslogs.analyzer.metrics import registry
from dslogs.analyzer.metrics import results
path, zone = sys.argv[1:]
con = duckdb.connect(path, read_only=True)
con.execute("SET TimeZone = $z", {"z": zone})
names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
def one(name):
    cur = con.execute(f'SELECT * FROM "{name}"')
    c = time.process_time()
    rows = results.result_rows(cur)
    return time.process_time() - c, len(rows)
first = {n: one(n)[0] for n in names}
best = {}
for _ in range(3):
    for n in names:
        t, size = one(n)
        best[n] = [min(t, best.get(n, [t])[0]), size]
print(json.dumps({"first": first, "best": best, "pandas": "pandas" in sys.modules,
                  "whole": time.process_time() - c0}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-5000000")
    ap.add_argument("--since", default="2026-11-23T13:00:00+00:00")
    ap.add_argument("--tz", default="UTC")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tree", type=Path, action="append", help="source trees (default: this one)")
    ap.add_argument("--min-rows", type=int, default=1000, help="tables listed one by one from this size")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    paths = sorted(str(p) for p in args.data.iterdir() if p.is_dir()) or [str(args.data)]
    with tempfile.TemporaryDirectory(prefix="result-rows-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.setdefault("XDG_CACHE_HOME", str(Path(tmp) / "xdg"))
        db = Path(tmp) / "results.duckdb"
        zone = subprocess.run([sys.executable, "-c", PREPARE, str(db), args.since, args.tz, *paths],
                              env=env, check=True, cwd=ROOT, capture_output=True, text=True).stdout.split()[-1]  # fmt: skip
        runs: dict[Path, list[dict]] = {t: [] for t in trees}
        for _ in range(args.repeat):
            for tree in trees:
                out = subprocess.run([sys.executable, "-c", CHILD, str(db), zone], check=True, cwd=tree,
                                     env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True).stdout  # fmt: skip
                runs[tree].append(json.loads(out.strip().splitlines()[-1]))
    names = list(runs[trees[0]][0]["best"])
    sizes = {n: runs[trees[0]][0]["best"][n][1] for n in names}
    big = [n for n in names if sizes[n] >= args.min_rows]

    def best(tree, key, n):
        return min(r[key][n][0] if key == "best" else r[key][n] for r in runs[tree])

    print(f"window since {args.since}, zone {zone}; CPU-s of result_rows, best of {args.repeat} runs")
    head = "".join(f"{t.name[-14:]:>16}" for t in trees)
    ratio_head = f"{'ratio':>8}" if len(trees) == 2 else ""
    print(f"{'table':<32}{'rows':>8}{head}{ratio_head}")
    for key, label in (("best", "warm pass"), ("first", "first pass (imports)")):
        print(f"-- {label}")
        totals = {t: 0.0 for t in trees}
        for n in names:
            for t in trees:
                totals[t] += best(t, key, n)
        for n in big:
            vals = [best(t, key, n) for t in trees]
            r = f"{vals[1] / vals[0]:>8.2f}" if len(trees) == 2 and vals[0] else ""
            print(f"{n:<32}{sizes[n]:>8}" + "".join(f"{v:>16.3f}" for v in vals) + r)
        vals = [totals[t] for t in trees]
        r = f"{vals[1] / vals[0]:>8.2f}" if len(trees) == 2 and vals[0] else ""
        print(f"{'all ' + str(len(names)) + ' tables':<32}{sum(sizes.values()):>8}" + "".join(f"{v:>16.3f}" for v in vals) + r)
    whole = [min(r["whole"] for r in runs[t]) for t in trees]
    print(f"{'child process CPU (4 passes)':<40}" + "".join(f"{v:>16.3f}" for v in whole))
    print(f"{'pandas imported':<40}" + "".join(f"{str(runs[t][0]['pandas']):>16}" for t in trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
