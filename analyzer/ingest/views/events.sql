-- events: one row per log line, v1 (collector/trace_schema_v1.json) and legacy (article 003 §2.2) normalised.
-- Input: dslogs_raw, the typed JSON fields of each line (analyzer/ingest/columns.py RAW_COLUMNS) plus
-- file_id and line_bytes. Parameter $tz: the zone naive legacy timestamps are read in.
-- source_format: each source format's tag (analyzer/ingest/formats/<name>.py), in order: v present
-- => v1, except the profile names the OTLP statement writes into v ('otlp:vllm', ...). Legacy: "timestamp" is naive local time (an offset, if a writer added one,
-- is honoured); duration_ms -1 means not measured (NULL); gpu_memory's kv_cache_size_mb is
-- torch.cuda.memory_allocated (allocated_mb). Legacy request_id is filled in afterwards
-- (legacy_request_ids.sql), because it counts input events across files. device .. rss_mb_after
-- are the request event's fields of the collector (collector/request.py); source names who measured
-- a queue stage (e.g. "gradio"). Every field of collector/schema.py FIELDS but v is selected, in
-- its order (tests/test_columns.py).
SELECT
    CASE
        WHEN v IS NOT NULL OR ts IS NOT NULL THEN ts
        WHEN regexp_matches("timestamp", '([zZ]|[+-][0-9]{2}(:?[0-9]{2})?)$') THEN try_cast("timestamp" AS TIMESTAMPTZ)
        ELSE timezone($tz, try_cast("timestamp" AS TIMESTAMP))
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
    device,
    inflight,
    attempts,
    reserved_mb_before,
    reserved_mb_after,
    allocated_mb_before,
    allocated_mb_after,
    rss_mb_before,
    rss_mb_after,
    source,
    done_before,
    done_seq,
    fallback,
    deploy_id,
    label,
    config,
    {source_format} AS source_format,
    file_id,
    line_bytes
FROM dslogs_raw
