"""OTLP/JSON traces: an OTel Collector's ``file`` exporter (one ExportTraceServiceRequest per
line), read by their own statement (``otlp_traces.sql`` beside this module), whose profiles
(vLLM's ``llm_request`` spans, OpenInference's, generic GenAI spans, openlit's) are told apart
per span."""

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
        return "OTLP/JSON traces with no LLM span (no `gen_ai.*` or `llm.*` span of an inference operation, no OpenInference LLM span, no vLLM `llm_request`)"
    return None


def _line_problem(value: dict) -> str | None:
    if not isinstance(value.get("resourceSpans"), list):
        return "not an OTLP trace request (no resourceSpans list)"
    return None


# Which spans are requests, declared once (the statement's otlp_is_request asks these lists):
# - OpenInference (`openinference.span.kind`): LLM spans; CHAIN, AGENT, TOOL, RETRIEVER, EMBEDDING,
#   RERANKER, GUARDRAIL, EVALUATOR, PROMPT spans wrap or sit beside the calls.
OPENINFERENCE_REQUEST_KINDS = ("LLM",)
# - GenAI conventions (`gen_ai.operation.name`): the inference operations, current and as older
#   instrumentations name them; invoke_agent, execute_tool, create_agent, embeddings,
#   invoke_workflow, retrieval (openlit's framework, vectordb and task names too) are not requests.
#   A span that names no operation is one (vLLM's, OpenLLMetry's).
GENAI_INFERENCE_OPERATIONS = ("chat", "text_completion", "generate_content", "text_generation", "completion")
# - OpenLLMetry's structure spans (`traceloop.span.kind`) are not requests.
TRACELOOP_STRUCTURE_KINDS = ("workflow", "task", "agent", "tool")
# Finish reasons that end a request in failure: vLLM's (vllm/v1/engine/__init__.py
# FINISH_REASON_STRINGS: stop, length, abort, error, repetition) "abort" (aborted by the client
# or the engine) and "error" (a request-level internal error, returned as HTTP 500), the GenAI
# conventions' "error" alike.
FAILED_FINISH_REASONS = ("abort", "error")
# The span event OpenInference's instrumentations add when the first token of a stream arrives
# (openinference-instrumentation-openai _stream.py): its time is the TTFT.
FIRST_TOKEN_EVENTS = ("First Token Stream Event",)


def _sql_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


# Macros otlp_traces.sql reads spans through, created on the connection before the read:
# otlp_attr: the value of attribute ``name`` in an OTLP key/value list (the last one when a key
# repeats); otlp_num: a value as a double (doubleValue, or intValue); otlp_int: an intValue as
# a BIGINT; otlp_is_request / otlp_failed_finish / otlp_first_token_event:
# the lists above.
OTLP_MACROS = (
    "CREATE OR REPLACE TEMP MACRO otlp_attr(kvs, name) AS "
    'list_filter(kvs, lambda x: x."key" = name)[-1]."value"',
    "CREATE OR REPLACE TEMP MACRO otlp_num(v) AS coalesce(v.doubleValue, TRY_CAST(v.intValue AS DOUBLE))",
    "CREATE OR REPLACE TEMP MACRO otlp_int(kvs, name) AS TRY_CAST(otlp_attr(kvs, name).intValue AS BIGINT)",
    "CREATE OR REPLACE TEMP MACRO otlp_is_request(oi_kind, op, tl_kind) AS CASE "
    f"WHEN oi_kind IS NOT NULL THEN list_contains({_sql_list(OPENINFERENCE_REQUEST_KINDS)}, upper(oi_kind)) "
    f"WHEN op IS NOT NULL THEN list_contains({_sql_list(GENAI_INFERENCE_OPERATIONS)}, lower(op)) "
    f"WHEN tl_kind IS NOT NULL THEN NOT list_contains({_sql_list(TRACELOOP_STRUCTURE_KINDS)}, lower(tl_kind)) "
    "ELSE true END",
    "CREATE OR REPLACE TEMP MACRO otlp_failed_finish(reason) AS "
    f"coalesce(list_contains({_sql_list(FAILED_FINISH_REASONS)}, lower(reason)), false)",
    f"CREATE OR REPLACE TEMP MACRO otlp_first_token_event(name) AS list_contains({_sql_list(FIRST_TOKEN_EVENTS)}, name)",
)

# vLLM preallocates GPU memory (nothing per request or session) and tokenizes inside the engine;
# no profile has post-processing, KV-cache size or GPU samples; only OpenInference counts reasoning
# tokens.
_GENAI_LACKS = frozenset({"tokenize", "queue", "prefill", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"})

FORMAT = Format(
    name="otlp_traces",
    order=10,
    writer="an OTel Collector `file` exporter (vLLM --otlp-traces-endpoint, OpenInference, openlit, OpenLLMetry)",
    sniff=lambda head, first: is_otlp_traces(head),
    read=STATEMENT,
    sniffed_names=r"^(?!\.).*\.json(?:\.gz)?$",
    names_text="*.json (OTLP traces)",
    source_formats={
        "otlp:vllm": "OTLP traces, vLLM llm_request spans",
        "otlp:openinference": "OTLP traces, OpenInference LLM spans (Arize Phoenix's convention)",
        "otlp:genai": "OTLP traces, OpenTelemetry GenAI spans",
        "otlp:openlit": "OTLP traces, openlit GenAI spans (token counts estimated from characters)",
    },
    # the statement names the profile in `v`, kept as the source_format
    tag=("starts_with(v, 'otlp:')", "v"),
    not_carried={
        "otlp:vllm": frozenset({"tokenize", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"}),
        "otlp:openinference": _GENAI_LACKS - {"reasoning"},
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
        "input_len", "output_len", "reasoning_len", "ttft_ms", "status", "finish_reason", "error_type", "error_msg",
        "failed_stage", "params", "source", "inflight", "label", "config",
    }),
    prepare=OTLP_MACROS,
    line_problem=_line_problem,
    unreadable="OTLP traces",
)  # fmt: skip
