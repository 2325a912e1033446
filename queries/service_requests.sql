-- The service model's request sample (what-if simulation, docs/capacity.md): per request of every
-- process, what it asked (input and output tokens, beams, max_new_tokens), what it cost (service
-- TTFT: TTFT less the queue wait; decode: e2e less TTFT; the handler time when TTFT is unknown),
-- the requests in flight when it started (the collector's `inflight`) and on average over its
-- handler time (mean_level), the time a waiting request's slot took to be handed over from the
-- request that freed it (handoff_ms), and the user's think time
-- before the session's next request: from this request's end to the next one's arrival (its end
-- less its e2e, which holds the queue wait), so the client's own round trip is in it. At most
-- 5,000 requests per process, picked by a hash of the request id: the same logs give the same
-- sample. Errors are kept (the OOM share is read from them). stack: what served the process, for
-- the setting's name (vllm: its spans; gradio: Gradio's queue measured the wait; else null), and
-- gpu: any event of the process ran on a CUDA device or read GPU memory. Units: ms, tokens.
WITH proc AS (
    SELECT coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey,
           CASE WHEN bool_or(source_format ILIKE '%vllm%') THEN 'vllm'
                WHEN bool_or(stage = 'queue' AND source = 'gradio') THEN 'gradio'
           END AS stack,
           bool_or(device ILIKE 'cuda%' OR gpu_mem_total_mb > 0 OR reserved_mb > 0) AS gpu
    FROM events
    GROUP BY ALL
), r AS (
    SELECT
        coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, host, pid, session_id, request_id, turn_index,
        end_ts, e2e_ms, queue_ms, ttft_ms, input_len, output_len, num_beams, max_new_tokens, inflight, is_error,
        coalesce(error_type IN ('OutOfMemoryError', 'OOMError') OR error_msg ILIKE '%out of memory%', false) AS oom,
        CASE WHEN e2e_ms BETWEEN 0 AND 1e9 THEN end_ts - to_microseconds(CAST(e2e_ms * 1000 AS BIGINT)) END AS arrive_ts
    FROM requests
    WHERE end_ts IS NOT NULL AND e2e_ms BETWEEN 0 AND 1e9
), s AS (
    SELECT
        *,
        -- the handler's interval: from its end less (e2e less the queue wait) to its end
        end_ts - to_microseconds(CAST(greatest(e2e_ms - coalesce(queue_ms, 0), 0) * 1000 AS BIGINT)) AS run_ts,
        hash(request_id) AS h
    FROM r
), cut AS (
    -- the process's 5,000th smallest hash of a request id: the picked requests are at or under it
    SELECT hkey, pkey, max(h) AS h_max
    FROM (SELECT hkey, pkey, h, row_number() OVER (PARTITION BY hkey, pkey ORDER BY h) AS k FROM s)
    WHERE k <= 5000
    GROUP BY hkey, pkey
), picked AS (
    -- the think time needs the session's next request, picked or not: only the sessions of the
    -- requests under the cut are sorted for it, and only those requests for the pick
    SELECT * FROM (
        SELECT *, row_number() OVER (PARTITION BY hkey, pkey ORDER BY h, request_id) AS pick
        FROM (SELECT
                  t.*,
                  (epoch_us(lead(arrive_ts) OVER (PARTITION BY session_id ORDER BY arrive_ts, turn_index, request_id))
                   - epoch_us(end_ts)) / 1000.0 AS think_ms
              FROM (SELECT s.*, c.h_max FROM s JOIN cut AS c USING (hkey, pkey)) AS t
              SEMI JOIN (SELECT DISTINCT session_id FROM s JOIN cut USING (hkey, pkey) WHERE h <= h_max) AS p
                ON t.session_id IS NOT DISTINCT FROM p.session_id)
        WHERE h <= h_max)
    WHERE pick <= 5000
), bounds AS (
    SELECT hkey, pkey, epoch_us(run_ts) AS t, 1 AS d FROM s
    UNION ALL
    SELECT hkey, pkey, epoch_us(end_ts) AS t, -1 AS d FROM s
), area AS (
    -- requests in flight integrated over time up to each boundary instant t (µs), and the last end
    -- at or before t: a request begun by t counts from its start to t, less what an ended one
    -- counts past its end, so the integral is t × (the requests in flight from t on) less the sum
    -- of the boundaries' signed times (two running sums in one sort). The one sweep gives every
    -- request's overlap with all the others, where pairing each request with every other one of
    -- its process costs their product.
    SELECT hkey, pkey, t,
           t * sum(sum(d)) OVER w - sum(sum(d * CAST(t AS HUGEINT))) OVER w AS i,
           max(max(CASE WHEN d = -1 THEN t END)) OVER w AS last_end
    FROM bounds
    GROUP BY hkey, pkey, t
    WINDOW w AS (PARTITION BY hkey, pkey ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), levels AS (
    -- each picked request's mean requests in flight over its handler time, itself included: the
    -- others' overlap with it over its length (the level it started at overstates a request that
    -- saw the others finish, and understates one that saw them come)
    SELECT a.hkey, a.pkey, a.request_id, a.run_ts,
           1 + (max(e.i) - max(b.i) - (epoch_us(a.end_ts) - epoch_us(a.run_ts)))
               / nullif(epoch_us(a.end_ts) - epoch_us(a.run_ts), 0) AS mean_level
    FROM picked AS a
    JOIN area AS b ON b.hkey = a.hkey AND b.pkey = a.pkey AND b.t = epoch_us(a.run_ts)
    JOIN area AS e ON e.hkey = a.hkey AND e.pkey = a.pkey AND e.t = epoch_us(a.end_ts)
    GROUP BY a.hkey, a.pkey, a.request_id, a.run_ts, a.end_ts
), handoffs AS (
    -- a picked request that was waiting when the process's last request before its start ended:
    -- the time from that end to its start is the framework handing the freed slot over
    SELECT a.hkey, a.pkey, a.request_id, a.run_ts,
           (epoch_us(a.run_ts) - max(b.last_end)) / 1000.0 AS handoff_ms
    FROM picked AS a
    JOIN area AS b ON b.hkey = a.hkey AND b.pkey = a.pkey AND b.t = epoch_us(a.run_ts)
    WHERE b.last_end >= epoch_us(a.run_ts - INTERVAL 60 SECOND)
    GROUP BY a.hkey, a.pkey, a.request_id, a.run_ts
    HAVING epoch_us(min(a.arrive_ts)) < max(b.last_end)
)
SELECT
    host, pid, proc.stack, proc.gpu, session_id, request_id, turn_index, input_len, output_len, num_beams, max_new_tokens, inflight, is_error, oom,
    e2e_ms, queue_ms,
    CASE WHEN ttft_ms IS NOT NULL THEN greatest(ttft_ms - coalesce(queue_ms, 0), 0) END AS service_ttft_ms,
    CASE WHEN ttft_ms IS NOT NULL AND e2e_ms >= ttft_ms THEN e2e_ms - ttft_ms
         ELSE greatest(e2e_ms - coalesce(queue_ms, 0), 0) END AS decode_ms,
    CASE WHEN think_ms >= 0 THEN think_ms END AS think_ms,
    levels.mean_level, handoffs.handoff_ms
FROM picked
LEFT JOIN proc USING (hkey, pkey)
LEFT JOIN levels USING (hkey, pkey, request_id, run_ts)
LEFT JOIN handoffs USING (hkey, pkey, request_id, run_ts)
ORDER BY host, pid, session_id, turn_index, request_id
