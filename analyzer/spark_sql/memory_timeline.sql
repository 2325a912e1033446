-- Spark SQL twin of queries/memory_timeline.sql (mirrors sha256:bd319697182887f0); rewrites: analyzer/spark_sql/twin.py.
-- Reserved and allocated GPU memory over time for at most :max_sessions sessions: those whose
-- trend looks like a leak (slope > :leak_slope_mb_per_min and rise > :leak_rise_mb) or that hold
-- ghost memory (reserved - allocated > :ghost_mb) first, then the steepest others. Each session is
-- thinned to about :max_points points (every k-th sample, last one kept) so rows stay bounded.
-- Units: MiB. Sources: article 003 §4.1 (reserved rising one way), 000 §1.1 (ghost memory).
WITH m AS (
    SELECT session_id, ts, reserved_mb, allocated_mb,
           ((unix_micros(ts) / 1e6) - (unix_micros(min(ts) OVER (PARTITION BY session_id)) / 1e6)) / 60.0D AS minute
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL AND reserved_mb IS NOT NULL
), per_session AS (
    SELECT session_id,
           coalesce(regr_slope(reserved_mb, minute), CASE WHEN regr_count(reserved_mb, minute) > 0 THEN CAST('NaN' AS DOUBLE) END) AS slope,
           max_by(reserved_mb, ts) FILTER (WHERE reserved_mb IS NOT NULL) - min_by(reserved_mb, ts) FILTER (WHERE reserved_mb IS NOT NULL) AS rise,
           max(reserved_mb - allocated_mb) AS ghost,
           count(*) AS n
    FROM m
    GROUP BY session_id
), chosen AS (
    SELECT session_id, n
    FROM per_session
    ORDER BY
        CASE WHEN (slope > :leak_slope_mb_per_min AND rise > :leak_rise_mb) OR ghost > :ghost_mb
             THEN 0 ELSE 1 END,
        coalesce(slope, 0) DESC,
        session_id
    LIMIT :max_sessions
), numbered AS (
    SELECT m.session_id, m.ts, m.reserved_mb, m.allocated_mb, c.n,
           row_number() OVER (PARTITION BY m.session_id ORDER BY m.ts NULLS LAST) AS rn
    FROM m JOIN chosen AS c ON m.session_id = c.session_id
)
SELECT ts, session_id, reserved_mb, allocated_mb
FROM numbered
WHERE (rn - 1) % CAST(ceil(n * 1.0 / :max_points) AS BIGINT) = 0 OR rn = n
ORDER BY session_id NULLS LAST, ts NULLS LAST
