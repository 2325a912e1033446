-- One row per session from the sessions view: requests, errors, time range, memory trend and the
-- latency medians the report's session table shows. Units: ms, MiB/min, %.
-- Source: docs/internals.md (sessions view; the report model's `sessions` keys).
SELECT
    session_id, host, requests, errors, first_ts, last_ts, duration_min,
    reserved_slope_mb_per_min, reserved_r2, ghost_max_mb,
    gpu_wait_pct_p50, gpu_util_pct_p50, tpot_p50_ms, ttft_p50_ms, e2e_p50_ms, prefill_p50_ms,
    max_kv_seq_len, max_output_len, source_format
FROM sessions
WHERE session_id IS NOT NULL
ORDER BY first_ts, session_id
