-- Capacity curve (000 §1.3: one prompt in 1.2 s does not mean five users at once will hold): one
-- row per process (host, pid) and in-flight level, the number of requests running in the process
-- at once, the request itself included.
-- A request's level is the collector's `inflight` when the request event carries it, else the
-- count of the process's requests whose handler interval holds its handler start: the interval
-- runs from end - (e2e - queue wait) (the collector counts a request once its handler runs, not
-- while it waits in a framework queue) to its end; an end and a start at one instant count the
-- end first. So legacy logs, and any source whose requests have a start and an end, get levels.
-- time_s: seconds the process spent with exactly `level` requests running (from the intervals).
-- tokens_per_s: output tokens emitted while the process ran at that level over the time it spent
-- there. A request emits its output during decode, from its first token (end - (e2e - ttft); both
-- include the queue wait) to its end, not while it waits or prefills: its output is spread evenly
-- over that interval (over its handler time when TTFT is unknown) and then re-split over the
-- levels its decode ran at by a per-level rate fitted in five passes (fit below). Spread over the
-- whole handler time instead, a request that waited at a low level and decoded at a high one
-- would move its tokens to the low level. Cost: each pass is two running sums over the process's
-- edges (3 per request) and a group by request, never a table of request × level (a decode
-- crosses ~10 levels on a busy box): bench/capacity_cost.py.
-- Memory and GPU utilisation at a level: every gpu_memory / gpu_sample event of the process while
-- it ran at that level (ASOF: the level set by the last edge at or before the event); without
-- such events, the before/after readings of the requests that started at the level (an "after"
-- may be read at another level, so they are the fallback). Peak: the 95th percentile of the
-- level's readings, so a reading stamped as the level changed does not set it. gpu_total_mb: the largest total any sampler reported
-- for the host. service_ttft: TTFT less the queue wait, what the level itself costs (the wait
-- is the limit doing its job). oom_requests: requests with an OOM error (a retry that then succeeded included).
-- Units: ms, MiB, %, tokens/s, seconds.
-- series capacity: host, pid, level, requests, time_s, ttft_p95_ms, service_ttft_p95_ms, tpot_p50_ms, tpot_p95_ms, e2e_p95_ms, queue_p95_ms, tokens_per_s, reserved_peak_mb, allocated_peak_mb, gpu_util_pct, gpu_total_mb, oom_requests
WITH RECURSIVE r0 AS (
    SELECT
        session_id, request_id, coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, host, pid,
        end_ts,
        -- a hostile or absurd duration (inf, 1e400) falls back to the request's start
        coalesce(CASE WHEN greatest(e2e_ms - coalesce(queue_ms, 0), 0) < 1e12
                      THEN end_ts - to_microseconds(CAST(greatest(e2e_ms - coalesce(queue_ms, 0), 0) * 1000 AS BIGINT))
                 END,
                 start_ts) AS run_ts,
        -- decode's length in ms: e2e less TTFT, at most the handler time; the handler time without
        -- a TTFT that leaves decode some time (one reported at the end, as a non-streaming server may)
        CASE WHEN e2e_ms - ttft_ms > 0 THEN least(e2e_ms - ttft_ms, e2e_ms - coalesce(queue_ms, 0))
             ELSE e2e_ms - coalesce(queue_ms, 0) END AS decode_ms,
        -- the request itself is running: an inflight below 1 is no level, the intervals give it
        CASE WHEN inflight >= 1 THEN inflight END AS inflight,
        ttft_ms, ttft_ms - coalesce(queue_ms, 0) AS service_ttft_ms, tpot_ms, e2e_ms, queue_ms, output_len,
        greatest(reserved_mb_before, reserved_mb_after) AS reserved_mb,
        greatest(allocated_mb_before, allocated_mb_after) AS allocated_mb,
        gpu_util_pct,
        is_error,
        coalesce(error_type IN ('OutOfMemoryError', 'OOMError') OR error_msg ILIKE '%out of memory%', false) AS oom
    FROM requests
    WHERE end_ts IS NOT NULL
), r AS MATERIALIZED (
    SELECT
        r0.*,
        -- a request's own number, to find its rows in the stream below (materialised: one
        -- numbering for every reader)
        row_number() OVER () AS rid,
        -- within the handler time (a fallen-back run_ts may be later)
        CASE WHEN decode_ms > 0 AND decode_ms < 1e12
             THEN greatest(end_ts - to_microseconds(CAST(decode_ms * 1000 AS BIGINT)), run_ts) END AS first_token_ts,
        -- its output is fitted to the levels it decoded at
        decode_ms > 0 AND decode_ms < 1e12 AND output_len BETWEEN 0 AND 1e9 AS fit
    FROM r0
), stream AS MATERIALIZED (
    -- the process's time cut at every handler start (d = 1), first token (kind 1) and end (d = -1;
    -- kind 2 when the request's output is fitted): level, the requests running; a piece runs from
    -- a row to the next (dur, whole microseconds), n_dec: the fitted requests decoding in it. An
    -- end and a start at one instant count the end first (a first token between them); an end
    -- carries its request's ids too, so ends at one instant have one order.
    SELECT hkey, pkey, rid, ts, d, kind, out,
           row_number() OVER w AS seq,
           sum(d) OVER w AS level,
           sum(CASE kind WHEN 1 THEN 1 WHEN 2 THEN -1 ELSE 0 END) OVER w AS n_dec,
           epoch_us(lead(ts) OVER w) - epoch_us(ts) AS dur
    FROM (SELECT hkey, pkey, rid, session_id, request_id, run_ts AS ts, 1 AS d, 0 AS kind, NULL AS out FROM r
          UNION ALL
          SELECT hkey, pkey, rid, session_id, request_id, first_token_ts, 0, 1, output_len FROM r WHERE fit
          UNION ALL
          SELECT hkey, pkey, rid, session_id, request_id, end_ts, -1, CASE WHEN fit THEN 2 ELSE 0 END, NULL FROM r)
    WINDOW w AS (PARTITION BY hkey, pkey ORDER BY ts, d, session_id, request_id, kind, rid
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), fit_levels AS MATERIALIZED (
    -- the time at each level and the decoding time there, summed over the decoding requests
    -- (whole microseconds, HUGEINT sums: a floating sum depends on how DuckDB's threads split the
    -- rows); lk: the level's number in the fit
    SELECT row_number() OVER () AS lk, *
    FROM (SELECT hkey, pkey, level, sum(dur) AS time_us, sum(n_dec * dur) AS level_us
          FROM stream
          WHERE level > 0 AND dur > 0
          GROUP BY ALL)
), procs AS (
    SELECT hkey, pkey, row_number() OVER () AS proc FROM stream GROUP BY hkey, pkey
), pieces AS MATERIALIZED (
    -- the stream in one order over all processes (gseq: the process, then the row's place in it):
    -- a request's rows lie in its process, so running sums need no partition; only what the
    -- passes read, as integers
    SELECT (p.proc << 40) + s.seq AS gseq, s.rid, s.kind, s.out, coalesce(s.dur, 0) AS dur, l.lk
    FROM stream AS s
    JOIN procs AS p USING (hkey, pkey)
    LEFT JOIN fit_levels AS l ON l.hkey = s.hkey AND l.pkey = s.pkey AND l.level = s.level AND s.dur > 0
), fit(it, lk, level_us, x, micro_tokens) AS (
    -- x: a decoding request's rate at the level, in micro-tokens per second (whole: the sums
    -- stay exact). Pass 0 takes one rate for all levels (output spread evenly over decode); each
    -- pass splits every request's output over its levels in proportion to x × its time there (the
    -- rate a request gets depends on how many run with it) and re-estimates x from the split.
    -- Per request, sum(x × time) is a difference of the running sum F of x × piece length; its
    -- weight w = output / that sum, so the tokens at a level are x × the integral of the decoding
    -- requests' summed weights over the level's time: no table of request × level.
    SELECT 0, lk, level_us, CAST(1 AS HUGEINT), CAST(NULL AS DOUBLE) FROM fit_levels
    UNION ALL
    SELECT c.it + 1, l.lk, l.level_us, CAST(round(m.micro_tokens / nullif(l.level_us, 0) * 1e6) AS HUGEINT),
           m.micro_tokens
    FROM (WITH fp AS (
              SELECT p.gseq, p.rid, p.kind, p.out, p.dur, p.lk,
                     coalesce(sum(coalesce(l.x, 0) * p.dur)
                                  OVER (ORDER BY p.gseq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS f
              FROM pieces AS p
              -- after the last pass, no rows: the recursion stops without another
              JOIN (SELECT DISTINCT it FROM fit WHERE it < 6) AS c ON true
              LEFT JOIN fit AS l USING (lk)
          ), wr AS (
              -- w carries 1e21: output in micro-tokens over micro-token-microseconds per second, 1e15 more
              SELECT rid, CAST(round(max(out) * 1e21 / nullif(CAST(max(f) FILTER (WHERE kind = 2)
                                                                  - max(f) FILTER (WHERE kind = 1) AS DOUBLE), 0)) AS HUGEINT) AS w
              FROM fp WHERE kind > 0 GROUP BY rid
          )
          SELECT lk, sum(g * dur) AS i
          FROM (SELECT lk, dur, sum(CASE kind WHEN 1 THEN w WHEN 2 THEN -w ELSE 0 END)
                                    OVER (ORDER BY gseq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS g
                FROM fp LEFT JOIN wr USING (rid))
          WHERE lk IS NOT NULL
          GROUP BY lk) AS q
    JOIN fit AS l USING (lk)
    JOIN (SELECT DISTINCT it FROM fit) AS c ON true
    CROSS JOIN LATERAL (SELECT CAST(l.x AS DOUBLE) * CAST(q.i AS DOUBLE) / 1e15 AS micro_tokens) AS m
), time_at AS (
    SELECT l.hkey, l.pkey, l.level, CAST(l.time_us AS DOUBLE) / 1e6 AS time_s,
           -- micro-tokens over microseconds: tokens per second
           coalesce(f.micro_tokens, 0) / nullif(CAST(l.time_us AS DOUBLE), 0) AS tokens_per_s
    FROM fit_levels AS l
    LEFT JOIN fit AS f ON f.lk = l.lk AND f.it = 6
), leveled AS (
    SELECT r.*, coalesce(r.inflight, s.level) AS level, r.inflight IS NOT NULL AS from_collector
    FROM r
    JOIN stream AS s ON s.rid = r.rid AND s.d = 1
), samples AS (
    -- the process's memory and utilisation readings, each at the level it was taken under
    SELECT coalesce(e.host, '') AS hkey, coalesce(e.pid, -1) AS pkey, s.level,
           quantile_cont(e.reserved_mb, 0.95) AS reserved_mb, quantile_cont(e.allocated_mb, 0.95) AS allocated_mb,
           CAST(sum(CASE WHEN abs(e.gpu_util_pct) < 1e9 THEN CAST(round(e.gpu_util_pct * 1000) AS HUGEINT) END) AS DOUBLE)
               / (count(CASE WHEN abs(e.gpu_util_pct) < 1e9 THEN 1 END) * 1000) AS gpu_util_pct
    FROM (SELECT * FROM events WHERE stage IN ('gpu_memory', 'gpu_sample') AND ts IS NOT NULL) AS e
    -- several edges at one instant: the level after the last of them (one row per instant, so
    -- the match does not depend on how the join breaks a tie)
    ASOF JOIN (SELECT hkey, pkey, ts, arg_max(level, seq) AS level FROM stream WHERE kind <> 1 GROUP BY hkey, pkey, ts) AS s
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
