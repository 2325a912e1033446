-- GPU utilisation and memory used per time bucket, host and GPU ($bucket from the span of the
-- logs: 'second', 'minute', 'hour' or 'day'). Units: %, MiB. Source: article 000 §2.1.
-- date_trunc runs once per distinct UTC minute, not per sample (see stage_percentiles_over_time).
-- util_avg is a sum of integers (1/1000 %) divided once, as in gpu_per_host.sql: a floating sum
-- depended on how DuckDB's threads split the rows.
-- series gpu_timeline: bucket, host, gpu_index, util_avg, util_max, mem_used_mb_max
-- params: bucket
WITH u AS (
    -- the pre-aggregation unit: a second for 'second' buckets (a few minutes of data), else a minute
    SELECT CASE WHEN $bucket = 'second' THEN 1000000 ELSE 60000000 END AS unit_us
), s AS (
    SELECT
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % u.unit_us) + u.unit_us) % u.unit_us)
             ELSE ts END AS utc_minute,
        host,
        gpu_index,
        gpu_util_pct,
        gpu_mem_used_mb
    FROM events, u
    WHERE stage = 'gpu_sample' AND ts IS NOT NULL
), buckets AS (
    SELECT utc_minute, date_trunc($bucket, utc_minute) AS bucket
    FROM (SELECT DISTINCT utc_minute FROM s) AS m
)
SELECT
    b.bucket,
    s.host,
    s.gpu_index,
    CAST(sum(CASE WHEN abs(s.gpu_util_pct) < 1e9 THEN CAST(round(s.gpu_util_pct * 1000) AS HUGEINT) END) AS DOUBLE)
        / (count(CASE WHEN abs(s.gpu_util_pct) < 1e9 THEN 1 END) * 1000) AS util_avg,
    max(s.gpu_util_pct) AS util_max,
    max(s.gpu_mem_used_mb) AS mem_used_mb_max
FROM s
JOIN buckets AS b ON b.utc_minute = s.utc_minute
GROUP BY b.bucket, s.host, s.gpu_index
ORDER BY bucket, host, gpu_index
