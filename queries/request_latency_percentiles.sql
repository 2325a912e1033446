-- Per-request latency percentiles: ttft_ms, tpot_ms, e2e_ms, tokens_per_s, ttfa_ms.
-- Units: ms (tokens/s for tokens_per_s). One row per metric; count = requests where it was
-- measured. tpot_upper_bound counts legacy requests whose tpot is inference_ms/output_len
-- (an upper bound). Names follow vLLM / OpenTelemetry GenAI. Definitions: docs/sql.md (the
-- requests view).
-- One quantile_cont over a list per metric: scalar calls each keep their own copy of the values.
SELECT metric, count, q[1] AS p50, q[2] AS p90, q[3] AS p95, q[4] AS p99, max, upper_bound_count
FROM (
    SELECT 'ttft_ms' AS metric, count(ttft_ms) AS count, quantile_cont(ttft_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
           max(ttft_ms) AS max, 0 AS upper_bound_count
    FROM requests
    UNION ALL
    SELECT 'tpot_ms' AS metric, count(tpot_ms) AS count, quantile_cont(tpot_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
           max(tpot_ms) AS max, sum(CASE WHEN tpot_is_upper_bound AND tpot_ms IS NOT NULL THEN 1 ELSE 0 END) AS upper_bound_count
    FROM requests
    UNION ALL
    SELECT 'e2e_ms' AS metric, count(e2e_ms) AS count, quantile_cont(e2e_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
           max(e2e_ms) AS max, 0 AS upper_bound_count
    FROM requests
    UNION ALL
    SELECT 'tokens_per_s' AS metric, count(tokens_per_s) AS count, quantile_cont(tokens_per_s, [0.50, 0.90, 0.95, 0.99]) AS q,
           max(tokens_per_s) AS max, 0 AS upper_bound_count
    FROM requests
    UNION ALL
    SELECT 'ttfa_ms' AS metric, count(ttfa_ms) AS count, quantile_cont(ttfa_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
           max(ttfa_ms) AS max, 0 AS upper_bound_count
    FROM requests
) AS m
