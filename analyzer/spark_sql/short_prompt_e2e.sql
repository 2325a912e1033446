-- Spark SQL twin of queries/short_prompt_e2e.sql (mirrors sha256:70204e2344c82f37); rewrites: analyzer/spark_sql/twin.py.
-- End-to-end latency of short prompts (input_len < :short_input_tokens tokens), the
-- "simple question" case of article 003 §5.2 (total < 1.2 s). Unit: ms. With R1-style
-- reasoning the <think> block alone often exceeds that; reasoning_share_p50 says how much.
SELECT
    count(e2e_ms) AS count,
    percentile(e2e_ms, 0.50) AS p50_ms,
    percentile(e2e_ms, 0.90) AS p90_ms,
    max(e2e_ms) AS max_ms,
    percentile(reasoning_share, 0.50) AS reasoning_share_p50
FROM requests
WHERE input_len < :short_input_tokens AND e2e_ms IS NOT NULL
