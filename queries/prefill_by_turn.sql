-- Prefill latency against turn index (1-based request number within a session); turns beyond
-- $max_turn share the last row. Unit: ms (input_len in tokens). Context growth shows as prefill
-- rising with turns: article 003 §4.3 ("over 20 turns prefill 800 ms -> 4.2 s").
-- series prefill_by_turn: turn_index, count, prefill_p50_ms, prefill_p95_ms, input_len_p50
-- params: max_turn
SELECT
    least(turn_index, $max_turn) AS turn_index,
    count(*) AS count,
    quantile_cont(prefill_ms, 0.50) AS prefill_p50_ms,
    quantile_cont(prefill_ms, 0.95) AS prefill_p95_ms,
    quantile_cont(input_len, 0.50) AS input_len_p50
FROM requests
WHERE prefill_ms IS NOT NULL AND turn_index IS NOT NULL
GROUP BY 1
ORDER BY 1
