-- Spark SQL twin of queries/stage_percentiles_over_time.sql (mirrors sha256:85f6db599760d7c1); rewrites: analyzer/spark_sql/twin.py.
-- The DuckDB query calls date_trunc once per distinct UTC minute (a cost there, not a
-- semantic change); Spark truncates each row, with the same buckets.
-- Stage latency percentiles per time bucket (the "p95 prefill by hour" chart).
-- Unit: ms. :bucket is a date_trunc unit ('minute', 'hour' or 'day') chosen from the span of the
-- logs so a year of logs stays a few thousand rows. Source: DESIGN.md §5; 003 §3.1.
SELECT
    date_trunc(:bucket, ts) AS bucket,
    stage,
    count(duration_ms) AS count,
    percentile(duration_ms, 0.50) AS p50_ms,
    percentile(duration_ms, 0.90) AS p90_ms,
    percentile(duration_ms, 0.95) AS p95_ms,
    percentile(duration_ms, 0.99) AS p99_ms,
    max(duration_ms) AS max_ms
FROM events
WHERE duration_ms IS NOT NULL AND ts IS NOT NULL
GROUP BY date_trunc(:bucket, ts), stage
ORDER BY bucket NULLS LAST, stage NULLS LAST
