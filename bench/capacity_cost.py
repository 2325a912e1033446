"""Cost of queries/capacity_per_level.sql: another git ref's text of it against this tree's, side
by side on one connection, one log set per size.

    .venv/bin/python bench/capacity_cost.py [--ref main] [--events 1000000] [--repeat 3]

Logs: sample_logs/healthy (the shipped sample) and a simulated one of --events events
(bench/data/capacity-<events>/, git-ignored, written once by `dslogs simulate`). Each is opened
as `analyze` opens it (requests and sessions materialised once), then the two texts run
interleaved --repeat times through the metric runner (dslogs.analyzer.metrics.results.run_metric:
parameters bound, rows fetched as the report reads them). Printed per size: requests, the best
wall seconds and CPU seconds (this process's, DuckDB's threads included) of each text, and the
ratio this tree / ref. The rows of the two are compared on every column but tokens_per_s (the
column the texts may compute differently): a difference there is printed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dslogs.analyzer.core.thresholds import defaults  # noqa: E402
from dslogs.analyzer.ingest.logs import open_logs  # noqa: E402
from dslogs.analyzer.metrics.registry import load_query, parameters  # noqa: E402
from dslogs.analyzer.metrics.results import run_metric  # noqa: E402

NAME = "capacity_per_level"


def ref_sql(ref: str) -> str:
    return subprocess.run(["git", "show", f"{ref}:queries/{NAME}.sql"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def simulated(events: int) -> Path:
    out = ROOT / "bench" / "data" / f"capacity-{events}"
    if not (out / "truth.json").exists():
        subprocess.run([sys.executable, "-m", "dslogs", "simulate", str(out), "--events", str(events),
                        "--seed", "0", "-q"], cwd=ROOT, check=True)  # fmt: skip
    return out


def timed(con, sql: str, params: dict) -> tuple[float, float, list]:
    c, w = time.process_time(), time.perf_counter()
    rows = run_metric(con, NAME, params, sql)
    return time.perf_counter() - w, time.process_time() - c, list(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", default="main")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    texts = {a.ref: ref_sql(a.ref), "this tree": load_query(NAME)}
    params = parameters(defaults(), "hour")
    sizes = [("sample (healthy)", ROOT / "sample_logs" / "healthy"), (f"{a.events:,} events", simulated(a.events))]
    print(f"{'logs':<20} {'requests':>9} {'text':<10} {'wall s':>8} {'CPU s':>8} {'wall ratio':>11} {'CPU ratio':>10}")
    for label, path in sizes:
        with open_logs([str(path)], use_cache=False) as db:
            n = db.con.execute("SELECT count(*) FROM requests").fetchone()[0]
            best: dict[str, tuple[float, float]] = {}
            rows: dict[str, list] = {}
            for _ in range(a.repeat):
                for key, sql in texts.items():
                    w, c, rows[key] = timed(db.con, sql, params)
                    bw, bc = best.get(key, (float("inf"), float("inf")))
                    best[key] = (min(bw, w), min(bc, c))
            (rw, rc), (tw, tc) = best[a.ref], best["this tree"]
            print(f"{label:<20} {n:>9,} {a.ref:<10} {rw:>8.3f} {rc:>8.3f}")
            print(f"{'':<20} {'':>9} {'this tree':<10} {tw:>8.3f} {tc:>8.3f} {tw / rw:>10.2f}x {tc / rc:>9.2f}x")
            strip = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows[a.ref]]
            if strip != [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows["this tree"]]:
                print(f"{'':<20} rows differ beyond tokens_per_s")


if __name__ == "__main__":
    main()
