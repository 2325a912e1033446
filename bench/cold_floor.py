"""The floor under a cold `dslogs analyze --format json` (docs/internals.md).

    PYTHONPATH=$PWD .venv/bin/python bench/cold_floor.py [LOGDIR] [--repeat N]

Runs, each in a child process over the same files (best of N; wall, CPU and peak RSS of that
child alone), a ladder of ever more complete designs, from bench/ingest.py's bare scan up to the
real cold analyze, and prints each against the bare scan. Each step adds one thing a report
needs, so the table says what every piece of the cold run costs and how far down any design that
keeps typed events (the cache, `dslogs query`) could go. LOGDIR defaults to
bench/data/ingest-1500000/gpu-01. The in-memory steps run with an 8 GB memory_limit, so they
measure the work and not DuckDB spilling to disk.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from ingest import BARE, PY, best, probe  # noqa: E402

# Every field typed by the read schema (RAW_COLUMNS), counted per column so each one is parsed
# and typed, nothing stored.
TYPED = """
import sys, duckdb
from dslogs.analyzer.ingest.columns import columns_struct
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
print(con.execute(
    f"SELECT count(COLUMNS(*)) FROM read_json($f, columns={columns_struct()}, format='newline_delimited')",
    {"f": sys.argv[1:]}).fetchall()[0][0])
"""
# The same, stored as they are in an in-memory table (no line_bytes, no normalisation).
TYPED_MEM = """
import sys, duckdb
from dslogs.analyzer.ingest.columns import columns_struct
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute("SET memory_limit = '8GB'")
con.execute(f"CREATE TABLE t AS SELECT * FROM read_json($f, columns={columns_struct()}, format='newline_delimited')",
            {"f": sys.argv[1:]})
print(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""
# dslogs' own read (events normalised, line_bytes) into memory, no cache; with materialize the
# requests and sessions tables too (what the report's queries run on).
OPEN = """
import os, sys
from dslogs.analyzer.ingest.logs import open_logs
db = open_logs([sys.argv[1]], use_cache=sys.argv[2] == "cache", materialize=sys.argv[3] == "1")
print(db.ingest["events"])
"""


def main() -> int:
    args = sys.argv[1:]
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    logdir = Path(args[0] if args else ROOT / "bench/data/ingest-1500000/gpu-01").resolve()
    files = sorted(str(p) for p in logdir.rglob("*.jsonl*"))
    big = {**os.environ, "DSLOGS_MEMORY_LIMIT": "8GB"}

    def fresh_cache() -> dict:
        return {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="dslogs-floor-")}

    steps = [
        ("bare scan: 2 fields, stage percentiles", lambda: probe([PY, "-c", BARE, *files])),
        ("read_json of every field, typed, not kept", lambda: probe([PY, "-c", TYPED, *files])),
        ("... kept in an in-memory table", lambda: probe([PY, "-c", TYPED_MEM, *files], env=big)),
        ("dslogs read (events, line_bytes) in memory",
         lambda: probe([PY, "-c", OPEN, str(logdir), "memory", "0"], env=big)),
        ("... + requests and sessions tables",
         lambda: probe([PY, "-c", OPEN, str(logdir), "memory", "1"], env=big)),
        ("analyze --no-cache (in memory)",
         lambda: probe([PY, "-m", "dslogs", "analyze", str(logdir), "--format", "json", "--no-cache"], env=big)),
        ("dslogs read into the cache file (+ derived)",
         lambda: probe([PY, "-c", OPEN, str(logdir), "cache", "1"], env=fresh_cache())),
        ("analyze, cold cache (the real run)",
         lambda: probe([PY, "-m", "dslogs", "analyze", str(logdir), "--format", "json"], env=fresh_cache())),
    ]  # fmt: skip
    results = [[] for _ in steps]
    for _ in range(repeat):  # interleaved, so a busy spell on the box hits every step alike
        for k, (_label, run) in enumerate(steps):
            results[k].append(run())
    rows = [(label, best(r)) for (label, _), r in zip(steps, results, strict=True)]
    bare = rows[0][1]
    print(f"{len(files)} files under {logdir}, best of {repeat}")
    print(
        f"{'step':46} {'wall s':>7} {'cpu s':>7} {'rss MB':>7} {'x bare wall':>11} {'x bare cpu':>10}"
    )
    for label, r in rows:
        if r["rc"] != 0:
            print(f"{label:46} failed: {r['err']}")
            continue
        print(f"{label:46} {r['wall']:7.2f} {r['cpu']:7.2f} {r['rss_mb']:7.0f} "
              f"{r['wall'] / bare['wall']:11.2f} {r['cpu'] / bare['cpu']:10.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
