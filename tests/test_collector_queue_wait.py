"""Queue wait where the framework lets the collector see it: a real Gradio server whose queue
runs one request at a time (queue wait read from the handler's gr.Request, GRADIO_PROFILING off),
and a handler's own semaphore (``tracer.gate``); then ``dslogs analyze`` shows it per request.
About 10 s (a Gradio server start and 3 calls of 0.4 s each in one slot)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from collector_helpers import read_lines
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs_collector import Tracer

HOLD_S = 0.4


def _by_stage(events, stage):
    return [e for e in events if e.get("stage") == stage]


def test_semaphore_wait_is_the_requests_queue_wait_counted_once(tmp_path):
    t = Tracer(tmp_path)
    sem = threading.Semaphore(1)

    def handler(i: int) -> None:
        rid = f"r{i}"
        with t.request(session_id=f"s{i}", request_id=rid), t.gate(sem, request_id=rid):
            time.sleep(0.2)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(handler, range(3)))
    t.close()
    events = read_lines(tmp_path)
    queues = {e["request_id"]: e for e in _by_stage(events, "queue")}
    reqs = {e["request_id"]: e for e in _by_stage(events, "request")}
    assert set(queues) == set(reqs) == {"r0", "r1", "r2"}
    waits = sorted(q["duration_ms"] for q in queues.values())
    assert waits[0] < 100 and 150 < waits[1] < 400 and 350 < waits[2] < 800, waits
    assert all(q["source"] == "semaphore" for q in queues.values())
    for rid, q in queues.items():
        # the wait lies inside the handler: its duration holds it once, not twice
        assert reqs[rid]["duration_ms"] == pytest.approx(q["duration_ms"] + 200, abs=120), (rid, q, reqs[rid])


def test_a_gate_whose_recording_fails_still_acquires_and_releases(tmp_path):
    t = Tracer(tmp_path)
    t._requests = None  # recording now raises inside the gate
    sem = threading.Semaphore(1)
    with t.gate(sem, request_id="r"):
        assert not sem.acquire(blocking=False)
    assert sem.acquire(blocking=False)
    t.close()


@pytest.fixture(scope="module")
def gradio_no_profiling():
    import os

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    gr = pytest.importorskip("gradio")
    pytest.importorskip("gradio_client")
    import gradio.profiling
    import gradio.queueing

    mp = pytest.MonkeyPatch()
    mp.setattr(gradio.queueing, "PROFILING_ENABLED", False)
    mp.setattr(gradio.profiling, "PROFILING_ENABLED", False)
    yield gr
    mp.undo()


def test_gradio_queue_wait_from_the_request_without_profiling(gradio_no_profiling, tmp_path):
    from gradio_client import Client

    from tests.e2e.apps.serving import free_port

    gr = gradio_no_profiling
    logs = tmp_path / "logs"
    t = Tracer(logs)

    def handler(text, request):
        with t.request(request_id=text, gradio_request=request):
            time.sleep(HOLD_S)
        return text

    # Gradio passes gr.Request to the parameter annotated with it (this module's annotations are
    # strings, which Gradio resolves in the module's globals, where gradio is not)
    handler.__annotations__ = {"text": str, "request": gr.Request, "return": str}

    with gr.Blocks() as demo:
        box = gr.Textbox()
        out = gr.Textbox()
        box.submit(handler, box, out, api_name="echo", concurrency_limit=1)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        clients = [Client(f"http://127.0.0.1:{port}/", verbose=False) for _ in range(3)]
        start = threading.Barrier(3)

        def call(i: int) -> str:
            start.wait()
            return clients[i].predict(f"q{i}", api_name="/echo")

        with ThreadPoolExecutor(3) as pool:
            assert sorted(pool.map(call, range(3))) == ["q0", "q1", "q2"]
        for c in clients:
            c.close()
    finally:
        demo.close()
        t.close()
    events = read_lines(logs)
    queues = _by_stage(events, "queue")
    reqs = {e["request_id"]: e for e in _by_stage(events, "request")}
    assert len(queues) == 3 and all(q["source"] == "gradio" for q in queues), [e.get("stage") for e in events]
    waits = sorted(q["duration_ms"] for q in queues)
    # one slot: the second and third waited about one and two handler times
    assert waits[1] > 0.6 * HOLD_S * 1000 and waits[2] > 1.6 * HOLD_S * 1000, waits
    assert {q["session_id"] for q in queues} == {r["session_id"] for r in reqs.values()}
    assert all(r["session_id"] for r in reqs.values())  # the session hash, from the gr.Request
    # the report shows it per request (drill-down) and as a stage (latency)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["analyze", str(logs), "--format", "json", "--no-cache", "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    model = json.loads(out.read_text(encoding="utf-8"))
    shown = sorted(r["queue_ms"] for rows in model["session_details"].values() for r in rows)
    assert shown == pytest.approx(waits, abs=0.01)
    assert any(s["stage"] == "queue" for s in model["stages"])
