-- Stage latency percentiles per time bucket (the "p95 prefill by hour" chart).
-- Unit: ms. $bucket is a date_trunc unit ('second', 'minute', 'hour' or 'day') chosen from the span of the
-- logs so a year of logs stays a few thousand rows. Source: 003 §3.1; percentiles as docs/sql.md.
-- date_trunc in the reader's zone is costly per row, so it runs once per distinct UTC minute
-- (integer arithmetic per row): zone offsets are whole minutes, so a UTC minute lies in one bucket.
-- series stage_latency_by_hour: bucket, stage, count, p50_ms, p90_ms, p95_ms, p99_ms, max_ms
-- params: bucket
WITH u AS (
    -- the pre-aggregation unit: a second for 'second' buckets (a few minutes of data), else a minute
    SELECT CASE WHEN $bucket = 'second' THEN 1000000 ELSE 60000000 END AS unit_us
), e AS (
    SELECT
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % u.unit_us) + u.unit_us) % u.unit_us)
             ELSE ts END AS utc_minute,
        stage,
        duration_ms
    FROM events, u
    WHERE duration_ms IS NOT NULL AND ts IS NOT NULL
), buckets AS (
    SELECT utc_minute, date_trunc($bucket, utc_minute) AS bucket
    FROM (SELECT DISTINCT utc_minute FROM e) AS m
)
, q AS (
    -- one quantile_cont over a list: one copy of the durations, not one per percentile
    SELECT
        b.bucket,
        e.stage,
        count(e.duration_ms) AS count,
        quantile_cont(e.duration_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
        max(e.duration_ms) AS max_ms
    FROM e
    JOIN buckets AS b ON b.utc_minute = e.utc_minute
    GROUP BY b.bucket, e.stage
)
SELECT bucket, stage, count, q[1] AS p50_ms, q[2] AS p90_ms, q[3] AS p95_ms, q[4] AS p99_ms, max_ms
FROM q
ORDER BY bucket, stage
