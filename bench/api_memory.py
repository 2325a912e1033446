"""Peak memory of the Python API's DataFrames against the command line, on the same logs.

    .venv/bin/python bench/api_memory.py [--events 1500000] [--days 7]

Data: bench/ingest.py's main data set (bench/data/ingest-<events>/, made once, git-ignored).
Each run is a child process (what a user runs), its peak RSS read from getrusage; the cache is
emptied before the cold runs. Runs:

- cli analyze: `dslogs analyze --format json`, the command line's memory goal (1.5 GB);
- cli query: `dslogs query LOGS "SELECT * FROM requests" --format csv` (every request, streamed
  as text);
- api requests: `dslogs.open(LOGS).requests`, the requests view as a pandas DataFrame;
- api events: `dslogs.open(LOGS).events`: refused by the frame budget before it is fetched
  (the message names `logs.relation`), and the same with the budget lifted, to show what the
  refusal saves;
- api events, first day: the events of one day of seven with the budget lifted (a frame that
  fits: what converting costs per MB of data);
- api relation: the events view aggregated through `logs.relation("events")` instead.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_MB = 1536

_spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
ingest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ingest)

API = """
import json, sys, dslogs
window = dict(zip(("since", "until"), sys.argv[4:6]))
logs = dslogs.open(sys.argv[1], cache=sys.argv[2], **window)
what = sys.argv[3]
out = {"events": logs.ingest["events"]}
try:
    if what == "relation":
        out["rows"] = logs.relation("events").aggregate("stage, count(*)").df().shape[0]
    else:
        df = getattr(logs, what)
        out["rows"], out["frame_mb"] = len(df), round(df.memory_usage(deep=True).sum() / 2**20, 1)
except dslogs.DslogsError as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


def child(cmd: list[str], env: dict) -> dict:
    """Run cmd in a child of a probe process: its wall, CPU and peak RSS, and its last stdout line."""
    probe = ("import json, resource, subprocess, sys, time\nt = time.perf_counter()\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "print(json.dumps({'rc': p.returncode, 'wall': time.perf_counter() - t, 'rss_mb': ru.ru_maxrss / 1024,"
             " 'out': (p.stdout.strip().splitlines() or [''])[-1][:400], 'err': p.stderr[-400:]}))")
    r = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--days", type=int, default=7)
    args = ap.parse_args()
    folder = ROOT / "bench" / "data" / f"ingest-{args.events}"
    ingest.make_data(folder, args.events, args.days)
    work = Path(tempfile.mkdtemp(prefix="dslogs-api-mem-"))
    cache = work / "cache.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    runs: list[tuple[str, dict]] = []

    def run(label: str, cmd: list[str], cold: bool = False, extra_env: dict | None = None) -> None:
        if cold:
            for p in work.glob("cache.duckdb*"):
                p.unlink()
        r = child(cmd, {**env, **(extra_env or {})})
        runs.append((label, r))
        print(f"{label:34} rc={r['rc']} {r['wall']:7.1f} s {r['rss_mb']:7.0f} MB  {r['out'][:110]}", flush=True)

    cli = [py, "-m", "dslogs"]
    run("cli analyze json (cold)", cli + ["analyze", str(folder), "--format", "json", "--cache", str(cache)], cold=True)
    run("cli analyze json (warm)", cli + ["analyze", str(folder), "--format", "json", "--cache", str(cache)])
    run("cli query requests csv (warm)", cli + ["query", str(folder), "SELECT * FROM requests", "--format", "csv",
                                                "--cache", str(cache)])
    api = [py, "-c", API, str(folder), str(cache)]
    run("api .requests (cold)", api + ["requests"], cold=True)
    run("api .requests (warm)", api + ["requests"])
    run("api .sessions (warm)", api + ["sessions"])
    run("api .events (warm, refused)", api + ["events"])
    run("api .events (warm, budget lifted)", api + ["events"], extra_env={"DSLOGS_FRAME_BUDGET_MB": "100000"})
    run("api .events 1st day (budget lifted)", api + ["events", "2026-11-23", "2026-11-24"],
        extra_env={"DSLOGS_FRAME_BUDGET_MB": "100000"})
    run("api relation('events') agg (warm)", api + ["relation"])
    shutil.rmtree(work, ignore_errors=True)

    by = dict(runs)
    base = by["cli analyze json (warm)"]["rss_mb"]
    print(f"\n== peak RSS, {args.events:,} events; goal <= {GOAL_MB} MB ==")
    print(f"{'run':34} {'peak MB':>8} {'x cli analyze warm':>19} {'within goal':>12}")
    for label, r in runs:
        ok = "yes" if r["rc"] == 0 and r["rss_mb"] <= GOAL_MB else "NO"
        print(f"{label:34} {r['rss_mb']:8.0f} {r['rss_mb'] / base:19.2f} {ok:>12}")


if __name__ == "__main__":
    main()
