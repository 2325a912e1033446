-- GPU memory and RSS per process (host, pid) over its requests' before/after values:
-- reserved and allocated at the first request's start and the last request's end, the sessions
-- it served, the most requests in flight at once; reserved_settled_mb = reserved after the request
-- that ends the first quarter of them (the allocator's warm-up high-water step is behind it),
-- reserved_mid_mb halfway from there to the last request (a leak keeps growing in both halves).
-- Leak or load (000 §1.3: memory that grows with concurrency is capacity): steady_rise_mb, the
-- growth at in-flight levels seen in both halves (below), and the in-flight peak of each half.
-- torch reports memory per process, so growth
-- that no session's own deltas explain belongs here. Units: MiB, minutes.
-- Sources: 000 §5 table, 003 §5.3 (reserved within +-200 MB), 000 §3.3 (RSS one way).
WITH p AS (
    -- reserved after each request in the order of their ends, as one list per process: the k-th
    -- of n read by index below (one sort, not a window over every request); requests ending at
    -- one instant are ordered by their key, so a tie cannot change the pick between runs
    SELECT
        host,
        pid,
        count(*) AS requests,
        count(DISTINCT session_id) AS sessions,
        max(inflight) AS inflight_max,
        min(start_ts) AS first_ts,
        max(end_ts) AS last_ts,
        (epoch(max(end_ts)) - epoch(min(start_ts))) / 60.0 AS minutes,
        arg_min(reserved_mb_before, start_ts) FILTER (WHERE reserved_mb_before IS NOT NULL) AS reserved_first_mb,
        arg_max(reserved_mb_after, end_ts) FILTER (WHERE reserved_mb_after IS NOT NULL) AS reserved_last_mb,
        arg_min(allocated_mb_before, start_ts) FILTER (WHERE allocated_mb_before IS NOT NULL) AS allocated_first_mb,
        arg_max(allocated_mb_after, end_ts) FILTER (WHERE allocated_mb_after IS NOT NULL) AS allocated_last_mb,
        arg_min(rss_mb_before, start_ts) FILTER (WHERE rss_mb_before IS NOT NULL) AS rss_first_mb,
        arg_max(rss_mb_after, end_ts) FILTER (WHERE rss_mb_after IS NOT NULL) AS rss_last_mb,
        count(reserved_mb_after) + count(allocated_mb_after) AS gpu_measured,
        count(rss_mb_after) AS rss_measured,
        list(reserved_mb_after ORDER BY end_ts, session_id, request_id) AS reserved_after
    FROM requests
    WHERE host IS NOT NULL OR pid IS NOT NULL
    GROUP BY host, pid
), q AS (
    -- leak or load: each request's reserved "before" with its in-flight level (the collector reads
    -- both at the request's start: the "after" is read under another level) and its place among
    -- the process's requests (by end), for the halves after the first quarter used above
    SELECT
        coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, inflight AS level, reserved_mb_before AS r,
        row_number() OVER (PARTITION BY host, pid ORDER BY end_ts, session_id, request_id) AS k,
        count(*) OVER (PARTITION BY host, pid) AS n
    FROM requests
    WHERE (host IS NOT NULL OR pid IS NOT NULL) AND reserved_mb_before IS NOT NULL AND inflight IS NOT NULL
), halves AS (
    SELECT hkey, pkey, level, r, k > (5 * n + 7) // 8 AS second
    FROM q
    WHERE k > (n + 3) // 4
), first_half AS (
    SELECT hkey, pkey, level, max(r) AS r1 FROM halves WHERE NOT second GROUP BY ALL
), second_half AS (
    SELECT hkey, pkey, level, median(r) AS r2 FROM halves WHERE second GROUP BY ALL
), steady AS (
    -- at each level seen in both halves: the second half's median reserved over the most the first
    -- half reserved at that level or any higher one (what the peak level needed before); the
    -- median over those levels. Load that comes and goes leaves this at or under 0; a leak raises
    -- it at every level.
    SELECT s.hkey, s.pkey,
           median(s.r2 - (SELECT max(f.r1) FROM first_half AS f
                          WHERE f.hkey = s.hkey AND f.pkey = s.pkey AND f.level >= s.level)) AS steady_rise_mb,
           count(*) AS steady_levels
    FROM second_half AS s
    WHERE EXISTS (SELECT 1 FROM first_half AS f WHERE f.hkey = s.hkey AND f.pkey = s.pkey AND f.level = s.level)
    GROUP BY ALL
), peaks AS (
    SELECT hkey, pkey,
           max(level) FILTER (WHERE NOT second) AS inflight_max_first,
           max(level) FILTER (WHERE second) AS inflight_max_second
    FROM halves
    GROUP BY ALL
)
SELECT
    host, pid, requests, sessions, inflight_max, first_ts, last_ts, minutes,
    reserved_first_mb, reserved_last_mb, allocated_first_mb, allocated_last_mb,
    rss_first_mb, rss_last_mb, gpu_measured, rss_measured,
    reserved_after[(requests + 3) // 4] AS reserved_settled_mb,
    reserved_after[(5 * requests + 7) // 8] AS reserved_mid_mb,
    steady.steady_rise_mb, steady.steady_levels, peaks.inflight_max_first, peaks.inflight_max_second
FROM p
LEFT JOIN steady ON steady.hkey = coalesce(p.host, '') AND steady.pkey = coalesce(p.pid, -1)
LEFT JOIN peaks ON peaks.hkey = coalesce(p.host, '') AND peaks.pkey = coalesce(p.pid, -1)
ORDER BY host, pid
