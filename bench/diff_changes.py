"""How well `dslogs diff` tells real changes from noise and from a pure mix shift.

For each simulated change (analyzer/simulate/changes.py) and a run without one, over several
seeds: simulate two days with the change at midnight, diff day 1 against day 2, and compare
what diff reports with truth.json's `expect` (regressed metrics, new findings, mix shifts,
changed parameters). Prints one row per change: runs, found as expected, false regressions.

    PYTHONPATH=. .venv/bin/python bench/diff_changes.py --seeds 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from dslogs.analyzer.simulate import simulate
from dslogs.analyzer.simulate.changes import CHANGES
from dslogs.analyzer.usecases.diff import build_diff


def check(d: dict, expect: dict) -> tuple[bool, list[str]]:
    regressed = {r["label"] for r in d["stages"] + d["request_metrics"] if r["verdict"] == "regression"}
    new = {f["rule"] for f in d["findings"]["new"]}
    shifted = {r["metric"] for r in d["mix"]["rows"] if r["shifted"]}
    params = {k for k, v in d["mix"]["params"].items() if v["changed"]}
    ok = (regressed == set(expect["regressions"]) and set(expect["new_findings"]) <= new
          and set(expect["mix_shift"]) <= shifted and params == set(expect["params"]))  # fmt: skip
    false = sorted(regressed - set(expect["regressions"]))
    return ok, false


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    none = {"regressions": [], "new_findings": [], "mix_shift": [], "params": []}
    print(f"{'change':16} {'runs':>4} {'as expected':>11} {'false regressions':>18}  seconds/run")
    with tempfile.TemporaryDirectory() as tmp:
        for name in [*CHANGES, None]:
            ok_runs, false_runs, seconds = 0, [], 0.0
            for seed in range(args.seeds):
                folder = Path(tmp) / f"{name}-{seed}"
                t0 = time.perf_counter()
                simulate(folder, days=2, seed=100 + seed, start="2026-11-23", change=name)
                expect = json.loads((folder / "truth.json").read_text()).get("change", {}).get("expect", none)
                d = build_diff(logs=[str(folder)], before_range="2026-11-23..2026-11-24",
                               after_range="2026-11-24..", tz="UTC", use_cache=False)  # fmt: skip
                seconds += time.perf_counter() - t0
                ok, false = check(d, expect)
                ok_runs += ok
                if false:
                    false_runs.append(f"seed {100 + seed}: {', '.join(false)}")
                shutil.rmtree(folder)
            print(f"{name or '(no change)':16} {args.seeds:>4} {ok_runs:>11} {len(false_runs):>18}  "
                  f"{seconds / args.seeds:.1f}", flush=True)  # fmt: skip
            for line in false_runs:
                print(f"    {line}")


if __name__ == "__main__":
    main()
