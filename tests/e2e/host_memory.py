"""Host-RAM attribution under concurrency on the real Gradio app: serve tests/e2e/apps/gradio_chat.py,
drive 16 sessions from 16 client threads (every first message at once; /chat and /chat_stream
run at most 4 requests each), then ``dslogs analyze`` on what the collector wrote.

Shared by tests/e2e/test_host_memory.py (one run in CI) and bench/host_ram_e2e.py (N runs and
the table: leaking sessions named, innocent sessions named, per run).
"""

from __future__ import annotations

import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SESSIONS, CONCURRENCY = 16, 4
CALL_TIMEOUT_S = 120
# 4 sessions keep 40 MiB per request from their third turn on (160 MiB over 6 turns); 4 hold
# 200 MiB while they generate and keep nothing
LEAK_PLAN = {"s02": "host_leak_late", "s05": "host_leak_late", "s08": "host_leak_late", "s11": "host_leak_late"}
TRANSIENT_PLAN = {"s01": "host_transient", "s04": "host_transient", "s07": "host_transient",
                  "s10": "host_transient", "s13": "host_transient", "s14": "host_transient",
                  "s03": "host_transient", "s15": "host_transient"}
STREAMING = {"s03", "s07", "s09", "s11", "s13", "s15"}
# Leakers that overlap: 4 client lanes (one per handler), 15 sessions each, one after another; the
# 5th session of every lane keeps 40 MiB on every turn from its first, and the lanes start each
# session together, so the 4 leakers run at the same time and every reading sees the others' keeps
LANES, PER_LANE, OVERLAP_AT = 4, 15, 4
OVERLAP_PLAN = {f"s{lane * PER_LANE + OVERLAP_AT:02d}": "host_leak" for lane in range(LANES)}
# The same shape on the (fake) GPU, shorter: 4 lanes of 5 sessions, the 3rd of every lane keeping
# its outputs (512 MiB of GPU memory per turn) from its first turn, 16 healthy sessions beside them
GPU_PER_LANE, GPU_OVERLAP_AT = 5, 2
GPU_OVERLAP_PLAN = {f"s{lane * GPU_PER_LANE + GPU_OVERLAP_AT:02d}": "gpu_leak" for lane in range(LANES)}


def serve_and_drive(log_dir: Path, plan: dict[str, str], model, tokenizer, *, turns: int,
                    sessions: int = SESSIONS, sample_interval_s: float = 0.5, lanes: int = 0) -> dict:
    """Serve the app with ``plan``, drive ``sessions`` x ``turns``; returns log_dir/sid_of/key_of/errors/drive_s.
    ``lanes``: that many client threads, each driving its share of the sessions one after another
    (lane l: sessions l * per lane onwards), every lane starting its next session together;
    0: one client thread per session, all starting at once."""
    import gradio.profiling
    import gradio.queueing

    from dslogs_collector import Tracer
    from tests.e2e.apps.fake_gpu import FakeCuda
    from tests.e2e.apps.faults import Plan
    from tests.e2e.apps.gradio_chat import ChatApp, build_demo
    from tests.e2e.apps.serving import free_port, patient_client

    # GRADIO_PROFILING is read when gradio is imported: switch the queue's profiling on here
    saved = gradio.queueing.PROFILING_ENABLED, gradio.profiling.PROFILING_ENABLED
    # Garbage left by earlier tests in this process (a Gradio Blocks is full of reference cycles) is
    # freed by whichever collection comes next: during this run, that would drop the RSS in the middle
    # of some requests, a move none of this run's requests made. Collect it before the run starts.
    gc.collect()
    gradio.queueing.PROFILING_ENABLED = gradio.profiling.PROFILING_ENABLED = True
    gpu = FakeCuda()
    tracer = Tracer(log_dir, memory_probe=gpu.probe, samplers=["process"], sample_interval_s=sample_interval_s)
    app = ChatApp(tracer, model, tokenizer, gpu, Plan(plan))
    demo = build_demo(app, concurrency_limit=CONCURRENCY)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    keys = [f"s{i:02d}" for i in range(sessions)]
    clients: dict = {}
    errors: dict[str, list[str]] = {}  # session key -> what each failed call raised
    t0 = time.perf_counter()
    try:
        for k in keys:
            clients[k] = patient_client(url, CALL_TIMEOUT_S)
        start = threading.Barrier(lanes or len(keys), timeout=CALL_TIMEOUT_S * turns)

        def user(k: str) -> None:
            api = "/chat_stream" if k in STREAMING else "/chat"
            start.wait()
            for turn in range(turns):
                try:
                    clients[k].submit(f"[{k}] w{turn} w{turn + 7} question {turn}", api_name=api).result(
                        timeout=CALL_TIMEOUT_S)
                except Exception as e:  # noqa: BLE001 - kept: a run with errors is reported as such
                    errors.setdefault(k, []).append(f"turn {turn}: {type(e).__name__}: {e}"[:300])

        def lane(ks: list[str]) -> None:
            for k in ks:
                user(k)

        per = -(-len(keys) // lanes) if lanes else 1
        with ThreadPoolExecutor(lanes or len(keys)) as pool:
            for f in [pool.submit(lane, keys[i:i + per]) for i in range(0, len(keys), per)]:
                f.result(timeout=CALL_TIMEOUT_S * turns * per)
    finally:
        drive_s = time.perf_counter() - t0
        for c in clients.values():
            c.close()
        demo.close()
        tracer.close()
        app.host_leak.clear()
        gradio.queueing.PROFILING_ENABLED, gradio.profiling.PROFILING_ENABLED = saved
    sid_of = {k: c.session_hash for k, c in clients.items()}
    return {"log_dir": log_dir, "sid_of": sid_of, "key_of": {v: k for k, v in sid_of.items()}, "errors": errors,
            "drive_s": drive_s}


def judged(report: dict, key_of: dict[str, str], plan: dict[str, str]) -> dict:
    """Which planted sessions ``rss_growth`` (host leaks) or ``memory_leak`` (GPU leaks) named, which
    innocent ones either named, what each named session was credited per request (MiB), and the
    process-scoped findings of the planted leaks' rule."""
    gpu = any(v.startswith("gpu_leak") for v in plan.values())
    rule, per_request = ("memory_leak", "leak_per_request_mb") if gpu else ("rss_growth", "rss_kept_per_request_mb")
    named: set[str] = set()
    credited: dict[str, float] = {}
    process = []
    for f in report["findings"]:
        if f["rule"] not in ("rss_growth", "memory_leak"):
            continue
        if f.get("scope") == "session":
            named |= {key_of.get(s, s) for s in f.get("session_ids") or []}
            if f["rule"] == rule:
                for d in ((f.get("evidence") or {}).get("details") or {}).get("sessions") or []:
                    if d.get(per_request) is not None:
                        credited[key_of.get(d["session_id"], d["session_id"])] = d[per_request]
        elif f["rule"] == rule:
            process.append(f)
    leaking = {k for k, v in plan.items() if v.startswith(("host_leak", "gpu_leak"))}
    return {"leaking": leaking, "found": named & leaking, "innocent": named - leaking, "process": process,
            "credited": credited}
