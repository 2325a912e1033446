-- Spark SQL twin of queries/gpu_memory_swing.sql (mirrors sha256:81b8b715bc1bfc8b); rewrites: analyzer/spark_sql/twin.py.
-- GPU memory swing per host and GPU: |delta gpu_mem_used_mb| / delta seconds between consecutive
-- gpu_sample events of one GPU (pairs more than :max_gap_s apart are ignored: a gap is not a
-- swing). Reports the largest swing overall and while util > :thrash_util_pct, and how many such
-- busy pairs swung faster than :thrash_swing_mb_per_s. Units: MiB/s, pairs.
-- Source: article 000 §2.1 (util > 80 % but memory.used swinging +-2 GB per second: KV cache not
-- shared, every request allocates and frees again).
WITH s AS (
    SELECT host, gpu_index, ts, gpu_util_pct, gpu_mem_used_mb,
           lag(gpu_mem_used_mb) OVER (PARTITION BY host, gpu_index ORDER BY ts NULLS LAST) AS prev_mb,
           lag(ts) OVER (PARTITION BY host, gpu_index ORDER BY ts NULLS LAST) AS prev_ts
    FROM events
    WHERE stage = 'gpu_sample' AND gpu_mem_used_mb IS NOT NULL
), d AS (
    SELECT host, gpu_index, gpu_util_pct,
           abs(gpu_mem_used_mb - prev_mb) / ((unix_micros(ts) / 1e6) - (unix_micros(prev_ts) / 1e6)) AS swing_mb_per_s,
           (unix_micros(ts) / 1e6) - (unix_micros(prev_ts) / 1e6) AS dt_s
    FROM s
    WHERE prev_ts IS NOT NULL AND (unix_micros(ts) / 1e6) > (unix_micros(prev_ts) / 1e6)
      AND (unix_micros(ts) / 1e6) - (unix_micros(prev_ts) / 1e6) <= :max_gap_s
)
SELECT
    host,
    gpu_index,
    count(*) AS pairs,
    percentile(dt_s, 0.50) AS interval_p50_s,
    max(swing_mb_per_s) AS swing_max_mb_per_s,
    max(CASE WHEN gpu_util_pct > :thrash_util_pct THEN swing_mb_per_s END) AS swing_max_busy_mb_per_s,
    sum(CASE WHEN gpu_util_pct > :thrash_util_pct THEN 1 ELSE 0 END) AS busy_pairs,
    sum(CASE WHEN gpu_util_pct > :thrash_util_pct AND swing_mb_per_s > :thrash_swing_mb_per_s
             THEN 1 ELSE 0 END) AS thrash_pairs
FROM d
GROUP BY host, gpu_index
ORDER BY host NULLS LAST, gpu_index NULLS LAST
