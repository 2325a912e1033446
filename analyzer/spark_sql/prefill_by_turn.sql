-- Spark SQL twin of queries/prefill_by_turn.sql (mirrors sha256:33aa1599e01aadd0); rewrites: analyzer/spark_sql/twin.py.
-- Prefill latency against turn index (1-based request number within a session); turns beyond
-- :max_turn share the last row. Unit: ms (input_len in tokens). Context growth shows as prefill
-- rising with turns: article 003 §4.3 ("over 20 turns prefill 800 ms -> 4.2 s").
SELECT
    least(turn_index, :max_turn) AS turn_index,
    count(*) AS count,
    percentile(prefill_ms, 0.50) AS prefill_p50_ms,
    percentile(prefill_ms, 0.95) AS prefill_p95_ms,
    percentile(input_len, 0.50) AS input_len_p50
FROM requests
WHERE prefill_ms IS NOT NULL AND turn_index IS NOT NULL
GROUP BY 1
ORDER BY 1 NULLS LAST
