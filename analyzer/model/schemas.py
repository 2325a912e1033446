"""JSON Schemas (Draft 2020-12) of the models dslogs writes and reads back: the report
``dslogs.report/1``, the diff ``dslogs.diff/1`` and the weekly report ``dslogs.weekly/1``.

Built here from the keys ``analyzer.model.report`` puts in the model (``SESSION_KEYS``, the stage
and percentile keys, ...) and shipped as JSON beside this module (``schemas/*.json``, regenerated
with ``python -m analyzer.model.schemas``; a test fails when a shipped file is stale). Every
renderer reads these models, so the schemas name a type for every field a renderer reads; what
only a row table adds (a metric's extra column) may be any JSON scalar.

Numbers are bounded to ±2**53: a renderer formats them as floats, and an integer of hundreds of
digits would not convert.
"""

from __future__ import annotations

import json

from analyzer.model.load import SCHEMA_DIR, SCHEMA_IDS
from analyzer.model.report import SCHEMA as REPORT_SCHEMA
from analyzer.model.report import SESSION_KEYS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
LIMIT = 2**53

NUM = {"type": "number", "minimum": -LIMIT, "maximum": LIMIT}
INT = {"type": "integer", "minimum": -LIMIT, "maximum": LIMIT}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
SHARE = {"type": "number", "minimum": 0, "maximum": 1}  # a fraction: rates and shares
COUNT = {"type": "integer", "minimum": 0, "maximum": LIMIT}
SCALAR = {"type": ["string", "number", "boolean", "null"], "minimum": -LIMIT, "maximum": LIMIT}


def opt(schema: dict) -> dict:
    """``schema`` or null (a metric with no data is null in the model)."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return {**schema, "type": [*types, "null"]}


def obj(props: dict, required: tuple[str, ...] = (), extra: dict | bool = True) -> dict:
    out: dict = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if extra is not True:
        out["additionalProperties"] = extra
    return out


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


def row(strings: tuple[str, ...] = (), numbers: tuple[str, ...] = (), integers: tuple[str, ...] = (),
        **more: dict) -> dict:
    """A row of a table: the named columns typed (each may be null), any other column a scalar."""
    props = {k: opt(STR) for k in strings} | {k: opt(NUM) for k in numbers} | {k: opt(INT) for k in integers}
    return obj(props | more, extra=SCALAR)


def _session_row() -> dict:
    strings = ("session_id", "host", "first_ts", "last_ts", "source_format")
    integers = ("requests", "errors", "max_kv_seq_len", "max_output_len")
    numbers = tuple(k for k in SESSION_KEYS if k not in strings + integers) + ("reserved_rise_mb",)
    # judged: rule -> what it judged of the session (memory_leak, rss_growth), its finding's names
    judged = obj({}, extra=obj({"basis": opt(STR)}, extra=opt(NUM)))
    return row(strings, numbers, integers, findings=opt(arr(STR)), judged=judged)


PCTS = row(numbers=("p50", "p90", "p95", "p99", "max"), integers=("count",))

TS_ROW_STRINGS = ("host", "session_id", "request_id", "first_ts", "last_ts", "ts", "start_ts", "bucket",
                  "metric", "stage", "error_type", "status", "source_format")  # fmt: skip


# Numeric columns of the series tables and the per-session request rows (the charts and the
# drill-down compute with them).
SERIES_NUMBERS = (
    "allocated_mb", "bin_end", "bin_start", "bytes", "bytes_written", "count", "decode_ms", "dropped", "e2e_ms",
    "events", "format_ms", "gpu_index", "gpu_util_pct", "gpu_wait_pct", "inference_ms", "input_len",
    "input_len_bin", "input_len_p50", "kv_cache_size_mb", "kv_seq_len", "max_ms", "max_new_tokens",
    "mem_used_mb_max", "num_beams", "output_len", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "prefill_max_ms",
    "prefill_ms", "prefill_p50_ms", "prefill_p95_ms", "queue_ms", "queued", "reasoning_len", "reserved_mb",
    "rss_mb", "tokenize_ms", "tpot_ms", "ttft_ms", "turn_index", "util_avg", "util_max", "written",
)  # fmt: skip


def report_schema() -> dict:
    """``dslogs.report/1``: what ``build_report`` returns and ``analyze --format json`` writes."""
    finding = obj(
        {
            "rule": STR, "severity": {"enum": ["critical", "warning", "info"]}, "scope": STR,
            "session_ids": arr(STR), "session_count": opt(INT), "hosts": arr(opt(STR)),
            "value": opt(NUM), "threshold": opt(NUM), "unit": opt(STR), "message": STR, "fix": opt(STR),
            "source": opt(STR),
            "evidence": opt(obj({"section": opt(STR), "chart": opt(STR), "details": opt({"type": "object"})})),
        },
        required=("rule", "severity", "scope", "session_ids", "message"),
    )  # fmt: skip
    checklist = obj(
        {"id": STR, "label": STR, "status": STR, "value": opt(NUM), "threshold": opt(NUM), "unit": opt(STR),
         "source": opt(STR), "note": opt(STR), "sessions": arr(STR)},
        required=("id", "label", "status"),
    )  # fmt: skip
    requests = obj(
        {
            **{k: opt(COUNT) for k in ("count", "ok", "errors", "reasoning_requests")},
            **{k: PCTS for k in ("ttft_ms", "tpot_ms", "e2e_ms", "tokens_per_s", "ttfa_ms")},
            "tpot_is_upper_bound": opt(BOOL),
            "slo": obj({"ttft_ms": opt(NUM), "tpot_ms": opt(NUM)}),
            **{k: opt(NUM) for k in ("prefill_decode_ratio_p50", "prefill_decode_ratio_p90")},
            **{k: opt(SHARE) for k in ("goodput", "prefill_share_of_compute", "reasoning_share_p50",
                                      "reasoning_share_p90")},
        }
    )  # fmt: skip
    ingest = obj(
        {
            **{k: INT for k in ("files", "events", "bad_lines", "skipped_files")},
            "bad_line_samples": arr(row(("file", "reason"), integers=("line",))),
            "bad_line_samples_truncated": opt(BOOL),
            "bad_line_samples_total": opt(COUNT),
            "formats": obj({}, extra=INT),
            "skipped": arr(row(("file", "reason"))),
        },
        required=("files", "events", "bad_lines"),
    )
    table = arr(row(TS_ROW_STRINGS, SERIES_NUMBERS))
    return {
        "$schema": DRAFT,
        "$id": "https://dslogs.dev/schemas/report-1.json",
        "title": REPORT_SCHEMA,
        "type": "object",
        "required": ["schema", "window", "ingest", "stages", "requests", "sessions", "findings"],
        "properties": {
            "schema": {"const": REPORT_SCHEMA},
            "generated_at": opt(STR),
            "dslogs_version": opt(STR),
            "window": obj({k: opt(STR) for k in ("since", "until", "first_event", "last_event")}),
            "ingest": ingest,
            "hosts": arr(row(("host", "first_ts", "last_ts"), integers=("events", "sessions", "requests"))),
            "checklist": arr(checklist),
            "stages": arr(row(("stage",), ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms"), ("count",))),
            "requests": requests,
            "sessions": arr(_session_row()),
            "sessions_total": opt(INT),
            "sessions_truncated": opt(BOOL),
            "findings": arr(finding),
            "notes": arr({"type": ["object", "string"]}),
            "rules": arr(row(("rule", "status", "reason", "severity", "source"), integers=("findings",))),
            "errors": arr(row(("error_type", "first_ts", "last_ts", "sample_msg", "failed_stage"),
                              integers=("count", "sessions"))),
            "slowest_sessions": arr(row(("session_id", "host"),
                                        ("e2e_p50_ms", "e2e_max_ms", "ttft_p50_ms", "tpot_p50_ms"), ("requests",))),
            "gpus": arr(row(("host", "first_ts", "last_ts"),
                            ("util_max", "util_p50", "util_avg", "mem_used_max_mb", "mem_used_p50_mb", "mem_total_mb",
                             "mem_used_share_p50", "sampled_s", "starved_s", "power_max_w", "temp_max_c"),
                            ("gpu_index", "samples", "starved_samples"))),
            "processes": arr(row(("host", "first_ts", "last_ts"),
                                 ("minutes", "rss_first_mb", "rss_last_mb", "rss_min_mb", "rss_max_mb",
                                  "rss_slope_mb_per_min", "rss_r2", "rss_held_rise_mb"), ("pid", "samples"))),
            "series_bucket": opt(STR),
            "series": obj({}, extra=table),
            "session_details": obj({}, extra=table),
            "session_details_truncated": opt(BOOL),
            "session_details_total": obj({}, extra=COUNT),  # session -> its requests, when cut
            "thresholds": obj({}, extra=obj({}, extra=NUM)),  # every threshold is a number
            "cpu_hosts": arr(STR),
            "no_gpu": BOOL,
            "capacity": CAPACITY,
        },
    }  # fmt: skip


# a process's capacity curve (analyzer.model.report.capacity_block): its in-flight levels and the
# verdicts drawn from them
CAPACITY_LEVEL = row(("host",), ("time_s", "ttft_p50_ms", "ttft_p95_ms", "service_ttft_p95_ms", "tpot_p50_ms",
                                 "tpot_p95_ms", "e2e_p50_ms", "e2e_p95_ms", "queue_p50_ms", "queue_p95_ms",
                                 "tokens_per_s", "reserved_peak_mb", "allocated_peak_mb", "gpu_util_pct",
                                 "gpu_total_mb"),
                     ("pid", "level", "requests", "requests_with_inflight", "error_requests", "oom_requests"),
                     sparse=opt(BOOL))
CAPACITY = arr(row(("host", "needs"), ("mb_per_request", "base_mb", "fit_r2", "gpu_total_mb"),
                   ("pid", "requests", "top_level", "knee", "slo_level", "oom_level"),
                   slo_over=opt(arr(STR)), slo_unmet=opt(BOOL),
                   recommendation=opt(obj({"limit": INT, "text": STR}, ("limit", "text"))),
                   levels=arr(CAPACITY_LEVEL)))


def diff_schema() -> dict:
    """``dslogs.diff/1``: what ``build_diff`` returns and ``diff --format json`` writes."""
    side = obj({"label": STR, "source": STR, "paths": arr(STR), "since": opt(STR), "until": opt(STR),
                "first_event": opt(STR), "last_event": opt(STR)})  # fmt: skip
    change = obj({"metric": STR, "label": STR}, required=("metric", "label"))
    return {
        "$schema": DRAFT,
        "$id": "https://dslogs.dev/schemas/diff-1.json",
        "title": SCHEMA_IDS["diff"],
        "type": "object",
        "required": ["schema", "before", "after", "stages", "request_metrics", "findings"],
        "properties": {
            "schema": {"const": SCHEMA_IDS["diff"]},
            "generated_at": opt(STR),
            "dslogs_version": opt(STR),
            "regression_threshold_pct": NUM,
            "significance": BOOL,
            "method": obj({}, extra=SCALAR),
            "before": side,
            "after": side,
            "stages": arr(change),
            "request_metrics": arr(change),
            "rates": arr(change),
            "mix": obj({"available": BOOL, "rows": arr(change)}),
            "memory": arr(change),
            "errors": arr(row(("error_type", "sample_msg"))),
            "findings": obj({}, extra=arr({"type": "object"})),
            "regressions": arr(STR),
            "notes": arr(STR),
            "series": obj({}, extra=obj({}, extra=arr(row(TS_ROW_STRINGS, SERIES_NUMBERS)))),
            "summary": arr(STR),
        },
    }


def weekly_schema() -> dict:
    """``dslogs.weekly/1``: what ``build_weekly`` returns and ``report weekly --format json`` writes."""
    return {
        "$schema": DRAFT,
        "$id": "https://dslogs.dev/schemas/weekly-1.json",
        "title": SCHEMA_IDS["weekly"],
        "type": "object",
        "required": ["schema", "week", "previous_week", "this", "previous"],
        "properties": {
            "schema": {"const": SCHEMA_IDS["weekly"]},
            "generated_at": opt(STR),
            "dslogs_version": opt(STR),
            "tz": STR,
            "regression_threshold_pct": NUM,
            "stages": arr({"type": "object"}),
            "request_metrics": arr({"type": "object"}),
            "regressions": INT,
            "findings": obj({}, extra=arr({"type": "object"})),
            "summary": arr(STR),
            "memory": arr({"type": "object"}),
            "week": STR,
            "previous_week": STR,
            "this": {"type": "object"},
            "previous": {"type": "object"},
            "traffic": arr(row(("key", "label"))),
            "notes": arr({"type": ["string", "object"]}),
            "errors": obj({"this": arr({"type": "object"}), "previous": arr({"type": "object"})}),
        },
    }


BUILDERS = {"report": report_schema, "diff": diff_schema, "weekly": weekly_schema}


def schema_text(name: str) -> str:
    return json.dumps(BUILDERS[name](), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name in BUILDERS:
        (SCHEMA_DIR / f"{name}.json").write_text(schema_text(name), encoding="utf-8")
        print(SCHEMA_DIR / f"{name}.json")


if __name__ == "__main__":
    main()
