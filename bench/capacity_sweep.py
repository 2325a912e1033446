"""Capacity sweep on the real Gradio app: the knee dslogs finds in the logs against the curve the
load driver measures from its own client timings.

The app is tests/e2e/apps/gradio_chat.py (a real Gradio server, the collector's Tracer, a tiny
random R1-shaped Qwen2 built from a config: no download, runs offline) behind
``concurrency_limit``. The driver runs closed-loop clients through gradio_client, 1 → N threads
in steps, each sending ``--per-client`` requests one after another; its curve is output tokens per
second of wall time at each step. dslogs reads the Tracer's logs and gives its capacity section.

    python bench/capacity_sweep.py                       # CPU, 1 → 8 clients, limit 8
    python bench/capacity_sweep.py --device cuda         # on a GPU: real torch.cuda memory too
    python bench/capacity_sweep.py --device cuda --levels 6 --per-client 4 --hidden 2048 --layers 8

``--server auto`` (the default) serves with Gradio when gradio and gradio_client are installed,
else with tests/e2e/apps/thread_server.py: the same handlers in this process, a pool of
``concurrency_limit`` workers whose queue holds the calls beyond it (``--server threads`` forces it).

Prints one table (client tokens/s and dslogs' tokens/s, TPOT p95 and peak reserved memory per
level) and both knees. Exit 0 when they agree within one level, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
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


class RealCuda:
    """What ChatApp asks of its GPU object, on a real GPU: torch measures, nothing is simulated."""

    def __init__(self):
        import torch

        self.torch = torch
        self.device = "cuda:0"

    @contextlib.contextmanager
    def activations(self, mb: float):
        yield

    def keep(self, mb: float) -> None:
        pass

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()

    probe = None  # the Tracer reads torch.cuda itself


def has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def load_model(hidden: int, layers: int):
    """tests/e2e's R1-shaped TinyR1 (the same vocabulary and answer shape) at a size whose
    generate is real work on the device: the tiny CI model spends its time in Gradio, not in the
    handler, so no level would ever contend. Random weights from a config: runs offline."""
    import torch
    import transformers

    from tests.e2e.apps import tiny_r1

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=len(tiny_r1.VOCAB), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=max(2, hidden // 64), num_key_value_heads=1, intermediate_size=hidden * 11 // 4,
        max_position_embeddings=8192, eos_token_id=tiny_r1.EOS_ID, pad_token_id=tiny_r1.PAD_ID, bos_token_id=None,
    )
    model = tiny_r1.TinyR1(cfg).eval()
    model.generation_config.pad_token_id = tiny_r1.PAD_ID
    return model


def build_app(log_dir: Path, device: str = "cpu", hidden: int = 768, layers: int = 6, app_cls=None):
    """ChatApp (or ``app_cls``, a subclass) on the sized TinyR1, warmed up, with its Tracer:
    (app, tracer). Nothing from gradio."""
    import torch

    from dslogs_collector import Tracer
    from tests.e2e.apps import tiny_r1
    from tests.e2e.apps.fake_gpu import FakeCuda
    from tests.e2e.apps.faults import Plan
    from tests.e2e.apps.gradio_chat import ChatApp

    if device == "cpu":
        torch.set_num_threads(1)  # one core per generate: the box's cores are the GPU's "slots"
    model = load_model(hidden, layers).to(device)
    ids = torch.tensor([[len(tiny_r1.SPECIALS) + i for i in range(6)]], device=device)
    with torch.no_grad():  # warm-up: the first generate calls of a process are slower
        model.generate(ids, max_new_tokens=tiny_r1.OUTPUT_TOKENS + 2, do_sample=False)
    gpu = FakeCuda() if device == "cpu" else RealCuda()
    tracer = Tracer(log_dir, memory_probe=gpu.probe) if gpu.probe else Tracer(log_dir)
    return (app_cls or ChatApp)(tracer, model, tiny_r1.load_tokenizer(), gpu, Plan({})), tracer


def serve(log_dir: Path, device: str = "cpu", concurrency_limit: int = 8, hidden: int = 768, layers: int = 6,
          port: int | None = None):
    """Start the app under Gradio; returns (url, close)."""
    import gradio.profiling
    import gradio.queueing

    from tests.e2e.apps.gradio_chat import build_demo
    from tests.e2e.apps.serving import free_port

    gradio.queueing.PROFILING_ENABLED = True
    gradio.profiling.PROFILING_ENABLED = True
    app, tracer = build_app(log_dir, device, hidden, layers)
    demo = build_demo(app, concurrency_limit=concurrency_limit)
    port = port or free_port()
    demo.queue(default_concurrency_limit=concurrency_limit).launch(
        server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)

    def close():
        demo.close()
        tracer.close()

    return f"http://127.0.0.1:{port}/", close


def gradio_clients(url: str, timeout_s: float):
    """new_client() for drive(): one gradio_client.Client per user, (call(message), close)."""
    from tests.e2e.apps.serving import patient_client

    def new_client():
        c = patient_client(url, timeout_s)
        return (lambda message: c.submit(message, api_name="/chat").result(timeout=timeout_s)), c.close

    return new_client


def serve_threads(log_dir: Path, device: str, concurrency_limit: int, hidden: int, layers: int,
                  timeout_s: float = 60.0):
    """The same handlers in this process, served by tests/e2e/apps/thread_server.py (a pool of
    ``concurrency_limit`` workers; the calls beyond it wait in its queue): (new_client, close).
    The driver's threads only wait on futures here, so they do not compete with the handlers."""
    from tests.e2e.apps.thread_server import ThreadServer

    app, tracer = build_app(log_dir, device, hidden, layers)
    server = ThreadServer(app, concurrency_limit, call_timeout_s=timeout_s)

    def new_client():
        _, call = server.client()
        return (lambda message: call(message, "/chat")), (lambda: None)

    def close():
        server.close()
        tracer.close()

    return new_client, close


def drive(new_client, levels: int, per_client: int, timeout_s: float = 60.0) -> list[dict]:
    """Closed-loop clients, 1 → ``levels`` threads: per step its requests, wall seconds and output
    tokens per second (every answer is tiny_r1.OUTPUT_TOKENS tokens long). ``new_client()`` gives
    one user's (call(message), close)."""
    from tests.e2e.apps import tiny_r1

    clients = [new_client() for _ in range(levels)]
    steps = []
    try:
        for n in range(1, levels + 1):
            gate = threading.Barrier(n + 1, timeout=timeout_s)
            done, errors = [0], []
            lock = threading.Lock()

            def user(i: int, n=n, gate=gate, done=done, errors=errors, lock=lock) -> None:
                gate.wait()
                for turn in range(per_client):
                    try:
                        clients[i][0](f"w{i} w{turn} question {turn}")
                        with lock:
                            done[0] += 1
                    except Exception as e:  # noqa: BLE001 - counted, the step goes on
                        errors.append(repr(e))

            threads = [threading.Thread(target=user, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            gate.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join(timeout_s * per_client)
            wall = time.perf_counter() - t0
            steps.append({"level": n, "requests": done[0], "errors": len(errors), "seconds": wall,
                          "tokens_per_s": done[0] * tiny_r1.OUTPUT_TOKENS / wall if wall > 0 else None})
    finally:
        for _, close in clients:
            close()
    return steps


def client_knee(steps: list[dict], thresholds: dict) -> int | None:
    """The client curve's knee, by the same definition as dslogs' (analyzer/rules/capacity_curve)."""
    from dslogs.analyzer.rules.capacity_curve import knee_of

    _, knee = knee_of(steps, thresholds["concurrency_cliff"])
    return knee


def sweep_thresholds(per_client: int) -> dict:
    """Default thresholds with the sparse-level cut sized to the sweep: a level needs two clients'
    worth of requests (a step of N clients holds N x per_client, spread over the levels below N
    as clients come and go), not the 20 a production day gives."""
    from dslogs.analyzer.core.thresholds import defaults

    t = defaults()
    t["concurrency_cliff"].update(min_level_requests=2 * per_client, min_requests=per_client * 4)
    return t


def serve_in_subprocess(log_dir: Path, device: str, concurrency_limit: int, hidden: int, layers: int,
                        timeout_s: float = 180.0):
    """The app in its own process, as in production: the driver's client threads must not share
    the server's interpreter lock (they would be the bottleneck the curve shows). (url, close)."""
    import subprocess

    from tests.e2e.apps.serving import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", str(port), "--logs", str(log_dir),
         "--device", device, "--concurrency-limit", str(concurrency_limit), "--hidden", str(hidden),
         "--layers", str(layers)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    deadline = time.monotonic() + timeout_s
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.startswith("ready "):
            break
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"capacity_sweep: the app did not start (exit {proc.poll()})")

    def close():
        try:
            proc.stdin.close()  # the server exits when its stdin closes
            proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - never leave it running
            proc.kill()
            proc.wait()

    return line.split()[1], close


def run(levels: int, per_client: int, device: str, concurrency_limit: int, log_dir: Path,
        hidden: int = 768, layers: int = 6, server: str = "gradio") -> dict:
    """``server``: gradio (the app in a subprocess, driven through gradio_client) or threads
    (tests/e2e/apps/thread_server.py in this process, for a box without gradio)."""
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.usecases.analyze import build_capacity

    timeout_s = 60.0
    if server == "threads":
        new_client, close = serve_threads(log_dir, device, concurrency_limit, hidden, layers, timeout_s)
    else:
        url, close = serve_in_subprocess(log_dir, device, concurrency_limit, hidden, layers)
        new_client = gradio_clients(url, timeout_s)
    try:
        steps = drive(new_client, levels, per_client, timeout_s)
    finally:
        close()
    t = sweep_thresholds(per_client)
    model = build_capacity(open_logs([str(log_dir)], use_cache=False), t)
    procs = [c for c in model["capacity"] if c.get("levels")]
    cap = max(procs, key=lambda c: c.get("requests") or 0) if procs else {}
    return {"device": device, "server": server, "steps": steps, "client_knee": client_knee(steps, t),
            "dslogs_knee": cap.get("knee"), "capacity": cap, "findings": model["findings"]}


def table(result: dict) -> str:
    by_level = {lv["level"]: lv for lv in result["capacity"].get("levels") or []}
    lines = ["| clients / in flight | client req | client tokens/s | dslogs req | dslogs tokens/s | TPOT p95 ms | "
             "queue p95 ms | peak reserved MiB |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v, d=1):
        return "—" if v is None else f"{v:,.{d}f}"

    for s in result["steps"]:
        lv = by_level.get(s["level"], {})
        lines.append(f"| {s['level']} | {s['requests']} | {f(s['tokens_per_s'])} | {lv.get('requests', '—')} | "
                     f"{f(lv.get('tokens_per_s'))} | {f(lv.get('tpot_p95_ms'))} | {f(lv.get('queue_p95_ms'))} | "
                     f"{f(lv.get('reserved_peak_mb'), 0)} |")
    rec = (result["capacity"].get("recommendation") or {}).get("text") or result["capacity"].get("needs")
    lines += ["", f"knee: client {result['client_knee']}, dslogs {result['dslogs_knee']} "
              f"({result['device']}, server {result.get('server', 'gradio')})",
              f"dslogs: {rec}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N (tiny Qwen2 moved there)")
    ap.add_argument("--levels", type=int, default=8, help="clients at the last step")
    ap.add_argument("--per-client", type=int, default=4, help="requests each client sends per step")
    ap.add_argument("--server", choices=("auto", "gradio", "threads"), default="auto",
                    help="auto: Gradio when gradio and gradio_client are installed, else a thread pool")
    ap.add_argument("--concurrency-limit", type=int, default=None, help="Gradio concurrency_limit (default: --levels)")
    ap.add_argument("--hidden", type=int, default=768, help="the random Qwen2's hidden size")
    ap.add_argument("--layers", type=int, default=6, help="the random Qwen2's layers")
    ap.add_argument("--logs", type=Path, default=None, help="keep the app's logs here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="write the result as JSON")
    ap.add_argument("--serve", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve is not None:  # the app alone, until stdin closes (serve_in_subprocess)
        url, close = serve(args.logs, args.device, args.concurrency_limit or args.levels, args.hidden, args.layers,
                           port=args.serve)
        print(f"ready {url}", flush=True)
        sys.stdin.read()
        close()
        return 0
    for name in ("levels", "per_client", "hidden", "layers"):
        if getattr(args, name) < 1:
            print(f"capacity_sweep: --{name.replace('_', '-')} must be ≥ 1", file=sys.stderr)
            return 2
    if args.concurrency_limit is not None and args.concurrency_limit < 1:
        print("capacity_sweep: --concurrency-limit must be ≥ 1", file=sys.stderr)
        return 2
    missing = [m for m in ("torch", "transformers", "duckdb") if not has(m)]
    if missing:
        print(f"capacity_sweep: {', '.join(missing)} not installed: the app needs torch and transformers, "
              "dslogs needs duckdb", file=sys.stderr)
        return 2
    if args.device != "cpu":
        import torch

        if not args.device.startswith("cuda") or not torch.cuda.is_available():
            why = "no CUDA device here" if args.device.startswith("cuda") else "cpu, cuda or cuda:N"
            print(f"capacity_sweep: --device {args.device}: {why} (torch {torch.__version__})", file=sys.stderr)
            return 2
        index = int(args.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            print(f"capacity_sweep: --device {args.device}: {torch.cuda.device_count()} CUDA device(s) here",
                  file=sys.stderr)
            return 2
    server = args.server
    if server == "auto":
        server = "gradio" if has("gradio", "gradio_client") else "threads"
    elif server == "gradio" and not has("gradio", "gradio_client"):
        print("capacity_sweep: --server gradio: gradio and gradio_client are not installed", file=sys.stderr)
        return 2
    print(f"capacity_sweep: server {server}, device {args.device}", flush=True)
    with tempfile.TemporaryDirectory(prefix="dslogs-sweep-") as tmp:
        log_dir = args.logs or Path(tmp) / "logs"
        result = run(args.levels, args.per_client, args.device, args.concurrency_limit or args.levels, log_dir,
                     hidden=args.hidden, layers=args.layers, server=server)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    a, b = result["client_knee"], result["dslogs_knee"]
    return 0 if a is not None and b is not None and abs(a - b) <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
