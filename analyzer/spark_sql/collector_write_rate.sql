-- Spark SQL twin of queries/collector_write_rate.sql (mirrors sha256:851c78a2388f4313); rewrites: analyzer/spark_sql/twin.py.
-- Log write rate per host from the collector's own cumulative bytes_written counter: the largest
-- increase between two consecutive collector heartbeats of one process, divided by the seconds
-- between them (pairs more than :max_heartbeat_gap_s apart are skipped). Units: bytes, bytes/s.
-- Used by the log_volume rule when ingest gives no line sizes. Source: article 000 §3.2,
-- §5 table (iotop WRITE > 1 MB/s from app.py).
WITH c AS (
    SELECT host, pid, ts, bytes_written,
           lag(bytes_written) OVER (PARTITION BY host, pid ORDER BY ts NULLS LAST) AS prev_bytes,
           lag(ts) OVER (PARTITION BY host, pid ORDER BY ts NULLS LAST) AS prev_ts
    FROM events
    WHERE stage = 'collector' AND bytes_written IS NOT NULL
), d AS (
    SELECT host, prev_ts, bytes_written - prev_bytes AS bytes,
           (unix_micros(ts) / 1e6) - (unix_micros(prev_ts) / 1e6) AS dt_s
    FROM c
    WHERE prev_ts IS NOT NULL AND bytes_written >= prev_bytes
      AND (unix_micros(ts) / 1e6) > (unix_micros(prev_ts) / 1e6) AND (unix_micros(ts) / 1e6) - (unix_micros(prev_ts) / 1e6) <= :max_heartbeat_gap_s
)
SELECT
    host,
    count(*) AS intervals,
    max(bytes / dt_s) AS peak_bytes_per_s,
    max_by(prev_ts, bytes / dt_s) FILTER (WHERE prev_ts IS NOT NULL) AS peak_from,
    max_by(bytes, bytes / dt_s) FILTER (WHERE bytes IS NOT NULL) AS peak_bytes,
    sum(bytes) AS total_bytes
FROM d
GROUP BY host
ORDER BY host NULLS LAST
