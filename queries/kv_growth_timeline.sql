-- KV cache length and size over time for the $report_timeline_sessions sessions with the longest KV
-- cache, each thinned to about $report_timeline_points points (rows stay bounded). Units: tokens,
-- MiB.
-- Source: article 003 §4.3 (kv_seq_len > 2048, kv_cache_size_mb 1.8 -> 12.4 GB).
-- One point per request (its largest reading: a request logs prefill and kv_cache events), with
-- turn_index its number in the session; events without a request id are a point each.
-- series kv_growth: ts, session_id, turn_index, kv_seq_len, kv_cache_size_mb
-- params: report_timeline_sessions, report_timeline_points
WITH e AS (
    SELECT session_id, ts, kv_seq_len, coalesce(request_id, CAST(ts AS VARCHAR)) AS point,
           CASE WHEN stage = 'kv_cache' THEN kv_cache_size_mb END AS kv_cache_size_mb
    FROM events
    WHERE stage IN ('kv_cache', 'prefill') AND session_id IS NOT NULL
      AND (kv_seq_len IS NOT NULL OR kv_cache_size_mb IS NOT NULL)
), k AS (
    SELECT session_id, max(ts) AS ts, max(kv_seq_len) AS kv_seq_len, max(kv_cache_size_mb) AS kv_cache_size_mb,
           row_number() OVER (PARTITION BY session_id ORDER BY min(ts), point) AS turn_index
    FROM e
    GROUP BY session_id, point
), chosen AS (
    SELECT session_id, count(*) AS n
    FROM k
    GROUP BY session_id
    ORDER BY max(coalesce(kv_seq_len, 0)) DESC, max(coalesce(kv_cache_size_mb, 0)) DESC, session_id
    LIMIT $report_timeline_sessions
), numbered AS (
    SELECT k.session_id, k.ts, k.turn_index, k.kv_seq_len, k.kv_cache_size_mb, c.n, k.turn_index AS rn
    FROM k JOIN chosen AS c ON k.session_id = c.session_id
)
SELECT ts, session_id, turn_index, kv_seq_len, kv_cache_size_mb
FROM numbered
WHERE (rn - 1) % CAST(ceil(n * 1.0 / $report_timeline_points) AS BIGINT) = 0 OR rn = n
ORDER BY session_id, ts
