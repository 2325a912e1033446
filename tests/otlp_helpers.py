"""OTLP/JSON trace files written by the OpenTelemetry SDK itself, for tests and bench/.

Spans are recorded by a real ``TracerProvider`` (opentelemetry-sdk), encoded into an
``ExportTraceServiceRequest`` by the SDK's own OTLP encoder
(opentelemetry-exporter-otlp-proto-common, the code the OTLP exporters send), and written one
request per line as an OTel Collector's ``file`` exporter does: proto3 JSON (camelCase, int64 as
strings, enums by name) with trace and span ids in hex (the OTLP/JSON rule the Collector
follows; protobuf's own JSON would write them in base64).

``vllm_request`` sets a span's attributes exactly as vLLM's ``OutputProcessor.do_tracing``
builds them (vllm/v1/engine/output_processor.py, names from vllm/tracing): a SERVER span named
``llm_request`` that starts at the request's arrival, latencies in seconds, the old
``gen_ai.usage.prompt_tokens``/``completion_tokens`` names and the finish reasons as a
JSON-encoded string.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

NS = 1_000_000_000


def _hex_ids(node):
    """proto3 JSON's base64 ids -> the hex of OTLP/JSON (what the Collector writes)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


class SeededIds(RandomIdGenerator):
    """The SDK's random ids drawn from a seeded generator: the same file on every run."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


@dataclass
class Recorder:
    """A tracer whose finished spans are written as OTLP/JSON lines (ids seeded when ``seed``
    is given, else the SDK's own random ones)."""

    resource: dict
    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    seed: int | None = None

    def __post_init__(self):
        ids = SeededIds(self.seed) if self.seed is not None else None
        self.provider = TracerProvider(resource=Resource.create(self.resource), id_generator=ids)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("vllm.llm_engine")

    def lines(self, per_line: int = 512) -> list[str]:
        spans = list(self.exporter.get_finished_spans())
        out = []
        for i in range(0, len(spans), per_line):
            msg = encode_spans(spans[i : i + per_line])
            out.append(json.dumps(_hex_ids(MessageToDict(msg)), separators=(",", ":")))
        return out

    def write(self, path: Path, per_line: int = 512) -> Path:
        text = "".join(line + "\n" for line in self.lines(per_line))
        if str(path).endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            Path(path).write_text(text, encoding="utf-8")
        return Path(path)


@dataclass
class VllmRequest:
    """One request's timeline, as vLLM's RequestStateStats holds it (seconds)."""

    request_id: str
    arrival: float
    queued: float  # time_in_queue
    prefill: float
    decode: float
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int | None = 2048
    temperature: float | None = 0.6
    top_p: float | None = 0.95
    n: int = 1
    finish_reason: str = "stop"

    @property
    def ttft(self) -> float:
        return self.queued + self.prefill

    @property
    def e2e(self) -> float:
        return self.queued + self.prefill + self.decode


def vllm_request(rec: Recorder, r: VllmRequest) -> None:
    """A span as do_tracing records it (finish reasons as the JSON string of a list)."""
    attributes = {
        "gen_ai.response.model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "gen_ai.request.id": r.request_id,
        "gen_ai.usage.prompt_tokens": r.prompt_tokens,
        "gen_ai.usage.completion_tokens": r.completion_tokens,
        "gen_ai.latency.time_in_queue": r.queued,
        "gen_ai.latency.time_to_first_token": r.ttft,
        "gen_ai.latency.e2e": r.e2e,
        "gen_ai.latency.time_in_model_prefill": r.prefill,
        "gen_ai.latency.time_in_model_decode": r.decode,
        "gen_ai.latency.time_in_model_inference": r.prefill + r.decode,
        "gen_ai.response.finish_reasons": json.dumps([r.finish_reason]),
    }
    if r.top_p:
        attributes["gen_ai.request.top_p"] = r.top_p
    if r.max_tokens:
        attributes["gen_ai.request.max_tokens"] = r.max_tokens
    if r.temperature:
        attributes["gen_ai.request.temperature"] = r.temperature
    if r.n:
        attributes["gen_ai.request.n"] = r.n
    span = rec.tracer.start_span(
        "llm_request", kind=SpanKind.SERVER, start_time=int(r.arrival * NS), attributes=attributes
    )
    span.end(end_time=int((r.arrival + r.e2e) * NS))


def vllm_workload(n: int = 200, seed: int = 7, start: float = 1_796_000_000.0,
                  overload_from: int | None = None, abort_every: int = 0) -> list[VllmRequest]:  # fmt: skip
    """``n`` requests ~0.5 s apart; from request ``overload_from`` on the queue wait grows by
    0.15 s a request (arrivals outpace the engine); every ``abort_every``-th request aborted."""
    rng = random.Random(seed)
    out = []
    t = start
    for i in range(n):
        t += rng.uniform(0.2, 0.8)
        queued = rng.uniform(0.001, 0.02)
        if overload_from is not None and i >= overload_from:
            queued += 0.15 * (i - overload_from + 1)
        prompt = rng.randint(20, 900)
        completion = rng.randint(50, 1500)
        aborted = bool(abort_every) and i % abort_every == abort_every - 1
        out.append(
            VllmRequest(
                request_id=f"cmpl-{seed:02d}{i:06d}",
                arrival=t,
                queued=queued,
                prefill=0.004 + prompt * 0.00004 * rng.uniform(0.8, 1.2),
                decode=completion * 0.012 * rng.uniform(0.9, 1.1),
                prompt_tokens=prompt,
                completion_tokens=completion,
                max_tokens=rng.choice([1024, 2048, 4096]),
                finish_reason="abort" if aborted else rng.choice(["stop", "stop", "length"]),
            )
        )
    return out


VLLM_RESOURCE = {"service.name": "vllm", "host.name": "gpu-a", "process.pid": 4242}


def write_vllm(path: Path, requests: list[VllmRequest], resource: dict | None = None,
               per_line: int = 512) -> Path:  # fmt: skip
    rec = Recorder(resource or VLLM_RESOURCE)
    for r in requests:
        vllm_request(rec, r)
    return rec.write(path, per_line)


def genai_call(rec: Recorder, start: float, seconds: float, *, attrs: dict,
               error: BaseException | None = None) -> None:  # fmt: skip
    """A generic GenAI client span (chat/text_generation) with an exception event on error."""
    span = rec.tracer.start_span("text_generation", kind=SpanKind.CLIENT,
                                 start_time=int(start * NS), attributes=attrs)  # fmt: skip
    if error is not None:
        span.record_exception(error, timestamp=int((start + seconds) * NS))
        span.set_status(Status(StatusCode.ERROR, str(error)))
    span.end(end_time=int((start + seconds) * NS))
