"""What per-hour partials kept in the cache could save a sliding `--since 1d` run, at most.

    .venv/bin/python bench/partials_ceiling.py [--data /work/benchdata/ingest-1500000] [--repeat 5]

Only the tables whose rows combine exactly over time can come from partials of whole hours: the
ones ``engines.merge.MERGES`` sums, mins or maxes (each row counts events, each at one instant)
and the timelines of a bucket that divides an hour (a bucket's row reads the events of that
bucket alone). Even with every whole hour's rows read for free, a run still computes each of
them over the window's two edge pieces (from --since to the next whole hour, and the hour the
data ends in). This times each such query over the window of the hourly cron's first run
(end of data - 1 day + 1 h, the cache filled first) and over those two pieces alone (a table of
their events), in one process, median of --repeat: the difference is the ceiling.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# events-only tables that combine exactly over whole hours (the others read a session's, a
# request's or a process's whole history in the window, or a distinct count over it)
CANDIDATES = ["time_span", "latency_hist", "future_events", "session_id_coverage", "gpu_wait_hist",
              "errors_over_time", "gpu_timeline", "log_volume_over_time", "log_volume_peak_minute",
              "stage_percentiles_over_time", "collector_write_rate", "stage_percentiles"]  # fmt: skip


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-1500000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from profile_trees import data_end

    from dslogs.analyzer.core.resources import load_query
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.metrics import registry
    from dslogs.analyzer.metrics.results import run_metric

    files = sorted(args.data.rglob("*.jsonl*"))
    logdir = files[0].parent
    since = (data_end(files) - timedelta(days=1) + timedelta(hours=1)).isoformat()
    with tempfile.TemporaryDirectory(prefix="dslogs-ceiling-") as home:
        env = {**os.environ, "XDG_CACHE_HOME": home, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "dslogs", "analyze", str(logdir), "--format", "json",
                        "--out", os.devnull], env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        os.environ["XDG_CACHE_HOME"] = home
        with open_logs([str(logdir)], since=since, tz="UTC") as db:
            con = db.con
            params = registry.parameters(defaults(), "hour")
            lo, hi = con.execute("SELECT min(ts), max(ts) FROM events").fetchone()
            con.execute(
                "CREATE TEMP TABLE _edge AS SELECT * FROM events WHERE ts < date_trunc('hour', $lo) "
                "+ INTERVAL 1 HOUR OR ts >= date_trunc('hour', $hi)",
                {"lo": lo, "hi": hi},
            )
            n_all = con.execute("SELECT count(*) FROM events").fetchone()[0]
            n_edge = con.execute("SELECT count(*) FROM _edge").fetchone()[0]
            print(f"--since {since}: {n_all} events in the window, {n_edge} in its two edge pieces")
            print(f"{'table':32}{'window':>10}{'edges':>10}  (median CPU-s of {args.repeat})")
            total_w = total_e = 0.0
            for name in CANDIDATES:
                sql = load_query(name).strip().rstrip(";")
                edge_sql = f"WITH events AS (SELECT * FROM _edge) SELECT * FROM (\n{sql}\n)"
                window, edges = [], []
                for _ in range(args.repeat):
                    c = cpu()
                    run_metric(con, name, params)
                    window.append(cpu() - c)
                    c = cpu()
                    run_metric(con, name, params, edge_sql)
                    edges.append(cpu() - c)
                w, e = statistics.median(window), statistics.median(edges)
                total_w, total_e = total_w + w, total_e + e
                print(f"{name:32}{w:10.4f}{e:10.4f}")
            print(f"{'all of them':32}{total_w:10.4f}{total_e:10.4f}")
            print(f"ceiling of the saving: {total_w - total_e:.3f} CPU-s a run (before reading the partials)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
