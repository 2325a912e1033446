-- Spark SQL twin of queries/decode_per_session.sql (mirrors sha256:c296328f339bab2c); rewrites: analyzer/spark_sql/twin.py.
-- Decode speed and GPU utilisation per session: tpot_ms p50 (time per output token; legacy logs
-- give an upper bound) and gpu_util_pct p50 as measured around generate. Units: ms, %.
-- Sources: article 003 §5.2 (decode < 130 ms/token), §4.2 (GPU < 20 % while decode is slow).
SELECT
    session_id,
    min(host) AS host,
    count(*) AS requests,
    count(tpot_ms) AS tpot_count,
    percentile(tpot_ms, 0.50) AS tpot_p50_ms,
    max(tpot_ms) AS tpot_max_ms,
    sum(CASE WHEN tpot_is_upper_bound THEN 1 ELSE 0 END) AS tpot_upper_bound_count,
    count(gpu_util_pct) AS gpu_util_count,
    percentile(gpu_util_pct, 0.50) AS gpu_util_pct_p50,
    max(gpu_util_pct) AS gpu_util_pct_max
FROM requests
WHERE session_id IS NOT NULL
GROUP BY session_id
ORDER BY session_id NULLS LAST
