"""A Gradio chat service on a DeepSeek-R1-shaped model, instrumented with dslogs.

Two chat endpoints in one server, as a service often has: ``/chat`` answers in one piece
(``tracer.generate``), ``/chat_stream`` streams (``tracer.stream_generate``). Each runs up to
``concurrency_limit`` requests at once; the rest wait in Gradio's queue, which the tracer
records as the ``queue`` stage (``GRADIO_PROFILING=1``).

What instrumenting takes, per handler: one ``tracer.request`` span around the handler body
(it records the request's memory before/after and how many requests were in flight), and
``tracer.tokenize`` / ``tracer.generate`` / ``tracer.stream_generate`` instead of the plain
calls. The session id is Gradio's ``session_hash``.

The fault plan (faults.py) makes some sessions misbehave the way article 003 describes;
``gpu`` is torch.cuda on a GPU host or faults' process-wide ``FakeCuda`` on CI.

Run it by hand: ``python -m tests.e2e.apps.gradio_chat`` (logs in ./logs).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

try:
    import gradio as gr
except ImportError:  # the handlers also run without a server: bench/gpu_e2e.py on a box without gradio
    gr = None

from tests.e2e.apps.faults import ACTIVATION_MB, Plan
from tests.e2e.apps.tiny_r1 import parse_thinking_chain

SAMPLING = {"do_sample": True, "temperature": 0.6, "top_p": 0.95}  # article 003 §2.2


class ChatApp:
    """The handlers and the state they keep (per process, like any module-level state)."""

    def __init__(self, tracer, model, tokenizer, gpu, plan: Plan, activation_mb: float = ACTIVATION_MB,
                 empty_cache: bool = True):
        self.tracer, self.model, self.tokenizer, self.gpu, self.plan = tracer, model, tokenizer, gpu, plan
        # what each request holds on the GPU while it runs; empty_cache=False is the app that
        # never applies article 003 §4.1's fix (ghost memory: reserved stays at the peak)
        self.activation_mb, self.empty_cache = activation_mb, empty_cache
        self.kept_outputs: dict[str, list] = {}  # the GPU leak: outputs kept per session
        self.host_leak: list[bytes] = []  # the host leak: a cache that is never trimmed
        self.turns: dict[str, int] = {}  # requests seen per session (the host leak may start late)
        # the app's own timing of each generate call: request_id -> (session_id, ms)
        self.generate_ms: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _kwargs(self, fault) -> dict:
        kw = dict(SAMPLING, max_new_tokens=fault.max_new_tokens, pad_token_id=self.tokenizer.eos_token_id)
        if fault.num_beams > 1:  # beam search: no sampling parameters
            kw = dict(max_new_tokens=fault.max_new_tokens, pad_token_id=self.tokenizer.eos_token_id,
                      num_beams=fault.num_beams, do_sample=False)
        return kw

    def _turn(self, sid: str) -> int:
        with self._lock:
            self.turns[sid] = self.turns.get(sid, 0) + 1
            return self.turns[sid]

    def _queued(self, request, sid: str, rid: str) -> None:
        """A server other than Gradio (tests/e2e/apps/thread_server.py) hands the request's wait
        for a worker over on the request; Gradio's the tracer reads itself."""
        ms = getattr(request, "queue_wait_ms", None)
        if ms is not None:
            self.tracer.queue_wait(ms, session_id=sid, request_id=rid, source="threads")

    @contextlib.contextmanager
    def _working_memory(self, fault):
        """Host memory the request holds while it generates (allocated after tokenizing, as a
        real pipeline's buffers are), released at its end."""
        held = b"\x02" * (fault.host_transient_mb * 1024 * 1024) if fault.host_transient_mb else None
        try:
            yield
        finally:
            del held

    def _after_reply(self, sid: str, fault, outputs, turn: int = 1) -> None:
        if fault.gpu_leak_mb:  # article 003 §4.1's bug: outputs kept, never del'd
            self.kept_outputs.setdefault(sid, []).append(outputs)
            self.gpu.keep(fault.gpu_leak_mb)
        else:  # article 003 §4.1's fix
            del outputs
            if self.empty_cache:
                self.gpu.empty_cache()
        if fault.host_leak_mb and turn >= fault.leak_from_turn:  # a per-request cache nobody trims
            with self._lock:
                self.host_leak.append(b"\x01" * (fault.host_leak_mb * 1024 * 1024))

    def chat(self, message: str, history: list, request: gr.Request) -> str:
        sid, rid = request.session_hash, str(uuid.uuid4())
        fault, turn = self.plan.for_message(message), self._turn(sid)
        t, tok = self.tracer, self.tokenizer
        with t.request(session_id=sid, request_id=rid, gradio_request=request):
            self._queued(request, sid, rid)
            enc = t.tokenize(tok, message, session_id=sid, request_id=rid, device=self.model.device)
            with self.gpu.activations(self.activation_mb), self._working_memory(fault):
                t0 = time.perf_counter()
                try:
                    outputs = t.generate(self.model, enc, session_id=sid, request_id=rid, tokenizer=tok,
                                         oom_fallback=fault.oom_fallback, **self._kwargs(fault))
                finally:
                    self.generate_ms[rid] = (sid, (time.perf_counter() - t0) * 1000)
            with t.stage("format", session_id=sid, request_id=rid):
                text = parse_thinking_chain(tok.decode(outputs[0][enc["input_ids"].shape[1]:],
                                                       skip_special_tokens=True))
            self._after_reply(sid, fault, outputs, turn)
        return text

    def chat_stream(self, message: str, history: list, request: gr.Request):
        sid, rid = request.session_hash, str(uuid.uuid4())
        fault, turn = self.plan.for_message(message), self._turn(sid)
        t, tok = self.tracer, self.tokenizer
        with t.request(session_id=sid, request_id=rid, gradio_request=request):
            self._queued(request, sid, rid)
            enc = t.tokenize(tok, message, session_id=sid, request_id=rid, device=self.model.device)
            text = ""
            with self.gpu.activations(self.activation_mb), self._working_memory(fault):
                t0 = time.perf_counter()
                try:
                    for piece in t.stream_generate(self.model, enc, session_id=sid, request_id=rid,
                                                   tokenizer=tok, **self._kwargs(fault)):
                        text += piece
                        yield text
                finally:
                    self.generate_ms[rid] = (sid, (time.perf_counter() - t0) * 1000)
            self._after_reply(sid, fault, None, turn)
        yield parse_thinking_chain(text)


def build_demo(app: ChatApp, concurrency_limit: int = 4) -> gr.Blocks:
    with gr.Blocks(title="DeepSeek-R1 (tiny) chat") as demo:
        with gr.Tab("answer"):
            gr.ChatInterface(app.chat, api_name="chat", concurrency_limit=concurrency_limit)
        with gr.Tab("streaming"):
            gr.ChatInterface(app.chat_stream, api_name="chat_stream", concurrency_limit=concurrency_limit)
    return demo


if __name__ == "__main__":  # pragma: no cover - manual run
    import os

    os.environ.setdefault("GRADIO_PROFILING", "1")
    from dslogs_collector import Tracer
    from tests.e2e.apps.fake_gpu import FakeCuda
    from tests.e2e.apps.tiny_r1 import load_model, load_tokenizer

    gpu = FakeCuda()
    app = ChatApp(Tracer("./logs", memory_probe=gpu.probe), load_model(), load_tokenizer(), gpu, Plan({}))
    build_demo(app).queue().launch(server_name="127.0.0.1")
