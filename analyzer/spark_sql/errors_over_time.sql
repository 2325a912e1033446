-- Spark SQL twin of queries/errors_over_time.sql (mirrors sha256:ed236d064503d97e); rewrites: analyzer/spark_sql/twin.py.
-- Errors per time bucket and type ($bucket: 'minute', 'hour' or 'day' from the span of the logs).
-- Unit: events. Source: article 003 §3.2.
SELECT
    date_trunc(:bucket, ts) AS bucket,
    coalesce(error_type, 'unknown') AS error_type,
    count(*) AS count
FROM events
WHERE stage = 'error' AND ts IS NOT NULL
GROUP BY date_trunc(:bucket, ts), coalesce(error_type, 'unknown')
ORDER BY bucket NULLS LAST, error_type NULLS LAST
