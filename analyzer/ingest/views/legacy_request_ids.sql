-- Legacy request ids: article 003's logger writes no request_id, so a request starts at each
-- input event of a session (tokenize in a session with none) and runs to the next one: <session_id>#<n>, n = the
-- 1-based index of the session's input events in (ts, file read order, file position) order, across
-- every file read (a session may cross midnight or a rotation). Lines before a session's first
-- input get NULL. Runs over the legacy rows of the sessions in $sessions (a list) only.
UPDATE events AS e
SET request_id = CASE WHEN n.k > 0 THEN n.session_id || '#' || CAST(n.k AS VARCHAR) END
FROM (
    SELECT
        rowid AS rid,
        session_id,
        sum(CASE WHEN stage = start_stage THEN 1 ELSE 0 END) OVER (
            PARTITION BY session_id
            ORDER BY ts NULLS LAST, file_id, rowid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS k
    FROM (
        -- a session that logs no input line (article 003 §3.2's traces start at tokenize)
        -- starts its requests at tokenize
        SELECT rowid, session_id, stage, ts, file_id,
               CASE WHEN bool_or(stage = 'input') OVER (PARTITION BY session_id) THEN 'input' ELSE 'tokenize' END
                   AS start_stage
        FROM events
        WHERE source_format = 'legacy' AND session_id IS NOT NULL AND list_contains($sessions, session_id)
    )
) AS n
WHERE e.rowid = n.rid
