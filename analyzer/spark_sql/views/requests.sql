-- requests: one row per request (provisional; mirrors analyzer/views/requests.sql once it lands).
WITH e AS (SELECT * FROM events WHERE request_id IS NOT NULL),
agg AS (
    SELECT
        session_id, request_id,
        min(host) AS host, min(pid) AS pid,
        min(ts) AS start_ts, max(ts) AS end_ts,
        max(CASE WHEN stage = 'input' THEN input_len END) AS input_chars,
        coalesce(max(CASE WHEN stage = 'tokenize' THEN input_len END),
                 max(CASE WHEN stage = 'prefill' THEN input_len END),
                 max(CASE WHEN stage = 'request' THEN input_len END)) AS input_len,
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
        max(CASE WHEN stage = 'request' THEN ttft_ms END) AS request_ttft_ms,
        max(CASE WHEN stage = 'request' THEN duration_ms END) AS request_e2e_ms,
        max(CASE WHEN stage = 'request' THEN ttfa_ms END) AS ttfa_ms,
        max(CASE WHEN stage IN ('prefill', 'kv_cache') THEN kv_seq_len END) AS kv_seq_len,
        max(CASE WHEN stage IN ('decode', 'inference') THEN num_beams END) AS num_beams,
        max(CASE WHEN stage IN ('decode', 'inference') THEN max_new_tokens END) AS max_new_tokens,
        max(CASE WHEN stage IN ('decode', 'inference') THEN temperature END) AS temperature,
        max(CASE WHEN stage IN ('decode', 'inference') THEN top_p END) AS top_p,
        max(CASE WHEN stage IN ('decode', 'inference') THEN do_sample END) AS do_sample,
        max(CASE WHEN stage IN ('decode', 'inference') THEN cpu_time_ms END) AS cpu_time_ms,
        max(CASE WHEN stage IN ('decode', 'inference') THEN gpu_wait_pct END) AS gpu_wait_pct,
        max(CASE WHEN stage IN ('decode', 'inference') THEN gpu_util_pct END) AS gpu_util_pct,
        max(CASE WHEN stage = 'request' THEN status END) AS request_status,
        max(CASE WHEN stage = 'error' THEN error_type END) AS error_type,
        max(CASE WHEN stage = 'error' THEN error_msg END) AS error_msg,
        sum(CASE WHEN stage = 'error' THEN 1 ELSE 0 END) AS error_events,
        min(source_format) AS source_format
    FROM e
    GROUP BY session_id, request_id
)
SELECT
    session_id, request_id, host, pid,
    row_number() OVER (PARTITION BY session_id ORDER BY start_ts NULLS LAST, request_id) AS turn_index,
    start_ts, end_ts, input_chars, input_len, output_len, reasoning_len,
    tokenize_ms, queue_ms, prefill_ms, decode_ms, inference_ms, format_ms,
    coalesce(request_ttft_ms,
             CASE WHEN prefill_ms IS NOT NULL
                  THEN coalesce(tokenize_ms, 0) + coalesce(queue_ms, 0) + prefill_ms END) AS ttft_ms,
    CASE WHEN decode_ms IS NOT NULL AND output_len > 1 THEN decode_ms / (output_len - 1)
         WHEN decode_ms IS NULL AND inference_ms IS NOT NULL AND output_len > 0 THEN inference_ms / output_len
    END AS tpot_ms,
    decode_ms IS NULL AND inference_ms IS NOT NULL AS tpot_is_upper_bound,
    coalesce(request_e2e_ms,
             CASE WHEN coalesce(tokenize_ms, queue_ms, prefill_ms, decode_ms, inference_ms, format_ms) IS NOT NULL
                  THEN coalesce(tokenize_ms, 0) + coalesce(queue_ms, 0) + coalesce(prefill_ms, 0)
                       + coalesce(decode_ms, 0) + coalesce(inference_ms, 0) + coalesce(format_ms, 0) END) AS e2e_ms,
    CASE WHEN coalesce(decode_ms, inference_ms) > 0 THEN output_len * 1000.0D / coalesce(decode_ms, inference_ms) END AS tokens_per_s,
    CASE WHEN decode_ms > 0 THEN prefill_ms / decode_ms END AS prefill_decode_ratio,
    CASE WHEN output_len > 0 THEN reasoning_len * 1.0D / output_len END AS reasoning_share,
    ttfa_ms, kv_seq_len, num_beams, max_new_tokens, temperature, top_p, do_sample,
    cpu_time_ms, gpu_wait_pct, gpu_util_pct,
    CASE WHEN request_status = 'error' OR error_events > 0 THEN 'error' ELSE 'ok' END AS status,
    error_type, error_msg,
    (request_status = 'error' OR error_events > 0) AS is_error,
    source_format
FROM agg
