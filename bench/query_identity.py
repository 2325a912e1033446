"""Every metric query of this tree against the same query of another git revision (default main),
on the same connection, result table against result table: a query rewritten to be cheaper
must give identical results.

    .venv/bin/python bench/query_identity.py [--base main] [--cache-home DIR] PATH [PATH ...]

Each PATH is opened as `analyze` opens it: a folder of sample_logs without a cache (in memory);
with --windowed, also through the cache (XDG_CACHE_HOME=--cache-home) with a `--since` seven
hours after its first day's midnight (the sliding window's views: stored rows plus edges).
Both versions of a query run with the same parameters (`now` fixed); the rows are compared in
order, value for value. A table that differs is run again on the base, twice: when the base
itself differs from run to run only in float columns (parallel float sums: regr_*, avg) and the
branch's differ from it by no more than that noise (relative 1e-9), it is "float noise";
anything else is a failure. Exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def base_sql(rev: str, name: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:queries/{name}.sql"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip


def close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def same(a: list[tuple], b: list[tuple]) -> bool:
    # NaN != NaN in Python: compare through repr for floats
    return len(a) == len(b) and all(
        len(x) == len(y) and all(
            (isinstance(u, float) and isinstance(v, float) and (u == v or (math.isnan(u) and math.isnan(v))))
            or (not isinstance(u, float) and u == v)
            for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )  # fmt: skip


def check(con, label: str, rev: str, failures: list, noise: list) -> int:
    from dslogs.analyzer.core.resources import load_query
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.metrics.registry import (
        METRIC_QUERIES,
        bucket_for_span,
        parameters,
        sql_params,
    )

    first, last = con.execute("SELECT min(ts), max(ts) FROM events").fetchone()
    params = parameters(
        defaults(), bucket_for_span(first and first.isoformat(), last and last.isoformat())
    )
    params["now"] = "2030-01-01T00:00:00+00:00"
    cols = {r[0] for r in con.execute("DESCRIBE events").fetchall()}
    n = 0
    for name in [*METRIC_QUERIES, "session_requests"]:
        if name in ("log_volume_over_time", "log_volume_peak_minute") and "line_bytes" not in cols:
            continue
        p = dict(params)
        if name == "session_requests":
            ids = [
                r[0]
                for r in con.execute(
                    "SELECT session_id FROM sessions WHERE session_id IS NOT NULL ORDER BY session_id LIMIT 50"
                ).fetchall()
            ]
            p["session_ids"] = ids
        mine, theirs = load_query(name), base_sql(rev, name)

        def run(sql: str, p: dict = p) -> list[tuple]:
            return con.execute(sql, {k: p[k] for k in sql_params(sql)}).fetchall()

        if mine == theirs:
            continue  # unchanged: its own run-to-run noise is not this branch's
        a, b = run(theirs), run(mine)
        n += 1
        if same(a, b):
            continue
        noisy = any(not same(a, run(theirs)) for _ in range(5))
        if noisy and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True)):
            noise.append(f"{label}: {name}")
            continue
        failures.append(f"{label}: {name} ({len(a)} rows base, {len(b)} rows branch)")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--base", default="main")
    ap.add_argument("--tz", help="the reader's zone (open_logs tz), default the local one")
    ap.add_argument("--windowed", action="store_true", help="also through the cache with a --since")
    args = ap.parse_args()
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.model import result_cache

    failures: list[str] = []
    noise: list[str] = []
    for path in args.paths:
        opened = [("memory", lambda p=path: open_logs([str(p)], tz=args.tz, use_cache=False))]
        if args.windowed:
            days = sorted(
                m.group(1) for f in path.rglob("*.jsonl*") if (m := re.search(r"_(\d{8})", f.name))
            )
            d = days[0]
            since = f"{d[:4]}-{d[4:6]}-{d[6:]}T07:00:00"
            opened = [
                ("cache, no window", lambda p=path: open_logs([str(p)], tz=args.tz)),
                (
                    f"cache, --since {since}",
                    lambda p=path, s=since: open_logs(
                        [str(p)], since=s, tz=args.tz, materialize=False
                    ),
                ),
            ]
        for how, opener in opened:
            db = opener()
            try:
                result_cache.materialize_derived(db.con)
                n = check(db.con, f"{path} [{how}]", args.base, failures, noise)
                print(f"{path} [{how}]: {n} changed queries compared", flush=True)
            finally:
                db.close()
    for x in noise:
        print("float noise (the base differs from itself as much):", x)
    for x in failures:
        print("DIFFERENT:", x)
    print("identical" if not failures else f"{len(failures)} different")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
