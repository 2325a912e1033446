"""HTML report benchmark: `analyze --out r.html` against the same run with
`--format json`, side by side in one run; target: HTML at most 1.3x JSON.

    .venv/bin/python bench/render.py [--events 1500000] [--days 7] [--repeat 3] [--baseline REV]

Data: sample_logs/ and a simulated set of --events events in --days daily files
(bench/data/render-<events>/, git-ignored, made once; --events 0 skips it). Each command runs as
a child process, as a user types it, with PYTHONPATH on the code under test; wall clock, CPU
(user + sys of the child: the steadier figure on a shared machine) and peak RSS come from the
child's rusage; each figure is the best (RSS: the largest) of --repeat runs, JSON and HTML runs
interleaved so a busy moment hits both.

- cold: an empty cache folder (XDG_CACHE_HOME) for every run: the logs are read, and nothing
  the report renderer may keep there (compiled templates) exists yet;
- warm: the cache folder of a previous run of the same command (what a user re-running sees).

--baseline REV also runs the code of git revision REV (exported with `git archive` to a
temporary folder), so the ratios before and after a change print in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# best-of-runs as bench/ingest.py defines it (bench/ is scripts, not a package)
_spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
_bench_ingest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_ingest)
best = _bench_ingest.best
PY = sys.executable
PROBE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
                  "rss_mb": ru.ru_maxrss / 1024, "err": p.stderr.decode(errors="replace")[-400:]}))
"""
TARGET = 1.3


def probe(cmd: list[str], env: dict, cwd: Path) -> dict:
    # cwd = the code tree: `python -m` puts the working directory ahead of PYTHONPATH
    out = subprocess.run([PY, "-c", PROBE, *cmd], capture_output=True, text=True, env=env, check=True, cwd=cwd).stdout
    return json.loads(out.strip().splitlines()[-1])


def make_data(folder: Path, events: int, days: int) -> Path:
    """Simulated logs, one file per day, made once (the same recipe as bench/ingest.py)."""
    from dslogs.analyzer.simulate import simulate

    if not (folder / "truth.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        simulate(folder, ["memory_leak", "gpu_wait", "kv_cache_bloat"], days=days, seed=7, events=events,
                 max_bytes=1 << 40)  # fmt: skip
        print(f"simulated {events} events over {days} days in {time.perf_counter() - t:.1f} s", flush=True)
    files = sorted(folder.rglob("*.jsonl*"))
    return folder / files[0].relative_to(folder).parts[0]


def export_revision(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and a == a and b == b else "n/a"


def measure(code: Path, logs: Path, work: Path, n: int) -> dict[str, dict]:
    """json/html × cold/warm for one code tree and one log folder."""
    base = {**os.environ, "PYTHONPATH": str(code)}
    cmds = {"json": [PY, "-m", "analyzer", "analyze", str(logs), "--format", "json", "--out", str(work / "r.json")],
            "html": [PY, "-m", "analyzer", "analyze", str(logs), "--out", str(work / "r.html")]}
    runs: dict[str, list[dict]] = {f"{k}_{s}": [] for s in ("cold", "warm") for k in cmds}
    for i in range(n):
        for kind, cmd in cmds.items():
            home = work / f"cold-{kind}-{i}-{time.monotonic_ns()}"
            runs[f"{kind}_cold"].append(probe(cmd, {**base, "XDG_CACHE_HOME": str(home)}, code))
            shutil.rmtree(home, ignore_errors=True)
    warm_homes = {kind: work / f"warm-{kind}" for kind in cmds}
    for kind, cmd in cmds.items():
        probe(cmd, {**base, "XDG_CACHE_HOME": str(warm_homes[kind])}, code)  # fills the cache
    for _ in range(n):
        for kind, cmd in cmds.items():
            runs[f"{kind}_warm"].append(probe(cmd, {**base, "XDG_CACHE_HOME": str(warm_homes[kind])}, code))
    for home in warm_homes.values():
        shutil.rmtree(home, ignore_errors=True)
    out = {k: best(v) for k, v in runs.items()}
    out["html_bytes"] = (work / "r.html").stat().st_size if (work / "r.html").is_file() else 0
    out["json_bytes"] = (work / "r.json").stat().st_size if (work / "r.json").is_file() else 0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_500_000, help="simulated data set size (0: sample_logs only)")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="a git revision to measure too (before/after in one run)")
    args = ap.parse_args()

    sets = {"sample_logs": ROOT / "sample_logs"}
    if args.events:
        sets[f"{args.events / 1e6:g} M events"] = make_data(ROOT / "bench" / "data" / f"render-{args.events}",
                                                           args.events, args.days)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="dslogs-bench-render-"))
    trees = {"after": ROOT}
    if args.baseline:
        trees = {f"before ({args.baseline})": export_revision(args.baseline, work / "baseline"), **trees}
    results: dict[str, dict] = {}
    try:
        for label, logs in sets.items():
            for version, code in trees.items():
                run_dir = work / f"run-{len(results)}"
                run_dir.mkdir()
                print(f"measuring {label}, {version} …", flush=True)
                results[f"{label} | {version}"] = measure(code, logs, run_dir, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'data set | code':34} {'cache':5} {'json s':>7} {'html s':>7} {'html/json':>9} "
          f"{'json cpu':>8} {'html cpu':>8} {'cpu ratio':>9} {'html RSS':>9} {'html KB':>8}")  # fmt: skip
    worst = {"wall": 0.0, "cpu": 0.0}
    for name, r in results.items():
        for state in ("cold", "warm"):
            j, h = r[f"json_{state}"], r[f"html_{state}"]
            if j["rc"] or h["rc"]:
                print(f"{name:34} {state:5} failed: {(j.get('err') or h.get('err') or '').strip().splitlines()[-1:]}")
                continue
            print(f"{name:34} {state:5} {j['wall']:7.2f} {h['wall']:7.2f} {ratio(h['wall'], j['wall']):>9} "
                  f"{j['cpu']:8.2f} {h['cpu']:8.2f} {ratio(h['cpu'], j['cpu']):>9} {h['rss_mb']:6.0f} MB "
                  f"{r['html_bytes'] / 1024:8.0f}")  # fmt: skip
            if name.endswith("| after"):
                worst = {k: max(worst[k], h[k] / j[k]) for k in worst}
    print()
    # On a shared box wall clock measures the neighbours as much as dslogs: the load says how much.
    load = os.getloadavg()[0]
    print(f"worst HTML/JSON ratio of the current code, cold or warm: {worst['cpu']:.2f}x cpu, "
          f"{worst['wall']:.2f}x wall   (target <= {TARGET}x; load average {load:.1f} on {os.cpu_count()} cpus)")
    out = ROOT / "bench" / "data" / "render-results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"(results in {out.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
