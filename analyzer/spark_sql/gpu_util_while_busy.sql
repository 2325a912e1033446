-- Spark SQL twin of queries/gpu_util_while_busy.sql (mirrors sha256:fdc4d779c8c54964); rewrites: analyzer/spark_sql/twin.py.
-- The DuckDB query calls date_trunc once per distinct UTC minute (a cost there, not a
-- semantic change); Spark truncates each row, with the same buckets.
-- GPU utilisation while requests ran, per host and GPU: gpu_sample events in a minute in which a
-- request of that host was in flight (request start..end expanded to minutes: an equi-join that
-- stays cheap over a year of 1 Hz samples): peak and median util. Units: %, samples.
-- Source: article 003 §5.3 (gpu_util_pct peak > 65 % means the GPU is used).
WITH busy AS (
    SELECT DISTINCT host, minute
    FROM (
        SELECT host,
               explode(sequence(date_trunc('minute', coalesce(start_ts, end_ts)),
                                      date_trunc('minute', coalesce(end_ts, start_ts)),
                                      INTERVAL 1 MINUTE)) AS minute
        FROM requests
        WHERE coalesce(start_ts, end_ts) IS NOT NULL
    ) AS expanded
), s AS (
    SELECT e.host, e.gpu_index, e.gpu_util_pct
    FROM events AS e
    JOIN busy AS b
      ON e.host IS NOT DISTINCT FROM b.host AND date_trunc('minute', e.ts) = b.minute
    WHERE e.stage = 'gpu_sample' AND e.gpu_util_pct IS NOT NULL
)
SELECT
    host,
    gpu_index,
    count(*) AS busy_samples,
    max(gpu_util_pct) AS util_peak_busy,
    percentile(gpu_util_pct, 0.50) AS util_p50_busy
FROM s
GROUP BY host, gpu_index
ORDER BY host NULLS LAST, gpu_index NULLS LAST
