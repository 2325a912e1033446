-- The $report_slowest_sessions slowest requests by end-to-end latency, each with what its time
-- went to: queue wait (before its handler ran), tokenize, prefill, decode (or one unsplit
-- inference stage), the rest (format, the app's own work); and what it asked for: beams (a failed
-- attempt's too), output length, max_new_tokens. shared_ms: the part of its time during which at
-- least one other request of the same process was in flight (the union of their overlaps, so
-- never more than e2e_ms); others_avg: the mean number of other requests in flight over its time.
-- A request spans e2e_ms up to end_ts, its last event (the collector writes the request event
-- when the request ends; its first event, start_ts, is the enqueue time when queue wait is
-- logged). Units: ms, tokens.
-- params: report_slowest_sessions
WITH req AS (
    SELECT request_id, session_id, host, pid, e2e_ms, end_ts AS end_at,
           end_ts - to_microseconds(CAST(e2e_ms * 1000 AS BIGINT)) AS start_ts
    FROM requests
    WHERE e2e_ms IS NOT NULL AND e2e_ms > 0
), top AS (
    SELECT * FROM req ORDER BY e2e_ms DESC, request_id LIMIT $report_slowest_sessions
), pieces AS (
    -- each other request's overlap with a top request, clipped to it
    SELECT t.request_id, greatest(o.start_ts, t.start_ts) AS s, least(o.end_at, t.end_at) AS e
    FROM top t
    JOIN req o ON o.host IS NOT DISTINCT FROM t.host AND o.pid IS NOT DISTINCT FROM t.pid
        AND o.request_id <> t.request_id AND o.start_ts < t.end_at AND o.end_at > t.start_ts
), runs AS (
    SELECT request_id, s, e,
           max(e) OVER (PARTITION BY request_id ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS prev_end
    FROM pieces
), islands AS (
    SELECT request_id, s, e,
           sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY request_id ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM runs
), shared AS (
    SELECT request_id, sum(epoch_ms(hi) - epoch_ms(lo)) AS shared_ms
    FROM (SELECT request_id, island, min(s) AS lo, max(e) AS hi FROM islands GROUP BY request_id, island)
    GROUP BY request_id
), overlap AS (
    SELECT request_id, sum(epoch_ms(e) - epoch_ms(s)) AS overlap_ms, count(*) AS others
    FROM pieces
    GROUP BY request_id
)
SELECT
    r.request_id, r.session_id, r.host, r.pid, r.turn_index, r.start_ts, r.e2e_ms, r.queue_ms, r.tokenize_ms,
    r.prefill_ms, r.decode_ms, r.inference_ms, r.format_ms, r.ttft_ms, r.tpot_ms, r.input_len, r.output_len,
    r.max_new_tokens, greatest(coalesce(r.num_beams, 1), coalesce(r.failed_num_beams, 1)) AS num_beams,
    r.status, r.error_type, r.inflight,
    coalesce(sh.shared_ms, 0) AS shared_ms,
    coalesce(ov.overlap_ms, 0) / r.e2e_ms AS others_avg,
    coalesce(ov.others, 0) AS others
FROM top t
JOIN requests r ON r.request_id = t.request_id AND r.session_id IS NOT DISTINCT FROM t.session_id
LEFT JOIN shared sh ON sh.request_id = t.request_id
LEFT JOIN overlap ov ON ov.request_id = t.request_id
ORDER BY r.e2e_ms DESC, r.request_id
-- the cut again at the end: an engine that merges per-host results re-applies only this one
LIMIT $report_slowest_sessions
