-- GPU memory swing per host and GPU: |delta gpu_mem_used_mb| / delta seconds between consecutive
-- gpu_sample events of one GPU (pairs more than $memory_thrash_max_gap_s apart are ignored: a gap
-- is not a swing). Reports the largest swing overall and while util > $memory_thrash_util_pct, and
-- how many such busy pairs swung faster than $memory_thrash_swing_mb_per_s. Units: MiB/s, pairs.
-- Source: article 000 §2.1 (util > 80 % but memory.used swinging +-2 GB per second: KV cache not
-- shared, every request allocates and frees again).
-- params: memory_thrash_max_gap_s, memory_thrash_util_pct, memory_thrash_swing_mb_per_s
WITH s AS (
    SELECT host, gpu_index, ts, gpu_util_pct, gpu_mem_used_mb,
           lag(gpu_mem_used_mb) OVER (PARTITION BY host, gpu_index ORDER BY ts) AS prev_mb,
           lag(ts) OVER (PARTITION BY host, gpu_index ORDER BY ts) AS prev_ts
    FROM events
    WHERE stage = 'gpu_sample' AND gpu_mem_used_mb IS NOT NULL
), d AS (
    SELECT host, gpu_index, gpu_util_pct,
           abs(gpu_mem_used_mb - prev_mb) / (epoch(ts) - epoch(prev_ts)) AS swing_mb_per_s,
           epoch(ts) - epoch(prev_ts) AS dt_s
    FROM s
    WHERE prev_ts IS NOT NULL AND epoch(ts) > epoch(prev_ts)
      AND epoch(ts) - epoch(prev_ts) <= $memory_thrash_max_gap_s
)
SELECT
    host,
    gpu_index,
    count(*) AS pairs,
    quantile_cont(dt_s, 0.50) AS interval_p50_s,
    max(swing_mb_per_s) AS swing_max_mb_per_s,
    max(CASE WHEN gpu_util_pct > $memory_thrash_util_pct THEN swing_mb_per_s END) AS swing_max_busy_mb_per_s,
    sum(CASE WHEN gpu_util_pct > $memory_thrash_util_pct THEN 1 ELSE 0 END) AS busy_pairs,
    sum(CASE WHEN gpu_util_pct > $memory_thrash_util_pct AND swing_mb_per_s > $memory_thrash_swing_mb_per_s
             THEN 1 ELSE 0 END) AS thrash_pairs
FROM d
GROUP BY host, gpu_index
ORDER BY host, gpu_index
