"""A unit-level stand-in for the ingest views: DuckDB tables named events / requests / sessions
with exactly the columns docs/internals.md documents, filled from small Python rows.

Used by tests/test_queries.py to check each query's SQL and numbers on hand-made data; the
end-to-end tests use the real ``dslogs.analyzer.ingest.logs.open_logs``.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from dslogs.analyzer.ingest.columns import EVENT_TYPES

# The events columns and types as the reader makes them (derived from collector/schema.py).
EVENTS = dict(EVENT_TYPES)

REQUESTS = {
    "session_id": "VARCHAR", "request_id": "VARCHAR", "host": "VARCHAR", "pid": "BIGINT",
    "turn_index": "BIGINT", "start_ts": "TIMESTAMPTZ", "end_ts": "TIMESTAMPTZ",
    "input_chars": "BIGINT", "input_len": "BIGINT", "output_len": "BIGINT", "reasoning_len": "BIGINT",
    "tokenize_ms": "DOUBLE", "queue_ms": "DOUBLE", "prefill_ms": "DOUBLE", "decode_ms": "DOUBLE",
    "inference_ms": "DOUBLE", "format_ms": "DOUBLE", "ttft_ms": "DOUBLE", "tpot_ms": "DOUBLE",
    "tpot_is_upper_bound": "BOOLEAN", "e2e_ms": "DOUBLE", "tokens_per_s": "DOUBLE",
    "prefill_decode_ratio": "DOUBLE", "reasoning_share": "DOUBLE", "ttfa_ms": "DOUBLE",
    "kv_seq_len": "BIGINT", "num_beams": "BIGINT", "max_new_tokens": "BIGINT",
    "temperature": "DOUBLE", "top_p": "DOUBLE", "do_sample": "BOOLEAN", "cpu_time_ms": "DOUBLE",
    "gpu_wait_pct": "DOUBLE", "gpu_util_pct": "DOUBLE", "status": "VARCHAR", "error_type": "VARCHAR",
    "error_msg": "VARCHAR", "is_error": "BOOLEAN", "source_format": "VARCHAR",
    "failed_num_beams": "BIGINT", "failed_max_new_tokens": "BIGINT", "device": "VARCHAR",
    "inflight": "BIGINT", "attempts": "BIGINT", "reserved_mb_before": "DOUBLE",
    "reserved_mb_after": "DOUBLE", "allocated_mb_before": "DOUBLE", "allocated_mb_after": "DOUBLE",
    "rss_mb_before": "DOUBLE", "rss_mb_after": "DOUBLE", "done_before": "BIGINT", "done_seq": "BIGINT",
}  # fmt: skip

SESSIONS = {
    "session_id": "VARCHAR", "host": "VARCHAR", "first_ts": "TIMESTAMPTZ", "last_ts": "TIMESTAMPTZ",
    "duration_min": "DOUBLE", "requests": "BIGINT", "errors": "BIGINT", "ooms": "BIGINT",
    "reserved_first_mb": "DOUBLE", "reserved_last_mb": "DOUBLE", "reserved_min_mb": "DOUBLE",
    "reserved_max_mb": "DOUBLE", "reserved_slope_mb_per_min": "DOUBLE", "reserved_r2": "DOUBLE",
    "allocated_max_mb": "DOUBLE", "allocated_slope_mb_per_min": "DOUBLE", "ghost_max_mb": "DOUBLE",
    "ghost_share_max": "DOUBLE", "max_num_ooms": "BIGINT", "max_kv_seq_len": "BIGINT",
    "max_kv_cache_size_mb": "DOUBLE", "max_num_beams": "BIGINT", "max_max_new_tokens": "BIGINT",
    "max_output_len": "BIGINT", "tpot_p50_ms": "DOUBLE", "ttft_p50_ms": "DOUBLE",
    "e2e_p50_ms": "DOUBLE", "prefill_p50_ms": "DOUBLE", "gpu_wait_pct_p50": "DOUBLE",
    "gpu_util_pct_p50": "DOUBLE", "source_format": "VARCHAR",
}  # fmt: skip


def _create(con, name: str, columns: dict[str, str], rows: list[dict]) -> None:
    unknown = {k for row in rows for k in row} - set(columns)
    if unknown:
        raise KeyError(f"{name}: columns not in docs/internals.md: {sorted(unknown)}")
    con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns.items())})")
    if rows:
        # A DataFrame scan is orders of magnitude faster than executemany for 10k+ rows.
        frame = pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=list(columns), dtype=object)
        con.register("_fixture_rows", frame)
        casts = ", ".join(f"CAST({c} AS {t})" for c, t in columns.items())
        con.execute(f"INSERT INTO {name} SELECT {casts} FROM _fixture_rows")
        con.unregister("_fixture_rows")


def fixture_connection(events=(), requests=(), sessions=(), line_bytes: bool = True):
    """An in-memory DuckDB with tables events / requests / sessions holding the given rows."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    columns = dict(EVENTS)
    if not line_bytes:
        columns.pop("line_bytes")
    _create(con, "events", columns, list(events))
    _create(con, "requests", REQUESTS, list(requests))
    _create(con, "sessions", SESSIONS, list(sessions))
    return con
