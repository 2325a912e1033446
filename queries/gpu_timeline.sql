-- GPU utilisation and memory used per time bucket, host and GPU ($bucket from the span of the
-- logs: 'minute', 'hour' or 'day'). Units: %, MiB. Source: article 000 §2.1.
-- date_trunc runs once per distinct UTC minute, not per sample (see stage_percentiles_over_time).
-- series gpu_timeline: bucket, host, gpu_index, util_avg, util_max, mem_used_mb_max
WITH s AS (
    SELECT
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % 60000000) + 60000000) % 60000000)
             ELSE ts END AS utc_minute,
        host,
        gpu_index,
        gpu_util_pct,
        gpu_mem_used_mb
    FROM events
    WHERE stage = 'gpu_sample' AND ts IS NOT NULL
), buckets AS (
    SELECT utc_minute, date_trunc($bucket, utc_minute) AS bucket
    FROM (SELECT DISTINCT utc_minute FROM s) AS m
)
SELECT
    b.bucket,
    s.host,
    s.gpu_index,
    avg(s.gpu_util_pct) AS util_avg,
    max(s.gpu_util_pct) AS util_max,
    max(s.gpu_mem_used_mb) AS mem_used_mb_max
FROM s
JOIN buckets AS b ON b.utc_minute = s.utc_minute
GROUP BY b.bucket, s.host, s.gpu_index
ORDER BY bucket, host, gpu_index
