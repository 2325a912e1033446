"""Host-RAM attribution under concurrency, measured over many runs of the real Gradio app.

    python bench/host_ram_e2e.py --runs 10                      # leak: 4 sessions keep 40 MiB/request from turn 3
    python bench/host_ram_e2e.py --runs 10 --scenario transient # 8 sessions hold 200 MiB while generating, keep nothing
    python bench/host_ram_e2e.py --runs 10 --scenario overlap   # 4 leakers at the same time among 56 healthy sessions
    python bench/host_ram_e2e.py --runs 6 --scenario gpu_overlap  # the same on the (fake) GPU: 512 MiB/turn, 16 healthy
    python bench/host_ram_e2e.py --keep-logs /tmp/hr --runs 10  # keep each run's logs ...
    python bench/host_ram_e2e.py --reanalyze /tmp/hr            # ... and judge them again (after an analyzer change)
    python bench/host_ram_e2e.py --runs 10 --free-mb 300       # the process frees 300 MiB held from before, mid-run

Each run serves tests/e2e/apps/gradio_chat.py (4 concurrent handlers per endpoint, 16 client
threads, the tiny R1-shaped model on CPU; tests/e2e/host_memory.py), runs ``dslogs analyze`` (the
real CLI) and prints one row: leaking sessions named of 4, what each was credited per request
(MiB; the planted keep beside it), innocent sessions named, the process-scoped findings of the
leak's rule (rss_growth; memory_leak for gpu_overlap). Exit 1 when a run missed a leaking session,
credited one beyond 25 % of its keep or named an innocent one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("GRADIO_PROFILING", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCENARIOS = {"leak": 6, "transient": 4, "overlap": 4, "gpu_overlap": 4}  # scenario -> turns per session


def analyze(log_dir: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "dslogs", "analyze", str(log_dir), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"dslogs analyze {log_dir}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def row(run: str, report: dict, meta: dict) -> tuple[str, bool]:
    from tests.e2e.apps.faults import FAULTS
    from tests.e2e.host_memory import judged

    j = judged(report, meta["key_of"], meta["plan"])
    keep = {k: FAULTS[meta["plan"][k]].host_leak_mb or FAULTS[meta["plan"][k]].gpu_leak_mb for k in j["leaking"]}
    credited = {k: j["credited"].get(k) for k in sorted(j["leaking"])}
    close = sum(c is not None and abs(c - keep[k]) <= 0.25 * keep[k] for k, c in credited.items())
    ok = close == len(j["leaking"]) and not j["innocent"]
    proc = "; ".join(f["message"] for f in j["process"]) or "-"
    shown = ", ".join("-" if c is None else f"{c:.1f}" for c in credited.values())
    line = (f"| {run} | {len(j['found'])} of {len(j['leaking'])} | {shown} (of {'/'.join(sorted({str(v) for v in keep.values()}))})"
            f" | {close} of {len(j['leaking'])} | {len(j['innocent'])}"
            f"{' (' + ', '.join(sorted(j['innocent'])) + ')' if j['innocent'] else ''} | {proc} |")
    return line, ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="leak")
    ap.add_argument("--keep-logs", help="write each run's logs under this folder")
    ap.add_argument("--reanalyze", help="judge the runs kept under this folder again, serving nothing")
    ap.add_argument("--free-mb", type=int, default=0,
                    help="memory the process holds from before the run and frees at a random moment of it (as a "
                         "garbage collection of an earlier app's objects does): a drop of RSS no request caused")
    args = ap.parse_args(argv)
    print("| run | leaking named | credited MiB per request | within 25 % | innocent named | process finding |\n"
          "|---|---|---|---|---|---|", flush=True)
    bad = 0
    if args.reanalyze:
        for d in sorted(p for p in Path(args.reanalyze).iterdir() if (p / "meta.json").exists()):
            line, ok = row(d.name, analyze(d / "logs"), json.loads((d / "meta.json").read_text()))
            bad += not ok
            print(line, flush=True)
        return 1 if bad else 0
    import torch

    from tests.e2e.apps import tiny_r1
    from tests.e2e.host_memory import (
        GPU_OVERLAP_PLAN,
        GPU_PER_LANE,
        LANES,
        LEAK_PLAN,
        OVERLAP_PLAN,
        PER_LANE,
        TRANSIENT_PLAN,
        serve_and_drive,
    )

    torch.set_num_threads(1)
    model, tokenizer = tiny_r1.load_model(), tiny_r1.load_tokenizer()
    plan = {"leak": LEAK_PLAN, "transient": TRANSIENT_PLAN, "overlap": OVERLAP_PLAN,
            "gpu_overlap": GPU_OVERLAP_PLAN}[args.scenario]
    per_lane = {"overlap": PER_LANE, "gpu_overlap": GPU_PER_LANE}.get(args.scenario)
    shape = {"sessions": LANES * per_lane, "lanes": LANES} if per_lane else {}
    root = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="host_ram_e2e."))
    try:
        for i in range(args.runs):
            d = root / f"{args.scenario}{i:02d}"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            if args.free_mb:
                held = [b"\x03" * (args.free_mb * 1024 * 1024)]
                at = random.Random(i).uniform(1.0, 9.0)  # a drive takes 10-12 s
                threading.Timer(at, held.clear).start()
            served = serve_and_drive(d / "logs", plan, model, tokenizer, turns=SCENARIOS[args.scenario], **shape)
            meta = {"plan": plan, "key_of": served["key_of"], "errors": served["errors"], "drive_s": served["drive_s"]}
            (d / "meta.json").write_text(json.dumps(meta))
            line, ok = row(f"{i + 1}", analyze(d / "logs"), meta)
            bad += not ok or bool(served["errors"])
            print(line + (f" errors {served['errors']}" if served["errors"] else ""), flush=True)
    finally:
        if not args.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
