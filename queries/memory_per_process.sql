-- GPU memory and RSS per process (host, pid) over its requests' before/after values (issue 12):
-- reserved and allocated at the first request's start and the last request's end, the sessions
-- it served, the most requests in flight at once; reserved_settled_mb = reserved after the request
-- that ends the first quarter of them (the allocator's warm-up high-water step is behind it),
-- reserved_mid_mb halfway from there to the last request (a leak keeps growing in both halves). torch reports memory per process, so growth
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
)
SELECT
    host, pid, requests, sessions, inflight_max, first_ts, last_ts, minutes,
    reserved_first_mb, reserved_last_mb, allocated_first_mb, allocated_last_mb,
    rss_first_mb, rss_last_mb, gpu_measured, rss_measured,
    reserved_after[(requests + 3) // 4] AS reserved_settled_mb,
    reserved_after[(5 * requests + 7) // 8] AS reserved_mid_mb
FROM p
ORDER BY host, pid
