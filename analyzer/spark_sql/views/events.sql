-- events: one row per log line, v1 and legacy normalised (docs/internals.md "Views").
-- Input: the temp view dslogs_raw (one row per non-blank, well-formed line: the JSON fields as
-- strings, params as its JSON text, plus source_file, line_no, line_bytes).
-- v1 has "v"; without it the line is the legacy seed format (DESIGN.md §4): naive "timestamp"
-- read in the session time zone (--tz), duration_ms -1 = not measured, gpu_memory's
-- kv_cache_size_mb is allocated memory, and request ids are synthesised as <session_id>#<n>,
-- n = the 1-based index of the session's input events in (ts, file, line) order.
WITH typed AS (
    SELECT
        to_timestamp(coalesce(ts, `timestamp`)) AS ts,
        stage,
        session_id,
        request_id,
        host,
        CAST(pid AS BIGINT) AS pid,
        CASE WHEN CAST(duration_ms AS DOUBLE) = -1 THEN NULL ELSE CAST(duration_ms AS DOUBLE) END AS duration_ms,
        CAST(input_len AS BIGINT) AS input_len,
        CAST(output_len AS BIGINT) AS output_len,
        CAST(reasoning_len AS BIGINT) AS reasoning_len,
        CAST(kv_seq_len AS BIGINT) AS kv_seq_len,
        CAST(cpu_time_ms AS DOUBLE) AS cpu_time_ms,
        CAST(gpu_wait_pct AS DOUBLE) AS gpu_wait_pct,
        CAST(gpu_util_pct AS DOUBLE) AS gpu_util_pct,
        CAST(get_json_object(params, '$.num_beams') AS BIGINT) AS num_beams,
        CAST(get_json_object(params, '$.max_new_tokens') AS BIGINT) AS max_new_tokens,
        CAST(get_json_object(params, '$.temperature') AS DOUBLE) AS temperature,
        CAST(get_json_object(params, '$.top_p') AS DOUBLE) AS top_p,
        CAST(get_json_object(params, '$.do_sample') AS BOOLEAN) AS do_sample,
        CAST(ttft_ms AS DOUBLE) AS ttft_ms,
        CAST(ttfa_ms AS DOUBLE) AS ttfa_ms,
        status,
        finish_reason,
        error_type,
        error_msg,
        failed_stage,
        CAST(allocated_mb AS DOUBLE) AS allocated_mb,
        CAST(reserved_mb AS DOUBLE) AS reserved_mb,
        CAST(max_allocated_mb AS DOUBLE) AS max_allocated_mb,
        CAST(num_ooms AS BIGINT) AS num_ooms,
        CAST(num_alloc_retries AS BIGINT) AS num_alloc_retries,
        CAST(gpu_index AS BIGINT) AS gpu_index,
        CAST(kv_cache_size_mb AS DOUBLE) AS kv_cache_size_mb,
        CAST(gpu_mem_util_pct AS DOUBLE) AS gpu_mem_util_pct,
        CAST(gpu_mem_used_mb AS DOUBLE) AS gpu_mem_used_mb,
        CAST(gpu_mem_total_mb AS DOUBLE) AS gpu_mem_total_mb,
        CAST(power_w AS DOUBLE) AS power_w,
        CAST(temp_c AS DOUBLE) AS temp_c,
        CAST(sm_clock_mhz AS DOUBLE) AS sm_clock_mhz,
        CAST(rss_mb AS DOUBLE) AS rss_mb,
        CAST(cpu_pct AS DOUBLE) AS cpu_pct,
        CAST(threads AS BIGINT) AS threads,
        CAST(queued AS BIGINT) AS queued,
        CAST(written AS BIGINT) AS written,
        CAST(dropped AS BIGINT) AS dropped,
        CAST(bytes_written AS BIGINT) AS bytes_written,
        CASE WHEN v IS NULL THEN 'legacy' ELSE 'v1' END AS source_format,
        source_file,
        line_no,
        line_bytes
    FROM dslogs_raw
), legacy AS (
    SELECT
        *,
        sum(CASE WHEN stage = 'input' THEN 1 ELSE 0 END) OVER (
            PARTITION BY session_id
            ORDER BY ts NULLS LAST, source_file, line_no
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS input_n
    FROM typed
    WHERE source_format = 'legacy'
)
SELECT ts, stage, session_id, request_id, host, pid, duration_ms, input_len, output_len,
       reasoning_len, kv_seq_len, cpu_time_ms, gpu_wait_pct, gpu_util_pct, num_beams,
       max_new_tokens, temperature, top_p, do_sample, ttft_ms, ttfa_ms, status, finish_reason,
       error_type, error_msg, failed_stage, allocated_mb, reserved_mb, max_allocated_mb, num_ooms,
       num_alloc_retries, gpu_index, kv_cache_size_mb, gpu_mem_util_pct, gpu_mem_used_mb,
       gpu_mem_total_mb, power_w, temp_c, sm_clock_mhz, rss_mb, cpu_pct, threads, queued, written,
       dropped, bytes_written, source_format, source_file, line_bytes
FROM typed
WHERE source_format = 'v1'
UNION ALL
SELECT ts, stage, session_id,
       CASE WHEN session_id IS NOT NULL AND input_n > 0
            THEN concat(session_id, '#', CAST(input_n AS STRING)) END AS request_id,
       host, pid, duration_ms, input_len, output_len,
       reasoning_len, kv_seq_len, cpu_time_ms, gpu_wait_pct, gpu_util_pct, num_beams,
       max_new_tokens, temperature, top_p, do_sample, ttft_ms, ttfa_ms, status, finish_reason,
       error_type, error_msg, failed_stage,
       CASE WHEN stage = 'gpu_memory' THEN coalesce(allocated_mb, kv_cache_size_mb) ELSE allocated_mb END,
       reserved_mb, max_allocated_mb, num_ooms,
       num_alloc_retries, gpu_index,
       CASE WHEN stage = 'gpu_memory' THEN NULL ELSE kv_cache_size_mb END,
       gpu_mem_util_pct, gpu_mem_used_mb,
       gpu_mem_total_mb, power_w, temp_c, sm_clock_mhz, rss_mb, cpu_pct, threads, queued, written,
       dropped, bytes_written, source_format, source_file, line_bytes
FROM legacy
