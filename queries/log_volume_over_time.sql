-- Log volume per time bucket and host: bytes of log lines written (line_bytes, the length of the
-- raw line as ingest read it, newline included) and events ($bucket: 'second', 'minute', 'hour' or 'day').
-- Units: bytes, events. Source: article 000 §3.2 (log writes eating the disk's IOPS).
-- Summed per UTC minute first (integer arithmetic per row), then per bucket: date_trunc in the
-- reader's zone runs once per minute, not per line (zone offsets are whole minutes).
-- series log_volume: bucket, host, bytes, events
-- params: bucket
WITH u AS (
    -- the pre-aggregation unit: a second for 'second' buckets (a few minutes of data), else a minute
    SELECT CASE WHEN $bucket = 'second' THEN 1000000 ELSE 60000000 END AS unit_us
), per_minute AS (
    SELECT
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % u.unit_us) + u.unit_us) % u.unit_us)
             ELSE ts END AS utc_minute,
        host,
        sum(line_bytes) AS bytes,
        count(*) AS events
    FROM events, u
    WHERE ts IS NOT NULL
    GROUP BY 1, host
)
SELECT
    date_trunc($bucket, utc_minute) AS bucket,
    host,
    sum(bytes) AS bytes,
    CAST(sum(events) AS BIGINT) AS events
FROM per_minute
GROUP BY date_trunc($bucket, utc_minute), host
ORDER BY bucket, host
