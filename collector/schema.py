"""Trace schema v1: the one Python definition of stage names and their fields.

Standard library only: the collector imports this inside the user's inference process, the
analyzer and the simulator import it too, and ``dslogs schema`` prints the JSON Schema built
from it (DESIGN.md §3). ``collector/trace_schema_v1.json`` is the shipped copy; a test checks it
equals :func:`json_schema`.
"""

from __future__ import annotations

import json
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

COMMON_FIELDS: dict[str, dict] = {
    "v": {"const": SCHEMA_VERSION},
    "ts": {"type": "string", "format": "date-time"},
    "stage": {"type": "string"},
    "session_id": _STR,
    "request_id": _STR,
    "host": _STR,
    "pid": _INT,
    "duration_ms": _DURATION,
}

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

_DECODE_FIELDS = {
    "output_len": _NONNEG_INT,
    "reasoning_len": _NONNEG_INT,
    "cpu_time_ms": _NONNEG_NUM,
    "gpu_wait_pct": {"type": ["number", "null"], "maximum": 100},
    "gpu_util_pct": _PCT,
    "params": GENERATE_PARAMS,
    "input_len": _NONNEG_INT,
    "kv_seq_len": _NONNEG_INT,
}

# stage -> its own fields (beyond COMMON_FIELDS). Order is the order of a request.
STAGES: dict[str, dict[str, dict]] = {
    "input": {"input_len": _NONNEG_INT},
    "tokenize": {"input_len": _NONNEG_INT},
    "queue": {"source": _STR},
    "prefill": {"input_len": _NONNEG_INT, "kv_seq_len": _NONNEG_INT},
    "decode": dict(_DECODE_FIELDS),
    "inference": dict(_DECODE_FIELDS),
    "format": {},
    "request": {
        "ttft_ms": _NONNEG_NUM,
        "input_len": _NONNEG_INT,
        "output_len": _NONNEG_INT,
        "reasoning_len": _NONNEG_INT,
        "ttfa_ms": _NONNEG_NUM,
        "status": {"enum": ["ok", "error", None]},
        "finish_reason": _STR,
        # per-request attribution (issue 12): torch's per-process GPU memory and process RSS
        # just before and just after the request, and requests in flight when it started
        "device": _STR,
        "inflight": {"type": ["integer", "null"], "minimum": 1},
        # the process's completion sequence: requests of this process completed before the
        # "before" reading, and this request's own completion index (1-based), read with "after"
        "done_before": _NONNEG_INT,
        "done_seq": {"type": ["integer", "null"], "minimum": 1},
        "attempts": {"type": ["integer", "null"], "minimum": 1},
        "reserved_mb_before": _NONNEG_NUM,
        "reserved_mb_after": _NONNEG_NUM,
        "allocated_mb_before": _NONNEG_NUM,
        "allocated_mb_after": _NONNEG_NUM,
        "rss_mb_before": _NONNEG_NUM,
        "rss_mb_after": _NONNEG_NUM,
        "fallback": _STR,
    },
    "error": {"error_type": _STR, "error_msg": _STR, "failed_stage": _STR, "params": GENERATE_PARAMS,
              "device": _STR, "fallback": _STR},
    "gpu_memory": {
        "allocated_mb": _NONNEG_NUM,
        "reserved_mb": _NONNEG_NUM,
        "max_allocated_mb": _NONNEG_NUM,
        "num_ooms": _NONNEG_INT,
        "num_alloc_retries": _NONNEG_INT,
        "gpu_index": _NONNEG_INT,
    },
    "kv_cache": {"kv_seq_len": _NONNEG_INT, "kv_cache_size_mb": _NONNEG_NUM},
    "gpu_sample": {
        "gpu_index": _NONNEG_INT,
        "gpu_util_pct": _PCT,
        "gpu_mem_util_pct": _PCT,
        "gpu_mem_used_mb": _NONNEG_NUM,
        "gpu_mem_total_mb": _NONNEG_NUM,
        "power_w": _NONNEG_NUM,
        "temp_c": _NUM,
        "sm_clock_mhz": _NONNEG_NUM,
    },
    "process_sample": {"rss_mb": _NONNEG_NUM, "cpu_pct": _NONNEG_NUM, "threads": _NONNEG_INT},
    "collector": {
        "queued": _NONNEG_INT,
        "written": _NONNEG_INT,
        "dropped": _NONNEG_INT,
        "bytes_written": _NONNEG_INT,
    },
}

# Stages timed per request, in pipeline order (the latency table's rows).
LATENCY_STAGES = ("tokenize", "queue", "prefill", "decode", "inference", "format", "request")
# Stages written by background samplers: no session_id / request_id.
SAMPLER_STAGES = ("gpu_sample", "process_sample", "collector")


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
