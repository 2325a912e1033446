"""The rules' and the model's Python cost on a real window's metric tables, side by side.

    .venv/bin/python bench/rules_cost.py [--data bench/data/ingest-5000000]
        [--since 2026-11-23T13:00:00+00:00] [--base /work/main] [--repeat 5] [--lazy-rows N]
    .venv/bin/python bench/rules_cost.py --fleet 150 --since '' [--base ...]

Each tree (this one, and --base's) runs in a child process with its own code: it opens the data
set's logs with the window (through the result cache's XDG_CACHE_HOME, so a filled cache makes
this quick), computes the metric tables once, then times, best of --repeat, CPU seconds
(process time) of:

- ``memory_leak_verdicts(metrics, thresholds)``;
- ``evaluate_rules(metrics, ingest, thresholds, leak)``;
- ``build_report_from_metrics`` (both of the above, the checklist and the rest of the model);

and the peak of Python memory allocated during one ``memory_leak_verdicts`` and one
``build_report_from_metrics`` (tracemalloc, a separate run: it slows what it traces), and a
digest of the model (less ``generated_at``): the same digest on both sides = the same model.
``--lazy-rows N``: the per-session tables of more than N rows stay in DuckDB (rows.LazyRows), as
at 20 M events (436 k sessions > metrics.LAZY_ROWS); default: the engine's own limit.
``--fleet N``: instead of --data, N hosts each serving sample_logs/concurrent_leak (ids suffixed
per host, written once under bench/data/fleet-N): many sessions judged by their memory steps, the
case where memory attribution's per-session passes must stay linear (150 hosts: 5,400 sessions,
44,100 request rows; a pass that rescanned every request per session took 124 s there).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys, time, tracemalloc
from dslogs.analyzer.model import report
from dslogs.analyzer import rules
from dslogs.analyzer.rules.attribution import memory_leak_verdicts
from dslogs.analyzer.engines.duckdb import DuckDBSource
from dslogs.analyzer.engines.compute import compute_metrics
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.core.thresholds import defaults

paths, since, repeat, lazy = json.loads(sys.argv[1])
db = open_logs(paths, since=since)
source = DuckDBSource(db.con, db.ingest, db.window, db=db, lazy_rows=lazy) if lazy else DuckDBSource.of(db)
t = defaults()
metrics = compute_metrics(source, t)
sessions = len(metrics.get("session_summary", []))


def cpu(fn):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def peak(fn):
    tracemalloc.start()
    fn()
    p = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return p / 2**20


leak = memory_leak_verdicts(metrics, t)
out = {
    "sessions": sessions,
    "verdicts_s": cpu(lambda: memory_leak_verdicts(metrics, t)),
    "rules_s": cpu(lambda: rules.evaluate_rules(metrics, source.ingest, t, leak)),
    "model_s": cpu(lambda: report.build_report_from_metrics(metrics, source.ingest, source.window, t)),
    "verdicts_peak_mb": peak(lambda: memory_leak_verdicts(metrics, t)),
    "model_peak_mb": peak(lambda: report.build_report_from_metrics(metrics, source.ingest, source.window, t)),
}
model = report.build_report_from_metrics(metrics, source.ingest, source.window, t)
model.pop("generated_at")
model.pop("ingest")  # the cache's own counters (files read, time) are not the rules'
text = report.report_to_json(model)
out["digest"] = hashlib.sha256(text.encode()).hexdigest()[:16]
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(text)
print(json.dumps(out))
"""


def child(tree: Path, paths: list[str], since: str | None, repeat: int, lazy: int | None, cache: str,
          dump: str | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([paths, since, repeat, lazy]), *([dump] if dump else [])],
                         capture_output=True, text=True, env=env, cwd=tree, check=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def fleet(n: int) -> Path:
    """N copies of the concurrent_leak sample, one host each, its sessions and requests its own."""
    out = ROOT / "bench" / "data" / f"fleet-{n}"
    if (out / "done").exists():
        return out
    src = next((ROOT / "sample_logs" / "concurrent_leak").rglob("*.jsonl.gz"))
    lines = gzip.open(src, "rt", encoding="utf-8").read().splitlines()
    host = json.loads(lines[0])["host"]
    ids = re.compile(r'"(session_id|request_id)":"([^"]+)"')
    for i in range(1, n + 1):
        d = out / f"{host}-{i}"
        d.mkdir(parents=True, exist_ok=True)
        text = "\n".join(ids.sub(lambda m, i=i: f'"{m[1]}":"{m[2]}-{i}"', ln.replace(host, f"{host}-{i}"))
                         for ln in lines)
        (d / src.name.removesuffix(".gz")).write_text(text + "\n", encoding="utf-8")
    (out / "done").touch()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "ingest-5000000")
    ap.add_argument("--fleet", type=int, help="N hosts of sample_logs/concurrent_leak instead of --data")
    ap.add_argument("--since", default="2026-11-23T13:00:00+00:00", help="'' for no window")
    ap.add_argument("--base", type=Path, help="another source tree (before), run interleaved with this one")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="child runs per tree, interleaved")
    ap.add_argument("--lazy-rows", type=int, default=None)
    ap.add_argument("--dump", help="write each tree's model (JSON, less generated_at and ingest) to DUMP.<tree>.json")
    ap.add_argument("--cache", default=os.environ.get("XDG_CACHE_HOME") or "/tmp/xdg-rules-cost")
    a = ap.parse_args()
    if a.fleet:
        a.data = fleet(a.fleet)
    a.since = a.since or None
    paths = sorted(str(p) for p in a.data.iterdir() if p.is_dir()) or [str(a.data)]
    trees = {"this": ROOT, **({"base": a.base.resolve()} if a.base else {})}
    got: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(a.rounds):
        for name, tree in trees.items():
            got[name].append(child(tree, paths, a.since, a.repeat, a.lazy_rows, a.cache,
                                   f"{a.dump}.{name}.json" if a.dump else None))
    keys = ("verdicts_s", "rules_s", "model_s", "verdicts_peak_mb", "model_peak_mb")
    best = {n: {k: min(r[k] for r in runs) for k in keys} | {"digest": {r["digest"] for r in runs},
                                                               "sessions": runs[0]["sessions"]}
            for n, runs in got.items()}  # fmt: skip
    print(f"{a.data.name} --since {a.since}: {best['this']['sessions']} sessions"
          + (f", lazy rows past {a.lazy_rows}" if a.lazy_rows else ""))
    print(f"{'':24}" + "".join(f"{n:>12}" for n in trees) + ("       ratio" if a.base else ""))
    for k in keys:
        row = f"{k:24}" + "".join(f"{best[n][k]:12.3f}" for n in trees)
        if a.base:
            row += f"{best['this'][k] / best['base'][k]:11.2f}x" if best["base"][k] else "        n/a"
        print(row)
    for n in trees:
        print(f"model digest {n}: {', '.join(sorted(best[n]['digest']))}")
    if a.base:
        print("same model" if best["this"]["digest"] == best["base"]["digest"] else "MODELS DIFFER")


if __name__ == "__main__":
    main()
