"""Slow-path benchmark: what one damaged line costs, before vs after.

    .venv/bin/python bench/damaged_ingest.py [--lines 210000] [--before REV] [--repeat 2]

One file of --lines v1 events (synthetic, written under bench/data/, git-ignored), read three
ways with `dslogs query ... --no-cache` as a child process: clean; with one `ts` that Python's
fromisoformat reads but DuckDB does not (`2026-W48-1`, the issue's case); with 25 such lines.
Each is timed for this checkout ("after") and for --before (default: the commit before the
hardening branch, extracted with `git archive`), and checked for the events it keeps and the
bad lines it names. Figures are CPU seconds (user + sys of the child: steadier than wall time on
a shared box), best of --repeat; ratios are against the clean read of the same code.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.trees import before_tree, timed  # noqa: E402

SQL = "SELECT count(*) AS events FROM events"


def write_logs(folder: Path, lines: int, bad_every: int | None) -> tuple[Path, set[int]]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ds15b_20261123.jsonl"
    bad: set[int] = set()
    if bad_every:
        bad = {lines // 2} if bad_every == 1 else set(range(lines // (bad_every + 1), lines, lines // (bad_every + 1)))
        bad = set(sorted(bad)[:bad_every])
    with open(path, "w", encoding="utf-8") as out:
        for k in range(1, lines + 1):
            sec = k % 86400
            ts = "2026-W48-1" if k in bad else f"2026-11-23T{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}.{k % 1000:03d}+00:00"
            obj = {"v": 1, "ts": ts, "stage": ("prefill", "decode", "gpu_sample")[k % 3], "session_id": f"s{k % 500}",
                   "request_id": f"r{k // 3}", "host": "gpu-01", "pid": 4242, "duration_ms": float(k % 900),
                   "gpu_util_pct": float(k % 100)}
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    return folder, bad


def run(code: Path, logs: Path) -> tuple[float, float, dict]:
    wall, cpu, out = timed([sys.executable, "-c", (
        "import json,sys; from dslogs.analyzer.ingest.logs import open_logs, run_query\n"
        f"db = open_logs([{str(logs)!r}], use_cache=False)\n"
        "print(json.dumps({'events': db.ingest['events'], 'bad_lines': db.ingest['bad_lines'],"
        " 'lines': [s['line'] for s in db.ingest['bad_line_samples']],"
        " 'reasons': sorted({s['reason'].split(':')[0] for s in db.ingest['bad_line_samples']})}))")], code)
    return wall, cpu, json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=210_000)
    ap.add_argument("--before", default=None, help="git revision for 'before' (default: merge-base with main)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    data = ROOT / "bench" / "data" / f"damaged-{args.lines}"
    cases = {"clean": 0, "1 bad ts": 1, "25 bad ts": 25}
    folders = {name: write_logs(data / name.replace(" ", "_"), args.lines, n) for name, n in cases.items()}
    with tempfile.TemporaryDirectory(prefix="dslogs-before-") as tmp:
        rev, before = before_tree(args.before, Path(tmp))
        codes = {"before": before, "after": ROOT}
        results: dict[tuple[str, str], tuple[float, float, dict]] = {}
        for name, (folder, _bad) in folders.items():
            for label, code in codes.items():
                best = None
                for _ in range(args.repeat):
                    got = run(code, folder)
                    best = got if best is None or got[1] < best[1] else best
                results[(name, label)] = best
    print(f"{args.lines:,} lines; before = {rev[:10]}, after = this checkout; CPU s (wall s), best of {args.repeat}")
    print(f"{'case':10} {'before':>16} {'after':>16} {'after/before':>13} {'before/clean':>13} {'after/clean':>12}   kept / named bad (before | after)")
    for name, (_folder, bad) in folders.items():
        b, a = results[(name, "before")], results[(name, "after")]
        cb, ca = results[("clean", "before")], results[("clean", "after")]
        want = args.lines - len(bad)
        print(f"{name:10} {b[1]:7.2f} ({b[0]:5.2f}) {a[1]:7.2f} ({a[0]:5.2f}) {a[1] / b[1]:12.2f}x {b[1] / cb[1]:12.2f}x {a[1] / ca[1]:11.2f}x"
              f"   want {want:,} / {len(bad)}: {b[2]['events']:,} / {b[2]['bad_lines']} | {a[2]['events']:,} / {a[2]['bad_lines']}")
        if a[2]["events"] != want or a[2]["bad_lines"] != len(bad):
            print(f"  AFTER WRONG: {a[2]}")


if __name__ == "__main__":
    main()
