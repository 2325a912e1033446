"""OTLP/JSON traces: an OTel Collector's ``file`` exporter (one export request per line; traces,
metrics and logs may share a file, judged per line), read by their own statement
(``otlp_traces.sql`` beside this module) over the spans ``otlp_lines.sql`` reads leniently (one
bad value costs that value or its span, counted with its line), whose profiles (vLLM's
``llm_request`` spans, OpenInference's, generic GenAI spans, openlit's) are told apart per span.

The exporter's other encodings (its ``compression: zstd`` and ``format: proto`` settings) are
recognised by their first bytes (``unpack``): a zstd stream is read as it is, the length-prefixed
stream of zstd frames (JSON compressed per message) is re-framed into one zstd stream of lines,
and protobuf is named (dslogs reads the JSON encoding)."""

from __future__ import annotations

import re
from pathlib import Path

from dslogs.analyzer.ingest.formats import STATEMENT, ZSTD_MAGIC, Format, head_bytes

_BOM = b"\xef\xbb\xbf"
_SPANS_KEY = re.compile(rb'^\s*\{\s*"resourceSpans"')
# An export request of any signal: a file of one may hold the others (one exporter, several
# pipelines), and a pretty-printed one opens with the key on its second line.
_EXPORT_KEY = re.compile(rb'^\s*\{\s*"resource(?:Spans|Metrics|Logs)"')
# A zstd frame holding one newline, uncompressed (RFC 8878: a single-segment frame header with a
# one-byte content size, then one last raw block of one byte): put between the exporter's frames,
# each one message without its newline, so that the stream reads as lines.
_NEWLINE_FRAME = ZSTD_MAGIC + b"\x20\x01\x09\x00\x00\n"


def is_otlp_traces(head: bytes) -> bool:
    """Whether a line (or a file's first bytes) is an OTLP/JSON ExportTraceServiceRequest."""
    head = head.removeprefix(_BOM)
    return bool(_SPANS_KEY.match(head)) and b'"resourceSpans"' in head[:64]


def is_otlp_export(head: bytes) -> bool:
    """Whether a file's first bytes are an OTLP/JSON export request of any signal (its lines are
    then judged one by one: traces read, metrics and logs passed over)."""
    head = head.removeprefix(_BOM)
    return bool(_EXPORT_KEY.match(head)) and b'"resource' in head[:64]


def framed(head: bytes) -> str | None:
    """The Collector file exporter's length-prefixed stream (each message after its length as 4
    big-endian bytes; its ``format: proto``, or ``compression: zstd`` without the native
    compression feature gate): "zstd" when the messages are zstd frames, "proto" when the first
    looks like an OTLP protobuf message (field 1, a length-delimited resource list), else None."""
    if len(head) < 8:
        return None
    size = int.from_bytes(head[:4], "big")
    if size <= 0:
        return None
    if head[4:8] == ZSTD_MAGIC:
        return "zstd"
    if head[4] == 0x0A and b"\x00" in head[:4096]:
        return "proto"
    return None


PROTOBUF = ("OTLP protobuf (the Collector file exporter's `format: proto`): dslogs reads its JSON "
            "encoding (`format: json`, the default)")  # fmt: skip


def unpack(path: Path, workdir: Path, name: str) -> tuple[Path, str] | str:
    """(the file DuckDB reads, its compression) for an OTLP file as the exporter wrote it, or why
    it cannot be read (one line)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        return f"cannot read ({exc.strerror or exc})"
    if head[:2] == b"\x1f\x8b":
        return path, "gzip"
    if head[:4] == ZSTD_MAGIC:
        return path, "zstd"
    kind = framed(head)
    if kind == "proto":
        return PROTOBUF
    if kind == "zstd":
        out = workdir / f"{name}.zst"
        try:
            with open(path, "rb") as src, open(out, "wb") as dst:
                while prefix := src.read(4):
                    size = int.from_bytes(prefix, "big")
                    frame = src.read(size)
                    if len(prefix) < 4 or len(frame) < size or frame[:4] != ZSTD_MAGIC:
                        break  # cut short or not a frame: what came before is read
                    dst.write(frame)
                    dst.write(_NEWLINE_FRAME)
        except OSError as exc:
            out.unlink(missing_ok=True)
            return f"cannot read ({exc.strerror or exc})"
        if not head_bytes(out, 64).lstrip().startswith(b"{"):  # `format: proto` compressed
            out.unlink(missing_ok=True)
            return PROTOBUF + " (zstd-compressed)"
        return out, "zstd"
    return path, "none"


def _describe(text: bytes) -> str | None:
    if framed(text) == "proto":
        return PROTOBUF
    if _SPANS_KEY.match(text):  # read, and no span is an LLM call
        return "OTLP/JSON traces with no LLM span (no `gen_ai.*` or `llm.*` span of an inference operation, no OpenInference LLM span, no vLLM `llm_request`)"
    return None


def _line_problem(value: dict) -> str | None:
    for key in ("resourceSpans", "resourceMetrics", "resourceLogs"):
        if key in value:
            if not isinstance(value[key], list):
                return f"wrong value type: {key} (a list expected)"
            return None
    if "v" in value and "stage" in value:
        return "a dslogs v1 line in an OTLP file (not read: write v1 lines to a *.jsonl file of their own)"
    return "not an OTLP/JSON export request (no resourceSpans, resourceMetrics or resourceLogs)"


# One attribute value as OTLP/JSON may hold it, every field as text (nothing rejects a line);
# otlp_kvs types it.
_KV = ('STRUCT("key" VARCHAR, "value" STRUCT(stringValue VARCHAR, boolValue VARCHAR, intValue VARCHAR, '
       'doubleValue VARCHAR, arrayValue JSON, kvlistValue JSON))')  # fmt: skip
_KV_JSON = ('{"key": "VARCHAR", "value": {"stringValue": "VARCHAR", "boolValue": "VARCHAR", "intValue": "VARCHAR", '
            '"doubleValue": "VARCHAR", "arrayValue": "JSON", "kvlistValue": "JSON"}}')  # fmt: skip


def lines_sql(compression: str = "auto") -> str:
    """The SELECT of otlp_lines.sql, for files of one compression."""
    sql = Path(__file__).with_name("otlp_lines.sql").read_text(encoding="utf-8")
    sql = sql.replace("{kv}", _KV).replace("{kv_json}", _KV_JSON)
    return sql.replace("format = 'newline_delimited',", f"format = 'newline_delimited', compression = '{compression}',")


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
# otlp_lines.sql's: a time in unix nanoseconds (at most 19 digits: within int64), else NULL; an
# integer as int64 text (DuckDB's own cast rounds "1.5"); a double that is a measurement (NaN, infinities and magnitudes past 1e18 are none: they would
# turn every percentile they join into NaN); a bad value as a reason shows it; attributes typed,
# and the reasons for the values typing dropped.
OTLP_LINE_MACROS = (
    "CREATE OR REPLACE TEMP MACRO otlp_time(t) AS "
    "CASE WHEN regexp_full_match(t, '[0-9]{1,19}') AND TRY_CAST(t AS BIGINT) IS NOT NULL THEN t END",
    "CREATE OR REPLACE TEMP MACRO otlp_int_text(t) AS "
    "CASE WHEN regexp_full_match(t, '-?[0-9]{1,19}') AND TRY_CAST(t AS BIGINT) IS NOT NULL THEN t END",
    "CREATE OR REPLACE TEMP MACRO otlp_double(t) AS "
    "CASE WHEN abs(TRY_CAST(t AS DOUBLE)) < 1e18 THEN TRY_CAST(t AS DOUBLE) END",
    "CREATE OR REPLACE TEMP MACRO otlp_short(t) AS "
    "CASE WHEN t IS NULL THEN 'null (or absent)' WHEN length(t) > 16 THEN '<text of ' || length(t) || ' characters>' ELSE '\"' || t || '\"' END",
    "CREATE OR REPLACE TEMP MACRO otlp_json_short(j) AS "
    "CASE WHEN length(CAST(j AS VARCHAR)) > 16 THEN '<' || json_type(j) || ' of ' || length(CAST(j AS VARCHAR)) || ' characters>' "
    "ELSE CAST(j AS VARCHAR) END",
    "CREATE OR REPLACE TEMP MACRO otlp_kvs(kvs) AS list_transform(kvs, lambda x: {'key': x.\"key\", 'value': {"
    "'stringValue': x.\"value\".stringValue, "
    "'boolValue': CASE lower(x.\"value\".boolValue) WHEN 'true' THEN true WHEN 'false' THEN false END, "
    "'intValue': otlp_int_text(x.\"value\".intValue), "
    "'doubleValue': otlp_double(x.\"value\".doubleValue), "
    "'arrayValue': x.\"value\".arrayValue, 'kvlistValue': x.\"value\".kvlistValue}})",
    "CREATE OR REPLACE TEMP MACRO otlp_kv_problems(kvs) AS coalesce(list_filter(list_transform(kvs, lambda x: CASE "
    "WHEN x.\"value\".doubleValue IS NOT NULL AND otlp_double(x.\"value\".doubleValue) IS NULL "
    "THEN 'bad value: ' || left(x.\"key\", 64) || ' doubleValue=' || otlp_short(x.\"value\".doubleValue) || ' (not a finite number; dropped)' "
    "WHEN x.\"value\".boolValue IS NOT NULL AND lower(x.\"value\".boolValue) NOT IN ('true', 'false') "
    "THEN 'bad value: ' || left(x.\"key\", 64) || ' boolValue=' || otlp_short(x.\"value\".boolValue) || ' (true/false expected; dropped)' "
    "WHEN x.\"value\".intValue IS NOT NULL AND otlp_int_text(x.\"value\".intValue) IS NULL "
    "THEN 'bad value: ' || left(x.\"key\", 64) || ' intValue=' || otlp_short(x.\"value\".intValue) || ' (an integer expected; dropped)' "
    "END), lambda p: p IS NOT NULL), [])",
)

# vLLM preallocates GPU memory (nothing per request or session) and tokenizes inside the engine;
# no profile has post-processing, KV-cache size or GPU samples; only OpenInference counts reasoning
# tokens.
_GENAI_LACKS = frozenset({"tokenize", "queue", "prefill", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"})

FORMAT = Format(
    name="otlp_traces",
    order=10,
    writer="an OTel Collector `file` exporter (vLLM --otlp-traces-endpoint, OpenInference, openlit, OpenLLMetry)",
    sniff=lambda head, first: is_otlp_export(head) or framed(head) is not None,
    read=STATEMENT,
    sniffed_names=r"^(?!\.).*\.json(?:\.gz|\.zst)?$",
    names_text="*.json, *.json.zst (OTLP traces)",
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
    prepare=(*OTLP_MACROS, *OTLP_LINE_MACROS),
    line_problem=_line_problem,
    unreadable="OTLP traces",
    stage=lines_sql,
    staged_as="otlp_lines",
    unpack=unpack,
)  # fmt: skip


# -- OTLP/JSON metrics: the GenAI histograms as a server's metrics --------------------------------

# The GenAI semantic conventions' histograms (seconds or tokens), read as a server's metrics
GENAI_HISTOGRAMS = frozenset({
    "gen_ai.client.operation.duration", "gen_ai.client.token.usage", "gen_ai.server.request.duration",
    "gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token",
})  # fmt: skip
# What the reader says of a file that holds metrics and no span (formats.describe's words)
METRICS_ONLY = "holds OTLP/JSON metrics"


def _number(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if abs(out) < 1e18 else None


def otlp_time(value) -> float | None:
    """Unix nanoseconds (an int64, as text or a number) as a number, else None."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return float(text) if re.fullmatch(r"[0-9]{1,19}", text) else None


def metric_servers(files: list[tuple[Path, str]], lo=None, hi=None) -> tuple[list[dict], set[str]]:
    """(server metrics as ``prometheus.server_metrics`` gives them, the files that gave some) of
    OTLP/JSON metrics files ``(path, display)``: each GenAI histogram data point (in [lo, hi)) a
    cumulative bucket series at its time (delta points summed), one server per resource
    (service.name, host.name) and file folder; a file with none of those histograms gives
    nothing."""
    import gzip
    import json

    from dslogs.analyzer.ingest.prometheus import Snapshot, server_metrics

    servers: dict[str, dict[float, Snapshot]] = {}
    used: set[str] = set()
    for path, display in files:
        try:
            with (gzip.open if display.endswith(".gz") else open)(path, "rb") as fh:
                lines = [raw for raw in fh if raw.lstrip(b"\xef\xbb\xbf \t").startswith(b'{"resourceMetrics"')]
        except (OSError, EOFError):
            continue
        running: dict[tuple, list[float]] = {}  # a delta series' sums so far
        for raw in lines:
            try:
                request = json.loads(raw.removeprefix(_BOM))
            except (ValueError, RecursionError):
                continue
            for rm in request.get("resourceMetrics") or []:
                attrs = {a.get("key"): (a.get("value") or {}).get("stringValue")
                         for a in ((rm.get("resource") or {}).get("attributes") or []) if isinstance(a, dict)}  # fmt: skip
                who = "/".join(v for v in (attrs.get("service.name"), attrs.get("host.name")) if v) or "otlp"
                folder = display.replace("\\", "/").rpartition("/")[0]
                key = f"{folder}/{who}" if folder else who
                for sm in rm.get("scopeMetrics") or []:
                    for metric in sm.get("metrics") or []:
                        name, hist = metric.get("name"), metric.get("histogram")
                        if name not in GENAI_HISTOGRAMS or not isinstance(hist, dict):
                            continue
                        delta = str(hist.get("aggregationTemporality")) in ("1", "AGGREGATION_TEMPORALITY_DELTA")
                        for point in hist.get("dataPoints") or []:
                            t = otlp_time(point.get("timeUnixNano"))
                            counts = [_number(c) for c in point.get("bucketCounts") or []]
                            bounds = [_number(b) for b in point.get("explicitBounds") or []]
                            if not t or None in counts or None in bounds or len(counts) != len(bounds) + 1:
                                continue
                            if (lo is not None and t / 1e9 < lo.timestamp()) or (hi is not None and t / 1e9 >= hi.timestamp()):
                                continue
                            used.add(display)
                            labels = tuple(sorted(
                                (a.get("key"), str(next(iter((a.get("value") or {}).values()), "")))
                                for a in point.get("attributes") or [] if isinstance(a, dict)))  # fmt: skip
                            total = [sum(counts), _number(point.get("sum")) or 0.0, *counts]
                            if delta:
                                acc = running.setdefault((key, name, labels), [0.0] * len(total))
                                if len(acc) != len(total):
                                    continue
                                total = [a + b for a, b in zip(acc, total, strict=True)]
                                running[(key, name, labels)] = total
                            snap = servers.setdefault(key, {}).setdefault(t / 1e9, Snapshot(display, t / 1e9))
                            snap.types[name] = "histogram"
                            snap.values[(f"{name}_count", labels)] = total[0]
                            snap.values[(f"{name}_sum", labels)] = total[1]
                            cumulative = 0.0
                            for bound, count in zip([*bounds, float("inf")], total[2:], strict=True):
                                cumulative += count
                                le = "+Inf" if bound == float("inf") else repr(bound)
                                snap.values[(f"{name}_bucket", tuple(sorted((*labels, ("le", le)))))] = cumulative
    out = []
    for key, snaps in sorted(servers.items()):
        row = {"server": key, **server_metrics(list(snaps.values()))}
        if row["snapshots"] < 2:
            row["note"] = "one export: no window (percentiles need two or more)"
        out.append(row)
    return out, used
