-- requests: one row per request (session_id, request_id) from the events view, in ts order within
-- its session (turn_index). Derived metrics (DESIGN.md §5, names after vLLM / OTel GenAI):
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
-- e2e and ttft from the request event include queue wait and failed attempts (collector contract,
-- issue 12); computed from stages they add the queue stage and every attempt's stage lines.
-- device, inflight, attempts and the memory before/after fields are the request event's.
WITH r AS (
    SELECT
        session_id,
        request_id,
        min(host) AS host,
        min(pid) AS pid,
        min(ts) AS start_ts,
        max(ts) AS end_ts,
        max(input_len) FILTER (WHERE stage = 'input') AS input_chars,
        coalesce(max(input_len) FILTER (WHERE stage = 'request'),
                 max(input_len) FILTER (WHERE stage = 'tokenize'),
                 max(input_len) FILTER (WHERE stage = 'prefill')) AS input_len,
        coalesce(max(output_len) FILTER (WHERE stage = 'request'),
                 max(output_len) FILTER (WHERE stage IN ('decode', 'inference'))) AS output_len,
        coalesce(max(reasoning_len) FILTER (WHERE stage = 'request'),
                 max(reasoning_len) FILTER (WHERE stage IN ('decode', 'inference'))) AS reasoning_len,
        sum(duration_ms) FILTER (WHERE stage = 'tokenize') AS tokenize_ms,
        sum(duration_ms) FILTER (WHERE stage = 'queue') AS queue_ms,
        sum(duration_ms) FILTER (WHERE stage = 'prefill') AS prefill_ms,
        sum(duration_ms) FILTER (WHERE stage = 'decode') AS decode_ms,
        sum(duration_ms) FILTER (WHERE stage = 'inference') AS inference_ms,
        sum(duration_ms) FILTER (WHERE stage = 'format') AS format_ms,
        max(duration_ms) FILTER (WHERE stage = 'request') AS request_ms,
        max(ttft_ms) FILTER (WHERE stage = 'request') AS request_ttft_ms,
        max(ttfa_ms) FILTER (WHERE stage = 'request') AS ttfa_ms,
        max(kv_seq_len) FILTER (WHERE stage IN ('prefill', 'kv_cache', 'decode', 'inference')) AS kv_seq_len,
        max(num_beams) FILTER (WHERE stage IN ('decode', 'inference', 'error')) AS num_beams,
        max(max_new_tokens) FILTER (WHERE stage IN ('decode', 'inference', 'error')) AS max_new_tokens,
        max(temperature) FILTER (WHERE stage IN ('decode', 'inference')) AS temperature,
        max(top_p) FILTER (WHERE stage IN ('decode', 'inference')) AS top_p,
        bool_or(do_sample) FILTER (WHERE stage IN ('decode', 'inference')) AS do_sample,
        sum(cpu_time_ms) FILTER (WHERE stage IN ('decode', 'inference')) AS cpu_time_ms,
        max(gpu_wait_pct) FILTER (WHERE stage IN ('decode', 'inference')) AS gpu_wait_pct,
        max(gpu_util_pct) FILTER (WHERE stage IN ('decode', 'inference')) AS gpu_util_pct,
        max(status) FILTER (WHERE stage = 'request') AS request_status,
        max(finish_reason) FILTER (WHERE stage = 'request') AS finish_reason,
        count(*) FILTER (WHERE stage = 'error') AS error_events,
        arg_min(error_type, ts) FILTER (WHERE stage = 'error') AS error_type,
        arg_min(error_msg, ts) FILTER (WHERE stage = 'error') AS error_msg,
        arg_min(failed_stage, ts) FILTER (WHERE stage = 'error') AS failed_stage,
        min(source_format) AS source_format,
        count(*) AS events,
        max(num_beams) FILTER (WHERE stage = 'error') AS failed_num_beams,
        max(max_new_tokens) FILTER (WHERE stage = 'error') AS failed_max_new_tokens,
        coalesce(min(device) FILTER (WHERE stage = 'request'), min(device)) AS device,
        max(inflight) FILTER (WHERE stage = 'request') AS inflight,
        max(attempts) FILTER (WHERE stage = 'request') AS attempts,
        max(reserved_mb_before) FILTER (WHERE stage = 'request') AS reserved_mb_before,
        max(reserved_mb_after) FILTER (WHERE stage = 'request') AS reserved_mb_after,
        max(allocated_mb_before) FILTER (WHERE stage = 'request') AS allocated_mb_before,
        max(allocated_mb_after) FILTER (WHERE stage = 'request') AS allocated_mb_after,
        max(rss_mb_before) FILTER (WHERE stage = 'request') AS rss_mb_before,
        max(rss_mb_after) FILTER (WHERE stage = 'request') AS rss_mb_after,
        max(done_before) FILTER (WHERE stage = 'request') AS done_before,
        max(done_seq) FILTER (WHERE stage = 'request') AS done_seq
    FROM events
    WHERE request_id IS NOT NULL
    GROUP BY session_id, request_id
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
    gpu_wait_pct,
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
