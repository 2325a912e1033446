-- Log write rate per host from the collector's own cumulative bytes_written counter: the largest
-- increase between two consecutive collector heartbeats of one process, divided by the seconds
-- between them (pairs more than $log_volume_max_heartbeat_gap_s apart are skipped). Units: bytes,
-- bytes/s. Used by the log_volume rule when ingest gives no line sizes. Source: article 000 §3.2,
-- §5 table (iotop WRITE > 1 MB/s from app.py).
-- params: log_volume_max_heartbeat_gap_s
WITH c AS (
    SELECT host, pid, ts, bytes_written,
           lag(bytes_written) OVER (PARTITION BY host, pid ORDER BY ts) AS prev_bytes,
           lag(ts) OVER (PARTITION BY host, pid ORDER BY ts) AS prev_ts
    FROM events
    WHERE stage = 'collector' AND bytes_written IS NOT NULL
), d AS (
    SELECT host, prev_ts, bytes_written - prev_bytes AS bytes,
           epoch(ts) - epoch(prev_ts) AS dt_s
    FROM c
    WHERE prev_ts IS NOT NULL AND bytes_written >= prev_bytes
      AND epoch(ts) > epoch(prev_ts) AND epoch(ts) - epoch(prev_ts) <= $log_volume_max_heartbeat_gap_s
)
SELECT
    host,
    count(*) AS intervals,
    max(bytes / dt_s) AS peak_bytes_per_s,
    max_by(prev_ts, bytes / dt_s) AS peak_from,
    max_by(bytes, bytes / dt_s) AS peak_bytes,
    sum(bytes) AS total_bytes
FROM d
GROUP BY host
ORDER BY host
