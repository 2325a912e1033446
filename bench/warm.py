"""Warm `analyze` against the bare scan, side by side in one run.

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

    .venv/bin/python bench/warm.py --cron [--data bench/data/ingest-5000000] [--hours 3]
        [--base /work/main]

cron: the hourly cron over today's growing file. The data set's last (plain) file is copied into
a temporary folder cut at ``--hours`` before its day's end (the other files are symlinked, never
written); one cold `analyze` (no window; `--cold-since`: with the first hour's --since, as a cron that never runs without one) fills the cache, then each hour the copy grows by that
hour's lines and `analyze --since <hour end - 1 day>` (``--whole``: no window) runs: wall and
CPU-s per run, against the bare scan of the same files, and against the same runs of the
``--base`` tree (each tree its own copy and cache), side by side in one run.
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
from datetime import UTC, date, datetime, timedelta
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


def hour_offsets(plain: Path, day: date, first_hour: int) -> list[int]:
    """Byte offsets of the first line at or after each hour from ``first_hour`` to the day's
    end (the file's size last); the file is in time order (one writer)."""
    marks = [f'"ts":"{day.isoformat()}T{h:02d}:' for h in range(first_hour, 24)]
    offsets, pos = [], 0
    with open(plain, "rb") as fh:
        for line in fh:
            text = line[:40].decode("utf-8", "replace")
            while len(offsets) < len(marks) and marks[len(offsets)] in text:
                offsets.append(pos)
            pos += len(line)
    if len(offsets) < len(marks):
        raise SystemExit(f"{plain}: no lines for every hour from {first_hour}:00")
    return [*offsets, pos]


def cron(args) -> int:
    files = sorted(p for p in args.data.rglob("*.jsonl*"))
    plain = [p for p in files if not p.name.endswith(".gz")][-1]
    m = re.search(r"_(\d{8})", plain.name)
    day = date(int(m.group(1)[:4]), int(m.group(1)[4:6]), int(m.group(1)[6:]))
    first_hour = 24 - args.hours
    offsets = hour_offsets(plain, day, first_hour)
    trees = {"after": ROOT}
    if args.base:
        trees = {"before": args.base.resolve(), **trees}
    work = Path(tempfile.mkdtemp(prefix="dslogs-cron-"))
    setups = {}
    for name, tree in trees.items():
        logdir = work / name / plain.parent.name
        logdir.mkdir(parents=True)
        for p in files:
            if p != plain:
                (logdir / p.name).symlink_to(p.resolve())
        copy_ = logdir / plain.name
        with open(plain, "rb") as src, open(copy_, "wb") as dst:
            dst.write(src.read(offsets[0]))
        env = {**os.environ, "XDG_CACHE_HOME": str(work / name / "cache")}
        setups[name] = (tree, logdir, copy_, env)
    res: dict[str, dict] = {}
    start = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=first_hour)
    for name, (tree, logdir, _, env) in setups.items():
        cmd = [*DSLOGS, "analyze", str(logdir), "--format", "json"]
        if args.cold_since:  # as a cron that only ever runs with --since sees it from its first run
            cmd += ["--since", (start - timedelta(days=1)).isoformat()]
        res[f"cold ({name})"] = probe_in(tree, cmd, env)
    steps: dict[str, list[dict]] = {name: [] for name in trees}
    bare: list[dict] = []
    sessions: dict[str, list] = {name: [] for name in trees}
    for i in range(args.hours):
        end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
            hours=first_hour + i + 1
        )
        since = (end - timedelta(days=1)).isoformat()
        for name, (tree, logdir, copy_, env) in setups.items():
            with open(plain, "rb") as src, open(copy_, "ab") as dst:
                src.seek(offsets[i])
                dst.write(src.read(offsets[i + 1] - offsets[i]))
            cmd = [*DSLOGS, "analyze", str(logdir), "--format", "json"]
            cmd += [] if args.whole else ["--since", since]
            steps[name].append(probe_in(tree, cmd, env))
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=tree,
                                 env={**env, "PYTHONPATH": str(tree)})  # fmt: skip
            try:
                model = json.loads(out.stdout)
                sessions[name].append((model["sessions_total"], model["ingest"]["events"]))
            except (ValueError, KeyError):
                sessions[name].append(None)
        logdir = setups["after"][1]
        bare.append(probe([PY, "-c", BARE, *map(str, sorted(logdir.iterdir()))]))
    shutil.rmtree(work, ignore_errors=True)

    def mean(runs: list[dict], key: str) -> float:
        return (
            sum(r[key] for r in runs) / len(runs)
            if runs and all(r["rc"] == 0 for r in runs)
            else float("nan")
        )

    b_wall, b_cpu = mean(bare, "wall"), mean(bare, "cpu")
    print(f"{len(files)} files; {plain.name} grows by one hour per run, {args.hours} runs "
          f"({(offsets[-1] - offsets[0]) / args.hours / 2**20:.1f} MiB per hour)")  # fmt: skip
    print(f"{'run':26} {'wall s':>7} {'cpu s':>7} {'wall/bare':>10} {'cpu/bare':>9}")
    print(f"{'bare scan (mean)':26} {b_wall:7.2f} {b_cpu:7.2f}")
    for name, r in res.items():
        print(
            f"{name:26} {r['wall']:7.2f} {r['cpu']:7.2f} {ratio(r['wall'], b_wall):>10} {ratio(r['cpu'], b_cpu):>9}"
        )
    for name in trees:
        for i, r in enumerate(steps[name]):
            label = f"cron {name} +{i + 1} h"
            if r["rc"] != 0:
                print(f"{label:26} failed: {(r.get('err') or '').strip().splitlines()[-1:]}")
                continue
            print(f"{label:26} {r['wall']:7.2f} {r['cpu']:7.2f} {ratio(r['wall'], b_wall):>10} "
                  f"{ratio(r['cpu'], b_cpu):>9}  sessions, events {sessions[name][i]}")  # fmt: skip
        w, c = mean(steps[name], "wall"), mean(steps[name], "cpu")
        print(
            f"{'cron ' + name + ' (mean)':26} {w:7.2f} {c:7.2f} {ratio(w, b_wall):>10} {ratio(c, b_cpu):>9}"
        )
    if len(trees) == 2:
        w = [mean(steps[n], "wall") for n in trees]
        c = [mean(steps[n], "cpu") for n in trees]
        print(f"after/before: wall {ratio(w[1], w[0])}, cpu {ratio(c[1], c[0])}; "
              f"same answers: {sessions['before'] == sessions['after']}")  # fmt: skip
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-1500000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another source tree (e.g. /work/main): "
                    "recompute/sliding, or the cron runs, also with its code")  # fmt: skip
    ap.add_argument("--cron", action="store_true", help="the hourly cron over a growing file")
    ap.add_argument("--hours", type=int, default=3, help="cron: runs, one hour of growth each")
    ap.add_argument("--whole", action="store_true", help="cron: no --since (every run: all days)")
    ap.add_argument("--cold-since", action="store_true",
                    help="cron: the first (cold) run has a --since too, as a cron that never runs without one")
    args = ap.parse_args()
    if args.cron:
        return cron(args)
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
