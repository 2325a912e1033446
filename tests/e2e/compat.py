"""The tracer the apps are given, and what of the collector API this checkout has.

The apps are written against the request-span API (TEAM.md's collector contract:
``Tracer(memory_probe=)``, ``tracer.request()``, ``tracer.stream_generate()``). Where this
checkout predates it, ``make_tracer`` returns a subclass with the documented pre-span
equivalents (a no-op span; the TextIteratorStreamer pattern of docs/collector.md) so the apps
still run, and the assertions that need the real thing are marked xfail(strict) on the flags
below: once the API is merged they run, and an xfail that starts passing fails the run.
"""

from __future__ import annotations

import contextlib
import inspect
import threading

from collector import Tracer

HAS_REQUEST_SPAN = hasattr(Tracer, "request")
HAS_STREAM = hasattr(Tracer, "stream_generate")
HAS_MEMORY_PROBE = "memory_probe" in inspect.signature(Tracer.__init__).parameters
HAS_COLLECTOR_API = HAS_REQUEST_SPAN and HAS_STREAM and HAS_MEMORY_PROBE


class _PreSpanTracer(Tracer):
    def __init__(self, *args, memory_probe=None, **kwargs):
        super().__init__(*args, **kwargs)

    if not HAS_REQUEST_SPAN:

        def request(self, **ids):
            return contextlib.nullcontext()

    if not HAS_STREAM:

        def stream_generate(self, model, inputs, *, session_id=None, request_id=None, tokenizer=None,
                            **kwargs):
            from transformers import TextIteratorStreamer

            streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=60)
            failed: list[BaseException] = []

            def run():
                try:
                    self.generate(model, inputs, session_id=session_id, request_id=request_id,
                                  tokenizer=tokenizer, streamer=streamer, **kwargs)
                except BaseException as e:  # handed to the consumer below
                    failed.append(e)
                    streamer.end()

            th = threading.Thread(target=run, daemon=True)
            th.start()
            yield from streamer
            th.join(60)
            if failed:
                raise failed[0]


def make_tracer(log_dir, memory_probe=None) -> Tracer:
    if HAS_COLLECTOR_API:
        return Tracer(log_dir, memory_probe=memory_probe)
    return _PreSpanTracer(log_dir, memory_probe=memory_probe)


def _has_diagnosis() -> bool:
    """Branch diagnosis's rules attribute memory by per-request deltas (new thresholds)."""
    from analyzer.thresholds import defaults

    return "leak_per_request_mb" in defaults().get("memory_leak", {})


HAS_DIAGNOSIS = _has_diagnosis()
