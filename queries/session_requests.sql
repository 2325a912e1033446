-- The requests of the sessions in $session_ids (the report's drill-down for flagged and slowest
-- sessions), at most $report_detail_requests per session, in turn order, with the gpu_memory
-- snapshot taken after each request (003 §4.1) and the time it was taken (memory_ts), the request's
-- last KV reading (kv_ts, kv_cache_size_mb of its kv_cache events, as kv_growth_timeline.sql), the
-- requests in flight at its start and the memory before/after it (the evidence of memory findings,
-- rules.evidence; the per-session charts draw the readings of the sessions a finding names, at the
-- time each was taken). Units: ms, tokens, %, MiB.
-- The list is a bound parameter, never spliced into the SQL.
-- params: session_ids, report_detail_requests
WITH r AS (
    SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY turn_index) AS rn
    FROM requests
    WHERE list_contains($session_ids, session_id)
), mem AS (
    -- one pass over the sessions' events for both readings (a NULL ordering value is skipped)
    SELECT request_id,
           max_by(reserved_mb, CASE WHEN stage = 'gpu_memory' THEN ts END) AS reserved_mb,
           max_by(allocated_mb, CASE WHEN stage = 'gpu_memory' THEN ts END) AS allocated_mb,
           max(CASE WHEN stage = 'gpu_memory' THEN ts END) AS memory_ts,
           max(CASE WHEN stage <> 'gpu_memory' THEN ts END) AS kv_ts,
           max(CASE WHEN stage = 'kv_cache' THEN kv_cache_size_mb END) AS kv_cache_size_mb
    FROM events
    WHERE request_id IS NOT NULL AND list_contains($session_ids, session_id)
      AND (stage = 'gpu_memory'
           OR stage IN ('prefill', 'kv_cache', 'decode', 'inference')
              AND (kv_seq_len IS NOT NULL OR kv_cache_size_mb IS NOT NULL))
    GROUP BY request_id
)
SELECT
    r.session_id, r.request_id, r.turn_index, r.start_ts, r.input_len, r.output_len, r.reasoning_len,
    r.tokenize_ms, r.queue_ms, r.prefill_ms, r.decode_ms, r.inference_ms, r.format_ms, r.ttft_ms,
    r.tpot_ms, r.e2e_ms, r.gpu_wait_pct, r.gpu_util_pct, r.kv_seq_len, r.num_beams, r.max_new_tokens,
    mem.reserved_mb, mem.allocated_mb, mem.memory_ts, mem.kv_ts, mem.kv_cache_size_mb, r.status, r.error_type,
    r.inflight, r.allocated_mb_before, r.allocated_mb_after, r.reserved_mb_before, r.reserved_mb_after,
    r.rss_mb_before, r.rss_mb_after, r.failed_num_beams, r.failed_max_new_tokens
FROM r
LEFT JOIN mem ON mem.request_id = r.request_id
WHERE r.rn <= $report_detail_requests
ORDER BY r.session_id, r.turn_index
