"""Engines benchmark: DuckDB and Spark (local) on the same simulated fleet logs.

    .venv/bin/python bench/engines.py [--events 1500000] [--hosts 8] [--master 'local[*]']
                                      [--json bench/data/engines.json]

Spark runs the same DuckDB analysis per group of hosts, one task per group reading its own files,
and merges (analyzer/engines/merge.py), so its per-core rate is DuckDB's plus Spark's overhead; the last
lines print the ratio. Spark reads at first use, so its "read s" is ~0 and "metrics s" holds the
read as well: compare the totals.

Data (bench/data/engines-<events>-<hosts>/, git-ignored, made once): a simulated fleet of
--hosts hosts, one day, rotated and gzipped files as the collector leaves them, plus its
`dslogs compact` Parquet. Each engine runs the whole analysis the report needs: read and
normalise the logs (views events/requests/sessions), then every metric query
(metrics.METRIC_QUERIES). Figures per engine and source:

- wall: seconds, read and metrics; events/s = events / wall;
- CPU: seconds of CPU used (DuckDB: this process; Spark: this process plus the JVM), and
  events per CPU-second: the per-core rate docs/scale.md sizes a cluster from (wall on a shared
  2-core machine is noisy; CPU time is the steadier figure);
- the JVM start is reported apart (a cluster pays it once per job, not per GB); each figure is
  the best of --repeat runs (Spark's first run also JIT-compiles its generated code).

Also printed, for docs/scale.md: events per request, bytes per event (JSONL as written, gzip,
Parquet), measured on the simulated data.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu_self() -> float:
    t = os.times()
    return t.user + t.system


def _cpu_jvm(spark) -> float:
    import psutil

    pid = spark.sparkContext._gateway.proc.pid
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with _quiet():
            t = p.cpu_times()
            # Python workers forked and reaped by the daemon count in its children_* fields.
            total += t.user + t.system + t.children_user + t.children_system
    return total


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        import psutil

        return exc_type is not None and issubclass(exc_type, psutil.Error)


def make_data(root: Path, events: int, hosts: int) -> tuple[Path, Path]:
    from dslogs.analyzer.ingest.compact import compact_logs
    from dslogs.analyzer.simulate import simulate

    logs, parquet = root / "logs", root / "parquet"
    if not (root / "done").exists():
        root.mkdir(parents=True, exist_ok=True)
        print(f"simulating {events} events on {hosts} hosts into {logs} ...", flush=True)
        simulate(logs, scenarios=["memory_leak", "oom", "low_gpu_util"], seed=7, hosts=hosts, events=events)
        t = time.perf_counter()
        summary = compact_logs([str(logs)], parquet)
        (root / "compact.json").write_text(json.dumps({**summary, "wall_s": time.perf_counter() - t}))
        (root / "done").write_text("ok\n")
    return logs, parquet


def data_shape(logs: Path, parquet: Path, db) -> dict:
    """Events per request and bytes per event, from the simulated files."""
    from dslogs.analyzer.ingest.logs import run_query

    raw = gz = 0
    for f in sorted(logs.rglob("*.jsonl*")):
        if f.name.endswith(".gz"):
            gz += f.stat().st_size
            with gzip.open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    raw += len(chunk)
        else:
            size = f.stat().st_size
            raw += size
            gz += len(gzip.compress(f.read_bytes(), compresslevel=6))
    pq = sum(f.stat().st_size for f in parquet.rglob("*.parquet"))
    events = db.ingest["events"]
    requests = run_query(db, "SELECT count(*) FROM requests").rows[0][0]
    per_stage = run_query(
        db, "SELECT count(*) FILTER (WHERE session_id IS NOT NULL), count(*) FILTER (WHERE session_id IS NULL) FROM events"
    ).rows[0]
    span = run_query(db, "SELECT epoch(max(ts)) - epoch(min(ts)) FROM events").rows[0][0]
    hosts = run_query(db, "SELECT count(DISTINCT host) FROM events").rows[0][0]
    return {
        "events": events,
        "requests": requests,
        "events_per_request": per_stage[0] / requests if requests else None,
        "sampler_events_per_host_hour": per_stage[1] / hosts / (span / 3600) if span else None,
        "requests_per_host_s": requests / hosts / span if span else None,
        "bytes_per_event_jsonl": raw / events,
        "bytes_per_event_gzip": gz / events,
        "bytes_per_event_parquet": pq / events,
        "hosts": hosts,
        "span_h": span / 3600,
    }


def bench_duckdb(source: Path) -> dict:
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.engines.compute import compute_metrics
    from dslogs.analyzer.ingest.logs import open_logs

    c0, t0 = _cpu_self(), time.perf_counter()
    db = open_logs([str(source)], use_cache=False)
    t1 = time.perf_counter()
    metrics = compute_metrics(db.con, defaults())
    c2, t2 = _cpu_self(), time.perf_counter()
    return {"db": db, "events": db.ingest["events"], "read_s": t1 - t0, "metrics_s": t2 - t1,
            "cpu_s": c2 - c0, "tables": len(metrics)}  # fmt: skip


def bench_spark(source: Path, master: str) -> dict:
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.engines.compute import compute_metrics
    from dslogs.analyzer.engines.spark.driver import open_spark
    from dslogs.analyzer.engines.spark.session import get_spark

    spark = get_spark(master)
    c0, j0, t0 = _cpu_self(), _cpu_jvm(spark), time.perf_counter()
    logs = open_spark([str(source)], master=master)
    t1 = time.perf_counter()
    metrics = compute_metrics(logs, defaults())
    c2, j2, t2 = _cpu_self(), _cpu_jvm(spark), time.perf_counter()
    events = logs.ingest["events"]
    logs.close()
    return {"events": events, "read_s": t1 - t0, "metrics_s": t2 - t1, "cpu_s": (c2 - c0) + (j2 - j0),
            "tables": len(metrics)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--repeat", type=int, default=2, help="runs per engine and source; the best is shown")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = ap.parse_args()

    root = ROOT / "bench" / "data" / f"engines-{args.events}-{args.hosts}"
    logs, parquet = make_data(root, args.events, args.hosts)
    compact = json.loads((root / "compact.json").read_text())
    results: dict[str, dict] = {}
    shape = None
    for label, source in (("duckdb jsonl", logs), ("duckdb parquet", parquet)):
        print(f"running {label} ...", flush=True)
        runs = []
        for _ in range(args.repeat):
            r = bench_duckdb(source)
            if shape is None:
                shape = data_shape(logs, parquet, r["db"])
            r.pop("db").close()
            runs.append(r)
        results[label] = min(runs, key=lambda r: r["read_s"] + r["metrics_s"])

    from dslogs.analyzer.engines.spark.session import get_spark

    t = time.perf_counter()
    spark = get_spark(args.master)
    jvm_start = time.perf_counter() - t
    cores = spark.sparkContext.defaultParallelism
    for label, source in (("spark jsonl", logs), ("spark parquet", parquet)):
        print(f"running {label} ({args.master}, {cores} cores) ...", flush=True)
        # The first run also warms the JVM (JIT of the generated code): the best run is what a
        # long job sees per GB.
        runs = [bench_spark(source, args.master) for _ in range(args.repeat)]
        results[label] = min(runs, key=lambda r: r["read_s"] + r["metrics_s"])

    print()
    print(f"data: {shape['events']} events, {shape['requests']} requests, {shape['hosts']} hosts, "
          f"{shape['span_h']:.1f} h; {os.cpu_count()} CPUs here, Spark {args.master} = {cores} cores; "
          f"JVM start {jvm_start:.1f} s")  # fmt: skip
    print(f"compact (DuckDB, {compact['new_files']} files): {compact['wall_s']:.1f} s, "
          f"{shape['events'] / compact['wall_s']:,.0f} events/s")  # fmt: skip
    header = f"{'engine':16} {'events':>10} {'read s':>8} {'metrics s':>10} {'wall s':>8} {'events/s':>11} {'CPU s':>8} {'events/CPU-s':>13}"
    print(header)
    print("-" * len(header))
    for label, r in results.items():
        wall = r["read_s"] + r["metrics_s"]
        r["wall_s"] = wall
        r["events_per_s"] = r["events"] / wall
        r["events_per_cpu_s"] = r["events"] / r["cpu_s"] if r["cpu_s"] else None
        print(f"{label:16} {r['events']:>10} {r['read_s']:>8.1f} {r['metrics_s']:>10.1f} {wall:>8.1f} "
              f"{r['events_per_s']:>11,.0f} {r['cpu_s']:>8.1f} {r['events_per_cpu_s']:>13,.0f}")  # fmt: skip
    for source in ("jsonl", "parquet"):
        duck, spk = results[f"duckdb {source}"], results[f"spark {source}"]
        if duck["events_per_cpu_s"] and spk["events_per_cpu_s"]:
            print(f"per-core rate {source}: DuckDB / Spark = {duck['events_per_cpu_s'] / spk['events_per_cpu_s']:.2f}x "
                  f"(target: within 2x)")  # fmt: skip
    for k in ("events_per_request", "sampler_events_per_host_hour", "bytes_per_event_jsonl",
              "bytes_per_event_gzip", "bytes_per_event_parquet"):  # fmt: skip
        print(f"{k}: {shape[k]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"shape": shape, "compact": compact, "jvm_start_s": jvm_start,
                                         "master": args.master, "cores": cores, "results": results}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
