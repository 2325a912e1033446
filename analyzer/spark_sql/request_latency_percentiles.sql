-- Spark SQL twin of queries/request_latency_percentiles.sql (mirrors sha256:2ec27430134156b1); rewrites: analyzer/spark_sql/twin.py.
-- Per-request latency percentiles: ttft_ms, tpot_ms, e2e_ms, tokens_per_s, ttfa_ms.
-- Units: ms (tokens/s for tokens_per_s). One row per metric; count = requests where it was
-- measured. tpot_upper_bound counts legacy requests whose tpot is inference_ms/output_len
-- (an upper bound). Names follow vLLM / OpenTelemetry GenAI. Source: DESIGN.md §5.
SELECT 'ttft_ms' AS metric, count(ttft_ms) AS count,
       percentile(ttft_ms, 0.50) AS p50, percentile(ttft_ms, 0.90) AS p90,
       percentile(ttft_ms, 0.95) AS p95, percentile(ttft_ms, 0.99) AS p99,
       max(ttft_ms) AS max, 0 AS upper_bound_count
FROM requests
UNION ALL
SELECT 'tpot_ms', count(tpot_ms),
       percentile(tpot_ms, 0.50), percentile(tpot_ms, 0.90),
       percentile(tpot_ms, 0.95), percentile(tpot_ms, 0.99),
       max(tpot_ms),
       sum(CASE WHEN tpot_is_upper_bound AND tpot_ms IS NOT NULL THEN 1 ELSE 0 END)
FROM requests
UNION ALL
SELECT 'e2e_ms', count(e2e_ms),
       percentile(e2e_ms, 0.50), percentile(e2e_ms, 0.90),
       percentile(e2e_ms, 0.95), percentile(e2e_ms, 0.99),
       max(e2e_ms), 0
FROM requests
UNION ALL
SELECT 'tokens_per_s', count(tokens_per_s),
       percentile(tokens_per_s, 0.50), percentile(tokens_per_s, 0.90),
       percentile(tokens_per_s, 0.95), percentile(tokens_per_s, 0.99),
       max(tokens_per_s), 0
FROM requests
UNION ALL
SELECT 'ttfa_ms', count(ttfa_ms),
       percentile(ttfa_ms, 0.50), percentile(ttfa_ms, 0.90),
       percentile(ttfa_ms, 0.95), percentile(ttfa_ms, 0.99),
       max(ttfa_ms), 0
FROM requests
