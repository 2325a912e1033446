"""Deploys on the real app: the Gradio chat app (tests/e2e/apps/gradio_chat.py) started three
times into one log folder, each start a new ``Tracer`` and a new server on the same model, as a
service restarted with a new setting: a baseline, a restart with the same settings, then the
KV cache turned off in the model's generation_config (every decode step recomputes the whole
sequence). No code in the app writes a deploy record: the tracer does.

``dslogs deploys`` must list two deploys: the restart with nothing changed is part of the first
(two starts in its processes), and the second names ``generate.use_cache True → False`` and is a
regression. The second test shifts the traffic mix at the third
deploy as well (mostly short prompts, which alone would make it faster): the mix adjustment must
still find the same requests slower. 2 sessions x 25 turns per deploy (x 40 with the mix shift); ~1 min each on a 2-core box.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dslogs_collector import Tracer
from tests.e2e.apps.faults import Plan
from tests.e2e.apps.serving import free_port, patient_client

gradio = pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

SESSIONS = 2  # two users at a time: a calm service, so the box's own load moves timings less
CALL_TIMEOUT_S = 60
SHORT, MIDDLE, LONG = 800, 1600, 2400  # prompt words: without a KV cache each decode step runs the whole sequence
# (tiny_r1, one thread: ~70 and ~120 ms a call with the cache; without it ~3.5x and ~6x)


def prompt(key: str, turn: int, words: int) -> str:
    return f"[{key}] " + " ".join(f"w{(turn * 7 + i) % 59}" for i in range(words))


def serve(log_dir, model, tokenizer, use_cache: bool, lengths: list[int], turns: int) -> None:
    """One start of the service: tracer, app, server; SESSIONS users x ``turns``; shut down."""
    from tests.e2e.apps.fake_gpu import FakeCuda
    from tests.e2e.apps.gradio_chat import ChatApp, build_demo

    model.generation_config.use_cache = use_cache
    gpu = FakeCuda()
    tracer = Tracer(log_dir, memory_probe=gpu.probe)
    app = ChatApp(tracer, model, tokenizer, gpu, Plan({}))
    demo = build_demo(app, concurrency_limit=SESSIONS)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    errors: list = []
    try:
        url = f"http://127.0.0.1:{port}/"
        clients = [patient_client(url, CALL_TIMEOUT_S) for _ in range(SESSIONS)]
        start = threading.Barrier(SESSIONS, timeout=60)

        def user(n: int) -> None:
            start.wait()
            for turn in range(turns):
                words = lengths[(n * turns + turn) % len(lengths)]
                try:
                    clients[n].predict(prompt(f"s{n:02d}", turn, words), api_name="/chat")
                except Exception as e:  # noqa: BLE001 - counted, the test fails on it
                    errors.append(e)

        with ThreadPoolExecutor(SESSIONS) as pool:
            for f in [pool.submit(user, n) for n in range(SESSIONS)]:
                f.result(timeout=CALL_TIMEOUT_S * turns)
        for c in clients:
            c.close()
    finally:
        demo.close()
        tracer.close()
    assert not errors, errors[:3]


def deploys_json(log_dir) -> dict:
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    r = CliRunner().invoke(app, ["deploys", str(log_dir), "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def own_model():
    from tests.e2e.apps.tiny_r1 import load_model

    return load_model(oom_at_batch=None)  # its generation_config is changed here: not the shared one


def _three_deploys(log_dir, model, tokenizer, lengths, third_lengths, turns):
    serve(log_dir, model, tokenizer, True, lengths, turns)
    serve(log_dir, model, tokenizer, True, lengths, turns)
    serve(log_dir, model, tokenizer, False, third_lengths, turns)
    return deploys_json(log_dir)


def _check(m: dict, turns: int) -> None:
    assert m["source"] == "records"
    ds = m["deploys"]
    assert [d["id"] for d in ds] == ["d1", "d2"], [(d["id"], d["start"], d["changes"]) for d in ds]
    assert [d["requests"] for d in ds] == [2 * SESSIONS * turns, SESSIONS * turns]
    # nothing changed at the restart: no deploy of its own, one more start of the first
    assert len(ds[0]["processes"]) == 2, ds[0]["processes"]
    # the record: what the service runs with, written by the tracer alone
    cfg = ds[0]["config"]
    assert cfg["model.class"] == "TinyR1" and cfg["generate.use_cache"] is True and cfg["device"] == "cpu"
    assert cfg["pkg.torch"] and cfg["pkg.transformers"] and cfg["pkg.gradio"] and cfg["dtype"] == "float32"
    assert cfg["call.max_new_tokens"] == 256 and cfg["call.do_sample"] is True
    assert not any("w1 w2" in str(v) for v in cfg.values())  # no prompt text
    assert ds[1]["changes"] == [{"key": "generate.use_cache", "before": True, "after": False}]
    assert ds[1]["verdict"] == "regression", ds[1]
    slower = {c["label"] for c in ds[1]["metric_changes"] if c["verdict"] == "regression"}
    assert slower & {"decode", "TPOT", "end-to-end"}, slower


def test_three_restarts_the_cache_off_is_the_regression(log_root, own_model, tokenizer):
    m = _three_deploys(log_root / "deploys" / "logs", own_model, tokenizer, [MIDDLE], [MIDDLE], 25)
    _check(m, 25)


def test_the_mix_shifts_with_the_cache_off(log_root, own_model, tokenizer):
    """At the third deploy 4 in 5 prompts are short (which alone makes requests faster): the
    same requests are still slower, and the verdict says so."""
    m = _three_deploys(log_root / "deploys_mix" / "logs", own_model, tokenizer, [SHORT, LONG],
                       [SHORT, SHORT, SHORT, SHORT, LONG], 40)
    _check(m, 40)
    d3 = m["deploys"][1]
    assert any("input tokens p50" in line for line in d3["summary"]), d3["summary"]  # the shift is seen
    # ... and the regression is the service's: slower for the same requests
    service = [c for c in d3["metric_changes"] if c["verdict"] == "regression" and c["quantile"] == "p50"]
    # (tokens/s falls where a time rises)
    assert service and all(c["service_pct"] is not None and abs(c["service_pct"]) > 20 for c in service), service
