"""What marking the one deploy of a `--since`/`--until` window costs, before vs after.

    PYTHONPATH=$PWD .venv/bin/python bench/deploy_window.py [--days 3] [--events 600000] [--before REV] [--repeat 2]

Simulated logs (daily files, written under bench/data/, git-ignored) of --days days with deploy
records: d1 at the first day's start, d2 (another torch, prefill +40 % from then on) 20 minutes
into the last hour of the run (14:00 on the last day). `dslogs analyze LOGS --since S --until U --format json` runs as a child process for:

- "one start, no cache": the last hour, d2's start in it (`--no-cache`): the files before the
  window are read once more to number the deploys (after) where nothing was marked (before);
- "one start, empty cache": the same window, a new cache each run: the files before the window
  are read into it once (after), so the next hour's run finds them there;
- "one start, warm cache": the same window, the cache holding every file (a run over the whole
  log set first, not timed): the deploys are numbered from the cache;
- "no start, no cache" and "no start, warm cache": 35 minutes from 5 minutes after d2's start,
  no deploy record in it: one query on the window, as before.

Each is timed for this checkout ("after") and --before (default: the merge-base with main,
extracted with `git archive`) in the same run. Figures are CPU seconds (user + sys of the child
and its threads: steadier than wall time on a shared box), best of --repeat; the deploy ids each
run marks are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.trees import before_tree, timed  # noqa: E402

START = "2026-11-20T00:00"


def write_logs(folder: Path, days: int, events: int) -> tuple[datetime, datetime]:
    """The logs, and (d2's start, the run's end)."""
    from dslogs.analyzer.simulate import simulate

    t0 = datetime.fromisoformat(START + "+00:00")
    end = t0 + timedelta(days=days - 1, hours=14)  # the last day's afternoon: traffic
    d2 = end - timedelta(minutes=40)
    if not (folder / "truth.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
        simulate(folder, hours=(end - t0).total_seconds() / 3600, seed=0, start=START, events=events, change="prefill_slower",
                 change_at=d2.strftime("%Y-%m-%dT%H:%M"))
        for at, torch in ((t0, "2.4.1"), (d2, "2.5.0")):
            rec = {"v": 1, "ts": at.isoformat(timespec="milliseconds"), "stage": "deploy", "host": "gpu-01", "pid": 4242,
                   "deploy_id": f"bench-{torch}", "config": json.dumps({"pkg.torch": torch, "trigger": "start"})}
            (folder / f"deploy_{at:%Y%m%d}.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
    return d2, end


IMPORTS = ("from dslogs.analyzer import ingest\nfrom dslogs.analyzer.core.selection import Selection\n"
           "from dslogs.analyzer.model import deploys as dm\n")
WHOLE_OPEN = IMPORTS + ("import sys\nwith ingest.open(Selection.build([sys.argv[1]], tz='UTC', use_cache=False), "
                        "materialize=False) as db:\n    print(len(dm.read_instances(db.con)[1]))\n")


def run(code: Path, args: list[str], cache_home: Path) -> tuple[float, float, list[str]]:
    wall, cpu, out = timed([sys.executable, "-m", "dslogs", "analyze", *args, "--format", "json", "--tz", "UTC"],
                           code, {"XDG_CACHE_HOME": str(cache_home)})
    return wall, cpu, [f"{d['id']} {d['verdict']}" for d in json.loads(out).get("deploys") or []]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--events", type=int, default=600_000)
    ap.add_argument("--before", default=None, help="git revision for 'before' (default: merge-base with main)")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    logs = ROOT / "bench" / "data" / f"deploy-window-{a.days}d-{a.events}"
    d2, end = write_logs(logs, a.days, a.events)
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M")  # noqa: E731
    last_hour = ["--since", iso(end - timedelta(hours=1)), "--until", iso(end)]
    after_d2 = ["--since", iso(d2 + timedelta(minutes=5)), "--until", iso(end)]
    with tempfile.TemporaryDirectory(prefix="dslogs-before-") as tmp:
        rev, before = before_tree(a.before, Path(tmp) / "code")
        codes = {"before": before, "after": ROOT}
        cases = {"one start, no cache": (last_hour, "--no-cache"), "one start, empty cache": (last_hour, "empty"),
                 "one start, warm cache": (last_hour, "warm"), "no start, no cache": (after_d2, "--no-cache"),
                 "no start, warm cache": (after_d2, "warm")}
        results: dict[tuple[str, str], tuple[float, float, list[str]]] = {}
        for label, code in codes.items():
            home = Path(tmp) / f"home-{label}"
            run(code, [str(logs)], home)  # the warm case's cache: every file
            for name, (window, mode) in cases.items():
                args = [str(logs), *window, *(["--no-cache"] if mode == "--no-cache" else [])]
                best = None
                for n in range(a.repeat):
                    got = run(code, args, home if mode != "empty" else Path(tmp) / f"empty-{label}-{n}")
                    best = got if best is None or got[1] < best[1] else best
                results[(name, label)] = best
        # what the added open costs by itself: the whole log set opened without a cache, its starts read
        whole = min(timed([sys.executable, "-c", WHOLE_OPEN, str(logs)], ROOT)[1] for _ in range(a.repeat))
        bare = min(timed([sys.executable, "-c", IMPORTS], ROOT)[1] for _ in range(a.repeat))
    print(f"{a.days} days, {a.events:,} events, d2 at {d2:%Y-%m-%d %H:%M}Z; before = {rev[:10]}, after = this checkout;"
          f" CPU s (wall s), best of {a.repeat}")
    print(f"{'case':24} {'before':>16} {'after':>16} {'after/before':>13}   marked (before | after)")
    for name in cases:
        b, x = results[(name, "before")], results[(name, "after")]
        print(f"{name:24} {b[1]:7.2f} ({b[0]:6.2f}) {x[1]:7.2f} ({x[0]:6.2f}) {x[1] / b[1]:12.2f}x"
              f"   {', '.join(b[2]) or '-'} | {', '.join(x[2]) or '-'}")
    print(f"the whole log set opened without a cache, its deploy starts read (after): {whole - bare:.2f} CPU s "
          f"(a child's {whole:.2f} less its imports' {bare:.2f})")


if __name__ == "__main__":
    main()
