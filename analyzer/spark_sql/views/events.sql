-- Spark SQL twin of analyzer/views/events.sql (mirrors sha256:3229de0f740981e2) and of
-- analyzer/views/legacy_request_ids.sql (mirrors sha256:3b0017bb6a4f2f3c), in one statement.
-- events: one row per log line, v1 (DESIGN.md §3) and legacy (§4, article 003 §2.2) normalised.
-- Input: dslogs_raw, the typed JSON fields of each good line (ingest.RAW_COLUMNS, typed as DuckDB
-- reads them, see spark_engine._read_jsonl) plus file_id (read order), block_start and row_id
-- (the line's place in its file), line_bytes and source_file. The session time zone is --tz (or
-- local): naive timestamps parse in it, which is DuckDB's timezone($tz, ...).
-- Legacy request ids: <session_id>#<n>, n = the 1-based index of the session's input events in
-- (ts, file read order, file position) order across every file read; lines before a session's
-- first input get NULL. DuckDB fills them with an UPDATE afterwards; here a window does it.
-- Differences from the DuckDB text: to_timestamp for try_cast, RLIKE for regexp_matches, the
-- legacy ids inline, NULLS LAST explicit.
WITH typed AS (
    SELECT
        CASE
            WHEN v IS NOT NULL OR ts IS NOT NULL THEN ts
            ELSE to_timestamp(`timestamp`)
        END AS ts,
        stage,
        session_id,
        CASE WHEN v IS NOT NULL THEN request_id END AS request_id,
        host,
        pid,
        CASE WHEN duration_ms = -1 THEN NULL ELSE duration_ms END AS duration_ms,
        input_len,
        output_len,
        reasoning_len,
        kv_seq_len,
        cpu_time_ms,
        gpu_wait_pct,
        gpu_util_pct,
        params.num_beams AS num_beams,
        params.max_new_tokens AS max_new_tokens,
        params.temperature AS temperature,
        params.top_p AS top_p,
        params.do_sample AS do_sample,
        ttft_ms,
        ttfa_ms,
        status,
        finish_reason,
        error_type,
        error_msg,
        failed_stage,
        CASE WHEN v IS NULL AND stage = 'gpu_memory' THEN coalesce(allocated_mb, kv_cache_size_mb) ELSE allocated_mb END AS allocated_mb,
        reserved_mb,
        max_allocated_mb,
        num_ooms,
        num_alloc_retries,
        gpu_index,
        CASE WHEN v IS NULL AND stage = 'gpu_memory' THEN NULL ELSE kv_cache_size_mb END AS kv_cache_size_mb,
        gpu_mem_util_pct,
        gpu_mem_used_mb,
        gpu_mem_total_mb,
        power_w,
        temp_c,
        sm_clock_mhz,
        rss_mb,
        cpu_pct,
        threads,
        queued,
        written,
        dropped,
        bytes_written,
        CASE WHEN v IS NOT NULL THEN 'v1' ELSE 'legacy' END AS source_format,
        source_file,
        line_bytes,
        file_id,
        block_start,
        row_id
    FROM dslogs_raw
), numbered AS (
    SELECT
        *,
        sum(CASE WHEN stage = 'input' THEN 1 ELSE 0 END) OVER (
            PARTITION BY session_id
            ORDER BY ts NULLS LAST, file_id, block_start, row_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS k
    FROM typed
    WHERE source_format = 'legacy' AND session_id IS NOT NULL
)
SELECT
    ts, stage, session_id, request_id, host, pid, duration_ms, input_len, output_len,
    reasoning_len, kv_seq_len, cpu_time_ms, gpu_wait_pct, gpu_util_pct, num_beams,
    max_new_tokens, temperature, top_p, do_sample, ttft_ms, ttfa_ms, status, finish_reason,
    error_type, error_msg, failed_stage, allocated_mb, reserved_mb, max_allocated_mb, num_ooms,
    num_alloc_retries, gpu_index, kv_cache_size_mb, gpu_mem_util_pct, gpu_mem_used_mb,
    gpu_mem_total_mb, power_w, temp_c, sm_clock_mhz, rss_mb, cpu_pct, threads, queued, written,
    dropped, bytes_written, source_format, source_file, line_bytes
FROM typed
WHERE NOT (source_format = 'legacy' AND session_id IS NOT NULL)
UNION ALL
SELECT
    ts, stage, session_id,
    CASE WHEN k > 0 THEN concat(session_id, '#', CAST(k AS STRING)) END AS request_id, host,
    pid, duration_ms, input_len, output_len, reasoning_len, kv_seq_len, cpu_time_ms,
    gpu_wait_pct, gpu_util_pct, num_beams, max_new_tokens, temperature, top_p, do_sample,
    ttft_ms, ttfa_ms, status, finish_reason, error_type, error_msg, failed_stage, allocated_mb,
    reserved_mb, max_allocated_mb, num_ooms, num_alloc_retries, gpu_index, kv_cache_size_mb,
    gpu_mem_util_pct, gpu_mem_used_mb, gpu_mem_total_mb, power_w, temp_c, sm_clock_mhz, rss_mb,
    cpu_pct, threads, queued, written, dropped, bytes_written, source_format, source_file,
    line_bytes
FROM numbered
