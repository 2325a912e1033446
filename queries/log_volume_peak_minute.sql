-- The busiest minute of log writing per host: bytes of log lines (line_bytes) in that minute and
-- the rate in bytes per second (bytes / 60). Units: bytes, bytes/s.
-- Source: article 000 §3.2 (iotop WRITE > 2 MB/s), §5 table (> 1 MB/s: logging too often).
-- Summed per UTC minute first (integer arithmetic per row); date_trunc in the reader's zone then
-- runs once per minute, not per line.
WITH per_utc_minute AS (
    SELECT
        host,
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % 60000000) + 60000000) % 60000000)
             ELSE ts END AS utc_minute,
        sum(line_bytes) AS bytes,
        count(*) AS events
    FROM events
    WHERE ts IS NOT NULL
    GROUP BY host, 2
), per_minute AS (
    SELECT host, date_trunc('minute', utc_minute) AS minute, sum(bytes) AS bytes,
           CAST(sum(events) AS BIGINT) AS events
    FROM per_utc_minute
    GROUP BY host, date_trunc('minute', utc_minute)
)
SELECT
    host,
    count(*) AS minutes,
    max_by(minute, bytes) AS peak_minute,
    max(bytes) AS peak_bytes,
    max(bytes) / 60.0 AS peak_bytes_per_s,
    max_by(events, bytes) AS peak_events,
    sum(bytes) AS total_bytes
FROM per_minute
GROUP BY host
ORDER BY host
