-- Capacity curve (000 §1.3: one prompt in 1.2 s does not mean five users at once will hold): one
-- row per process (host, pid) and in-flight level, the number of requests running in the process
-- at once, the request itself included.
-- A request's level is the collector's `inflight` when the request event carries it, else the
-- count of the process's requests whose handler interval holds its handler start: the interval
-- runs from end - (e2e - queue wait) (the collector counts a request once its handler runs, not
-- while it waits in a framework queue) to its end; an end and a start at one instant count the
-- end first. So legacy logs, and any source whose requests have a start and an end, get levels.
-- time_s: seconds the process spent with exactly `level` requests running (from the intervals).
-- tokens_per_s: the aggregate output rate while the process ran at that level: each request's
-- output spread evenly over its handler time, summed over the requests running, time-weighted
-- over the level's periods (a second running sum over the same edges).
-- Memory and GPU utilisation at a level: every gpu_memory / gpu_sample event of the process while
-- it ran at that level (ASOF: the level set by the last edge at or before the event); without
-- such events, the before/after readings of the requests that started at the level (an "after"
-- may be read at another level, so they are the fallback). Peak: the 95th percentile of the
-- level's readings, so a reading stamped as the level changed does not set it. gpu_total_mb: the largest total any sampler reported
-- for the host. service_ttft: TTFT less the queue wait, what the level itself costs (the wait
-- is the limit doing its job). oom_requests: requests with an OOM error (a retry that then succeeded included).
-- Units: ms, MiB, %, tokens/s, seconds.
-- series capacity: host, pid, level, requests, time_s, ttft_p95_ms, service_ttft_p95_ms, tpot_p50_ms, tpot_p95_ms, e2e_p95_ms, queue_p95_ms, tokens_per_s, reserved_peak_mb, allocated_peak_mb, gpu_util_pct, gpu_total_mb, oom_requests
WITH r AS (
    SELECT
        session_id, request_id, coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, host, pid,
        end_ts,
        -- a hostile or absurd duration (inf, 1e400) falls back to the request's start
        coalesce(CASE WHEN greatest(e2e_ms - coalesce(queue_ms, 0), 0) < 1e12
                      THEN end_ts - to_microseconds(CAST(greatest(e2e_ms - coalesce(queue_ms, 0), 0) * 1000 AS BIGINT))
                 END,
                 start_ts) AS run_ts,
        inflight, ttft_ms, ttft_ms - coalesce(queue_ms, 0) AS service_ttft_ms, tpot_ms, e2e_ms, queue_ms, output_len,
        -- in 1/1000 token/s, a whole number: the running sums below are exact
        CASE WHEN e2e_ms - coalesce(queue_ms, 0) > 0 AND output_len IS NOT NULL
                  AND output_len / ((e2e_ms - coalesce(queue_ms, 0)) / 1000.0) < 1e12
             THEN CAST(round(output_len / ((e2e_ms - coalesce(queue_ms, 0)) / 1000.0) * 1000) AS BIGINT)
        END AS run_milli_tokens_per_s,
        greatest(reserved_mb_before, reserved_mb_after) AS reserved_mb,
        greatest(allocated_mb_before, allocated_mb_after) AS allocated_mb,
        gpu_util_pct,
        is_error,
        coalesce(error_type IN ('OutOfMemoryError', 'OOMError') OR error_msg ILIKE '%out of memory%', false) AS oom
    FROM requests
    WHERE end_ts IS NOT NULL
), edges AS (
    SELECT hkey, pkey, run_ts AS ts, 1 AS d, coalesce(run_milli_tokens_per_s, 0) AS dr, session_id, request_id FROM r
    UNION ALL
    -- an end carries its request's ids too: ends at one instant then have one order
    SELECT hkey, pkey, end_ts AS ts, -1 AS d, -coalesce(run_milli_tokens_per_s, 0) AS dr, session_id, request_id
    FROM r
), steps AS (
    SELECT
        hkey, pkey, ts, d, session_id, request_id,
        sum(d) OVER w AS level,
        sum(dr) OVER w AS rate,
        lead(ts) OVER w AS next_ts
    FROM edges
    WINDOW w AS (PARTITION BY hkey, pkey ORDER BY ts, d, session_id, request_id
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), time_at AS (
    -- whole microseconds and HUGEINT sums, divided once: a floating sum depends on how
    -- DuckDB's threads split the rows
    SELECT hkey, pkey, level, CAST(sum(epoch_us(next_ts) - epoch_us(ts)) AS DOUBLE) / 1e6 AS time_s,
           CAST(sum(CAST(greatest(rate, 0) AS HUGEINT) * (epoch_us(next_ts) - epoch_us(ts))) AS DOUBLE)
               / nullif(CAST(sum(epoch_us(next_ts) - epoch_us(ts)) AS DOUBLE), 0) / 1000 AS tokens_per_s
    FROM steps
    WHERE level > 0 AND next_ts IS NOT NULL
    GROUP BY hkey, pkey, level
), leveled AS (
    SELECT r.*, coalesce(r.inflight, s.level) AS level, r.inflight IS NOT NULL AS from_collector
    FROM r
    JOIN steps AS s
      ON s.d = 1 AND s.hkey = r.hkey AND s.pkey = r.pkey
     AND s.session_id IS NOT DISTINCT FROM r.session_id AND s.request_id = r.request_id
), samples AS (
    -- the process's memory and utilisation readings, each at the level it was taken under
    SELECT coalesce(e.host, '') AS hkey, coalesce(e.pid, -1) AS pkey, s.level,
           quantile_cont(e.reserved_mb, 0.95) AS reserved_mb, quantile_cont(e.allocated_mb, 0.95) AS allocated_mb,
           CAST(sum(CASE WHEN abs(e.gpu_util_pct) < 1e9 THEN CAST(round(e.gpu_util_pct * 1000) AS HUGEINT) END) AS DOUBLE)
               / (count(CASE WHEN abs(e.gpu_util_pct) < 1e9 THEN 1 END) * 1000) AS gpu_util_pct
    FROM (SELECT * FROM events WHERE stage IN ('gpu_memory', 'gpu_sample') AND ts IS NOT NULL) AS e
    ASOF JOIN steps AS s
      ON s.hkey = coalesce(e.host, '') AND s.pkey = coalesce(e.pid, -1) AND e.ts >= s.ts
    WHERE s.level > 0
    GROUP BY ALL
), per_level AS (
    SELECT
        hkey, pkey, min(host) AS host, min(pid) AS pid, level,
        count(*) AS requests,
        count(*) FILTER (WHERE from_collector) AS requests_with_inflight,
        quantile_cont(ttft_ms, 0.5) AS ttft_p50_ms,
        quantile_cont(ttft_ms, 0.95) AS ttft_p95_ms,
        quantile_cont(service_ttft_ms, 0.95) AS service_ttft_p95_ms,
        quantile_cont(tpot_ms, 0.5) AS tpot_p50_ms,
        quantile_cont(tpot_ms, 0.95) AS tpot_p95_ms,
        quantile_cont(e2e_ms, 0.5) AS e2e_p50_ms,
        quantile_cont(e2e_ms, 0.95) AS e2e_p95_ms,
        quantile_cont(queue_ms, 0.5) AS queue_p50_ms,
        quantile_cont(queue_ms, 0.95) AS queue_p95_ms,
        max(reserved_mb) AS req_reserved_mb,
        max(allocated_mb) AS req_allocated_mb,
        CAST(sum(CASE WHEN abs(gpu_util_pct) < 1e9 THEN CAST(round(gpu_util_pct * 1000) AS HUGEINT) END) AS DOUBLE)
            / (count(CASE WHEN abs(gpu_util_pct) < 1e9 THEN 1 END) * 1000) AS req_gpu_util_pct,
        count(*) FILTER (WHERE is_error) AS error_requests,
        count(*) FILTER (WHERE oom) AS oom_requests
    FROM leveled
    GROUP BY hkey, pkey, level
), totals AS (
    SELECT coalesce(host, '') AS hkey, max(gpu_mem_total_mb) AS gpu_total_mb
    FROM events
    WHERE stage = 'gpu_sample' AND gpu_mem_total_mb IS NOT NULL
    GROUP BY 1
)
SELECT
    p.host, p.pid, p.level, p.requests, p.requests_with_inflight,
    coalesce(t.time_s, 0.0) AS time_s,
    p.ttft_p50_ms, p.ttft_p95_ms, p.service_ttft_p95_ms, p.tpot_p50_ms, p.tpot_p95_ms, p.e2e_p50_ms, p.e2e_p95_ms,
    p.queue_p50_ms, p.queue_p95_ms, t.tokens_per_s,
    coalesce(s.reserved_mb, p.req_reserved_mb) AS reserved_peak_mb,
    coalesce(s.allocated_mb, p.req_allocated_mb) AS allocated_peak_mb,
    coalesce(s.gpu_util_pct, p.req_gpu_util_pct) AS gpu_util_pct,
    g.gpu_total_mb,
    p.error_requests, p.oom_requests
FROM per_level AS p
LEFT JOIN time_at AS t USING (hkey, pkey, level)
LEFT JOIN samples AS s USING (hkey, pkey, level)
LEFT JOIN totals AS g ON g.hkey = p.hkey
ORDER BY p.host, p.pid, p.level
