-- The $report_slowest_sessions slowest sessions by median end-to-end latency, with their request
-- count, ttft and tpot medians and worst e2e. Units: ms. Definitions: docs/sql.md (the requests
-- view).
-- params: report_slowest_sessions
SELECT
    session_id,
    min(host) AS host,
    count(*) AS requests,
    quantile_cont(e2e_ms, 0.50) AS e2e_p50_ms,
    max(e2e_ms) AS e2e_max_ms,
    quantile_cont(ttft_ms, 0.50) AS ttft_p50_ms,
    quantile_cont(tpot_ms, 0.50) AS tpot_p50_ms
FROM requests
WHERE session_id IS NOT NULL AND e2e_ms IS NOT NULL
GROUP BY session_id
ORDER BY e2e_p50_ms DESC, session_id
LIMIT $report_slowest_sessions
