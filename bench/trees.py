"""Two source trees side by side in one run: cold `analyze --format json` over the same data sets,
each run a child process with an empty cache folder of its own (XDG_CACHE_HOME), timed by wall
clock and CPU (user + sys) with its peak RSS (ru_maxrss, bench/ingest.py's PROBE), the two trees
alternating (the second repeat starts with the other tree), then the ratios (second tree / first)
and whether the two reports are the same once the run's own lines (read time, generated_at, the
cache path) are left out. How keeping the per-session tables in DuckDB was measured against main:

    .venv/bin/python bench/trees.py /work/main . bench/data/ingest-5000000 bench/data/ingest-20000000
        [--repeat 2] [--work /tmp/trees]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ingest import PROBE  # noqa: E402

PY = sys.executable
# lines of a report that differ between any two runs
VOLATILE = ('"seconds"', '"generated_at"', '"cache"')


def run(tree: Path, data: Path, out: Path, home: Path) -> dict:
    cmd = f"{PY} -m analyzer analyze {data} --format json > {out}"
    env = {**os.environ, "XDG_CACHE_HOME": str(home), "PYTHONPATH": str(tree)}
    shutil.rmtree(home, ignore_errors=True)
    try:
        p = subprocess.run([PY, "-c", PROBE, "sh", cmd], capture_output=True, text=True, env=env,
                           cwd=tree, check=True)  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def before_tree(rev: str | None, dest: Path) -> tuple[str, Path]:
    """The tree of ``rev`` (None: the merge-base of HEAD with main) extracted under ``dest`` with
    `git archive`: the "before" side of a bench that runs both in one run. Returns (rev, its tree)."""
    repo = Path(__file__).resolve().parents[1]
    rev = rev or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=repo, capture_output=True,
                                text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", rev], cwd=repo, capture_output=True, check=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return rev, dest


def timed(cmd: list[str], code: Path, env: dict | None = None, timeout: float = 3600) -> tuple[float, float, str]:
    """Run ``cmd`` as a child on the tree ``code`` (its PYTHONPATH and working folder): (wall s, CPU s
    of the child, user + sys, its stdout); a failing child stops the bench with its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(code), timeout=timeout,
                       env={**os.environ, **(env or {}), "PYTHONPATH": str(code)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{code}: {r.stderr[-800:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), r.stdout


def stable(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not any(v in line for v in VOLATILE)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("data", type=Path, nargs="+")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dslogs-trees-"))
    work.mkdir(parents=True, exist_ok=True)
    trees = [args.first.resolve(), args.second.resolve()]
    for data in args.data:
        runs: dict[int, list[dict]] = {0: [], 1: []}
        for rep in range(args.repeat):
            for i in (0, 1) if rep % 2 == 0 else (1, 0):
                r = run(trees[i], data.resolve(), work / f"{i}.json", work / f"home-{i}")
                runs[i].append(r)
                print(f"{data.name} {trees[i]} wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s, "
                      f"peak RSS {r['rss_mb']:.0f} MB, rc {r['rc']}", flush=True)  # fmt: skip
        same = stable(work / "0.json") == stable(work / "1.json")
        a, b = ({k: min(x[k] for x in runs[i]) for k in ("wall", "cpu")} | {"rss": max(x["rss_mb"] for x in runs[i])}
                for i in (0, 1))  # fmt: skip
        print(f"{data.name}: peak RSS {a['rss']:.0f} -> {b['rss']:.0f} MB ({b['rss'] / a['rss']:.2f}x), "
              f"CPU {a['cpu']:.1f} -> {b['cpu']:.1f} s ({b['cpu'] / a['cpu']:.2f}x), "
              f"wall {a['wall']:.1f} -> {b['wall']:.1f} s ({b['wall'] / a['wall']:.2f}x); "
              f"reports {'the same' if same else 'DIFFER'}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
