"""The ChatApp handlers served without Gradio: one thread pool of ``concurrency`` workers per
endpoint, as Gradio's ``concurrency_limit`` (a call beyond it waits in the pool's queue, as in
Gradio's). Used by bench/gpu_e2e.py and bench/capacity_sweep.py on a box without gradio.

The time a call waited for a worker reaches the handler as ``request.queue_wait_ms``, the
number Gradio's profiling gives the tracer, so the logs hold the ``queue`` stage either way.
Imports nothing from gradio."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

ENDPOINTS = ("/chat", "/chat_stream")


class ThreadServer:
    """A generator handler is consumed to its last piece, as Gradio consumes it."""

    def __init__(self, app, concurrency: int, call_timeout_s: float = 120.0):
        self.app, self.call_timeout_s = app, call_timeout_s
        self.pools = {api: ThreadPoolExecutor(concurrency, thread_name_prefix=f"serve{api}") for api in ENDPOINTS}

    def client(self, key: str | None = None):
        """(session id, call(message, api) -> the answer): one user's connection."""
        sid = uuid.uuid4().hex[:11]

        def call(message: str, api: str = "/chat"):
            queued = time.perf_counter()

            def handle():
                req = SimpleNamespace(session_hash=sid, queue_wait_ms=(time.perf_counter() - queued) * 1000)
                if api == "/chat":
                    return self.app.chat(message, [], req)
                return list(self.app.chat_stream(message, [], req))[-1]

            return self.pools[api].submit(handle).result(timeout=self.call_timeout_s)

        return sid, call

    def close(self) -> None:
        for p in self.pools.values():
            p.shutdown(wait=True)
