-- Spark SQL twin of queries/gpu_timeline.sql (mirrors sha256:0534e2bcb1a892ad); rewrites: analyzer/spark_sql/twin.py.
-- The DuckDB query calls date_trunc once per distinct UTC minute (a cost there, not a
-- semantic change); Spark truncates each row, with the same buckets.
-- GPU utilisation and memory used per time bucket, host and GPU (:bucket from the span of the
-- logs: 'minute', 'hour' or 'day'). Units: %, MiB. Source: article 000 §2.1.
SELECT
    date_trunc(:bucket, ts) AS bucket,
    host,
    gpu_index,
    avg(gpu_util_pct) AS util_avg,
    max(gpu_util_pct) AS util_max,
    max(gpu_mem_used_mb) AS mem_used_mb_max
FROM events
WHERE stage = 'gpu_sample' AND ts IS NOT NULL
GROUP BY date_trunc(:bucket, ts), host, gpu_index
ORDER BY bucket NULLS LAST, host NULLS LAST, gpu_index NULLS LAST
