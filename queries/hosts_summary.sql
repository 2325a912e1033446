-- Per host: events, sessions, requests and time range. Unit: counts.
SELECT
    host,
    count(*) AS events,
    count(DISTINCT session_id) AS sessions,
    -- a request id with format lines alone is no request (analyzer/ingest/views/requests.sql)
    count(DISTINCT CASE WHEN stage <> 'format' THEN request_id END) AS requests,
    min(ts) AS first_ts,
    max(ts) AS last_ts
FROM events
GROUP BY host
ORDER BY host
