-- Spark SQL twin of queries/log_volume_peak_minute.sql (mirrors sha256:3a102cf1cc687ece); rewrites: analyzer/spark_sql/twin.py.
-- The DuckDB query calls date_trunc once per distinct UTC minute (a cost there, not a
-- semantic change); Spark truncates each row, with the same buckets.
-- The busiest minute of log writing per host: bytes of log lines (line_bytes) in that minute and
-- the rate in bytes per second (bytes / 60). Units: bytes, bytes/s.
-- Source: article 000 §3.2 (iotop WRITE > 2 MB/s), §5 table (> 1 MB/s: logging too often).
WITH per_minute AS (
    SELECT host, date_trunc('minute', ts) AS minute, sum(line_bytes) AS bytes, count(*) AS events
    FROM events
    WHERE ts IS NOT NULL
    GROUP BY host, date_trunc('minute', ts)
)
SELECT
    host,
    count(*) AS minutes,
    max_by(minute, bytes) FILTER (WHERE minute IS NOT NULL) AS peak_minute,
    max(bytes) AS peak_bytes,
    max(bytes) / 60.0D AS peak_bytes_per_s,
    max_by(events, bytes) FILTER (WHERE events IS NOT NULL) AS peak_events,
    sum(bytes) AS total_bytes
FROM per_minute
GROUP BY host
ORDER BY host NULLS LAST
