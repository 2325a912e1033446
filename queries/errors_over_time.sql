-- Errors per time bucket and type ($bucket: 'minute', 'hour' or 'day' from the span of the logs).
-- Unit: events. Source: article 003 §3.2.
-- series errors_timeline: bucket, error_type, count
-- params: bucket
SELECT
    date_trunc($bucket, ts) AS bucket,
    coalesce(error_type, 'unknown') AS error_type,
    count(*) AS count
FROM events
WHERE stage = 'error' AND ts IS NOT NULL
GROUP BY date_trunc($bucket, ts), coalesce(error_type, 'unknown')
ORDER BY bucket, error_type
