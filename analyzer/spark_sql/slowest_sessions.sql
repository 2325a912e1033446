-- Spark SQL twin of queries/slowest_sessions.sql (mirrors sha256:b5b05a695cd04998); rewrites: analyzer/spark_sql/twin.py.
-- The :limit slowest sessions by median end-to-end latency, with their request count, ttft and
-- tpot medians and worst e2e. Units: ms. Source: DESIGN.md §5.
SELECT
    session_id,
    min(host) AS host,
    count(*) AS requests,
    percentile(e2e_ms, 0.50) AS e2e_p50_ms,
    max(e2e_ms) AS e2e_max_ms,
    percentile(ttft_ms, 0.50) AS ttft_p50_ms,
    percentile(tpot_ms, 0.50) AS tpot_p50_ms
FROM requests
WHERE session_id IS NOT NULL AND e2e_ms IS NOT NULL
GROUP BY session_id
ORDER BY e2e_p50_ms DESC, session_id NULLS LAST
LIMIT :limit
