-- Host memory (RSS) trend per process from process_sample events: first/last/min/max rss_mb and
-- regr_slope(rss_mb, minutes since the process's first sample) with regr_r2. Units: MB, MB/min.
-- Source: article 000 §3.3 (RSS rising one way, 1250 -> 1380 -> 1520 MB, is a leak of Python
-- objects; a steady 1200-1350 MB band is healthy).
-- Step-shaped growth (issue 12: concurrent requests turn a leak into a noisy staircase whose R²
-- stays low): rss_held_rise_mb = the lowest RSS of the last third of the process's sampled time
-- minus the highest of its first third, a rise that held whatever the noise in between.
WITH p AS (
    SELECT host, pid, ts, rss_mb,
           (epoch(ts) - epoch(min(ts) OVER (PARTITION BY host, pid))) / 60.0 AS minute,
           (epoch(ts) - epoch(min(ts) OVER (PARTITION BY host, pid)))
               / nullif(epoch(max(ts) OVER (PARTITION BY host, pid)) - epoch(min(ts) OVER (PARTITION BY host, pid)), 0)
               AS pos
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
    min_by(rss_mb, ts) AS rss_first_mb,
    max_by(rss_mb, ts) AS rss_last_mb,
    min(rss_mb) AS rss_min_mb,
    max(rss_mb) AS rss_max_mb,
    regr_slope(rss_mb, minute) AS rss_slope_mb_per_min,
    regr_r2(rss_mb, minute) AS rss_r2,
    min(rss_mb) FILTER (WHERE pos >= 2.0 / 3) - max(rss_mb) FILTER (WHERE pos <= 1.0 / 3) AS rss_held_rise_mb
FROM p
GROUP BY host, pid
ORDER BY host, pid
