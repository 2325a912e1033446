-- Spark SQL twin of queries/errors_by_type.sql (mirrors sha256:97a9056043ba6510); rewrites: analyzer/spark_sql/twin.py.
-- Errors by type: count, first and last time, one sample message, sessions affected.
-- Unit: events. Source: article 003 §3.2 (error events with error_type / error_msg);
-- 000 §5 (grep ERROR|OOM|CUDA|timeout in the service log).
SELECT
    coalesce(error_type, 'unknown') AS error_type,
    count(*) AS count,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    min(error_msg) AS sample_msg,
    count(DISTINCT session_id) AS sessions,
    min(failed_stage) AS failed_stage
FROM events
WHERE stage = 'error'
GROUP BY coalesce(error_type, 'unknown')
ORDER BY count DESC, error_type NULLS LAST
