"""What if, against the real Gradio app: calibrate the service model on one run, predict runs at
other concurrency limits and user counts, run them, compare (docs/capacity.md, "What if").

The app is bench/capacity_sweep.py's: tests/e2e/apps/gradio_chat.py in its own process, behind
``concurrency_limit``, on a random TinyR1 sized so that generate is real work (hidden 768, 4
layers, one torch thread per generate on CPU). The users are closed loop: each is one
gradio_client session sending a prompt, waiting for the reply, thinking, and sending the next.
No public conversation trace is available offline here, so the request sizes are drawn (seeded)
from a log-normal prompt length (median 12 words, sigma 0.8, at most 120 words: the shape of
chat prompts in public traces, short with a long tail) and the think time from an exponential
of mean ``--think-ms``; the tiny model answers every prompt with the same 16 tokens.

Each run lasts a fixed time (users stop sending at its end). Measured per cell, from the run's
own logs (what the service saw), over the requests that ended between 5 s after the start and
the end: e2e p95 (queue wait included), and output tokens per second of that window.

    python bench/whatif_proof.py                          # calibrate at 4 x 4 (90 s), seven 45 s cells
    python bench/whatif_proof.py --calibrate 3,6 --cells 1,3 2,6 4,8 6,6 3,12 8,10 --seconds 60

Prints the table (predicted / measured / error per cell) in Markdown; --json writes it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("GRADIO_PROFILING", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HIDDEN, LAYERS = 768, 4
WARM_S = 5.0  # seconds of each run left out of the measured window: the users fall into step
WORDS = "what how why when where which model token memory cache batch queue answer reason".split()


def prompt(rng: random.Random) -> str:
    n = min(120, max(1, round(math.exp(rng.gauss(math.log(12), 0.8)))))
    return " ".join(rng.choice(WORDS) for _ in range(n))


def run_cell(log_dir: Path, limit: int, users: int, seconds: float, think_ms: float, seed: int = 0) -> dict:
    """``users`` closed-loop users against the app at ``limit`` for ``seconds``: after that no user
    sends again. The measured window ends there, so the tail (the last replies, fewer users) is
    not in it; its start leaves WARM_S for the users to fall into step."""
    from bench.capacity_sweep import gradio_clients, serve_in_subprocess

    url, close = serve_in_subprocess(log_dir, "cpu", limit, HIDDEN, LAYERS)
    errors: list[str] = []
    try:
        new_client = gradio_clients(url, 300.0)
        clients = [new_client() for _ in range(users)]
        gate = threading.Barrier(users + 1, timeout=300)
        deadline = [0.0]

        def user(i: int) -> None:
            rng = random.Random(f"{seed}:{limit}:{users}:{i}")
            gate.wait()
            time.sleep(rng.expovariate(1 / think_ms) / 1000 if think_ms > 0 else 0)
            while time.time() < deadline[0]:
                try:
                    clients[i][0](prompt(rng))
                except Exception as e:  # noqa: BLE001 - counted, the run goes on
                    errors.append(repr(e))
                if think_ms > 0:
                    time.sleep(rng.expovariate(1 / think_ms) / 1000)

        threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
        for t in threads:
            t.start()
        t0 = time.time()
        deadline[0] = t0 + seconds
        gate.wait()
        for t in threads:
            t.join()
        for _, c in clients:
            c()
    finally:
        close()
    return {"limit": limit, "users": users, "start": t0 + WARM_S, "end": t0 + seconds, "errors": len(errors)}


def thresholds():
    """Default thresholds with the sparse-level cut sized to a short run (10 requests a level)."""
    from dslogs.analyzer.core.thresholds import defaults

    t = defaults()
    t["concurrency_cliff"].update(min_level_requests=10, min_requests=100)
    return t


def measured(log_dir: Path, run: dict) -> dict:
    """The run's e2e p95 and output tokens/s from its logs, over the requests that ended in the
    measured window (after the warm-up, before the users stopped)."""
    from dslogs.analyzer.ingest.logs import open_logs

    logs = open_logs([str(log_dir)], use_cache=False)
    try:
        e2e, tokens, n = logs.con.execute(
            "SELECT quantile_cont(e2e_ms, 0.95), sum(output_len), count(*) FROM requests "
            "WHERE epoch_us(end_ts) BETWEEN $a AND $b",
            {"a": int(run["start"] * 1e6), "b": int(run["end"] * 1e6)}).fetchone()
    finally:
        logs.close()
    span = run["end"] - run["start"]
    return {"e2e_p95_ms": e2e, "tokens_per_s": (tokens or 0) / span, "requests": n}


def calibrate(log_dir: Path, cells: list[tuple[int, int]]) -> dict:
    """The capacity model of the calibration logs with ``cells`` simulated."""
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.usecases.analyze import build_capacity

    model = build_capacity(open_logs([str(log_dir)], use_cache=False), thresholds(),
                           {"limits": sorted({c[0] for c in cells}), "users": sorted({c[1] for c in cells})})
    cap = max(model["capacity"], key=lambda c: c.get("requests") or 0)
    if (cap.get("service") or {}).get("needs") or not cap.get("service"):
        raise ValueError(f"whatif_proof: calibration too small: {(cap.get('service') or {}).get('needs')}")
    out: dict = {(c["limit"], c["users"]): c for c in cap["what_if"]}
    notes = cap.get("what_if_notes") or []
    for key in cells:
        out[key] = {**out[key], "note": "; ".join(n for n in notes if f"limit {key[0]} " in n)}
    out["service"] = {k: v for k, v in cap["service"].items() if k not in ("mix", "think_ms")}
    return out


def err(p: float | None, m: float | None) -> float | None:
    return None if not p or not m else (p - m) / m * 100


def table(rows: list[dict]) -> str:
    lines = ["| limit | users | the calibration setting | e2e p95 predicted | measured | error | tokens/s predicted | "
             "measured | error |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['limit']} | {r['users']} | {r['seen']} | {r['pred_e2e_p95_ms']:,.0f} | "
                     f"{r['e2e_p95_ms']:,.0f} | {r['e2e_err_pct']:+.0f} % | {r['pred_tokens_per_s']:.1f} | "
                     f"{r['tokens_per_s']:.1f} | {r['tps_err_pct']:+.0f} % |")
    ok = [abs(r["e2e_err_pct"]) <= 20 and abs(r["tps_err_pct"]) <= 20 for r in rows]
    worst = max(max(abs(r["e2e_err_pct"]), abs(r["tps_err_pct"])) for r in rows)
    lines += ["", f"within 20 % (both): {sum(ok)} of {len(rows)} cells; worst error {worst:.0f} %"]
    return "\n".join(lines)


def prove(calib: tuple[int, int], cells: list[tuple[int, int]], seconds: float, think_ms: float, work: Path,
          calib_seconds: float | None = None) -> dict:
    c_lim, c_users = calib
    cal_dir = work / f"calib-{c_lim}x{c_users}"
    cal_run = run_cell(cal_dir, c_lim, c_users, calib_seconds or seconds, think_ms, seed=1)
    pred = calibrate(cal_dir, cells)
    rows = []
    for lim, u in cells:
        d = work / f"cell-{lim}x{u}"
        run = run_cell(d, lim, u, seconds, think_ms, seed=2)
        m = measured(d, run)
        p = pred[(lim, u)]
        rows.append({"limit": lim, "users": u, "errors": run["errors"], "requests": m["requests"],
                     "seen": "yes" if (lim, u) == (c_lim, c_users) else "no",
                     "pred_e2e_p95_ms": p["e2e_p95_ms"], "e2e_p95_ms": m["e2e_p95_ms"],
                     "e2e_err_pct": err(p["e2e_p95_ms"], m["e2e_p95_ms"]),
                     "pred_tokens_per_s": p["tokens_per_s"], "tokens_per_s": m["tokens_per_s"],
                     "tps_err_pct": err(p["tokens_per_s"], m["tokens_per_s"]), "note": p["note"]})
    return {"calibration": {"limit": c_lim, "users": c_users, **cal_run}, "service": pred["service"], "cells": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", default="4,4", help="limit,users of the calibration run")
    ap.add_argument("--cells", nargs="+", default=["4,4", "1,2", "2,4", "2,6", "3,8", "6,6", "4,10"],
                    help="limit,users of each predicted run")
    ap.add_argument("--seconds", type=float, default=45.0, help="seconds the users send in each predicted run")
    ap.add_argument("--calib-seconds", type=float, default=90.0, help="seconds of the calibration run")
    ap.add_argument("--think-ms", type=float, default=1000.0, help="mean think time between turns")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep every run's logs under this folder")
    ap.add_argument("--repredict", type=Path, default=None,
                    help="an earlier --json result: predict its cells again from the logs --keep holds")
    args = ap.parse_args(argv)
    try:
        calib = tuple(int(x) for x in args.calibrate.split(","))
        cells = [tuple(int(x) for x in c.split(",")) for c in args.cells]
    except ValueError:
        print("whatif_proof: --calibrate and --cells take limit,users pairs, e.g. 2,4", file=sys.stderr)
        return 2
    try:
        return _main(args, calib, cells)
    except ValueError as e:  # a calibration run too small to fit
        print(e, file=sys.stderr)
        return 2


def _main(args, calib, cells) -> int:
    if args.repredict:  # the measured cells of an earlier run, predicted again from its kept logs
        result = json.loads(args.repredict.read_text(encoding="utf-8"))
        cal = result["calibration"]
        pred = calibrate(args.keep / f"calib-{cal['limit']}x{cal['users']}",
                         [(r["limit"], r["users"]) for r in result["cells"]])
        result["service"] = pred["service"]
        for r in result["cells"]:
            p = pred[(r["limit"], r["users"])]
            r.update(pred_e2e_p95_ms=p["e2e_p95_ms"], pred_tokens_per_s=p["tokens_per_s"], note=p["note"],
                     e2e_err_pct=err(p["e2e_p95_ms"], r["e2e_p95_ms"]),
                     tps_err_pct=err(p["tokens_per_s"], r["tokens_per_s"]))
        print(json.dumps(result["service"], default=str))
        print(table(result["cells"]))
        return 0
    with tempfile.TemporaryDirectory(prefix="dslogs-whatif-") as tmp:
        result = prove(calib, cells, args.seconds, args.think_ms, args.keep or Path(tmp), args.calib_seconds)
    print(json.dumps(result["service"], default=str))
    print(table(result["cells"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
