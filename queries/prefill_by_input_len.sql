-- Prefill latency against prompt length: requests binned by input_len (tokens) in bins of
-- $input_bin_tokens; inputs beyond $max_input_tokens share the last bin (bounded rows).
-- Unit: ms. Shows whether prefill cost follows context length (article 003 §4.3, §5.4).
-- series prefill_vs_input: input_len_bin, count, prefill_p50_ms, prefill_p95_ms, prefill_max_ms
-- params: input_bin_tokens, max_input_tokens
SELECT
    least(floor(input_len / $input_bin_tokens), floor($max_input_tokens / $input_bin_tokens))
        * $input_bin_tokens AS input_len_bin,
    count(*) AS count,
    quantile_cont(prefill_ms, 0.50) AS prefill_p50_ms,
    quantile_cont(prefill_ms, 0.95) AS prefill_p95_ms,
    max(prefill_ms) AS prefill_max_ms
FROM requests
WHERE prefill_ms IS NOT NULL AND input_len IS NOT NULL
GROUP BY 1
ORDER BY 1
