-- Spark SQL twin of queries/rss_per_process.sql (mirrors sha256:517fd7214d60a42e); rewrites: analyzer/spark_sql/twin.py.
-- Host memory (RSS) trend per process from process_sample events: first/last/min/max rss_mb and
-- coalesce(regr_slope(rss_mb, minutes since the process's first sample), CASE WHEN regr_count(rss_mb, minutes since the process's first sample) > 0 THEN CAST('NaN' AS DOUBLE) END) with regr_r2. Units: MB, MB/min.
-- Source: article 000 §3.3 (RSS rising one way, 1250 -> 1380 -> 1520 MB, is a leak of Python
-- objects; a steady 1200-1350 MB band is healthy).
WITH p AS (
    SELECT host, pid, ts, rss_mb,
           ((unix_micros(ts) / 1e6) - (unix_micros(min(ts) OVER (PARTITION BY host, pid)) / 1e6)) / 60.0D AS minute
    FROM events
    WHERE stage = 'process_sample' AND rss_mb IS NOT NULL
)
SELECT
    host,
    pid,
    count(*) AS samples,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    max(minute) AS minutes,
    min_by(rss_mb, ts) FILTER (WHERE rss_mb IS NOT NULL) AS rss_first_mb,
    max_by(rss_mb, ts) FILTER (WHERE rss_mb IS NOT NULL) AS rss_last_mb,
    min(rss_mb) AS rss_min_mb,
    max(rss_mb) AS rss_max_mb,
    coalesce(regr_slope(rss_mb, minute), CASE WHEN regr_count(rss_mb, minute) > 0 THEN CAST('NaN' AS DOUBLE) END) AS rss_slope_mb_per_min,
    regr_r2(rss_mb, minute) AS rss_r2
FROM p
GROUP BY host, pid
ORDER BY host NULLS LAST, pid NULLS LAST
