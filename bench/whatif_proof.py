"""What if, against the real Gradio app: calibrate the service model on one run, predict runs at
other concurrency limits and user counts, run them, compare (docs/capacity.md, "What if").

The app is bench/capacity_sweep.py's: tests/e2e/apps/gradio_chat.py in its own process, behind
``concurrency_limit``, on a random TinyR1 sized so that generate is real work (hidden 768, 4
layers, one torch thread per generate on CPU). The users are closed loop: each is one
gradio_client session sending a prompt, waiting for the reply, thinking, and sending the next.
With ``--trace FILE`` each request's size is a row of a public trace, drawn (seeded) by each user:
the conversation trace of Azure's LLM inference dataset (``data/AzureLLMInferenceTrace_conv.csv``
of github.com/Azure/AzurePublicDataset, columns ``ContextTokens`` and ``GeneratedTokens``; not
shipped here), both lengths scaled by ``--trace-scale`` (default 1/8: the trace's median of 1,020
prompt and 129 output tokens become 128 and 16, which the CPU model serves in a fraction of a
second; the trace's tails come along). The app answers with exactly that many tokens (at least
the 11 of the think block and EOS). Without it, the prompts are drawn from a log-normal length
(median 12 words, sigma 0.8, at most 120 words) and every answer is the same 16 tokens. The think
time is exponential, of mean ``--think-ms``.

Each run lasts a fixed time (users stop sending at its end). Measured per cell, from the run's
own logs (what the service saw), over the requests that ended between 5 s after the start and
the end: e2e p95 (queue wait included), and output tokens per second of that window.

    python bench/whatif_proof.py                          # calibrate at 3 x 5 (90 s), nine 60 s cells
    python bench/whatif_proof.py --calibrate 3,6 --cells 1,3 2,6 4,8 6,6 3,12 8,10 --seconds 60

Prints the table (predicted / measured / error per cell) in Markdown; --json writes it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
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


PROMPT_CAP = 1024  # words: the trace's longest prompts (14 k tokens) would each hold a core for seconds
OUT_RE = re.compile(r"^\[out=(\d+)\] ")


def load_trace(path: Path, scale: float) -> list[tuple[int, int]]:
    """(prompt words, output tokens) per row of an Azure LLM inference trace, scaled."""
    with open(path, newline="") as f:
        rows = [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]
    if not rows:
        raise SystemExit(f"whatif_proof: {path}: no rows with ContextTokens and GeneratedTokens")
    return [(min(PROMPT_CAP, max(1, round(c * scale))), max(1, round(g * scale))) for c, g in rows]


def prompt(rng: random.Random, trace: list[tuple[int, int]] | None = None) -> str:
    """A message: from a trace row ("[out=N] " and its prompt's words), else log-normal words."""
    if trace:
        words, out = trace[rng.randrange(len(trace))]
        return f"[out={out}] " + " ".join(rng.choice(WORDS) for _ in range(words))
    n = min(120, max(1, round(math.exp(rng.gauss(math.log(12), 0.8)))))
    return " ".join(rng.choice(WORDS) for _ in range(n))


def trace_app_class():
    """The e2e ChatApp answering a message that starts "[out=N] " with N output tokens (the think
    block and EOS included; never fewer than those)."""
    import gradio as gr

    from tests.e2e.apps import tiny_r1
    from tests.e2e.apps.gradio_chat import ChatApp

    shape = tiny_r1.OUTPUT_TOKENS - tiny_r1.ANSWER_WORDS

    class TraceChatApp(ChatApp):
        _want = threading.local()

        def chat(self, message, history, request):
            m = OUT_RE.match(message)
            self._want.out = int(m.group(1)) if m else None
            return super().chat(message, history, request)

        # Gradio passes the request to a parameter annotated gr.Request; this module's annotations
        # are strings naming a local import, so the class itself is set
        chat.__annotations__.update(message=str, history=list, request=gr.Request)

        def _kwargs(self, fault) -> dict:
            kw = super()._kwargs(fault)
            out = getattr(self._want, "out", None)
            if out is not None:
                kw["answer_words"] = max(0, out - shape)
                kw["max_new_tokens"] = max(kw["max_new_tokens"], out + 1)
            return kw

    return TraceChatApp


def run_cell(log_dir: Path, limit: int, users: int, seconds: float, think_ms: float, seed: int = 0,
             app: App | None = None, requests: int | None = None,
             trace: list[tuple[int, int]] | None = None) -> dict:
    """``users`` closed-loop users against the app at ``limit`` for ``seconds``: after that no user
    sends again. The measured window ends there, so the tail (the last replies, fewer users) is
    not in it; its start leaves WARM_S for the users to fall into step. ``app``: a running app
    (its limit set to ``limit`` first; its logs go where it was started), else one of its own.
    ``requests``: the users also stop once the app has answered that many (a calibration sized in
    requests, not seconds, lasts as long as the box needs for them)."""
    from bench.capacity_sweep import gradio_clients

    own = app is None
    if own:
        app = App(log_dir, limit)
    errors: list[str] = []
    load_before = os.getloadavg()[0]
    try:
        app.set_limit(limit)
        new_client = gradio_clients(app.url, 300.0)
        clients = [new_client() for _ in range(users)]
        gate = threading.Barrier(users + 1, timeout=300)
        deadline = [0.0]
        answered = [0]

        def user(i: int) -> None:
            rng = random.Random(f"{seed}:{limit}:{users}:{i}")
            gate.wait()
            time.sleep(rng.expovariate(1 / think_ms) / 1000 if think_ms > 0 else 0)
            while time.time() < deadline[0] and (requests is None or answered[0] < requests):
                try:
                    clients[i][0](prompt(rng, trace))
                    answered[0] += 1
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
        t_end = min(time.time(), t0 + seconds)
        for _, c in clients:
            c()
    finally:
        if own:
            app.close()
    # the box's 1-minute load average as the run began and ended: a busy box slows every cell
    return {"limit": limit, "users": users, "start": t0 + WARM_S, "end": t_end, "errors": len(errors),
            "load": [round(load_before, 1), round(os.getloadavg()[0], 1)]}


class App:
    """The app of bench/capacity_sweep.py in its own process (as in production: the users'
    client threads must not share its interpreter lock), whose Gradio concurrency limit can be
    changed while it runs, as an operator changes it: one start for several settings."""

    def __init__(self, log_dir: Path, limit: int, timeout_s: float = 180.0):
        import subprocess

        from tests.e2e.apps.serving import free_port

        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(free_port()), "--logs", str(log_dir),
             "--limit", str(limit)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
        self.limit = limit
        line = self._reply("ready ", timeout_s)
        self.url = line.split()[1]

    def _reply(self, prefix: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        line = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if line.startswith(prefix):
                return line
        self.close()
        raise RuntimeError(f"whatif_proof: the app did not answer {prefix.strip()!r} (exit {self.proc.poll()})")

    def set_limit(self, limit: int) -> None:
        if limit != self.limit:
            self.proc.stdin.write(f"limit {limit}\n")
            self.proc.stdin.flush()
            self._reply(f"limit {limit}", 30.0)
            self.limit = limit

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the server exits when its stdin closes
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - never leave it running
            self.proc.kill()
            self.proc.wait()


def _serve(port: int, log_dir: Path, limit: int) -> int:
    """The app under Gradio until stdin closes; a line ``limit N`` sets every queue's
    concurrency limit to N (the events waiting then start under the new limit)."""
    import gradio.profiling
    import gradio.queueing

    from bench.capacity_sweep import build_app
    from tests.e2e.apps.gradio_chat import build_demo

    gradio.queueing.PROFILING_ENABLED = True
    gradio.profiling.PROFILING_ENABLED = True
    app, tracer = build_app(log_dir, "cpu", HIDDEN, LAYERS, app_cls=trace_app_class())
    demo = build_demo(app, concurrency_limit=limit)
    demo.queue(default_concurrency_limit=limit).launch(
        server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    print(f"ready http://127.0.0.1:{port}/", flush=True)
    for line in sys.stdin:
        n = int(line.split()[1])
        # Gradio reads each queue's limit as it picks the next event: set, it holds from there on
        for q in demo._queue.event_queue_per_concurrency_id.values():
            q.concurrency_limit = n
        print(f"limit {n}", flush=True)
    demo.close()
    tracer.close()
    return 0


def thresholds(min_requests: int = 100, min_level_requests: int = 10):
    """Default thresholds with the sparse-level cut sized to a short run (10 requests a level)."""
    from dslogs.analyzer.core.thresholds import defaults

    t = defaults()
    t["concurrency_cliff"].update(min_level_requests=min_level_requests, min_requests=min_requests)
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


def calibrate(log_dir: Path, cells: list[tuple[int, int]], th: dict | None = None) -> dict:
    """The capacity model of the calibration logs with ``cells`` simulated."""
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.usecases.analyze import build_capacity

    model = build_capacity(open_logs([str(log_dir)], use_cache=False), th or thresholds(),
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
    lines = ["| limit | users | the calibration setting | requests | load | e2e p95 predicted | measured | error | "
             "tokens/s predicted | measured | error |", "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        load = "–".join(f"{x:.0f}" for x in r.get("load") or [])
        lines.append(f"| {r['limit']} | {r['users']} | {r['seen']} | {r['requests']} | {load} | "
                     f"{r['pred_e2e_p95_ms']:,.0f} | {r['e2e_p95_ms']:,.0f} | {r['e2e_err_pct']:+.0f} % | "
                     f"{r['pred_tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | {r['tps_err_pct']:+.0f} % |")
    unseen = [r for r in rows if r["seen"] == "no"]
    ok = [abs(r["e2e_err_pct"]) <= 20 and abs(r["tps_err_pct"]) <= 20 for r in unseen]
    worst = max((max(abs(r["e2e_err_pct"]), abs(r["tps_err_pct"])) for r in unseen), default=0)
    lines += ["", f"unseen cells within 20 % (both): {sum(ok)} of {len(unseen)}; worst error {worst:.0f} %"]
    return "\n".join(lines)


def prove(calib: tuple[int, int], cells: list[tuple[int, int]], seconds: float, think_ms: float, work: Path,
          calib_seconds: float | None = None, trace: list[tuple[int, int]] | None = None) -> dict:
    c_lim, c_users = calib
    cal_dir = work / f"calib-{c_lim}x{c_users}"
    cal_run = run_cell(cal_dir, c_lim, c_users, calib_seconds or seconds, think_ms, seed=1, trace=trace)
    pred = calibrate(cal_dir, cells)
    rows = []
    for i, (lim, u) in enumerate(cells):
        d = work / f"cell{i}-{lim}x{u}"  # a setting may be run twice (the calibration's: its spread)
        run = run_cell(d, lim, u, seconds, think_ms, seed=2, trace=trace)
        m = measured(d, run)
        p = pred[(lim, u)]
        rows.append({"limit": lim, "users": u, "errors": run["errors"], "requests": m["requests"], "load": run["load"],
                     "seen": "yes" if (lim, u) == (c_lim, c_users) else "no",
                     "pred_e2e_p95_ms": p["e2e_p95_ms"], "e2e_p95_ms": m["e2e_p95_ms"],
                     "e2e_err_pct": err(p["e2e_p95_ms"], m["e2e_p95_ms"]),
                     "pred_tokens_per_s": p["tokens_per_s"], "tokens_per_s": m["tokens_per_s"],
                     "tps_err_pct": err(p["tokens_per_s"], m["tokens_per_s"]), "note": p["note"]})
    return {"calibration": {"limit": c_lim, "users": c_users, **cal_run}, "service": pred["service"], "cells": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", default="3,5", help="limit,users of the calibration run")
    ap.add_argument("--cells", nargs="+", default=["3,5", "1,2", "1,4", "2,4", "2,6", "4,8", "6,6", "4,10", "3,5"],
                    help="limit,users of each predicted run (the calibration's setting again shows the box's spread)")
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds the users send in each predicted run")
    ap.add_argument("--calib-seconds", type=float, default=90.0, help="seconds of the calibration run")
    ap.add_argument("--think-ms", type=float, default=1000.0, help="mean think time between turns")
    ap.add_argument("--trace", type=Path, default=None,
                    help="request sizes from an Azure LLM inference trace CSV (ContextTokens, GeneratedTokens)")
    ap.add_argument("--trace-scale", type=float, default=0.125, help="both lengths of a trace row times this")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep every run's logs under this folder")
    ap.add_argument("--repredict", type=Path, default=None,
                    help="an earlier --json result: predict its cells again from the logs --keep holds")
    ap.add_argument("--serve", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--logs", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve is not None:  # the app alone (App)
        return _serve(args.serve, args.logs, args.limit)
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
    try:
        trace = load_trace(args.trace, args.trace_scale) if args.trace else None
    except (OSError, KeyError, ValueError) as e:
        print(f"whatif_proof: --trace {args.trace}: {e!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dslogs-whatif-") as tmp:
        result = prove(calib, cells, args.seconds, args.think_ms, args.keep or Path(tmp), args.calib_seconds,
                       trace)
    if trace:
        result["trace"] = {"file": str(args.trace), "scale": args.trace_scale, "rows": len(trace)}
    print(json.dumps(result["service"], default=str))
    print(table(result["cells"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
