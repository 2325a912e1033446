-- Spark SQL twin of queries/session_requests.sql (mirrors sha256:3197490a854f7dfc).
-- The requests of the sessions in :session_ids (the report's drill-down for flagged and slowest
-- sessions), at most :max_requests per session, in turn order. Units: ms, tokens, %.
-- The list is a bound parameter, never spliced into the SQL.
WITH r AS (
    SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY turn_index NULLS LAST) AS rn
    FROM requests
    WHERE array_contains(:session_ids, session_id)
)
SELECT
    session_id, request_id, turn_index, start_ts, input_len, output_len, reasoning_len,
    tokenize_ms, queue_ms, prefill_ms, decode_ms, inference_ms, format_ms, ttft_ms, tpot_ms,
    e2e_ms, gpu_wait_pct, gpu_util_pct, kv_seq_len, num_beams, max_new_tokens, status, error_type
FROM r
WHERE rn <= :max_requests
ORDER BY session_id NULLS LAST, turn_index NULLS LAST
