"""The real-app end-to-end faults on a real GPU: the allocator's and NVML's own readings instead
of tests/e2e's ``memory_probe``.

    python bench/gpu_e2e.py                  # on a CUDA machine (under 5 min on an H200)
    python bench/gpu_e2e.py --device cpu     # a dry run of the whole flow here (FakeCuda, simulated OOM)

The app is tests/e2e/apps/gradio_chat.py's ``ChatApp`` on tests/e2e/apps/tiny_r1.py's R1-shaped
random Qwen2 (built from a config, no download), served by Gradio when gradio and gradio_client
are installed, otherwise by one thread pool of ``CONCURRENCY`` workers per endpoint (the same
handlers and tracer, without the HTTP server). 16 client threads send 4 turns each, every first
message at once. Two runs:

* **faults**: beam search (``num_beams=2``); a real CUDA OOM (``num_beams=5``: each decode step
  asks the allocator for 16 GiB per beam, refused under
  ``torch.cuda.set_per_process_memory_fraction``), with and without the greedy fallback;
  ``max_new_tokens=4096``; a GPU leak (512 MiB of CUDA tensors kept per request across
  requests). Healthy requests hold 32 MiB of activations and call ``empty_cache()`` after.
* **ghost**: an app that never calls ``empty_cache()`` while each request holds 4 GiB, one
  request at a time, users pausing between turns and the service idle a few seconds at the end:
  reserved stays at the peak while allocated falls back, which the periodic ``gpu_memory``
  snapshots show (000 §1.1).

For each run: ``dslogs analyze`` (the real CLI) on what the collector wrote, then a table
fault -> rule -> sessions injected / found / extra; on CUDA, checks that the readings are the real
ones (device ``cuda:0`` on requests, torch's own OOM message, ``num_ooms`` rising, NVML samples)
and then bench/gpu_check.py. Exit 1 on any miss, extra session or failed check; on a machine
without CUDA (and no ``--device cpu``), one line and exit 0.

The analysis needs duckdb next to torch; a GPU box without it is told so in one line (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# Gradio reads these when it is imported: per-request queue wait is kept only with profiling on
os.environ.setdefault("GRADIO_PROFILING", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MB = 1024 * 1024
GIB = 1024 * MB
SESSIONS, TURNS, CONCURRENCY = 16, 4, 4
CALL_TIMEOUT_S = 120
# the process may use this much of the GPU: an OOM step asks for 16 GiB x 5 beams, far above it
CAP_GIB = 40
GHOST_ACTIVATION_MB = 4096
SAMPLE_S = 0.25  # the gpu_memory/gpu_sample samplers' interval
# Timing rules read (wall - process CPU) / wall as GPU wait: on a launch-bound tiny model (or on
# CPU) they measure the box, not the app. Shown in brackets, not counted as extra.
TIMING_RULES = frozenset({"gpu_wait", "cpu_bound", "low_gpu_util", "gpu_starved", "memory_thrash"})


class RealCuda:
    """tests/e2e/apps/fake_gpu.FakeCuda's interface over real CUDA memory: what the app holds
    is real tensors, and the tracer reads torch's allocator itself (no probe)."""

    device = "cuda:0"
    probe = None

    def __init__(self, torch):
        self.torch = torch
        self._lock = threading.Lock()
        self.kept: list = []

    @contextlib.contextmanager
    def activations(self, mb: float):
        x = self.torch.empty(int(mb * MB), dtype=self.torch.uint8, device=self.device)
        try:
            yield
        finally:
            del x

    def keep(self, mb: float) -> None:
        x = self.torch.empty(int(mb * MB), dtype=self.torch.uint8, device=self.device)
        with self._lock:
            self.kept.append(x)

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()


@dataclass
class Expect:
    fault: str
    rule: str
    keys: set[str]
    host_ok: bool = False  # a process/host-scoped finding of this rule counts as found


@dataclass
class Scenario:
    name: str
    plan: dict[str, str]
    expect: list[Expect]
    sessions: int = SESSIONS
    turns: int = TURNS
    activation_mb: float | None = None  # None: the app's default (faults.ACTIVATION_MB)
    empty_cache: bool = True
    streaming: set[str] = field(default_factory=set)
    concurrency: int = CONCURRENCY
    think_s: float = 0.0  # a user's pause between turns
    idle_s: float = 0.0  # the service left idle after the traffic, samplers still running


def keys_of(plan: dict[str, str], *faults: str) -> set[str]:
    return {k for k, f in plan.items() if f in faults}


FAULT_PLAN = {"s00": "beam", "s01": "beam", "s02": "max_tokens", "s03": "max_tokens", "s04": "oom",
              "s05": "oom_fallback", "s08": "gpu_leak", "s09": "gpu_leak"}
SCENARIOS = [
    Scenario(
        "faults", FAULT_PLAN,
        [Expect("beam search (num_beams=2)", "beam_search", keys_of(FAULT_PLAN, "beam")),
         Expect("num_beams=5 that OOMed (the OOM's cause)", "beam_search", keys_of(FAULT_PLAN, "oom", "oom_fallback")),
         Expect("max_new_tokens=4096", "high_max_tokens", keys_of(FAULT_PLAN, "max_tokens")),
         Expect("CUDA OOM in generate, no fallback", "oom", keys_of(FAULT_PLAN, "oom")),
         Expect("CUDA OOM in generate, oom_fallback=True", "oom", keys_of(FAULT_PLAN, "oom_fallback")),
         Expect("GPU leak: 512 MiB of tensors kept per request", "memory_leak", keys_of(FAULT_PLAN, "gpu_leak"))],
        # beam search cannot stream (transformers refuses a streamer with beams)
        streaming={"s03", "s07", "s09", "s11", "s13", "s15"},
    ),
    # one request at a time: overlapping 4 GiB transients would be another test (attribution
    # under concurrency); this one is about what the allocator keeps between requests
    Scenario(
        "ghost", {}, [], sessions=4, turns=3, activation_mb=GHOST_ACTIVATION_MB, empty_cache=False,
        concurrency=1, think_s=0.3, idle_s=3.0,
    ),
]
SCENARIOS[1].expect = [Expect(f"ghost memory: {GHOST_ACTIVATION_MB} MiB per request, no empty_cache()",
                              "ghost_memory", {f"s{i:02d}" for i in range(SCENARIOS[1].sessions)}, host_ok=True)]

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'  ' + detail if detail else ''}", flush=True)
    return bool(ok)


# -- serving ---------------------------------------------------------------------------------------
def has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


class GradioServer:
    def __init__(self, app, concurrency: int):
        import gradio.profiling
        import gradio.queueing

        from tests.e2e.apps.gradio_chat import build_demo
        from tests.e2e.apps.serving import free_port

        gradio.queueing.PROFILING_ENABLED = gradio.profiling.PROFILING_ENABLED = True
        self.demo = build_demo(app, concurrency_limit=concurrency)
        port = free_port()
        self.demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        self.url, self.clients = f"http://127.0.0.1:{port}/", []

    def client(self, key: str):
        from tests.e2e.apps.serving import patient_client

        c = patient_client(self.url, CALL_TIMEOUT_S)
        self.clients.append(c)

        def call(message: str, api: str):
            return c.submit(message, api_name=api).result(timeout=CALL_TIMEOUT_S)

        return c.session_hash, call

    def close(self) -> None:
        for c in self.clients:
            c.close()
        self.demo.close()


class FakeSampler:
    """The dry run's stand-in for the collector's torch sampler: FakeCuda's process-wide
    reserved/allocated as periodic ``gpu_memory`` snapshots outside any session."""

    def __init__(self, tracer, gpu):
        self.tracer, self.gpu, self.stop = tracer, gpu, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            mem = self.gpu.probe()
            self.tracer.event("gpu_memory", reserved_mb=mem["reserved_mb"], allocated_mb=mem["allocated_mb"],
                              gpu_index=0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def run_app(sc: Scenario, log_dir: Path, model, tokenizer, gpu, cuda: bool, server_kind: str) -> dict:
    """Serve ``sc`` and drive it: every session's first message at once, then its turns in order."""
    from dslogs_collector import Tracer
    from tests.e2e.apps.faults import Plan
    from tests.e2e.apps.gradio_chat import ChatApp
    from tests.e2e.apps.thread_server import ThreadServer

    tracer = Tracer(log_dir, samplers=cuda, sample_interval_s=SAMPLE_S, memory_probe=gpu.probe)
    sampler = None if cuda else FakeSampler(tracer, gpu)
    kw = {} if sc.activation_mb is None else {"activation_mb": sc.activation_mb}
    app = ChatApp(tracer, model, tokenizer, gpu, Plan(sc.plan), empty_cache=sc.empty_cache, **kw)
    server = GradioServer(app, sc.concurrency) if server_kind == "gradio" else \
        ThreadServer(app, sc.concurrency, call_timeout_s=CALL_TIMEOUT_S)
    keys = [f"s{i:02d}" for i in range(sc.sessions)]
    errors: dict[str, int] = {}
    t0 = time.perf_counter()
    try:
        callers = {k: server.client(k) for k in keys}
        start = threading.Barrier(len(keys), timeout=60)

        def user(k: str) -> None:
            api = "/chat_stream" if k in sc.streaming else "/chat"
            start.wait()
            for turn in range(sc.turns):
                if turn:
                    time.sleep(sc.think_s)
                try:
                    callers[k][1](f"[{k}] w{turn} w{turn + 7} question {turn}", api)
                except Exception:  # noqa: BLE001 - the OOM session's error reaches its client
                    errors[k] = errors.get(k, 0) + 1

        with ThreadPoolExecutor(len(keys)) as pool:
            for f in [pool.submit(user, k) for k in keys]:
                f.result(timeout=CALL_TIMEOUT_S * sc.turns)
        time.sleep(sc.idle_s)
    finally:
        server.close()
        if sampler is not None:
            sampler.close()
        tracer.close()
        if cuda:
            gpu.kept.clear()
            app.kept_outputs.clear()
            gpu.torch.cuda.empty_cache()
    sid_of = {k: callers[k][0] for k in keys}
    return {"sid_of": sid_of, "key_of": {v: k for k, v in sid_of.items()}, "errors": errors,
            "drive_s": time.perf_counter() - t0}


# -- judging ---------------------------------------------------------------------------------------
def analyze(log_dir: Path) -> dict | None:
    import json

    proc = subprocess.run([sys.executable, "-m", "dslogs", "analyze", str(log_dir), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    if proc.returncode != 0:
        check(f"dslogs analyze {log_dir.name}", False, f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
        return None
    return json.loads(proc.stdout)


def table(sc: Scenario, model: dict, key_of: dict[str, str]) -> list[dict]:
    named: dict[str, set[str]] = {}
    scoped: dict[str, bool] = {}
    for f in model["findings"]:
        ids = {key_of.get(s, f"?{s}") for s in f.get("session_ids") or []}
        named.setdefault(f["rule"], set()).update(ids)
        if f.get("scope") in ("host", "process"):
            scoped[f["rule"]] = True
    injected_for: dict[str, set[str]] = {}
    for e in sc.expect:
        injected_for.setdefault(e.rule, set()).update(e.keys)
    rows = []
    for e in sc.expect:
        got = named.get(e.rule, set())
        found = got & e.keys
        ok = found == e.keys or (e.host_ok and scoped.get(e.rule, False))
        rows.append({"fault": e.fault, "rule": e.rule, "injected": e.keys, "found": found,
                     "host": scoped.get(e.rule, False), "extra": got - injected_for[e.rule], "ok": ok})
    faulty = set(sc.plan) | {k for e in sc.expect for k in e.keys}
    extra_any = {k for r, ks in named.items() if r not in TIMING_RULES and r not in injected_for for k in ks}
    extra_any |= {k for r, ks in named.items() if r in injected_for for k in ks - injected_for[r]}
    healthy_named = sorted((f"({r})" if r in TIMING_RULES else r) for r, ks in named.items() if ks - faulty)
    rows.append({"fault": "none (healthy) / other rules", "rule": "any: " + (", ".join(healthy_named) or "-"),
                 "injected": set(), "found": set(), "host": False, "extra": extra_any, "ok": not extra_any})
    return rows


def print_table(title: str, rows: list[dict]) -> None:
    def fmt(keys):
        keys = sorted(keys)
        return f"{len(keys)}: {', '.join(keys)}" if keys else "0"

    print(f"\n### {title}\n")
    print("| fault | rule | sessions injected | found | extra | |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        found = fmt(r["found"]) + (" + process/host finding" if r["host"] else "")
        print(f"| {r['fault']} | {r['rule']} | {fmt(r['injected'])} | {found} | {fmt(r['extra'])} | "
              f"{'ok' if r['ok'] else 'MISS'} |")
    print(flush=True)


def real_readings(sc: Scenario, log_dir: Path, run: dict) -> None:
    """On CUDA: the numbers dslogs read are the allocator's and NVML's, not a probe's."""
    from tests.e2e.logs import read_events

    ev = read_events(log_dir)
    reqs = [e for e in ev if e["stage"] == "request"]
    check(f"{sc.name}: request spans read cuda:0's allocator",
          bool(reqs) and all(e.get("device") == "cuda:0" and e.get("reserved_mb_before") is not None for e in reqs),
          f"{len(reqs)} requests")
    check(f"{sc.name}: NVML gpu_sample events", any(e["stage"] == "gpu_sample" for e in ev))
    check(f"{sc.name}: torch gpu_memory sampler events",
          any(e["stage"] == "gpu_memory" and e.get("session_id") is None for e in ev))
    if sc.name == "faults":
        ooms = [e for e in ev if e["stage"] == "error" and e.get("error_type") == "OutOfMemoryError"]
        real = [e for e in ooms if "simulated" not in str(e.get("error_msg") or e.get("message") or "")]
        check("faults: OOMs are torch's own (not simulated)", bool(ooms) and len(real) == len(ooms),
              f"{len(real)} of {len(ooms)}")
        num_ooms = max((e.get("num_ooms") or 0 for e in ev if e["stage"] == "gpu_memory"), default=0)
        check("faults: torch's num_ooms rose", num_ooms >= 1, f"num_ooms {num_ooms}")
    if sc.name == "ghost":
        reserved = max((e.get("reserved_mb_after") or 0 for e in reqs), default=0)
        check("ghost: reserved stays at the peak after requests", reserved >= GHOST_ACTIVATION_MB,
              f"reserved_mb_after max {reserved}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="real-app end-to-end faults on a GPU")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run of the whole flow (FakeCuda memory, simulated OOM)")
    ap.add_argument("--server", choices=("auto", "gradio", "threads"), default="auto",
                    help="auto: Gradio when gradio and gradio_client are installed, else a thread pool")
    ap.add_argument("--keep-logs", help="write each run's logs under this folder and keep them")
    ap.add_argument("--no-gpu-check", action="store_true", help="skip bench/gpu_check.py at the end")
    args = ap.parse_args(argv)
    if not has("torch", "transformers"):
        print("torch and transformers are needed (pip install -e '.[hf]'): nothing to run")
        return 0
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"no CUDA device (torch {torch.__version__}): nothing to run; --device cpu for a dry run")
        return 0
    if not has("duckdb"):
        print("duckdb is not installed here: dslogs analyze needs it (pip install duckdb)")
        return 2
    server_kind = args.server
    if server_kind == "auto":
        server_kind = "gradio" if has("gradio", "gradio_client") else "threads"
    elif server_kind == "gradio" and not has("gradio", "gradio_client"):
        print("--server gradio: gradio and gradio_client are not installed")
        return 2

    from tests.e2e.apps import tiny_r1
    from tests.e2e.apps.fake_gpu import FakeCuda

    torch.set_num_threads(1 if not cuda else torch.get_num_threads())
    model, tokenizer = tiny_r1.load_model(), tiny_r1.load_tokenizer()
    where = "cpu (dry run: FakeCuda memory, simulated OOM)"
    if cuda:
        model = model.to("cuda")
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_GIB * GIB / total), 0)
        where = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, " \
                f"memory capped at {CAP_GIB} GiB of {total / GIB:.0f}"
    print(f"device: {where}; server: {server_kind}", flush=True)

    root = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="dslogs-gpu-e2e-"))
    t_all = time.perf_counter()
    try:
        for sc in SCENARIOS:
            log_dir = root / sc.name
            shutil.rmtree(log_dir, ignore_errors=True)
            gpu = RealCuda(torch) if cuda else FakeCuda()
            try:
                run = run_app(sc, log_dir, model, tokenizer, gpu, cuda, server_kind)
            except Exception as e:  # a crash is a FAIL with its reason
                check(f"{sc.name}: the app served every call", False, f"{type(e).__name__}: {e}")
                continue
            want_errors = {k: sc.turns for k in keys_of(sc.plan, "oom")}
            check(f"{sc.name}: drove {sc.sessions} sessions x {sc.turns} turns in {run['drive_s']:.1f} s",
                  run["errors"] == want_errors, f"client errors {run['errors'] or 'none'}")
            if cuda:
                real_readings(sc, log_dir, run)
            model_json = analyze(log_dir)
            if model_json is None:
                continue
            rows = table(sc, model_json, run["key_of"])
            print_table(f"{sc.name} ({'CUDA' if cuda else 'CPU dry run'})", rows)
            for r in rows:
                check(f"{sc.name}: {r['fault']} -> {r['rule']}", r["ok"],
                      f"found {sorted(r['found'])}, extra {sorted(r['extra'])}")
        if cuda and not args.no_gpu_check:
            print("\nbench/gpu_check.py:", flush=True)
            rc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py")], cwd=REPO).returncode
            check("bench/gpu_check.py", rc == 0, f"exit {rc}")
    finally:
        if not args.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
    failed = [r for r in RESULTS if not r[1]]
    print(f"\nSUMMARY: {'PASS' if not failed else 'FAIL'} — {len(RESULTS) - len(failed)}/{len(RESULTS)} checks "
          f"passed in {time.perf_counter() - t_all:.0f} s")
    for name, _, detail in failed:
        print(f"  FAIL {name}: {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
