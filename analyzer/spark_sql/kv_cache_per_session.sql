-- Spark SQL twin of queries/kv_cache_per_session.sql (mirrors sha256:ce22b961cb2c9767); rewrites: analyzer/spark_sql/twin.py.
-- KV cache growth per session: kv_seq_len (prefill and kv_cache events) and kv_cache_size_mb
-- (kv_cache events only), first, last and max. Units: tokens, MiB.
-- Source: article 003 §4.3 (kv_seq_len > 2048 grows memory fast), §5.4 (kv_cache_size_mb < 8 GB).
WITH k AS (
    SELECT session_id, host, ts, kv_seq_len,
           CASE WHEN stage = 'kv_cache' THEN kv_cache_size_mb END AS kv_cache_size_mb
    FROM events
    WHERE stage IN ('kv_cache', 'prefill') AND session_id IS NOT NULL
      AND (kv_seq_len IS NOT NULL OR kv_cache_size_mb IS NOT NULL)
)
SELECT
    session_id,
    min(host) AS host,
    count(*) AS samples,
    min_by(kv_seq_len, ts) FILTER (WHERE kv_seq_len IS NOT NULL) AS kv_seq_len_first,
    max_by(kv_seq_len, ts) FILTER (WHERE kv_seq_len IS NOT NULL) AS kv_seq_len_last,
    max(kv_seq_len) AS kv_seq_len_max,
    count(kv_cache_size_mb) AS kv_size_samples,
    max(kv_cache_size_mb) AS kv_cache_size_max_mb
FROM k
GROUP BY session_id
ORDER BY session_id NULLS LAST
