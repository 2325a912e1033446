"""Ingest benchmark (issue 4): dslogs against a bare DuckDB scan and jq on the same files.

    .venv/bin/python bench/ingest.py [--events 2000000] [--days 7] [--repeat 3]

Simulator data (bench/data/ingest-<events>/, git-ignored; made once): --days daily files of
--events events in all, the closed days gzipped as our collector leaves them. Everything runs as
a child process (what a user types), timed by wall clock and by CPU (user + sys of the child):
on a shared machine CPU time is the steadier figure. Each figure is the best of --repeat runs.

- bare: one DuckDB read_json scan computing stage percentiles of the same files (explicit
  columns, the fastest way to ask DuckDB that question);
- cold query: `dslogs query` on requests with an empty cache (reads every file, builds the
  cache); --no-cache too;
- cold analyze: `dslogs analyze --format json` with an empty cache ('n/a' if it fails);
- warm: the same query once the cache holds the files (and, after one more run, the
  requests/sessions tables); target <= 0.5x bare;
- append: one more day's file added to a warm cache: the extra time against the cold read's,
  and the new file's share of the bytes;
- session: `dslogs session ID --format jsonl` (warm and --no-cache) against
  `zcat -f FILES | jq -c 'select(.session_id == ID)'`; target >= 10x;
- peak RSS of each child (ru_maxrss); target <= 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
DSLOGS = [PY, "-m", "analyzer"]
BARE = """
import sys, duckdb
files = sys.argv[1:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
rows = con.execute(
    "SELECT stage, count(*), quantile_cont(duration_ms, [0.5, 0.9, 0.95, 0.99]), max(duration_ms) "
    "FROM read_json($f, columns={stage: 'VARCHAR', duration_ms: 'DOUBLE'}, format='newline_delimited') "
    "GROUP BY stage", {"f": files}).fetchall()
print(len(rows))
"""
# Runs one command and reports its own child's wall, CPU and peak RSS (so figures never mix).
PROBE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[2:], shell=sys.argv[1] == "sh", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
                  "rss_mb": ru.ru_maxrss / 1024, "err": p.stderr.decode(errors="replace")[-400:]}))
"""


def probe(cmd: list[str] | str, env: dict | None = None) -> dict:
    shell = isinstance(cmd, str)
    args = [PY, "-c", PROBE, "sh" if shell else "exec", *([cmd] if shell else cmd)]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"rc": runs[-1]["rc"], "wall": float("nan"), "cpu": float("nan"), "rss_mb": float("nan"),
                "err": runs[-1]["err"]}  # fmt: skip
    return {"rc": 0, "wall": min(r["wall"] for r in ok), "cpu": min(r["cpu"] for r in ok),
            "rss_mb": max(r["rss_mb"] for r in ok)}  # fmt: skip


def make_data(folder: Path, events: int, days: int) -> list[Path]:
    from analyzer.simulate import simulate

    done = folder / "truth.json"
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        # One file per day (no size rotation), as DESIGN §8's reference and the issue ask.
        simulate(folder, ["memory_leak", "gpu_wait", "kv_cache_bloat"], days=days, seed=7, events=events,
                 max_bytes=1 << 40)  # fmt: skip
        print(f"simulated {events} events over {days} days in {time.perf_counter() - t:.1f} s", flush=True)
    return sorted(p for p in folder.rglob("*.jsonl*"))


def extra_day(folder: Path, events: int, days: int, into: Path) -> Path:
    """One more day of traffic (a new file for the append test), made once."""
    from analyzer.simulate import simulate

    src = folder.parent / (folder.name + "-extra")
    if not (src / "truth.json").is_file():
        shutil.rmtree(src, ignore_errors=True)
        first = date(2026, 11, 23) + timedelta(days=days)  # the day after the data set (simulate's start)
        simulate(src, ["healthy"], days=1, seed=8, events=max(1, events // days), max_bytes=1 << 40,
                 start=first.isoformat())  # fmt: skip
    (new,) = sorted(src.rglob("*.jsonl*"))
    target = into / new.name
    shutil.copyfile(new, target)
    return target


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and a == a and b == b else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data = ROOT / "bench" / "data" / f"ingest-{args.events}"
    files = make_data(data, args.events, args.days)
    logdir = data / files[0].relative_to(data).parts[0]
    total_bytes = sum(p.stat().st_size for p in files)
    events = json.loads((data / "truth.json").read_text())["events"]
    print(f"{len(files)} files, {total_bytes / 2**20:.0f} MiB on disk, {events} events", flush=True)
    work = Path(tempfile.mkdtemp(prefix="dslogs-bench-"))
    n = args.repeat

    def env_with(cache_home: Path) -> dict:
        return {**os.environ, "XDG_CACHE_HOME": str(cache_home)}

    def cold(cmd: list[str]) -> dict:
        runs = []
        for i in range(n):
            home = work / f"cold-{time.monotonic_ns()}-{i}"
            runs.append(probe(cmd, env_with(home)))
            shutil.rmtree(home, ignore_errors=True)
        return best(runs)

    query = [*DSLOGS, "query", str(logdir), "SELECT count(*), avg(ttft_ms), quantile_cont(e2e_ms, 0.95) FROM requests"]
    res: dict[str, dict] = {}
    res["bare"] = best([probe([PY, "-c", BARE, *map(str, files)]) for _ in range(n)])
    res["cold_query"] = cold(query)
    res["cold_query_no_cache"] = best([probe([*query, "--no-cache"]) for _ in range(n)])
    res["cold_analyze"] = cold([*DSLOGS, "analyze", str(logdir), "--format", "json"])

    # Warm: a cache that has seen the files (and a second run that stored requests/sessions).
    # The append test works on a copy of the folder, so the data set stays as simulated.
    warm_logs = work / "logs"
    shutil.copytree(logdir, warm_logs)
    home = work / "warm"
    warm_query = [*DSLOGS, "query", str(warm_logs), query[-1]]
    probe(warm_query, env_with(home))
    probe(warm_query, env_with(home))
    res["warm_query"] = best([probe(warm_query, env_with(home)) for _ in range(n)])
    res["warm_analyze"] = best([probe([*DSLOGS, "analyze", str(warm_logs), "--format", "json"], env_with(home)) for _ in range(n)])

    # Session drill-down against jq over the same files.
    import duckdb

    sid = duckdb.sql(
        "SELECT session_id FROM read_json($f, columns={session_id: 'VARCHAR', stage: 'VARCHAR'}, "
        "format='newline_delimited') WHERE stage = 'input' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
        params={"f": [str(p) for p in files]},
    ).fetchall()[0][0]  # fmt: skip
    session = [*DSLOGS, "session", str(warm_logs), sid, "--format", "jsonl"]
    res["session_warm"] = best([probe(session, env_with(home)) for _ in range(n)])
    res["session_no_cache"] = best([probe([*session, "--no-cache"]) for _ in range(n)])
    jq = f"zcat -f {' '.join(str(p) for p in files)} | jq -c 'select(.session_id == \"{sid}\")'"
    res["jq"] = best([probe(jq) for _ in range(max(1, n - 1))]) if shutil.which("jq") else best([{"rc": 1, "err": "no jq"}])

    # One new day appended to the warm cache: only that file is read.
    new = extra_day(data, args.events, args.days, warm_logs)
    res["append"] = probe(warm_query, env_with(home))
    new_share = new.stat().st_size / (total_bytes + new.stat().st_size)
    with open(new, "rb") as fh:
        new_events = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    event_share = new_events / (events + new_events)
    shutil.rmtree(work, ignore_errors=True)

    bare = res["bare"]
    print()
    print(f"{'run':22} {'wall s':>8} {'cpu s':>8} {'peak RSS':>9} {'wall/bare':>10} {'cpu/bare':>9}")
    for name, r in res.items():
        if r.get("rc") != 0:
            print(f"{name:22} {'n/a':>8}   ({(r.get('err') or '').strip().splitlines()[-1:] or ''})")
            continue
        print(f"{name:22} {r['wall']:8.2f} {r['cpu']:8.2f} {r['rss_mb']:7.0f} MB {ratio(r['wall'], bare['wall']):>10} "
              f"{ratio(r['cpu'], bare['cpu']):>9}")  # fmt: skip
    cold_q, warm_q, app = res["cold_query"], res["warm_query"], res["append"]
    extra = (app["wall"] - warm_q["wall"]) / max(cold_q["wall"] - warm_q["wall"], 1e-9)
    print()
    print(f"cold query / bare:      {ratio(cold_q['wall'], bare['wall'])} wall, {ratio(cold_q['cpu'], bare['cpu'])} cpu   (target <= 2.0x)")
    print(f"cold analyze / bare:    {ratio(res['cold_analyze']['wall'], bare['wall'])} wall, "
          f"{ratio(res['cold_analyze']['cpu'], bare['cpu'])} cpu   (target <= 2.0x)")  # fmt: skip
    print(f"warm query / bare:      {ratio(warm_q['wall'], bare['wall'])} wall, {ratio(warm_q['cpu'], bare['cpu'])} cpu   (target <= 0.5x)")
    print(f"append: extra time {extra:.2f} of a cold read, for a file holding {event_share:.2f} of the events "
          f"({new_share:.2f} of the bytes on disk: it is not gzipped)")  # fmt: skip
    print(f"jq / session (warm):    {ratio(res['jq']['wall'], res['session_warm']['wall'])}   (target >= 10x)")
    print(f"jq / session (no cache): {ratio(res['jq']['wall'], res['session_no_cache']['wall'])}")
    peak = max(r["rss_mb"] for k, r in res.items() if r.get("rc") == 0 and k not in ("jq",))
    print(f"peak RSS of dslogs:     {peak:.0f} MB   (target <= 1536 MB)")
    out = data / "results.json"
    out.write_text(json.dumps({"files": len(files), "bytes": total_bytes, "events": events, "runs": res,
                               "append_extra_share": extra, "append_bytes_share": new_share,
                               "append_events_share": event_share}, indent=1))  # fmt: skip
    print(f"(results in {out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
