-- sessions: one row per session (provisional; mirrors analyzer/views/sessions.sql once it lands).
WITH mem AS (
    SELECT session_id, ts, reserved_mb, allocated_mb, num_ooms,
           (unix_micros(ts) / 1e6) / 60.0D AS minute
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL
), mem_fit AS (
    SELECT session_id,
           min_by(reserved_mb, ts) AS reserved_first_mb, max_by(reserved_mb, ts) AS reserved_last_mb,
           min(reserved_mb) AS reserved_min_mb, max(reserved_mb) AS reserved_max_mb,
           regr_slope(reserved_mb, minute) AS reserved_slope_mb_per_min,
           regr_r2(reserved_mb, minute) AS reserved_r2,
           max(allocated_mb) AS allocated_max_mb,
           regr_slope(allocated_mb, minute) AS allocated_slope_mb_per_min,
           max(reserved_mb - allocated_mb) AS ghost_max_mb,
           max(CASE WHEN reserved_mb > 0 THEN (reserved_mb - allocated_mb) / reserved_mb END) AS ghost_share_max,
           max(num_ooms) AS max_num_ooms
    FROM mem GROUP BY session_id
), ev_agg AS (
    SELECT session_id, min(host) AS host, min(ts) AS first_ts, max(ts) AS last_ts,
           max(kv_seq_len) AS max_kv_seq_len,
           max(CASE WHEN stage = 'kv_cache' THEN kv_cache_size_mb END) AS max_kv_cache_size_mb,
           sum(CASE WHEN stage = 'error' AND (error_type IN ('OutOfMemoryError', 'OOMError')
                    OR lower(coalesce(error_msg, '')) LIKE '%out of memory%') THEN 1 ELSE 0 END) AS ooms,
           min(source_format) AS source_format
    FROM events WHERE session_id IS NOT NULL GROUP BY session_id
), req_agg AS (
    SELECT session_id, count(*) AS requests, sum(CASE WHEN is_error THEN 1 ELSE 0 END) AS errors,
           max(num_beams) AS max_num_beams, max(max_new_tokens) AS max_max_new_tokens,
           max(output_len) AS max_output_len,
           percentile(tpot_ms, 0.5) AS tpot_p50_ms, percentile(ttft_ms, 0.5) AS ttft_p50_ms,
           percentile(e2e_ms, 0.5) AS e2e_p50_ms, percentile(prefill_ms, 0.5) AS prefill_p50_ms,
           percentile(gpu_wait_pct, 0.5) AS gpu_wait_pct_p50, percentile(gpu_util_pct, 0.5) AS gpu_util_pct_p50
    FROM requests GROUP BY session_id
)
SELECT ev_agg.session_id, ev_agg.host, ev_agg.first_ts, ev_agg.last_ts,
       (unix_micros(ev_agg.last_ts) - unix_micros(ev_agg.first_ts)) / 60e6 AS duration_min,
       coalesce(req_agg.requests, 0) AS requests, coalesce(req_agg.errors, 0) AS errors, ev_agg.ooms,
       mem_fit.reserved_first_mb, mem_fit.reserved_last_mb, mem_fit.reserved_min_mb, mem_fit.reserved_max_mb,
       mem_fit.reserved_slope_mb_per_min, mem_fit.reserved_r2, mem_fit.allocated_max_mb, mem_fit.allocated_slope_mb_per_min,
       mem_fit.ghost_max_mb, mem_fit.ghost_share_max, mem_fit.max_num_ooms, ev_agg.max_kv_seq_len, ev_agg.max_kv_cache_size_mb,
       req_agg.max_num_beams, req_agg.max_max_new_tokens, req_agg.max_output_len, req_agg.tpot_p50_ms, req_agg.ttft_p50_ms,
       req_agg.e2e_p50_ms, req_agg.prefill_p50_ms, req_agg.gpu_wait_pct_p50, req_agg.gpu_util_pct_p50, ev_agg.source_format
FROM ev_agg LEFT JOIN mem_fit ON ev_agg.session_id = mem_fit.session_id LEFT JOIN req_agg ON ev_agg.session_id = req_agg.session_id
