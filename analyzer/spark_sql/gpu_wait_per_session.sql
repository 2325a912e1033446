-- Spark SQL twin of queries/gpu_wait_per_session.sql (mirrors sha256:02e8a192d8e13789); rewrites: analyzer/spark_sql/twin.py.
-- gpu_wait_pct distribution per session: (wall - process CPU time) / wall x 100 over generate,
-- the seed's definition (article 003 §4.2; > 60 % means the CPU sits waiting on the GPU).
-- Unit: %. One row per session that measured it.
SELECT
    session_id,
    min(host) AS host,
    count(gpu_wait_pct) AS count,
    percentile(gpu_wait_pct, 0.50) AS gpu_wait_pct_p50,
    percentile(gpu_wait_pct, 0.90) AS gpu_wait_pct_p90,
    max(gpu_wait_pct) AS gpu_wait_pct_max
FROM requests
WHERE gpu_wait_pct IS NOT NULL AND session_id IS NOT NULL
GROUP BY session_id
ORDER BY session_id NULLS LAST
