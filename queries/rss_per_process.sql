-- Host memory (RSS) trend per process from process_sample events: first/last/min/max rss_mb and
-- regr_slope(rss_mb, minutes since the process's first sample) with regr_r2, in exact integers
-- (ms and 1/1000 MB, HUGEINT sums, one division at the end): floating sums depended on how
-- DuckDB's threads split the rows, so two runs differed in the 9th-10th digit. An RSS of 1e9 MB or
-- more (no reading) is left out of the trend, so no sum can overflow. Units: MB, MB/min.
-- Source: article 000 §3.3 (RSS rising one way, 1250 -> 1380 -> 1520 MB, is a leak of Python
-- objects; a steady 1200-1350 MB band is healthy).
-- Step-shaped growth (concurrent requests turn a leak into a noisy staircase whose R²
-- stays low): rss_held_rise_mb = the lowest RSS of the last third of the process's sampled time
-- minus the highest of its first third, a rise that held whatever the noise in between.
WITH p AS (
    SELECT host, pid, ts, rss_mb,
           (epoch(ts) - epoch(min(ts) OVER (PARTITION BY host, pid))) / 60.0 AS minute,
           epoch_ms(ts) - epoch_ms(min(ts) OVER (PARTITION BY host, pid)) AS x,
           CASE WHEN abs(rss_mb) < 1e9 THEN CAST(round(rss_mb * 1000) AS BIGINT) END AS y,
           (epoch(ts) - epoch(min(ts) OVER (PARTITION BY host, pid)))
               / nullif(epoch(max(ts) OVER (PARTITION BY host, pid)) - epoch(min(ts) OVER (PARTITION BY host, pid)), 0)
               AS pos
    FROM events
    WHERE stage = 'process_sample' AND rss_mb IS NOT NULL
), agg AS (
SELECT
    host,
    pid,
    count(*) AS samples,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    max(minute) AS minutes,
    min_by(rss_mb, ts) AS rss_first_mb,
    max_by(rss_mb, ts) AS rss_last_mb,
    min(rss_mb) AS rss_min_mb,
    max(rss_mb) AS rss_max_mb,
    min(rss_mb) FILTER (WHERE pos >= 2.0 / 3) - max(rss_mb) FILTER (WHERE pos <= 1.0 / 3) AS rss_held_rise_mb,
    count(CASE WHEN x IS NOT NULL THEN y END) AS n,
    sum(CASE WHEN y IS NOT NULL THEN x END) AS sx,
    sum(CASE WHEN x IS NOT NULL THEN y END) AS sy,
    sum(CASE WHEN y IS NOT NULL THEN CAST(x AS HUGEINT) * x END) AS sxx,
    sum(CAST(x AS HUGEINT) * y) AS sxy,
    sum(CASE WHEN x IS NOT NULL THEN CAST(y AS HUGEINT) * y END) AS syy
FROM p
GROUP BY host, pid
), d AS (
    SELECT *, try(n * sxy - sx * sy) AS dxy, try(n * sxx - sx * sx) AS dxx, try(n * syy - sy * sy) AS dyy
    FROM agg
)
SELECT
    host, pid, samples, first_ts, last_ts, minutes, rss_first_mb, rss_last_mb, rss_min_mb, rss_max_mb,
    -- as regr_slope: (MB / 1000) per ms * 60 = MB per minute; NaN without spread in time
    CASE WHEN dxx > 0 THEN CAST(try(dxy * 60) AS DOUBLE) / CAST(dxx AS DOUBLE)
         WHEN n > 0 AND dxx = 0 THEN 'NaN'::DOUBLE END AS rss_slope_mb_per_min,
    -- as regr_r2: NULL without spread in time, 1 without spread in RSS
    CASE WHEN dxx > 0 AND dyy = 0 THEN 1.0
         WHEN dxx > 0 AND dyy > 0
         THEN (CAST(dxy AS DOUBLE) / CAST(dxx AS DOUBLE)) * (CAST(dxy AS DOUBLE) / CAST(dyy AS DOUBLE)) END AS rss_r2,
    rss_held_rise_mb
FROM d
ORDER BY host, pid
