"""The event columns: the one read schema (``RAW_COLUMNS``, every v1 field plus the legacy
``timestamp``) and the user-facing ``events`` columns (``EVENT_COLUMNS``, docs/internals.md),
with their DuckDB types, and the small SQL quoting helpers the ingest modules share.
"""

from __future__ import annotations

_PARAMS = "STRUCT(num_beams BIGINT, max_new_tokens BIGINT, temperature DOUBLE, top_p DOUBLE, do_sample BOOLEAN)"
# The one read schema for both formats: every v1 field (DESIGN.md §3) and legacy's timestamp.
# v is read as text: any value present means v1. Unknown fields are not read.
RAW_COLUMNS: dict[str, str] = {
    "v": "VARCHAR", "ts": "TIMESTAMPTZ", "timestamp": "VARCHAR", "stage": "VARCHAR",
    "session_id": "VARCHAR", "request_id": "VARCHAR", "host": "VARCHAR", "pid": "BIGINT",
    "duration_ms": "DOUBLE", "input_len": "BIGINT", "output_len": "BIGINT",
    "reasoning_len": "BIGINT", "kv_seq_len": "BIGINT", "cpu_time_ms": "DOUBLE",
    "gpu_wait_pct": "DOUBLE", "gpu_util_pct": "DOUBLE", "params": _PARAMS, "ttft_ms": "DOUBLE",
    "ttfa_ms": "DOUBLE", "status": "VARCHAR", "finish_reason": "VARCHAR", "error_type": "VARCHAR",
    "error_msg": "VARCHAR", "failed_stage": "VARCHAR", "allocated_mb": "DOUBLE",
    "reserved_mb": "DOUBLE", "max_allocated_mb": "DOUBLE", "num_ooms": "BIGINT",
    "num_alloc_retries": "BIGINT", "gpu_index": "BIGINT", "kv_cache_size_mb": "DOUBLE",
    "gpu_mem_util_pct": "DOUBLE", "gpu_mem_used_mb": "DOUBLE", "gpu_mem_total_mb": "DOUBLE",
    "power_w": "DOUBLE", "temp_c": "DOUBLE", "sm_clock_mhz": "DOUBLE", "rss_mb": "DOUBLE",
    "cpu_pct": "DOUBLE", "threads": "BIGINT", "queued": "BIGINT", "written": "BIGINT",
    "dropped": "BIGINT", "bytes_written": "BIGINT",
}  # fmt: skip
# Per-request fields of the collector -> analyzer contract (TEAM.md, issue 12): the device, the
# requests in flight and what the request changed in the process's memory (before/after).
REQUEST_FIELDS: dict[str, str] = {
    "device": "VARCHAR", "inflight": "BIGINT", "attempts": "BIGINT",
    "reserved_mb_before": "DOUBLE", "reserved_mb_after": "DOUBLE",
    "allocated_mb_before": "DOUBLE", "allocated_mb_after": "DOUBLE",
    "rss_mb_before": "DOUBLE", "rss_mb_after": "DOUBLE", "source": "VARCHAR",
    "done_before": "BIGINT", "done_seq": "BIGINT",
}  # fmt: skip
RAW_COLUMNS.update(REQUEST_FIELDS)
PARAM_TYPES = {"num_beams": "BIGINT", "max_new_tokens": "BIGINT", "temperature": "DOUBLE",
                "top_p": "DOUBLE", "do_sample": "BOOLEAN"}  # fmt: skip

# The user-facing events columns (docs/internals.md), in order.
EVENT_COLUMNS = [
    "ts", "stage", "session_id", "request_id", "host", "pid", "duration_ms", "input_len",
    "output_len", "reasoning_len", "kv_seq_len", "cpu_time_ms", "gpu_wait_pct", "gpu_util_pct",
    "num_beams", "max_new_tokens", "temperature", "top_p", "do_sample", "ttft_ms", "ttfa_ms",
    "status", "finish_reason", "error_type", "error_msg", "failed_stage", "allocated_mb",
    "reserved_mb", "max_allocated_mb", "num_ooms", "num_alloc_retries", "gpu_index",
    "kv_cache_size_mb", "gpu_mem_util_pct", "gpu_mem_used_mb", "gpu_mem_total_mb", "power_w",
    "temp_c", "sm_clock_mhz", "rss_mb", "cpu_pct", "threads", "queued", "written", "dropped",
    "bytes_written", "source_format", "source_file", "line_bytes",
]  # fmt: skip
EVENT_COLUMNS[EVENT_COLUMNS.index("source_format") : EVENT_COLUMNS.index("source_format")] = list(
    REQUEST_FIELDS
)


def sql_literal(text: str) -> str:
    """A SQL string literal of our own making (paths we discovered, zone names we validated)."""
    return "'" + str(text).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns_struct() -> str:
    return (
        "{" + ", ".join(f"{sql_ident(k)}: {sql_literal(v)}" for k, v in RAW_COLUMNS.items()) + "}"
    )


def event_type(column: str) -> str:
    if column == "ts":
        return "TIMESTAMPTZ"
    if column in (
        "source_file",
        "source_format",
        "stage",
        "session_id",
        "request_id",
        "host",
        "status",
        "finish_reason",
        "error_type",
        "error_msg",
        "failed_stage",
        "device",
        "source",
    ):
        return "VARCHAR"
    if column == "do_sample":
        return "BOOLEAN"
    if column in ("temperature", "top_p"):
        return "DOUBLE"
    return RAW_COLUMNS.get(column, "BIGINT")
