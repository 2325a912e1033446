-- The requests of the sessions in $session_ids (the report's drill-down for flagged and slowest
-- sessions), at most $report_detail_requests per session, in turn order, with the gpu_memory
-- snapshot taken after each request (003 §4.1), the requests in flight at its start and the memory
-- before/after it (the evidence of memory findings, rules.evidence). Units: ms, tokens, %, MiB.
-- The list is a bound parameter, never spliced into the SQL.
-- params: session_ids, report_detail_requests
WITH r AS (
    SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY turn_index) AS rn
    FROM requests
    WHERE list_contains($session_ids, session_id)
), mem AS (
    SELECT request_id, max_by(reserved_mb, ts) AS reserved_mb, max_by(allocated_mb, ts) AS allocated_mb
    FROM events
    WHERE stage = 'gpu_memory' AND request_id IS NOT NULL AND list_contains($session_ids, session_id)
    GROUP BY request_id
)
SELECT
    r.session_id, r.request_id, r.turn_index, r.start_ts, r.input_len, r.output_len, r.reasoning_len,
    r.tokenize_ms, r.queue_ms, r.prefill_ms, r.decode_ms, r.inference_ms, r.format_ms, r.ttft_ms,
    r.tpot_ms, r.e2e_ms, r.gpu_wait_pct, r.gpu_util_pct, r.kv_seq_len, r.num_beams, r.max_new_tokens,
    mem.reserved_mb, mem.allocated_mb, r.status, r.error_type, r.inflight,
    r.allocated_mb_before, r.allocated_mb_after, r.reserved_mb_before, r.reserved_mb_after,
    r.rss_mb_before, r.rss_mb_after, r.failed_num_beams, r.failed_max_new_tokens
FROM r
LEFT JOIN mem ON mem.request_id = r.request_id
WHERE r.rn <= $report_detail_requests
ORDER BY r.session_id, r.turn_index
