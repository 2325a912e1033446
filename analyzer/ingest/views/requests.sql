-- requests: one row per request (session_id, request_id) from the events view, in ts order within
-- its session (turn_index). Derived metrics (names after vLLM / OTel GenAI):
--   ttft_ms = the request event's ttft_ms, else tokenize + queue + prefill (a missing part counts
--             0; NULL when prefill was not measured);
--   tpot_ms = decode_ms / (output_len - 1); a request with one unsplit inference stage (legacy)
--             gets inference_ms / output_len and tpot_is_upper_bound (it includes prefill);
--   e2e_ms  = the request event's duration_ms, else the sum of the measured stages;
--   tokens_per_s = output_len / e2e seconds; prefill_decode_ratio = prefill_ms / decode_ms;
--   reasoning_share = reasoning_len / output_len.
-- Stage times are summed over a request's lines of that stage (a retried generate counts twice);
-- generate parameters and GPU figures are the largest seen in its decode/inference lines; the
-- parameters of failed attempts (error events' params) count too (an OOM with num_beams=5 then a
-- greedy fallback is a beam-search request: failed_num_beams keeps what the failed attempt used).
-- e2e and ttft from the request event include queue wait and failed attempts (what the collector
-- measures, collector/request.py); computed from stages they add the queue stage and every attempt's stage lines.
-- device, inflight, attempts and the memory before/after fields are the request event's.
-- A stage's aggregates are written agg(CASE WHEN stage ... THEN x END), not agg(x) FILTER (WHERE
-- stage ...): the same values in the same order (aggregates skip NULLs; arg_min skips a NULL
-- ordering value), and DuckDB 2.0 computes the 50 of them in half the time (1.3 -> 0.6 s CPU
-- over 1.57 M events).
WITH r AS (
    SELECT
        session_id,
        request_id,
        min(host) AS host,
        min(pid) AS pid,
        min(ts) AS start_ts,
        max(ts) AS end_ts,
        max(CASE WHEN stage = 'input' THEN input_len END) AS input_chars,
        coalesce(max(CASE WHEN stage = 'request' THEN input_len END),
                 max(CASE WHEN stage = 'tokenize' THEN input_len END),
                 max(CASE WHEN stage = 'prefill' THEN input_len END)) AS input_len,
        coalesce(max(CASE WHEN stage = 'request' THEN output_len END),
                 max(CASE WHEN stage IN ('decode', 'inference') THEN output_len END)) AS output_len,
        coalesce(max(CASE WHEN stage = 'request' THEN reasoning_len END),
                 max(CASE WHEN stage IN ('decode', 'inference') THEN reasoning_len END)) AS reasoning_len,
        sum(CASE WHEN stage = 'tokenize' THEN duration_ms END) AS tokenize_ms,
        sum(CASE WHEN stage = 'queue' THEN duration_ms END) AS queue_ms,
        sum(CASE WHEN stage = 'prefill' THEN duration_ms END) AS prefill_ms,
        sum(CASE WHEN stage = 'decode' THEN duration_ms END) AS decode_ms,
        sum(CASE WHEN stage = 'inference' THEN duration_ms END) AS inference_ms,
        sum(CASE WHEN stage = 'format' THEN duration_ms END) AS format_ms,
        max(CASE WHEN stage = 'request' THEN duration_ms END) AS request_ms,
        max(CASE WHEN stage = 'request' THEN ttft_ms END) AS request_ttft_ms,
        max(CASE WHEN stage = 'request' THEN ttfa_ms END) AS ttfa_ms,
        max(CASE WHEN stage IN ('prefill', 'kv_cache', 'decode', 'inference') THEN kv_seq_len END) AS kv_seq_len,
        max(CASE WHEN stage IN ('decode', 'inference', 'error') THEN num_beams END) AS num_beams,
        max(CASE WHEN stage IN ('decode', 'inference', 'error') THEN max_new_tokens END) AS max_new_tokens,
        max(CASE WHEN stage IN ('decode', 'inference') THEN temperature END) AS temperature,
        max(CASE WHEN stage IN ('decode', 'inference') THEN top_p END) AS top_p,
        bool_or(CASE WHEN stage IN ('decode', 'inference') THEN do_sample END) AS do_sample,
        sum(CASE WHEN stage IN ('decode', 'inference') THEN cpu_time_ms END) AS cpu_time_ms,
        max(CASE WHEN stage IN ('decode', 'inference') THEN gpu_wait_pct END) AS gpu_wait_pct,
        max(CASE WHEN stage IN ('decode', 'inference') THEN gpu_util_pct END) AS gpu_util_pct,
        max(CASE WHEN stage = 'request' THEN status END) AS request_status,
        max(CASE WHEN stage = 'request' THEN finish_reason END) AS finish_reason,
        count(CASE WHEN stage = 'error' THEN 1 END) AS error_events,
        arg_min(error_type, CASE WHEN stage = 'error' THEN ts END) AS error_type,
        arg_min(error_msg, CASE WHEN stage = 'error' THEN ts END) AS error_msg,
        arg_min(failed_stage, CASE WHEN stage = 'error' THEN ts END) AS failed_stage,
        min(source_format) AS source_format,
        count(*) AS events,
        max(CASE WHEN stage = 'error' THEN num_beams END) AS failed_num_beams,
        max(CASE WHEN stage = 'error' THEN max_new_tokens END) AS failed_max_new_tokens,
        coalesce(min(CASE WHEN stage = 'request' THEN device END), min(device)) AS device,
        max(CASE WHEN stage = 'request' THEN inflight END) AS inflight,
        max(CASE WHEN stage = 'request' THEN attempts END) AS attempts,
        max(CASE WHEN stage = 'request' THEN reserved_mb_before END) AS reserved_mb_before,
        max(CASE WHEN stage = 'request' THEN reserved_mb_after END) AS reserved_mb_after,
        max(CASE WHEN stage = 'request' THEN allocated_mb_before END) AS allocated_mb_before,
        max(CASE WHEN stage = 'request' THEN allocated_mb_after END) AS allocated_mb_after,
        max(CASE WHEN stage = 'request' THEN rss_mb_before END) AS rss_mb_before,
        max(CASE WHEN stage = 'request' THEN rss_mb_after END) AS rss_mb_after,
        max(CASE WHEN stage = 'request' THEN done_before END) AS done_before,
        max(CASE WHEN stage = 'request' THEN done_seq END) AS done_seq
    FROM events
    WHERE request_id IS NOT NULL
    GROUP BY session_id, request_id
    -- format lines alone are no request: a drop-in log_event("format") written after the answer,
    -- outside any request the logger saw, got an id of its own (Streamlit's article app does this)
    HAVING count(CASE WHEN stage <> 'format' THEN 1 END) > 0
), d AS (
    SELECT
        *,
        coalesce(request_ttft_ms,
                 CASE WHEN prefill_ms IS NOT NULL
                      THEN coalesce(tokenize_ms, 0) + coalesce(queue_ms, 0) + prefill_ms END) AS ttft,
        CASE
            WHEN decode_ms IS NOT NULL THEN CASE WHEN output_len > 1 THEN decode_ms / (output_len - 1) END
            WHEN inference_ms IS NOT NULL AND output_len > 0 THEN inference_ms / output_len
        END AS tpot,
        coalesce(request_ms,
                 CASE WHEN coalesce(tokenize_ms, queue_ms, prefill_ms, decode_ms, inference_ms, format_ms) IS NOT NULL
                      THEN coalesce(tokenize_ms, 0) + coalesce(queue_ms, 0) + coalesce(prefill_ms, 0)
                           + coalesce(decode_ms, 0) + coalesce(inference_ms, 0) + coalesce(format_ms, 0) END) AS e2e,
        coalesce(request_status, CASE WHEN error_events > 0 THEN 'error' ELSE 'ok' END) AS status
    FROM r
)
SELECT
    session_id,
    request_id,
    host,
    pid,
    row_number() OVER (PARTITION BY session_id ORDER BY start_ts, request_id) AS turn_index,
    start_ts,
    end_ts,
    input_chars,
    input_len,
    output_len,
    reasoning_len,
    tokenize_ms,
    queue_ms,
    prefill_ms,
    decode_ms,
    inference_ms,
    format_ms,
    ttft AS ttft_ms,
    tpot AS tpot_ms,
    (decode_ms IS NULL AND inference_ms IS NOT NULL) AS tpot_is_upper_bound,
    e2e AS e2e_ms,
    CASE WHEN e2e > 0 AND output_len IS NOT NULL THEN output_len / (e2e / 1000.0) END AS tokens_per_s,
    CASE WHEN decode_ms > 0 THEN prefill_ms / decode_ms END AS prefill_decode_ratio,
    CASE WHEN output_len > 0 THEN reasoning_len / output_len END AS reasoning_share,
    ttfa_ms,
    kv_seq_len,
    num_beams,
    max_new_tokens,
    temperature,
    top_p,
    do_sample,
    cpu_time_ms,
    -- no meaning on a CPU device (multi-threaded CPU time exceeds wall time: negative values)
    CASE WHEN lower(device) LIKE 'cpu%' THEN NULL ELSE gpu_wait_pct END AS gpu_wait_pct,
    gpu_util_pct,
    status,
    error_type,
    error_msg,
    status = 'error' AS is_error,
    source_format,
    finish_reason,
    failed_stage,
    error_events,
    events,
    failed_num_beams,
    failed_max_new_tokens,
    device,
    inflight,
    attempts,
    reserved_mb_before,
    reserved_mb_after,
    allocated_mb_before,
    allocated_mb_after,
    rss_mb_before,
    rss_mb_after,
    done_before,
    done_seq
FROM d
