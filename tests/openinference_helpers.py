"""OpenInference spans written by the real instrumentation, for tests and scripts/.

``openinference-instrumentation-openai`` wraps the real ``openai`` client, which talks to a small
OpenAI-compatible server started here on 127.0.0.1 (stdlib http.server). Each call's plan (token
counts, latency, streaming, an HTTP 500) travels in its last message, so the server answers what
the test put in; the instrumentation records the span as it would against vLLM or OpenAI: kind
LLM, ``llm.token_count.*`` from the response's usage, ``llm.invocation_parameters`` as the JSON of
the request's parameters, ``session.id``/``user.id`` from ``using_session``/``using_user``, the
"First Token Stream Event" of a stream, an ``exception`` event and ERROR status on failure.
Agent and chain spans around the calls come from the library's own ``OITracer``.

With a ``Clock`` nothing sleeps: the SDK's clock is it, moved as the response arrives (the
client's response hook: the first chunk's wait, or the whole answer's) and after the first
chunk of a stream (the rest of it), so the spans are the same, byte for byte, on every run
(scripts/otlp_samples.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NS = 1_000_000_000


@dataclass
class Call:
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # the server's time to answer (a stream: to its last chunk)
    first_token: float = 0.0  # a stream: seconds before its first chunk
    stream: bool = False
    fail: bool = False  # HTTP 500
    session: str | None = None
    user: str | None = None
    max_tokens: int | None = 256
    temperature: float | None = 0.7
    n: int | None = None
    gap: float = 0.0  # seconds before the call (its arrival after the previous call's end)


class Clock:
    """A clock in nanoseconds that moves only when told to."""

    def __init__(self, start: float):
        self.ns = int(start * NS)

    def __call__(self) -> int:
        return self.ns

    def wait(self, seconds: float) -> None:
        self.ns += int(seconds * NS)


_CLOCK: Clock | None = None


def _wait(seconds: float) -> None:
    """The server's wait: real time, unless a Clock moves instead (on the client's side)."""
    if _CLOCK is None:
        time.sleep(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        plan = json.loads(body["messages"][-1]["content"])
        usage = {"prompt_tokens": plan["prompt_tokens"], "completion_tokens": plan["completion_tokens"],
                 "total_tokens": plan["prompt_tokens"] + plan["completion_tokens"]}  # fmt: skip
        if plan["fail"]:
            _wait(plan["seconds"])
            out = json.dumps({"error": {"message": "internal server error", "type": "InternalServerError"}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        base = {"id": "chatcmpl-1", "created": 1_796_000_000, "model": body["model"]}
        if not plan["stream"]:
            _wait(plan["seconds"])
            out = json.dumps({**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        _wait(plan["first_token"])
        chunk = {**base, "object": "chat.completion.chunk"}
        for i, piece in enumerate(("o", "k")):
            if i:
                _wait(max(0.0, plan["seconds"] - plan["first_token"]))
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            self.wfile.write(b"data: " + json.dumps({**chunk, "choices": [
                {"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n")  # fmt: skip
            self.wfile.flush()
        self.wfile.write(b"data: " + json.dumps({**chunk, "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode() + b"\n\n")  # fmt: skip
        self.wfile.write(b"data: " + json.dumps({**chunk, "choices": [], "usage": usage}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class FakeOpenAI:
    """An OpenAI-compatible chat server on 127.0.0.1 answering each call's plan."""

    def __enter__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def run_calls(provider, calls: list[Call], agent_every: int = 0, model: str = "qwen2.5-0.5b-instruct",
              clock: Clock | None = None) -> None:  # fmt: skip
    """Make ``calls`` through the instrumented client (one at a time). With ``agent_every``, each
    group of that many calls runs inside an AGENT span holding a CHAIN span, as an agent framework
    traces a turn (OITracer, the library's tracer), the agent span carrying the group's token total."""
    import httpx
    import openai
    from openinference.instrumentation import OITracer, TraceConfig, using_session, using_user
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.semconv.trace import SpanAttributes

    global _CLOCK
    patches = contextlib.ExitStack()
    if clock is not None:
        from unittest import mock

        _CLOCK = clock
        patches.enter_context(mock.patch("opentelemetry.sdk.trace.time_ns", clock))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    tracer = OITracer(provider.get_tracer("agent"), config=TraceConfig())
    try:
        with FakeOpenAI() as server:
            current: list[Call] = []

            def arrived(response) -> None:  # headers in: the wait before the first byte
                if clock is not None and current:
                    c = current[-1]
                    clock.wait(c.first_token if c.stream and not c.fail else c.seconds)

            http = httpx.Client(event_hooks={"response": [arrived]})
            client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, http_client=http)

            def one(c: Call) -> None:
                if c.gap and clock is not None:
                    clock.wait(c.gap)
                current.append(c)
                params = {k: v for k, v in (("max_tokens", c.max_tokens), ("temperature", c.temperature), ("n", c.n))
                          if v is not None}  # fmt: skip
                plan = json.dumps({"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                                   "seconds": c.seconds, "first_token": c.first_token, "stream": c.stream,
                                   "fail": c.fail})  # fmt: skip
                messages = [{"role": "user", "content": plan}]
                session = using_session(c.session) if c.session else contextlib.nullcontext()
                user = using_user(c.user) if c.user else contextlib.nullcontext()
                with session, user:
                    try:
                        if c.stream:
                            for i, _chunk in enumerate(client.chat.completions.create(
                                    model=model, messages=messages, stream=True,
                                    stream_options={"include_usage": True}, **params)):  # fmt: skip
                                if i == 0 and clock is not None:  # the first token recorded: the rest
                                    clock.wait(max(0.0, c.seconds - c.first_token))
                        else:
                            client.chat.completions.create(model=model, messages=messages, **params)
                    except openai.InternalServerError:
                        pass

            groups = [calls[i:i + agent_every] for i in range(0, len(calls), agent_every)] if agent_every else [calls]
            for group in groups:
                if not agent_every:
                    for c in group:
                        one(c)
                    continue
                with tracer.start_as_current_span("agent.run", openinference_span_kind="agent") as agent:
                    with tracer.start_as_current_span("plan", openinference_span_kind="chain"):
                        for c in group:
                            one(c)
                    agent.set_attribute(SpanAttributes.LLM_TOKEN_COUNT_PROMPT, sum(c.prompt_tokens for c in group))
                    agent.set_attribute(SpanAttributes.LLM_TOKEN_COUNT_COMPLETION,
                                        sum(c.completion_tokens for c in group))
    finally:
        instrumentor.uninstrument()
        patches.close()
        _CLOCK = None
