-- GPU sampler summary per host and GPU (gpu_sample events, NVML): utilisation peak / median / mean,
-- memory used max and median (MiB and share of total), and the time the GPU was "starved": util <
-- $gpu_starved_util_pct while memory used > $gpu_starved_mem_used_share of total. Samplers tick
-- faster while generating than when idle, so time counts, not samples: each sample stands for the
-- seconds until the next one, at most $gpu_starved_max_sample_weight_s.
-- Units: %, MiB, fraction, seconds. Sources: article 000 §2.1 (utilization.gpu long below 20 %
-- with memory.used near the limit: the GPU idles waiting for data), 003 §5.3 (peak > 65 %).
-- util_avg and the seconds are sums of integers (1/1000 %, microseconds) divided once: a floating
-- sum depended on how DuckDB's threads split the rows (two runs differed in the last digits).
-- params: gpu_starved_max_sample_weight_s, gpu_starved_util_pct, gpu_starved_mem_used_share
WITH s AS (
    SELECT host, gpu_index, ts, gpu_util_pct, gpu_mem_used_mb, gpu_mem_total_mb, power_w, temp_c,
           least(coalesce(epoch_us(lead(ts) OVER (PARTITION BY host, gpu_index ORDER BY ts)) - epoch_us(ts),
                          CAST(round($gpu_starved_max_sample_weight_s * 1000000) AS BIGINT)),
                 CAST(round($gpu_starved_max_sample_weight_s * 1000000) AS BIGINT)) AS weight_us
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
    quantile_cont(gpu_util_pct, 0.50) AS util_p50,
    -- (a utilisation of 1e9 % or more is no reading: left out, so the sum cannot overflow)
    CAST(sum(CASE WHEN abs(gpu_util_pct) < 1e9 THEN CAST(round(gpu_util_pct * 1000) AS HUGEINT) END) AS DOUBLE)
        / (count(CASE WHEN abs(gpu_util_pct) < 1e9 THEN 1 END) * 1000) AS util_avg,
    max(gpu_mem_used_mb) AS mem_used_max_mb,
    quantile_cont(gpu_mem_used_mb, 0.50) AS mem_used_p50_mb,
    max(gpu_mem_total_mb) AS mem_total_mb,
    quantile_cont(CASE WHEN gpu_mem_total_mb > 0 THEN gpu_mem_used_mb / gpu_mem_total_mb END, 0.50)
        AS mem_used_share_p50,
    CAST(sum(CASE WHEN gpu_util_pct IS NOT NULL AND gpu_mem_total_mb > 0 THEN weight_us ELSE 0 END) AS DOUBLE)
        / 1000000 AS sampled_s,
    CAST(sum(CASE WHEN gpu_util_pct < $gpu_starved_util_pct
                   AND gpu_mem_total_mb > 0
                   AND gpu_mem_used_mb > $gpu_starved_mem_used_share * gpu_mem_total_mb
                  THEN weight_us ELSE 0 END) AS DOUBLE) / 1000000 AS starved_s,
    sum(CASE WHEN gpu_util_pct < $gpu_starved_util_pct
              AND gpu_mem_total_mb > 0
              AND gpu_mem_used_mb > $gpu_starved_mem_used_share * gpu_mem_total_mb
             THEN 1 ELSE 0 END) AS starved_samples,
    max(power_w) AS power_max_w,
    max(temp_c) AS temp_max_c
FROM s
GROUP BY host, gpu_index
ORDER BY host, gpu_index
