-- Spark SQL twin of queries/log_volume_over_time.sql (mirrors sha256:fe923fbb3edf705a); rewrites: analyzer/spark_sql/twin.py.
-- The DuckDB query calls date_trunc once per distinct UTC minute (a cost there, not a
-- semantic change); Spark truncates each row, with the same buckets.
-- Log volume per time bucket and host: bytes of log lines written (line_bytes, the length of the
-- raw line as ingest read it, newline included) and events (:bucket: 'minute', 'hour' or 'day').
-- Units: bytes, events. Source: article 000 §3.2 (log writes eating the disk's IOPS).
SELECT
    date_trunc(:bucket, ts) AS bucket,
    host,
    sum(line_bytes) AS bytes,
    count(*) AS events
FROM events
WHERE ts IS NOT NULL
GROUP BY date_trunc(:bucket, ts), host
ORDER BY bucket NULLS LAST, host NULLS LAST
