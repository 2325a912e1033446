-- Spark SQL twin of queries/hosts_summary.sql (mirrors sha256:4ce8d789403a9ce2); rewrites: analyzer/spark_sql/twin.py.
-- Per host: events, sessions, requests and time range. Unit: counts.
SELECT
    host,
    count(*) AS events,
    count(DISTINCT session_id) AS sessions,
    count(DISTINCT request_id) AS requests,
    min(ts) AS first_ts,
    max(ts) AS last_ts
FROM events
GROUP BY host
ORDER BY host NULLS LAST
