-- First and last event time and event counts by source format (v1 / legacy).
-- Units: ISO timestamps, events, sessions. Used to pick the time-bucket width of the timelines.
SELECT
    min(ts) AS first_event,
    max(ts) AS last_event,
    count(*) AS events,
    sum(CASE WHEN source_format = 'v1' THEN 1 ELSE 0 END) AS v1_events,
    sum(CASE WHEN source_format = 'legacy' THEN 1 ELSE 0 END) AS legacy_events,
    count(DISTINCT session_id) AS sessions
FROM events
