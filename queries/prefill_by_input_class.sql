-- Prefill percentiles for short prompts (input_len < $slow_prefill_long_input_tokens) and long ones
-- (>=). Unit: ms. Thresholds differ by class: 900 ms short (article 003 §5.2), 2500 ms for a
-- 1200-token prompt (003 §5.4). Prompts without a token count are class 'unknown'.
-- params: slow_prefill_long_input_tokens
SELECT
    CASE WHEN input_len IS NULL THEN 'unknown'
         WHEN input_len >= $slow_prefill_long_input_tokens THEN 'long'
         ELSE 'short' END AS input_class,
    count(*) AS count,
    quantile_cont(prefill_ms, 0.50) AS p50_ms,
    quantile_cont(prefill_ms, 0.95) AS p95_ms,
    max(prefill_ms) AS max_ms,
    max(input_len) AS input_len_max
FROM requests
WHERE prefill_ms IS NOT NULL
GROUP BY 1
ORDER BY 1
