-- Spark SQL twin of queries/gpu_per_host.sql (mirrors sha256:73480597aef0b23d); rewrites: analyzer/spark_sql/twin.py.
-- GPU sampler summary per host and GPU (gpu_sample events, NVML): utilisation peak / median /
-- mean, memory used max and median (MiB and share of total), and the time the GPU was
-- "starved": util < :starved_util_pct while memory used > :starved_mem_share of total. Samplers
-- tick faster while generating than when idle, so time counts, not samples: each sample stands
-- for the seconds until the next one, at most :max_sample_weight_s.
-- Units: %, MiB, fraction, seconds. Sources: article 000 §2.1 (utilization.gpu long below 20 %
-- with memory.used near the limit: the GPU idles waiting for data), 003 §5.3 (peak > 65 %).
WITH s AS (
    SELECT host, gpu_index, ts, gpu_util_pct, gpu_mem_used_mb, gpu_mem_total_mb, power_w, temp_c,
           least(coalesce((unix_micros(lead(ts) OVER (PARTITION BY host, gpu_index ORDER BY ts NULLS LAST)) / 1e6) - (unix_micros(ts) / 1e6),
                          :max_sample_weight_s),
                 :max_sample_weight_s) AS weight_s
    FROM events
    WHERE stage = 'gpu_sample'
)
SELECT
    host,
    gpu_index,
    count(*) AS samples,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    max(gpu_util_pct) AS util_max,
    percentile(gpu_util_pct, 0.50) AS util_p50,
    avg(gpu_util_pct) AS util_avg,
    max(gpu_mem_used_mb) AS mem_used_max_mb,
    percentile(gpu_mem_used_mb, 0.50) AS mem_used_p50_mb,
    max(gpu_mem_total_mb) AS mem_total_mb,
    percentile(CASE WHEN gpu_mem_total_mb > 0 THEN gpu_mem_used_mb / gpu_mem_total_mb END, 0.50)
        AS mem_used_share_p50,
    sum(CASE WHEN gpu_util_pct IS NOT NULL AND gpu_mem_total_mb > 0 THEN weight_s ELSE 0 END)
        AS sampled_s,
    sum(CASE WHEN gpu_util_pct < :starved_util_pct
              AND gpu_mem_total_mb > 0
              AND gpu_mem_used_mb > :starved_mem_share * gpu_mem_total_mb
             THEN weight_s ELSE 0 END) AS starved_s,
    sum(CASE WHEN gpu_util_pct < :starved_util_pct
              AND gpu_mem_total_mb > 0
              AND gpu_mem_used_mb > :starved_mem_share * gpu_mem_total_mb
             THEN 1 ELSE 0 END) AS starved_samples,
    max(power_w) AS power_max_w,
    max(temp_c) AS temp_max_c
FROM s
GROUP BY host, gpu_index
ORDER BY host NULLS LAST, gpu_index NULLS LAST
