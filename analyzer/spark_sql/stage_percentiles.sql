-- Spark SQL twin of queries/stage_percentiles.sql (mirrors sha256:5a853ce71d480c18); rewrites: analyzer/spark_sql/twin.py.
-- Stage latency percentiles over the whole window: count, p50, p90, p95, p99, max.
-- Unit: ms. One row per stage with measured durations (duration_ms NULL or -1 = not measured).
-- Percentiles are linear-interpolated (quantile_cont = numpy's default). Source: DESIGN.md §5;
-- article 003 §3.1 (the latency slices of one request).
SELECT
    stage,
    count(duration_ms) AS count,
    percentile(duration_ms, 0.50) AS p50_ms,
    percentile(duration_ms, 0.90) AS p90_ms,
    percentile(duration_ms, 0.95) AS p95_ms,
    percentile(duration_ms, 0.99) AS p99_ms,
    max(duration_ms) AS max_ms
FROM events
WHERE duration_ms IS NOT NULL
GROUP BY stage
ORDER BY
    CASE stage
        WHEN 'tokenize' THEN 1 WHEN 'queue' THEN 2 WHEN 'prefill' THEN 3 WHEN 'decode' THEN 4
        WHEN 'inference' THEN 5 WHEN 'format' THEN 6 WHEN 'request' THEN 7 ELSE 8
    END,
    stage
