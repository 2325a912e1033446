"""tracer.stream_generate on a real model.generate() (tiny random Qwen2 on CPU), and behind a
real Gradio server driven by gradio_client: text streams, an OOM in generate reaches the client
as an error within seconds and frees the concurrency slot, a closed stream (a client's cancel)
stops generate, and
Gradio's queue wait (GRADIO_PROFILING=1) lands in the request's duration and ttft."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dslogs_collector import Tracer  # noqa: E402
from tests.collector_hf_helpers import (  # noqa: E402
    PROMPT,
    OomOn,
    by_stage,
    events_of,
    prompt_ids,
    prompt_text,
    tiny_qwen2,
    word_tokenizer,
)
from tests.e2e.apps.serving import free_port, patient_client  # noqa: E402

pytestmark = pytest.mark.hf


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def generate_threads():
    return [t for t in threading.enumerate() if t.name.startswith("dslogs-generate")]


class SlowSteps:
    """A forward pre-hook sleeping ``s`` per forward, so a stream lasts long enough to cancel."""

    def __init__(self, model, s):
        self.model, self.s = model, s

    def __enter__(self):
        self.h = self.model.register_forward_pre_hook(lambda *a: time.sleep(self.s))
        return self

    def __exit__(self, *exc):
        self.h.remove()


class RaiseOomAfter(transformers.LogitsProcessor):
    """A logits processor that raises torch.cuda.OutOfMemoryError at generated token ``n``."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls >= self.n:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB")
        return scores


def test_stream_yields_the_generated_text_and_traces_it(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    enc = t.tokenize(tokenizer, prompt_text(30), session_id="s", request_id="r")
    w0 = time.perf_counter()
    first_piece_ms = None
    pieces = []
    for piece in t.stream_generate(model, enc, session_id="s", request_id="r", tokenizer=tokenizer,
                                   max_new_tokens=12, eos_token_id=None):
        if first_piece_ms is None:
            first_piece_ms = (time.perf_counter() - w0) * 1000
        pieces.append(piece)
    wall_ms = (time.perf_counter() - w0) * 1000
    t.close()
    ref = model.generate(**enc, max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert "".join(pieces).strip() == tokenizer.decode(ref[0, PROMPT:], skip_special_tokens=True).strip()
    assert len(pieces) > 3  # streamed, not one block at the end
    ev = events_of(tmp_path)
    assert [e["stage"] for e in ev] == ["input", "tokenize", "prefill", "decode", "request", "kv_cache"]
    tok, pre, dec, req = ev[1], ev[2], ev[3], ev[4]
    assert dec["output_len"] == 12 == req["output_len"] and req["finish_reason"] == "length"
    assert req["status"] == "ok" and req["device"] == "cpu" and req["attempts"] == 1 and req["inflight"] == 1
    # ttft = tokenize + time to the first streamed token: after the prefill, before the first piece
    assert tok["duration_ms"] + pre["duration_ms"] <= req["ttft_ms"] <= tok["duration_ms"] + first_piece_ms
    assert pre["duration_ms"] + dec["duration_ms"] <= wall_ms
    assert not generate_threads()


def test_beam_search_with_streaming_fails_at_once(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    with pytest.raises(ValueError, match="num_beams=4"):
        t.stream_generate(model, prompt_ids(), request_id="r", tokenizer=tokenizer, num_beams=4)
    with pytest.raises(ValueError, match="tokenizer"):
        t.stream_generate(model, prompt_ids(), request_id="r")
    t.close()
    assert not events_of(tmp_path) and not generate_threads()


def test_oom_mid_stream_ends_it_and_reraises_in_the_consumer(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    proc = RaiseOomAfter(5)
    pieces = []
    t0 = time.perf_counter()
    with pytest.raises(torch.cuda.OutOfMemoryError) as got:
        for piece in t.stream_generate(model, prompt_ids(), session_id="s", request_id="r", tokenizer=tokenizer,
                                       max_new_tokens=50, temperature=0.8, do_sample=True,
                                       logits_processor=transformers.LogitsProcessorList([proc])):
            pieces.append(piece)
    elapsed = time.perf_counter() - t0
    t.flush()
    ev = events_of(tmp_path)  # on disk before the consumer saw the exception
    t.close()
    assert elapsed < 5 and pieces  # the text before the OOM came through, then the error
    assert "Tried to allocate 3.50 GiB" in str(got.value)
    (err,) = by_stage(ev, "error")
    (req,) = by_stage(ev, "request")
    assert err["error_type"] == "OutOfMemoryError" and err["failed_stage"] == "decode"
    assert err["params"]["temperature"] == 0.8 and err["device"] == "cpu"
    assert req["status"] == "error" and req["finish_reason"] == "error" and req["ttft_ms"] > 0
    assert not generate_threads() and not model._forward_hooks


def test_oom_fallback_retries_greedy_before_any_text(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    with OomOn(model, 1):  # the prefill of the first attempt fails
        text = "".join(t.stream_generate(model, prompt_ids(), session_id="s", request_id="r", tokenizer=tokenizer,
                                         max_new_tokens=6, do_sample=True, eos_token_id=None, oom_fallback=True))
    t.close()
    greedy = model.generate(**prompt_ids(), max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert text.strip() == tokenizer.decode(greedy[0, PROMPT:], skip_special_tokens=True).strip()
    ev = events_of(tmp_path)
    assert [e["stage"] for e in ev] == ["error", "prefill", "decode", "request", "kv_cache"]
    err, _, dec, req, _ = ev
    assert err["fallback"] == "greedy" and err["failed_stage"] == "prefill" and err["params"]["do_sample"] is True
    assert dec["fallback"] == "greedy" and req["attempts"] == 2 and req["status"] == "ok"


def test_oom_after_text_went_out_is_not_retried(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    proc = RaiseOomAfter(4)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        list(t.stream_generate(model, prompt_ids(), request_id="r", tokenizer=tokenizer, max_new_tokens=20,
                               oom_fallback=True, logits_processor=transformers.LogitsProcessorList([proc])))
    t.close()
    ev = events_of(tmp_path)
    (err,) = by_stage(ev, "error")
    assert "fallback" not in err and not by_stage(ev, "decode")


def test_closing_the_stream_stops_generate(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    with SlowSteps(model, 0.01):
        stream = t.stream_generate(model, prompt_ids(), session_id="s", request_id="r", tokenizer=tokenizer,
                                   max_new_tokens=300, eos_token_id=None)
        got = [next(stream), next(stream)]
        t0 = time.perf_counter()
        stream.close()  # what a client cancel does to the handler's generator
        stopped_s = time.perf_counter() - t0
    t.close()
    assert got and stopped_s < 2 and not generate_threads()
    (req,) = by_stage(events_of(tmp_path), "request")
    assert req["finish_reason"] == "cancelled" and req["output_len"] < 100


def test_user_stopping_criteria_still_apply(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    crit = transformers.StoppingCriteriaList([transformers.MaxLengthCriteria(max_length=PROMPT + 3)])
    list(t.stream_generate(model, prompt_ids(), request_id="r", tokenizer=tokenizer, max_new_tokens=30,
                           eos_token_id=None, stopping_criteria=crit))
    t.close()
    (req,) = by_stage(events_of(tmp_path), "request")
    assert req["output_len"] == 3


# -- a real Gradio server -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gradio_mods():
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("GRADIO_PROFILING", "1")  # read at gradio's import
    gr = pytest.importorskip("gradio")
    client_mod = pytest.importorskip("gradio_client")
    import gradio.queueing

    if not gradio.queueing.PROFILING_ENABLED:  # gradio was imported before this module set the env
        mp = pytest.MonkeyPatch()
        mp.setattr(gradio.queueing, "PROFILING_ENABLED", True)
        yield gr, client_mod
        mp.undo()
    else:
        yield gr, client_mod


def serve(gr, demo):
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        show_error=True)
    return demo, f"http://127.0.0.1:{port}/"


def test_gradio_streaming_handler_oom_reaches_the_client(gradio_mods, model, tokenizer, tmp_path):
    gr, _ = gradio_mods
    t = Tracer(tmp_path)

    def chat(message, history):
        rid = str(uuid.uuid4())
        kwargs = {"max_new_tokens": 40, "eos_token_id": None}
        if message == "oom":
            kwargs["logits_processor"] = transformers.LogitsProcessorList([RaiseOomAfter(6)])
        elif message == "long":
            kwargs["max_new_tokens"] = 300
        with t.request(session_id="s", request_id=rid):
            enc = t.tokenize(tokenizer, prompt_text(10), session_id="s", request_id=rid)
            text = ""
            for piece in t.stream_generate(model, enc, session_id="s", request_id=rid, tokenizer=tokenizer,
                                           **kwargs):
                text += piece
                yield text

    demo, url = serve(gr, gr.ChatInterface(chat))
    try:
        client = patient_client(url, 60)
        t0 = time.perf_counter()
        with pytest.raises(Exception) as got:  # noqa: PT011 (gradio_client's AppError)
            client.submit("oom", api_name="/chat").result(timeout=60)
        oom_to_client_s = time.perf_counter() - t0
        assert not isinstance(got.value, TimeoutError) and "timed out" not in str(got.value).lower()
        assert oom_to_client_s < 10, oom_to_client_s
        # the concurrency slot (1, Gradio's default) is free again: the next call runs and streams
        ok = client.submit("hello", api_name="/chat").result(timeout=60)
        assert isinstance(ok, str) and ok.count("w") >= 20
        # the client cancels a long stream: Gradio drops the handler's generator, generate stops
        with SlowSteps(model, 0.03):
            job = client.submit("long", api_name="/chat")
            deadline = time.monotonic() + 30
            while len(job.outputs()) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.perf_counter()
            job.cancel()
            while generate_threads() and time.perf_counter() - t0 < 10:
                time.sleep(0.05)
            cancel_to_stop_s = time.perf_counter() - t0
        assert not generate_threads() and cancel_to_stop_s < 5
        client.close()
    finally:
        demo.close()
    t.close()
    print(f"\nOOM to client error: {oom_to_client_s * 1000:.0f} ms; cancel to generate stopped: "
          f"{cancel_to_stop_s * 1000:.0f} ms")
    ev = events_of(tmp_path)
    (err,) = by_stage(ev, "error")
    reqs = by_stage(ev, "request")
    assert err["error_type"] == "OutOfMemoryError" and err["failed_stage"] == "decode"
    assert [r["status"] for r in reqs] == ["error", "ok", "ok"]
    assert reqs[2]["finish_reason"] == "cancelled" and 5 <= reqs[2]["output_len"] < 300
    assert reqs[0]["request_id"] == err["request_id"] and reqs[0]["attempts"] == 1
    assert not generate_threads()


def test_gradio_queue_wait_is_recorded(gradio_mods, model, tokenizer, tmp_path):
    gr, _ = gradio_mods
    t = Tracer(tmp_path)

    def answer(message):
        rid = message  # the client's label: matches events to the client's own timings
        with t.request(session_id=rid, request_id=rid):
            enc = t.tokenize(tokenizer, prompt_text(20), session_id=rid, request_id=rid)
            text = ""
            for piece in t.stream_generate(model, enc, session_id=rid, request_id=rid, tokenizer=tokenizer,
                                           max_new_tokens=40, eos_token_id=None):
                text += piece
                yield text

    demo, url = serve(gr, gr.Interface(answer, "text", "text", concurrency_limit=1))
    timings = {}
    try:
        clients = [patient_client(url, 60) for _ in range(3)]
        start = threading.Barrier(3, timeout=30)

        def call(i):
            start.wait()
            t0 = time.perf_counter()
            clients[i].submit(f"c{i}", api_name="/answer").result(timeout=60)
            timings[f"c{i}"] = (time.perf_counter() - t0) * 1000

        with SlowSteps(model, 0.012):  # ~0.5 s per call, so the queue is visible
            threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(90)
        for c in clients:
            c.close()
    finally:
        demo.close()
    t.close()
    assert len(timings) == 3
    ev = events_of(tmp_path)
    queue = {e["request_id"]: e for e in by_stage(ev, "queue")}
    reqs = {e["request_id"]: e for e in by_stage(ev, "request")}
    assert set(queue) == set(reqs) == set(timings) and {q["source"] for q in queue.values()} == {"gradio"}
    order = sorted(timings, key=lambda rid: queue[rid]["duration_ms"])
    handler = {rid: reqs[rid]["duration_ms"] - queue[rid]["duration_ms"] for rid in order}
    # What the client sees beyond the request span is transport (HTTP join, SSE, gradio_client's
    # job thread) plus Gradio's pre/postprocessing: the same for each call. So the client's own
    # measure of call k's queue wait is its e2e minus its handler time minus that overhead, taken
    # from the call that did not wait.
    overhead = timings[order[0]] - reqs[order[0]]["duration_ms"]
    client_wait = {rid: timings[rid] - handler[rid] - overhead for rid in order}
    print("\nclient e2e / request.duration_ms / queue ms / client-measured wait:",
          {rid: (round(timings[rid]), round(reqs[rid]["duration_ms"]), round(queue[rid]["duration_ms"]),
                 round(client_wait[rid])) for rid in order})
    assert 0 <= overhead < 1000
    # the first runs at once; the second waits for the first, the third for both
    assert queue[order[0]]["duration_ms"] < 150
    assert queue[order[1]]["duration_ms"] == pytest.approx(handler[order[0]], abs=200)
    assert queue[order[2]]["duration_ms"] == pytest.approx(handler[order[0]] + handler[order[1]], abs=300)
    for rid in order[1:]:
        assert queue[rid]["duration_ms"] > 300  # ~0.5 s handlers: a real wait, not noise
        assert queue[rid]["duration_ms"] == pytest.approx(client_wait[rid], abs=max(150, 0.2 * client_wait[rid]))
    for rid in order:
        assert reqs[rid]["ttft_ms"] >= queue[rid]["duration_ms"]  # queue wait is in ttft too


# -- the docs' Streamlit example under a real Streamlit AppTest ---------------------------------

def streamlit_chat_app():
    """docs/collector.md's Streamlit example, with the tiny model (AppTest runs this source)."""
    import uuid

    import streamlit as st
    import transformers

    from dslogs_collector import Tracer
    from tests.collector_hf_helpers import tiny_qwen2, word_tokenizer
    from tests.test_collector_stream import RaiseOomAfter

    @st.cache_resource
    def load():
        return tiny_qwen2(), word_tokenizer(), Tracer(None)  # $DSLOGS_LOG_DIR

    model, tokenizer, tracer = load()
    if "session_id" not in st.session_state:
        st.session_state.session_id = str(uuid.uuid4())
    sid = st.session_state.session_id
    if prompt := st.chat_input("ask"):
        rid = str(uuid.uuid4())
        extra = {}
        if prompt.startswith("oom"):
            extra["logits_processor"] = transformers.LogitsProcessorList([RaiseOomAfter(5)])
        with tracer.request(session_id=sid, request_id=rid):
            inputs = tracer.tokenize(tokenizer, prompt, session_id=sid, request_id=rid)
            with st.chat_message("assistant"):
                response = st.write_stream(tracer.stream_generate(
                    model, inputs, session_id=sid, request_id=rid, tokenizer=tokenizer,
                    max_new_tokens=16, eos_token_id=None, **extra))
            st.session_state.last = response
        tracer.flush()


def test_streamlit_write_stream_example(tmp_path, monkeypatch):
    testing = pytest.importorskip("streamlit.testing.v1")
    import streamlit as st

    monkeypatch.setenv("DSLOGS_LOG_DIR", str(tmp_path))
    at = testing.AppTest.from_function(streamlit_chat_app, default_timeout=120)
    at.run()
    at.chat_input[0].set_value("w5 w6 w7 w8").run()
    assert not at.exception
    answer = at.session_state["last"]
    assert isinstance(answer, str) and answer.count("w") >= 10
    at.chat_input[0].set_value("oom w9 w10").run()
    assert at.exception and "Tried to allocate 3.50 GiB" in at.exception[0].message  # the OOM, shown
    st.cache_resource.clear()
    ev = events_of(tmp_path)
    reqs = by_stage(ev, "request")
    (err,) = by_stage(ev, "error")
    assert [r["status"] for r in reqs] == ["ok", "error"] and reqs[0]["output_len"] == 16
    assert err["error_type"] == "OutOfMemoryError" and err["request_id"] == reqs[1]["request_id"]
    assert len({r["session_id"] for r in reqs}) == 1
    assert not generate_threads()


def test_timeout_between_pieces_stops_generate(model, tokenizer, tmp_path):
    t = Tracer(tmp_path)
    with SlowSteps(model, 0.4):
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError):
            list(t.stream_generate(model, prompt_ids(), request_id="r", tokenizer=tokenizer, max_new_tokens=50,
                                   eos_token_id=None, timeout_s=0.1))
        took = time.perf_counter() - t0
    t.close()
    assert took < 5 and not generate_threads()
