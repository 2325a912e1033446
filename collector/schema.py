"""Trace schema v1: the one Python definition of stage names and their fields.

Standard library only: the collector imports this inside the user's inference process, the
analyzer and the simulator import it too, and ``dslogs schema`` prints the JSON Schema built
from it. ``collector/trace_schema_v1.json`` is the shipped copy; a test checks it
equals :func:`json_schema`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1
DEFAULT_PREFIX = "ds15b"
DEFAULT_MAX_BYTES = 10 * 2**20  # article 003 §2.1: one file per day, at most 10 MB

# JSON Schema type fragments.
_INT = {"type": ["integer", "null"]}
_NUM = {"type": ["number", "null"]}
_STR = {"type": ["string", "null"]}
_BOOL = {"type": ["boolean", "null"]}
_NONNEG_INT = {"type": ["integer", "null"], "minimum": 0}
_NONNEG_NUM = {"type": ["number", "null"], "minimum": 0}
_PCT = {"type": ["number", "null"], "minimum": 0, "maximum": 100}
# duration_ms may be -1 for "not measured" (article 003's convention).
_DURATION = {"type": ["number", "null"], "minimum": -1}

GENERATE_PARAMS = {
    "type": ["object", "null"],
    "properties": {
        "num_beams": _NONNEG_INT,
        "max_new_tokens": _NONNEG_INT,
        "temperature": _NUM,
        "top_p": _NUM,
        "do_sample": _BOOL,
    },
}


@dataclass(frozen=True)
class Field:
    """One field of a trace line: its JSON Schema fragment and what it means (the note of
    docs/internals.md's events table). Its logical type (``type``) follows from the fragment."""

    schema: dict
    note: str = ""

    @property
    def type(self) -> str:
        return logical_type(self.schema)


def logical_type(fragment: dict) -> str:
    """int, float, text, bool, timestamp or struct: what a reader stores a field as."""
    if "const" in fragment:
        return "int" if isinstance(fragment["const"], int) else "text"
    if "enum" in fragment:
        kinds = {type(v) for v in fragment["enum"] if v is not None}
        if kinds != {str}:
            raise ValueError(f"an enum of text only: {fragment}")
        return "text"
    kinds = fragment["type"] if isinstance(fragment["type"], list) else [fragment["type"]]
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1:
        raise ValueError(f"one JSON type per field: {fragment}")
    kind = kinds[0]
    if kind == "string":
        return "timestamp" if fragment.get("format") == "date-time" else "text"
    return {"integer": "int", "number": "float", "boolean": "bool", "object": "struct"}[kind]


# Every field, once: the order is the order of the analyzer's events columns (docs/internals.md).
FIELDS: dict[str, Field] = {
    "v": Field({"const": SCHEMA_VERSION}, "schema version; a line with v is a v1 line"),
    "ts": Field({"type": "string", "format": "date-time"}, "event time, RFC 3339 with its offset"),
    "stage": Field({"type": "string"}, "what happened"),
    "session_id": Field(_STR, "null on sampler stages"),
    "request_id": Field(_STR, "null on sampler stages"),
    "host": Field(_STR, "the machine's name"),
    "pid": Field(_INT, "the process writing the line"),
    "duration_ms": Field(_DURATION, "wall time of the stage; -1 when not measured"),
    "input_len": Field(_NONNEG_INT, "characters on `input`, tokens elsewhere"),
    "output_len": Field(_NONNEG_INT, "tokens generated"),
    "reasoning_len": Field(_NONNEG_INT, "tokens inside the reasoning block"),
    "kv_seq_len": Field(_NONNEG_INT, "tokens in the KV cache"),
    "cpu_time_ms": Field(_NONNEG_NUM),
    "gpu_wait_pct": Field({"type": ["number", "null"], "maximum": 100}),
    "gpu_util_pct": Field(_PCT),
    "params": Field(GENERATE_PARAMS, "generate() parameters"),
    "ttft_ms": Field(_NONNEG_NUM, "time to the first token"),
    "ttfa_ms": Field(_NONNEG_NUM, "time to the first answer token (after the reasoning)"),
    "status": Field({"enum": ["ok", "error", None]}, "`ok` or `error`"),
    "finish_reason": Field(_STR),
    "error_type": Field(_STR),
    "error_msg": Field(_STR),
    "failed_stage": Field(_STR),
    "allocated_mb": Field(_NONNEG_NUM),
    "reserved_mb": Field(_NONNEG_NUM),
    "max_allocated_mb": Field(_NONNEG_NUM),
    "num_ooms": Field(_NONNEG_INT),
    "num_alloc_retries": Field(_NONNEG_INT),
    "gpu_index": Field(_NONNEG_INT),
    "kv_cache_size_mb": Field(_NONNEG_NUM),
    "gpu_mem_util_pct": Field(_PCT),
    "gpu_mem_used_mb": Field(_NONNEG_NUM),
    "gpu_mem_total_mb": Field(_NONNEG_NUM),
    "power_w": Field(_NONNEG_NUM),
    "temp_c": Field(_NUM),
    "sm_clock_mhz": Field(_NONNEG_NUM),
    "rss_mb": Field(_NONNEG_NUM),
    "cpu_pct": Field(_NONNEG_NUM),
    "threads": Field(_NONNEG_INT),
    "queued": Field(_NONNEG_INT),
    "written": Field(_NONNEG_INT),
    "dropped": Field(_NONNEG_INT),
    "bytes_written": Field(_NONNEG_INT),
    # per-request attribution: which session kept the memory
    "device": Field(_STR, "the device the model ran on (`cuda:0`, `cpu`, `mps`)"),
    "inflight": Field({"type": ["integer", "null"], "minimum": 1},
                      "requests in flight in the process when it started (itself included)"),
    "attempts": Field({"type": ["integer", "null"], "minimum": 1}, "1 + failed attempts"),
    "reserved_mb_before": Field(_NONNEG_NUM, "torch's reserved GPU memory of the process just before the request"),
    "reserved_mb_after": Field(_NONNEG_NUM, "... and just after it ended"),
    "allocated_mb_before": Field(_NONNEG_NUM, "torch's allocated GPU memory just before the request"),
    "allocated_mb_after": Field(_NONNEG_NUM, "... and just after it ended"),
    "rss_mb_before": Field(_NONNEG_NUM, "the process's RSS just before the request"),
    "rss_mb_after": Field(_NONNEG_NUM, "... and just after it ended"),
    "source": Field(_STR, "who measured the wait (`gradio`)"),
    # the process's completion sequence: requests of this process completed before the
    # "before" reading, and this request's own completion index (1-based), read with "after"
    "done_before": Field(_NONNEG_INT, "requests of the process completed before this one's \"before\" reading"),
    "done_seq": Field({"type": ["integer", "null"], "minimum": 1},
                      "this request's completion index in the process (1-based), read with \"after\""),
    "fallback": Field(_STR, "the retry after an OOM (`greedy`: oom_fallback)"),
    # what the service runs with (collector/deploy.py)
    "deploy_id": Field(_STR, "the tracer start a `deploy` line belongs to (one per process start)"),
    "label": Field(_STR, "the deploy's own name: `$DSLOGS_DEPLOY` or OpenTelemetry's service.version"),
    "config": Field(_STR, "the deploy record: a JSON object of flat keys (`pkg.torch`, `model.config_hash`, "
                          "`generate.use_cache`, `git.commit`, ...)"),
}  # fmt: skip

COMMON = ("v", "ts", "stage", "session_id", "request_id", "host", "pid", "duration_ms")
_DECODE = ("output_len", "reasoning_len", "cpu_time_ms", "gpu_wait_pct", "gpu_util_pct", "params", "input_len",
           "kv_seq_len")  # fmt: skip

# stage -> its own fields (beyond COMMON). Order is the order of a request.
STAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "input": ("input_len",),
    "tokenize": ("input_len",),
    "queue": ("source",),
    "prefill": ("input_len", "kv_seq_len"),
    "decode": _DECODE,
    "inference": _DECODE,
    "format": (),
    "request": ("ttft_ms", "input_len", "output_len", "reasoning_len", "ttfa_ms", "status", "finish_reason",
                "device", "inflight", "done_before", "done_seq", "attempts", "reserved_mb_before",
                "reserved_mb_after", "allocated_mb_before", "allocated_mb_after", "rss_mb_before",
                "rss_mb_after", "fallback"),
    "error": ("error_type", "error_msg", "failed_stage", "params", "device", "fallback"),
    "gpu_memory": ("allocated_mb", "reserved_mb", "max_allocated_mb", "num_ooms", "num_alloc_retries",
                   "gpu_index"),
    "kv_cache": ("kv_seq_len", "kv_cache_size_mb"),
    "gpu_sample": ("gpu_index", "gpu_util_pct", "gpu_mem_util_pct", "gpu_mem_used_mb", "gpu_mem_total_mb",
                   "power_w", "temp_c", "sm_clock_mhz"),
    "process_sample": ("rss_mb", "cpu_pct", "threads"),
    "collector": ("queued", "written", "dropped", "bytes_written"),
    "deploy": ("deploy_id", "label", "config"),
}  # fmt: skip

# The JSON Schema fragments, by name (derived from FIELDS).
COMMON_FIELDS: dict[str, dict] = {name: FIELDS[name].schema for name in COMMON}
STAGES: dict[str, dict[str, dict]] = {
    stage: {name: FIELDS[name].schema for name in names} for stage, names in STAGE_FIELDS.items()
}


def field_stages(name: str) -> tuple[str, ...]:
    """The stages a field appears on (every stage for a common field)."""
    if name in COMMON:
        return tuple(STAGES)
    return tuple(stage for stage, names in STAGE_FIELDS.items() if name in names)


# Stages timed per request, in pipeline order (the latency table's rows).
LATENCY_STAGES = ("tokenize", "queue", "prefill", "decode", "inference", "format", "request")
# Stages written by background samplers: no session_id / request_id.
SAMPLER_STAGES = ("gpu_sample", "process_sample", "collector", "deploy")


def stage_fields(stage: str) -> dict[str, dict]:
    """All fields a line of ``stage`` may carry: common fields first, then the stage's own."""
    return {**COMMON_FIELDS, **STAGES[stage]}


def json_schema() -> dict:
    """JSON Schema (draft 2020-12) for one v1 trace line."""
    branches = []
    for stage, fields in STAGES.items():
        props = {**COMMON_FIELDS, **fields, "stage": {"const": stage}}
        branches.append(
            {
                "if": {"properties": {"stage": {"const": stage}}, "required": ["stage"]},
                "then": {"properties": props},
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://dslogs.dev/schema/trace-v1.json",
        "title": "dslogs trace line, schema v1",
        "description": "One JSON object per line. Unknown fields are allowed and ignored by readers.",
        "type": "object",
        "required": ["v", "ts", "stage"],
        "properties": {**COMMON_FIELDS, "stage": {"enum": list(STAGES)}},
        "additionalProperties": True,
        "allOf": branches,
    }


SCHEMA_FILE = Path(__file__).with_name("trace_schema_v1.json")


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
