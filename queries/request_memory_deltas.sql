-- One row per request that carries before/after memory values (issue 12): its GPU delta
-- (allocated after - before, else reserved), its RSS delta, and the sessions of the other requests
-- of the same process that ended while its handler ran. Their leaks land in this request's delta (torch and
-- RSS are per process), so the rules subtract them (analyzer/rules.py, attribute_deltas).
-- Units: MiB.
WITH r AS (
    SELECT
        session_id, request_id, host, pid, end_ts,
        -- the handler's start, where "before" was read: e2e includes the queue wait (contract)
        coalesce(end_ts - to_microseconds(CAST((e2e_ms - coalesce(queue_ms, 0)) * 1000 AS BIGINT)), start_ts) AS start_ts,
        coalesce(allocated_mb_after - allocated_mb_before, reserved_mb_after - reserved_mb_before) AS gpu_delta_mb,
        rss_mb_after - rss_mb_before AS rss_delta_mb
    FROM requests
    WHERE session_id IS NOT NULL
      AND (allocated_mb_after IS NOT NULL OR reserved_mb_after IS NOT NULL OR rss_mb_after IS NOT NULL)
)
SELECT
    a.host, a.pid, a.session_id, a.request_id, a.start_ts, a.gpu_delta_mb, a.rss_delta_mb,
    list(b.session_id ORDER BY b.end_ts) FILTER (WHERE b.session_id IS NOT NULL) AS ended_during
FROM r AS a
LEFT JOIN r AS b
    ON b.host IS NOT DISTINCT FROM a.host AND b.pid IS NOT DISTINCT FROM a.pid
   AND b.end_ts > a.start_ts AND b.end_ts < a.end_ts
   AND NOT (b.session_id = a.session_id AND b.request_id = a.request_id)
GROUP BY ALL
ORDER BY a.host, a.pid, a.start_ts, a.session_id, a.request_id
