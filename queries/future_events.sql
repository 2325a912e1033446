-- Naive (legacy, offset-less) timestamps that land after $now + $report_future_margin_min minutes:
-- the sign of logs written in another time zone than --tz reads them in. Unit: events.
-- params: now, report_future_margin_min
SELECT
    count(*) FILTER (WHERE source_format = 'legacy') AS naive_events,
    count(*) FILTER (WHERE source_format = 'legacy'
                     AND ts > $now::TIMESTAMPTZ + to_minutes(CAST($report_future_margin_min AS BIGINT))) AS future_events,
    max(ts) FILTER (WHERE source_format = 'legacy') AS naive_last_ts
FROM events
