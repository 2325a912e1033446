-- How many requests carry a usable session id: a request is a v1 request event
-- or a legacy input event; null, "" and "unknown" (article 003's default) name no session.
-- Unit: requests.
-- The string tests once per distinct session id (a few requests share one), not per event.
SELECT
    CAST(coalesce(sum(n), 0) AS BIGINT) AS requests,
    CAST(coalesce(sum(n) FILTER (WHERE session_id IS NULL OR trim(session_id) = '' OR lower(session_id) = 'unknown'), 0) AS BIGINT)
        AS without_session
FROM (
    SELECT session_id, count(*) AS n
    FROM events
    WHERE (source_format = 'v1' AND stage = 'request') OR (source_format = 'legacy' AND stage = 'input')
    GROUP BY session_id
) AS s
