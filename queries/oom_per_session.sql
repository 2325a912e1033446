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
), g AS MATERIALIZED (
    SELECT session_id, host, pid, ts, num_ooms
    FROM events AS e
    WHERE stage = 'gpu_memory' AND num_ooms IS NOT NULL
      -- num_ooms is the process's counter: in a process serving requests at the same time a
      -- session's snapshots also see other sessions' OOMs, so only error events count there
      AND NOT EXISTS (SELECT 1 FROM requests AS q
                      WHERE q.inflight > 1 AND q.host IS NOT DISTINCT FROM e.host AND q.pid IS NOT DISTINCT FROM e.pid)
), varying AS (
    -- a counter that never changes in a (host, pid, session) has no rise: only the others are
    -- ordered by time (the lag below), usually none
    SELECT host, pid, session_id
    FROM g
    GROUP BY host, pid, session_id
    HAVING min(num_ooms) < max(num_ooms)
), counter AS (
    SELECT g.session_id, g.host, g.ts,
           g.num_ooms - lag(g.num_ooms) OVER (PARTITION BY g.host, g.pid, g.session_id ORDER BY g.ts) AS rise
    FROM g
    SEMI JOIN varying AS v
      ON g.host IS NOT DISTINCT FROM v.host AND g.pid IS NOT DISTINCT FROM v.pid
     AND g.session_id IS NOT DISTINCT FROM v.session_id
), rises AS (
    SELECT session_id, host, ts, 0 AS oom_errors, rise AS num_ooms_rise,
           CAST(NULL AS VARCHAR) AS error_type, CAST(NULL AS VARCHAR) AS error_msg
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
ORDER BY first_ts
