-- sessions: one row per session_id. Request counts and latency medians come from the requests
-- view; memory trends from the session's gpu_memory events:
-- reserved_slope_mb_per_min = the least-squares slope of reserved_mb over minutes with its r2
-- (as regr_slope/regr_r2, in exact integers: see gm_sums), ghost =
-- reserved - allocated (000 §1.1); ooms = error events naming an OOM (003 §3.2) or the rise of
-- num_ooms, whichever is larger (a collector may log both for one OOM); rss_slope_mb_per_min = the slope of the session's process (host, pid) RSS
-- while the session ran (000 §3.3). Medians are quantile_cont (linear interpolation). A slope
-- over samples at one instant is NULL, not NaN.
-- Per-stage aggregates use CASE, not FILTER, for speed (as in requests.sql).
WITH ev AS (
    SELECT
        session_id,
        min(host) AS host,
        min(pid) AS pid,
        min(ts) AS first_ts,
        max(ts) AS last_ts,
        count(CASE WHEN stage = 'error'
                        AND (error_type IN ('OutOfMemoryError', 'OOMError')
                             OR error_msg ILIKE '%out of memory%') THEN 1 END) AS oom_errors,
        arg_min(reserved_mb, CASE WHEN stage = 'gpu_memory' AND reserved_mb IS NOT NULL THEN ts END) AS reserved_first_mb,
        arg_max(reserved_mb, CASE WHEN stage = 'gpu_memory' AND reserved_mb IS NOT NULL THEN ts END) AS reserved_last_mb,
        min(CASE WHEN stage = 'gpu_memory' THEN reserved_mb END) AS reserved_min_mb,
        max(CASE WHEN stage = 'gpu_memory' THEN reserved_mb END) AS reserved_max_mb,
        max(CASE WHEN stage = 'gpu_memory' THEN allocated_mb END) AS allocated_max_mb,
        max(CASE WHEN stage = 'gpu_memory' THEN reserved_mb - allocated_mb END) AS ghost_max_mb,
        max(CASE WHEN stage = 'gpu_memory' THEN (reserved_mb - allocated_mb) / nullif(reserved_mb, 0) END) AS ghost_share_max,
        max(num_ooms) AS max_num_ooms,
        max(num_ooms) - min(num_ooms) AS num_ooms_rise,
        max(kv_seq_len) AS max_kv_seq_len,
        max(kv_cache_size_mb) AS max_kv_cache_size_mb,
        min(source_format) AS source_format,
        count(*) AS events
    FROM events
    WHERE session_id IS NOT NULL
    GROUP BY session_id
), gm_points AS (
    -- The reserved/allocated trend in exact integers, as the RSS slope below: x = ms since the
    -- session's first gpu_memory sample, y = MB in 1/1000. Floating regr_slope/regr_r2 summed the
    -- rows in the order DuckDB's threads split them, so two runs on the same files differed in
    -- the 9th-10th digit (a value on the report's 3-decimal rounding edge could flip); integer
    -- sums do not.
    -- A value of 1e9 MB or more (no memory reading) is left out, so no sum can overflow.
    SELECT session_id,
           epoch_ms(ts) - epoch_ms(min(ts) OVER (PARTITION BY session_id)) AS x,
           CASE WHEN abs(reserved_mb) < 1e9 THEN CAST(round(reserved_mb * 1000) AS BIGINT) END AS r,
           CASE WHEN abs(allocated_mb) < 1e9 THEN CAST(round(allocated_mb * 1000) AS BIGINT) END AS a
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL
      AND (reserved_mb IS NOT NULL OR allocated_mb IS NOT NULL)
), gm_pairs AS (
    -- regr_slope's pairs: both values present
    SELECT session_id,
           CASE WHEN r IS NOT NULL THEN x END AS rx, CASE WHEN x IS NOT NULL THEN r END AS ry,
           CASE WHEN a IS NOT NULL THEN x END AS ax, CASE WHEN x IS NOT NULL THEN a END AS ay
    FROM gm_points
), gm_sums AS (
    -- exact in HUGEINT
    SELECT session_id,
           count(rx) AS rn, sum(rx) AS rsx, sum(ry) AS rsy,
           sum(CAST(rx AS HUGEINT) * rx) AS rsxx, sum(CAST(rx AS HUGEINT) * ry) AS rsxy,
           sum(CAST(ry AS HUGEINT) * ry) AS rsyy,
           count(ax) AS an, sum(ax) AS asx, sum(ay) AS asy,
           sum(CAST(ax AS HUGEINT) * ax) AS asxx, sum(CAST(ax AS HUGEINT) * ay) AS asxy
    FROM gm_pairs
    GROUP BY session_id
), gm_d AS (
    -- n * sum(xy) - sum(x) * sum(y) and the like, exact (try: NULL, not an error, for a session
    -- too large for HUGEINT)
    SELECT session_id,
           try(rn * rsxy - rsx * rsy) AS r_dxy, try(rn * rsxx - rsx * rsx) AS r_dxx,
           try(rn * rsyy - rsy * rsy) AS r_dyy,
           try(an * asxy - asx * asy) AS a_dxy, try(an * asxx - asx * asx) AS a_dxx
    FROM gm_sums
), gm AS (
    -- Their ratio is the slope in (MB / 1000) per ms: * 60 for MB per minute. Samples at one
    -- instant (no spread in x) have no slope: NULL, not NaN.
    SELECT session_id,
           CASE WHEN r_dxx > 0 THEN CAST(try(r_dxy * 60) AS DOUBLE) / CAST(r_dxx AS DOUBLE) END
               AS reserved_slope_mb_per_min,
           -- as regr_r2: NULL without spread in x, 1 without spread in y
           CASE WHEN r_dxx > 0 AND r_dyy = 0 THEN 1.0
                WHEN r_dxx > 0 AND r_dyy > 0
                THEN (CAST(r_dxy AS DOUBLE) / CAST(r_dxx AS DOUBLE)) * (CAST(r_dxy AS DOUBLE) / CAST(r_dyy AS DOUBLE)) END
               AS reserved_r2,
           CASE WHEN a_dxx > 0 THEN CAST(try(a_dxy * 60) AS DOUBLE) / CAST(a_dxx AS DOUBLE) END
               AS allocated_slope_mb_per_min
    FROM gm_d
), rq AS (
    SELECT
        session_id,
        count(*) AS requests,
        count(*) FILTER (WHERE is_error) AS errors,
        max(num_beams) AS max_num_beams,
        max(max_new_tokens) AS max_max_new_tokens,
        max(output_len) AS max_output_len,
        quantile_cont(tpot_ms, 0.5) AS tpot_p50_ms,
        quantile_cont(ttft_ms, 0.5) AS ttft_p50_ms,
        quantile_cont(e2e_ms, 0.5) AS e2e_p50_ms,
        quantile_cont(prefill_ms, 0.5) AS prefill_p50_ms,
        quantile_cont(gpu_wait_pct, 0.5) AS gpu_wait_pct_p50,
        quantile_cont(gpu_util_pct, 0.5) AS gpu_util_pct_p50
    FROM requests
    GROUP BY session_id
), rss_points AS (
    -- One point per process and instant, in exact integers: x = ms since the process's first
    -- sample, y = RSS in 1/1000 MB. The running sums below are then exact (HUGEINT), so the
    -- difference of two of them loses nothing and every engine gets the same numbers; floating
    -- sums over a process's lifetime would cancel badly for a short session late in it.
    SELECT host, pid, ts,
           epoch_ms(ts) - epoch_ms(min(ts) OVER (PARTITION BY host, pid)) AS x,
           sum(CAST(round(rss_mb * 1000) AS HUGEINT)) AS sy,
           count(*) AS n
    FROM events
    -- (an RSS of 1e9 MB or more is no reading: left out, so no sum can overflow)
    WHERE stage = 'process_sample' AND abs(rss_mb) < 1e9 AND host IS NOT NULL AND pid IS NOT NULL
    GROUP BY host, pid, ts
), rss_cum AS (
    -- Running sums per process: a session's regression over its time range is the difference
    -- of two of them (found with ASOF joins), not a range join over every sample.
    SELECT host, pid, ts,
           sum(CAST(n AS HUGEINT)) OVER w AS n,
           sum(CAST(n AS HUGEINT) * x) OVER w AS sx,
           sum(sy) OVER w AS sy,
           sum(CAST(n AS HUGEINT) * x * x) OVER w AS sxx,
           sum(CAST(x AS HUGEINT) * sy) OVER w AS sxy
    FROM rss_points
    WINDOW w AS (PARTITION BY host, pid ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), bounds AS (
    -- Both ends of each session in one ASOF join: lo.ts < first_ts is lo.ts <= first_ts - 1 us
    -- (timestamps are whole microseconds).
    SELECT session_id, host, pid, 1 AS hi, last_ts AS bound FROM ev
    UNION ALL
    SELECT session_id, host, pid, 0 AS hi, first_ts - INTERVAL 1 MICROSECOND AS bound FROM ev
), ends AS (
    SELECT b.session_id, b.hi, c.n, c.sx, c.sy, c.sxx, c.sxy
    FROM bounds AS b
    ASOF JOIN rss_cum AS c ON c.host = b.host AND c.pid = b.pid AND c.ts <= b.bound
), rss AS (
    SELECT
        hi.session_id,
        hi.n - coalesce(lo.n, 0) AS n,
        hi.sx - coalesce(lo.sx, 0) AS sx,
        hi.sy - coalesce(lo.sy, 0) AS sy,
        hi.sxx - coalesce(lo.sxx, 0) AS sxx,
        hi.sxy - coalesce(lo.sxy, 0) AS sxy
    FROM ends AS hi
    LEFT JOIN ends AS lo ON lo.session_id = hi.session_id AND lo.hi = 0
    WHERE hi.hi = 1
), rss_slope AS (
    -- Least-squares slope in (MB / 1000) per ms, times 60 000 / 1000: MB per minute.
    SELECT session_id,
           CASE WHEN n >= 2 AND try(n * sxx - sx * sx) > 0
                THEN CAST(try(n * sxy - sx * sy) AS DOUBLE) / CAST(n * sxx - sx * sx AS DOUBLE) * 60.0 END
               AS rss_slope_mb_per_min
    FROM rss
)
SELECT
    ev.session_id,
    ev.host,
    ev.first_ts,
    ev.last_ts,
    (epoch(ev.last_ts) - epoch(ev.first_ts)) / 60.0 AS duration_min,
    coalesce(rq.requests, 0) AS requests,
    coalesce(rq.errors, 0) AS errors,
    greatest(ev.oom_errors, coalesce(ev.num_ooms_rise, 0)) AS ooms,
    ev.reserved_first_mb,
    ev.reserved_last_mb,
    ev.reserved_min_mb,
    ev.reserved_max_mb,
    gm.reserved_slope_mb_per_min,
    gm.reserved_r2,
    ev.allocated_max_mb,
    gm.allocated_slope_mb_per_min,
    ev.ghost_max_mb,
    ev.ghost_share_max,
    ev.max_num_ooms,
    ev.max_kv_seq_len,
    ev.max_kv_cache_size_mb,
    rq.max_num_beams,
    rq.max_max_new_tokens,
    rq.max_output_len,
    rq.tpot_p50_ms,
    rq.ttft_p50_ms,
    rq.e2e_p50_ms,
    rq.prefill_p50_ms,
    rq.gpu_wait_pct_p50,
    rq.gpu_util_pct_p50,
    ev.source_format,
    ev.pid,
    rss_slope.rss_slope_mb_per_min,
    ev.events
FROM ev
LEFT JOIN rq ON rq.session_id = ev.session_id
LEFT JOIN gm ON gm.session_id = ev.session_id
LEFT JOIN rss_slope ON rss_slope.session_id = ev.session_id
