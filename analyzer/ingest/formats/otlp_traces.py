"""OTLP/JSON traces: an OTel Collector's ``file`` exporter (one ExportTraceServiceRequest per
line), read by their own statement (``otlp_traces.sql`` beside this module), whose profiles
(vLLM's ``llm_request`` spans, generic GenAI spans, openlit's) are told apart per span."""

from __future__ import annotations

import re
from pathlib import Path

from dslogs.analyzer.ingest.formats import STATEMENT, Format

_SPANS_KEY = re.compile(rb'^\s*\{\s*"resourceSpans"')


def is_otlp_traces(head: bytes) -> bool:
    """Whether a line (or a file's first bytes) is an OTLP/JSON ExportTraceServiceRequest."""
    return bool(_SPANS_KEY.match(head)) and b'"resourceSpans"' in head[:64]


def _describe(text: bytes) -> str | None:
    if _SPANS_KEY.match(text):  # read, and no span is an LLM call
        return "OTLP/JSON traces with no LLM span (no `gen_ai.*` or `llm.*` attribute, no vLLM `llm_request`)"
    return None


def _line_problem(value: dict) -> str | None:
    if not isinstance(value.get("resourceSpans"), list):
        return "not an OTLP trace request (no resourceSpans list)"
    return None


# The value of attribute ``name`` in an OTLP key/value list (the last one when a key repeats);
# otlp_traces.sql reads attributes through it. Created on the connection before the read.
OTLP_MACROS = (
    "CREATE OR REPLACE TEMP MACRO otlp_attr(kvs, name) AS "
    'list_filter(kvs, lambda x: x."key" = name)[-1]."value"'
)

# vLLM preallocates GPU memory (nothing per request or session) and tokenizes inside the engine;
# neither profile has post-processing, KV-cache size, GPU samples or reasoning tokens.
_GENAI_LACKS = frozenset({"tokenize", "queue", "prefill", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"})

FORMAT = Format(
    name="otlp_traces",
    order=10,
    writer="an OTel Collector `file` exporter (vLLM --otlp-traces-endpoint, openlit, OpenLLMetry)",
    sniff=lambda head, first: is_otlp_traces(head),
    read=STATEMENT,
    sniffed_names=r"^(?!\.).*\.json(?:\.gz)?$",
    names_text="*.json (OTLP traces)",
    source_formats={
        "otlp:vllm": "OTLP traces, vLLM llm_request spans",
        "otlp:genai": "OTLP traces, OpenTelemetry GenAI spans",
        "otlp:openlit": "OTLP traces, openlit GenAI spans (token counts estimated from characters)",
    },
    # the statement names the profile in `v`, kept as the source_format
    tag=("starts_with(v, 'otlp:')", "v"),
    not_carried={
        "otlp:vllm": frozenset({"tokenize", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"}),
        "otlp:genai": _GENAI_LACKS,
        "otlp:openlit": _GENAI_LACKS,
    },
    estimated_tokens={"otlp:openlit": "openlit counts tokens from the text's characters"},
    line_name="OTLP/JSON trace",
    damaged=lambda line, obj: bool(_SPANS_KEY.match(line)),
    describe=_describe,
    statement=lambda: Path(__file__).with_name("otlp_traces.sql").read_text(encoding="utf-8"),
    gives=frozenset({
        "v", "ts", "timestamp", "stage", "session_id", "request_id", "host", "pid", "duration_ms",
        "input_len", "output_len", "ttft_ms", "status", "finish_reason", "error_type", "error_msg",
        "failed_stage", "params", "source", "inflight", "label", "config",
    }),
    prepare=(OTLP_MACROS,),
    line_problem=_line_problem,
    unreadable="OTLP traces",
)  # fmt: skip
