-- Spark SQL twin of queries/memory_per_host.sql (mirrors sha256:ef2c60f42e1f96a0); rewrites: analyzer/spark_sql/twin.py.
-- GPU memory per host from gpu_memory events written outside any session (periodic snapshots):
-- reserved max and ghost memory = reserved - allocated (article 000 §1.1). Units: MiB, fraction.
-- Sessions' own snapshots are in memory_per_session.
WITH m AS (
    SELECT
        host, ts, reserved_mb,
        reserved_mb - allocated_mb AS ghost_mb,
        CASE WHEN reserved_mb > 0 THEN (reserved_mb - allocated_mb) / reserved_mb END AS ghost_share
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NULL AND reserved_mb IS NOT NULL
)
SELECT
    host,
    count(*) AS samples,
    max(reserved_mb) AS reserved_max_mb,
    max(ghost_mb) AS ghost_max_mb,
    percentile(ghost_mb, 0.50) AS ghost_p50_mb,
    percentile(ghost_share, 0.50) AS ghost_share_p50,
    max_by(ghost_mb, ts) FILTER (WHERE ghost_mb IS NOT NULL) AS ghost_last_mb,
    max_by(ghost_share, ts) FILTER (WHERE ghost_share IS NOT NULL) AS ghost_share_last
FROM m
GROUP BY host
ORDER BY host NULLS LAST
