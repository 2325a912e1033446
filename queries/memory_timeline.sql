-- Reserved and allocated GPU memory over time for at most $report_timeline_sessions sessions with
-- two or more snapshots (one point draws no line and shows no trend): those a memory rule may flag
-- first (an OOM error or num_ooms rise, as in oom_per_session.sql; a leak-like trend, slope >
-- $memory_leak_slope_mb_per_min and rise > $memory_leak_rise_mb; median reserved - allocated >
-- $ghost_memory_ghost_mb), taking turns, so a flagged session's memory is on the chart, then the
-- steepest others. Each session is thinned to about $report_timeline_points points (every k-th
-- sample, last one kept).
-- Units: MiB (torch's *_mb fields). Sources: article 003 §4.1 (reserved rising one way), §3.2
-- (OOM), 000 §1.1 (ghost memory).
-- series memory_timeline: ts, session_id, request_id, reserved_mb, allocated_mb
-- params: memory_leak_slope_mb_per_min, memory_leak_rise_mb, ghost_memory_ghost_mb
-- params: report_timeline_sessions, report_timeline_points
WITH g AS MATERIALIZED (
    -- the session's gpu_memory snapshots, read once for the points, the first instant and the
    -- OOM counter below
    SELECT session_id, request_id, host, pid, ts, reserved_mb, allocated_mb, num_ooms
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL
      AND (reserved_mb IS NOT NULL OR num_ooms IS NOT NULL)
), m AS (
    -- ms since the session's first snapshot: its min(ts) by a GROUP BY and a join, not a
    -- window over every snapshot (same values, a third of the cost)
    -- the trend in exact integers (ms, 1/1000 MiB), as memory_per_session.sql: a floating
    -- regr_slope depended on how DuckDB's threads split the rows, and so could the pick
    SELECT g.session_id, g.request_id, g.ts, g.reserved_mb, g.allocated_mb,
           CASE WHEN abs(g.reserved_mb) < 1e9 THEN epoch_ms(g.ts) - epoch_ms(f.first_ts) END AS x,
           CASE WHEN abs(g.reserved_mb) < 1e9 AND epoch_ms(g.ts) IS NOT NULL THEN CAST(round(g.reserved_mb * 1000) AS BIGINT) END AS y
    FROM g
    JOIN (SELECT session_id, min(ts) AS first_ts FROM g WHERE reserved_mb IS NOT NULL
          GROUP BY session_id) AS f
      ON f.session_id = g.session_id
    WHERE g.reserved_mb IS NOT NULL
), varying AS (
    -- a counter that never changes in a (host, pid, session) has no rise: only the others are
    -- ordered by time (the lag below), usually none
    SELECT host, pid, session_id
    FROM g
    WHERE num_ooms IS NOT NULL
    GROUP BY host, pid, session_id
    HAVING min(num_ooms) < max(num_ooms)
), oom_rises AS (
    SELECT g.session_id,
           g.num_ooms - lag(g.num_ooms) OVER (PARTITION BY g.host, g.pid, g.session_id ORDER BY g.ts) AS rise
    FROM g
    SEMI JOIN varying AS v
      ON g.host IS NOT DISTINCT FROM v.host AND g.pid IS NOT DISTINCT FROM v.pid
     AND g.session_id = v.session_id
    WHERE g.num_ooms IS NOT NULL
), oom AS (
    SELECT DISTINCT session_id
    FROM events
    WHERE stage = 'error' AND session_id IS NOT NULL
      AND (error_type IN ('OutOfMemoryError', 'OOMError')
           OR lower(coalesce(error_type, '')) LIKE '%outofmemory%'
           OR lower(coalesce(error_msg, '')) LIKE '%out of memory%')
    UNION
    SELECT DISTINCT session_id FROM oom_rises WHERE rise > 0
), sums AS (
    SELECT session_id,
           count(x) AS xn, sum(x) AS sx, sum(y) AS sy, sum(CAST(x AS HUGEINT) * x) AS sxx, sum(CAST(x AS HUGEINT) * y) AS sxy,
           max_by(reserved_mb, ts) - min_by(reserved_mb, ts) AS rise,
           quantile_cont(reserved_mb - allocated_mb, 0.5) AS ghost,
           count(*) AS n
    FROM m
    GROUP BY session_id
), per_session AS (
    -- regr_slope's value in MiB per minute: NaN without spread in time
    SELECT session_id, rise, ghost, n,
           CASE WHEN dxx > 0 THEN CAST(try(dxy * 60) AS DOUBLE) / CAST(dxx AS DOUBLE)
                WHEN xn > 0 AND dxx = 0 THEN 'NaN'::DOUBLE END AS slope
    FROM (SELECT *, try(xn * sxy - sx * sy) AS dxy, try(xn * sxx - sx * sx) AS dxx FROM sums) AS d
), ranked AS (
    SELECT p.session_id, p.n,
           CASE WHEN o.session_id IS NOT NULL THEN 1
                WHEN p.slope > $memory_leak_slope_mb_per_min AND p.rise > $memory_leak_rise_mb THEN 2
                WHEN p.ghost > $ghost_memory_ghost_mb THEN 3
                ELSE 4 END AS kind,
           -- snapshots at one instant give a NaN slope, which sorts above every number
           CASE WHEN isnan(p.slope) THEN 0 ELSE coalesce(p.slope, 0) END AS slope_key
    FROM per_session AS p LEFT JOIN oom AS o ON p.session_id = o.session_id
    WHERE p.n >= 2
), chosen AS (
    -- the flagged kinds take turns (steepest first within each), so many leaking sessions
    -- cannot push every OOM session off the chart; then the steepest others
    SELECT session_id, n
    FROM (
        SELECT session_id, n, kind,
               row_number() OVER (PARTITION BY kind ORDER BY slope_key DESC, session_id) AS rk
        FROM ranked
    ) AS r
    ORDER BY kind = 4, rk, kind
    LIMIT $report_timeline_sessions
), numbered AS (
    SELECT m.session_id, m.request_id, m.ts, m.reserved_mb, m.allocated_mb, c.n,
           row_number() OVER (PARTITION BY m.session_id ORDER BY m.ts) AS rn
    FROM m JOIN chosen AS c ON m.session_id = c.session_id
)
SELECT ts, session_id, request_id, reserved_mb, allocated_mb
FROM numbered
WHERE (rn - 1) % CAST(ceil(n * 1.0 / $report_timeline_points) AS BIGINT) = 0 OR rn = n
ORDER BY session_id, ts
