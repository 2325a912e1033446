-- How many requests carry a usable session id (issue 11 item 4): a request is a v1 request event
-- or a legacy input event; null, "" and "unknown" (article 003's default) name no session.
-- Unit: requests.
SELECT
    count(*) AS requests,
    count(*) FILTER (WHERE session_id IS NULL OR trim(session_id) = '' OR lower(session_id) = 'unknown') AS without_session
FROM events
WHERE (source_format = 'v1' AND stage = 'request') OR (source_format = 'legacy' AND stage = 'input')
