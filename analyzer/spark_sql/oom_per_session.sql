-- Spark SQL twin of queries/oom_per_session.sql (mirrors sha256:d21d337365e4c1c9); rewrites: analyzer/spark_sql/twin.py.
-- Out-of-memory events per session (or per host when no session is known): error events whose
-- type is OutOfMemoryError / OOMError or whose message says "out of memory", and rises of the
-- allocator's cumulative num_ooms counter between consecutive gpu_memory snapshots of one
-- process within one session (a value carried in from earlier traffic is not this session's OOM).
-- Unit: events. Source: article 003 §3.2 (OOMError logging), §5.3 (no OOM).
WITH errs AS (
    SELECT session_id, host, ts, 1 AS oom_errors, 0 AS num_ooms_rise, error_type, error_msg
    FROM events
    WHERE stage = 'error'
      AND (error_type IN ('OutOfMemoryError', 'OOMError')
           OR lower(coalesce(error_type, '')) LIKE '%outofmemory%'
           OR lower(coalesce(error_msg, '')) LIKE '%out of memory%')
), counter AS (
    SELECT session_id, host, ts,
           num_ooms - lag(num_ooms) OVER (PARTITION BY host, pid, session_id ORDER BY ts NULLS LAST) AS rise
    FROM events
    WHERE stage = 'gpu_memory' AND num_ooms IS NOT NULL
), rises AS (
    SELECT session_id, host, ts, 0 AS oom_errors, rise AS num_ooms_rise,
           CAST(NULL AS STRING) AS error_type, CAST(NULL AS STRING) AS error_msg
    FROM counter
    WHERE rise > 0
), a AS (
    SELECT * FROM errs UNION ALL SELECT * FROM rises
)
SELECT
    session_id,
    host,
    sum(oom_errors) AS oom_errors,
    sum(num_ooms_rise) AS num_ooms_rise,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    min(error_type) AS error_type,
    min(error_msg) AS sample_msg
FROM a
GROUP BY session_id, host
ORDER BY first_ts NULLS LAST
