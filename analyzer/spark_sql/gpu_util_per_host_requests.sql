-- Spark SQL twin of queries/gpu_util_per_host_requests.sql (mirrors sha256:6a626db57ff36f6c); rewrites: analyzer/spark_sql/twin.py.
-- GPU utilisation per host as measured around generate (decode / inference gpu_util_pct,
-- the seed logger's field), for hosts without NVML samplers. Units: %, requests.
-- Source: article 003 §3.2 (gpu_util_pct 12.4 on an inference line), §5.3 (peak > 65 %).
SELECT
    host,
    count(gpu_util_pct) AS requests,
    max(gpu_util_pct) AS util_peak,
    percentile(gpu_util_pct, 0.50) AS util_p50
FROM requests
WHERE gpu_util_pct IS NOT NULL
GROUP BY host
ORDER BY host NULLS LAST
