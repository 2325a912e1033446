-- Spark SQL twin of analyzer/views/sessions.sql (mirrors sha256:f98f60d2a2370f94); see it for the
-- definitions. Differences: percentile for quantile_cont (both exact, linear interpolation),
-- unix_micros(ts) / 1e6 for epoch(ts), min_by/max_by for arg_min/arg_max (NULLs filtered in the
-- FILTER clause), CAST('NaN' AS DOUBLE) for 'NaN'::DOUBLE, 60.0D for 60.0 (a double).
WITH ev AS (
    SELECT
        session_id,
        min(host) AS host,
        min(pid) AS pid,
        min(ts) AS first_ts,
        max(ts) AS last_ts,
        count(*) FILTER (WHERE stage = 'error'
                         AND (error_type IN ('OutOfMemoryError', 'OOMError')
                              OR error_msg ILIKE '%out of memory%')) AS oom_errors,
        min_by(reserved_mb, ts) FILTER (WHERE stage = 'gpu_memory' AND reserved_mb IS NOT NULL) AS reserved_first_mb,
        max_by(reserved_mb, ts) FILTER (WHERE stage = 'gpu_memory' AND reserved_mb IS NOT NULL) AS reserved_last_mb,
        min(reserved_mb) FILTER (WHERE stage = 'gpu_memory') AS reserved_min_mb,
        max(reserved_mb) FILTER (WHERE stage = 'gpu_memory') AS reserved_max_mb,
        nullif(regr_slope(reserved_mb, (unix_micros(ts) / 1e6) / 60.0D) FILTER (WHERE stage = 'gpu_memory'), CAST('NaN' AS DOUBLE)) AS reserved_slope_mb_per_min,
        nullif(regr_r2(reserved_mb, (unix_micros(ts) / 1e6) / 60.0D) FILTER (WHERE stage = 'gpu_memory'), CAST('NaN' AS DOUBLE)) AS reserved_r2,
        max(allocated_mb) FILTER (WHERE stage = 'gpu_memory') AS allocated_max_mb,
        nullif(regr_slope(allocated_mb, (unix_micros(ts) / 1e6) / 60.0D) FILTER (WHERE stage = 'gpu_memory'), CAST('NaN' AS DOUBLE)) AS allocated_slope_mb_per_min,
        max(reserved_mb - allocated_mb) FILTER (WHERE stage = 'gpu_memory') AS ghost_max_mb,
        max((reserved_mb - allocated_mb) / nullif(reserved_mb, 0)) FILTER (WHERE stage = 'gpu_memory') AS ghost_share_max,
        max(num_ooms) AS max_num_ooms,
        max(num_ooms) - min(num_ooms) AS num_ooms_rise,
        max(kv_seq_len) AS max_kv_seq_len,
        max(kv_cache_size_mb) AS max_kv_cache_size_mb,
        min(source_format) AS source_format,
        count(*) AS events
    FROM events
    WHERE session_id IS NOT NULL
    GROUP BY session_id
), rq AS (
    SELECT
        session_id,
        count(*) AS requests,
        count(*) FILTER (WHERE is_error) AS errors,
        max(num_beams) AS max_num_beams,
        max(max_new_tokens) AS max_max_new_tokens,
        max(output_len) AS max_output_len,
        percentile(tpot_ms, 0.5) AS tpot_p50_ms,
        percentile(ttft_ms, 0.5) AS ttft_p50_ms,
        percentile(e2e_ms, 0.5) AS e2e_p50_ms,
        percentile(prefill_ms, 0.5) AS prefill_p50_ms,
        percentile(gpu_wait_pct, 0.5) AS gpu_wait_pct_p50,
        percentile(gpu_util_pct, 0.5) AS gpu_util_pct_p50
    FROM requests
    GROUP BY session_id
), rss AS (
    SELECT
        ev.session_id,
        nullif(regr_slope(p.rss_mb, (unix_micros(p.ts) / 1e6) / 60.0D), CAST('NaN' AS DOUBLE)) AS rss_slope_mb_per_min,
        max(p.rss_mb) - min(p.rss_mb) AS rss_rise_mb
    FROM ev
    JOIN events AS p
      ON p.stage = 'process_sample' AND p.host = ev.host AND p.pid = ev.pid
     AND p.ts BETWEEN ev.first_ts AND ev.last_ts
    GROUP BY ev.session_id
)
SELECT
    ev.session_id,
    ev.host,
    ev.first_ts,
    ev.last_ts,
    ((unix_micros(ev.last_ts) / 1e6) - (unix_micros(ev.first_ts) / 1e6)) / 60.0D AS duration_min,
    coalesce(rq.requests, 0) AS requests,
    coalesce(rq.errors, 0) AS errors,
    ev.oom_errors + greatest(coalesce(ev.num_ooms_rise, 0), 0) AS ooms,
    ev.reserved_first_mb,
    ev.reserved_last_mb,
    ev.reserved_min_mb,
    ev.reserved_max_mb,
    ev.reserved_slope_mb_per_min,
    ev.reserved_r2,
    ev.allocated_max_mb,
    ev.allocated_slope_mb_per_min,
    ev.ghost_max_mb,
    ev.ghost_share_max,
    ev.max_num_ooms,
    ev.max_kv_seq_len,
    ev.max_kv_cache_size_mb,
    rq.max_num_beams,
    rq.max_max_new_tokens,
    rq.max_output_len,
    rq.tpot_p50_ms,
    rq.ttft_p50_ms,
    rq.e2e_p50_ms,
    rq.prefill_p50_ms,
    rq.gpu_wait_pct_p50,
    rq.gpu_util_pct_p50,
    ev.source_format,
    ev.pid,
    rss.rss_slope_mb_per_min,
    rss.rss_rise_mb,
    ev.events
FROM ev
LEFT JOIN rq ON rq.session_id = ev.session_id
LEFT JOIN rss ON rss.session_id = ev.session_id
