"""Warm `analyze` against the bare scan (issue 16 item 3), side by side in one run.

    .venv/bin/python bench/warm.py [--data bench/data/ingest-1500000] [--repeat 3] [--base /work/main]

The data set is one that bench/ingest.py made (its folder holds the logs and truth.json). Every
figure is a child process, timed by wall clock and by CPU (user + sys), best of --repeat:

- bare: bench/ingest.py's BARE, one DuckDB read_json scan computing stage percentiles;
- cold: `analyze --format json` with an empty cache (once; it fills the cache);
- same window: `analyze --format json` again over the same files (no window), then with an
  explicit `--since` (first run computes, the next ones reuse the stored model);
- recompute: the same files and window with a different thresholds file each run (the stored
  model cannot be reused: metrics, rules and model are computed from the cached events);
- sliding: `--since` one hour later on every run, as `--since 6d` from an hourly cron sees it
  (nothing to reuse but the cached events and their derived tables).

With --base TREE (another checkout, e.g. main), the recompute and sliding runs are also made with
that tree's code (its own cache, filled by its own cold run), interleaved run by run with this
tree's: before/after in one run.

Target: warm <= 0.5x bare (wall). The sessions in each window are printed (target: 50 k+).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from datetime import date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
bench_ingest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_ingest)
BARE, PY, DSLOGS = bench_ingest.BARE, bench_ingest.PY, bench_ingest.DSLOGS
probe, best, ratio = bench_ingest.probe, bench_ingest.best, bench_ingest.ratio


def probe_in(tree: Path, cmd: list[str], env: dict) -> dict:
    """bench_ingest.probe with another source tree's code (cwd and PYTHONPATH = tree)."""
    env = {**env, "PYTHONPATH": str(tree)}
    out = subprocess.run([PY, "-c", bench_ingest.PROBE, "exec", *cmd], capture_output=True,
                         text=True, env=env, check=True, cwd=tree).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def sessions_in(cmd: list[str], env: dict) -> int | None:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    try:
        return json.loads(out.stdout)["sessions_total"]
    except (ValueError, KeyError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-1500000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another source tree: recompute/sliding also with it")
    args = ap.parse_args()
    files = sorted(p.absolute() for p in args.data.rglob("*.jsonl*"))
    if not files:
        raise SystemExit(f"no logs under {args.data}: make them with bench/ingest.py --events N")
    logdir = files[0].parent
    days = sorted({m.group(1) for p in files if (m := re.search(r"_(\d{8})", p.name))})
    first = date(int(days[0][:4]), int(days[0][4:6]), int(days[0][6:]))
    span = max(1, len(days) - 1)
    work = Path(tempfile.mkdtemp(prefix="dslogs-warm-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    n = args.repeat
    analyze = [*DSLOGS, "analyze", str(logdir), "--format", "json"]
    res: dict[str, dict] = {}
    sessions: dict[str, int | None] = {}

    res["bare"] = best([probe([PY, "-c", BARE, *map(str, files)]) for _ in range(n)])
    res["cold"] = probe(analyze, env)
    res["same window (all)"] = best([probe(analyze, env) for _ in range(n)])
    sessions["same window (all)"] = sessions_in(analyze, env)

    since = datetime(first.year, first.month, first.day, 6)
    fixed = [
        *analyze,
        "--since",
        since.isoformat(),
        "--until",
        (since + timedelta(days=span)).isoformat(),
    ]
    probe(fixed, env)  # computes and stores this window's model
    res[f"same window ({span} d)"] = best([probe(fixed, env) for _ in range(n)])
    sessions[f"same window ({span} d)"] = sessions_in(fixed, env)

    base = args.base.resolve() if args.base else None
    base_env = {**env, "XDG_CACHE_HOME": str(work / "cache-base")}
    if base is not None:
        probe_in(base, analyze, base_env)  # the base tree's cold run fills its own cache
    runs, base_runs = [], []
    for i in range(n):
        th = work / f"thresholds-{i}.toml"
        th.write_text(f"[slo]\nttft_ms = {1000 + i + 1}\n")
        runs.append(probe([*analyze, "--thresholds", str(th)], env))
        if base is not None:
            base_runs.append(probe_in(base, [*analyze, "--thresholds", str(th)], base_env))
    if base is not None:
        res[f"recompute [{base.name}]"] = best(base_runs)
    res["recompute (thresholds)"] = best(runs)

    runs, base_runs = [], []
    for i in range(n):
        # --since an hour later each run; the end stays open (what a cron's `--since 6d` asks)
        moved = since + timedelta(hours=i + 1)
        runs.append(probe([*analyze, "--since", moved.isoformat()], env))
        if base is not None:
            base_runs.append(probe_in(base, [*analyze, "--since", moved.isoformat()], base_env))
    if base is not None:
        res[f"sliding [{base.name}]"] = best(base_runs)
    res["sliding (--since +1 h)"] = best(runs)
    sessions["sliding (--since +1 h)"] = sessions_in(
        [*analyze, "--since", (since + timedelta(hours=n + 1)).isoformat()], env
    )
    shutil.rmtree(work, ignore_errors=True)

    bare = res["bare"]
    events = (
        json.loads((args.data / "truth.json").read_text()).get("events")
        if (args.data / "truth.json").is_file()
        else None
    )
    print(
        f"{len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.0f} MiB, {events} events"
    )
    print(
        f"{'run':26} {'wall s':>7} {'cpu s':>7} {'RSS MB':>7} {'wall/bare':>10} {'cpu/bare':>9} {'sessions':>9}"
    )
    for name, r in res.items():
        if r.get("rc") != 0:
            print(f"{name:26} n/a ({(r.get('err') or '').strip().splitlines()[-1:]})")
            continue
        s = sessions.get(name)
        print(f"{name:26} {r['wall']:7.2f} {r['cpu']:7.2f} {r['rss_mb']:7.0f} {ratio(r['wall'], bare['wall']):>10} "
              f"{ratio(r['cpu'], bare['cpu']):>9} {s if s is not None else '':>9}")  # fmt: skip
    print("target: warm <= 0.5x bare (wall)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
