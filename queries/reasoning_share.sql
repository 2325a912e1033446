-- Reasoning share (reasoning_len / output_len, the <think> part of an R1-style answer) and time
-- to first answer token (ttfa_ms, after </think>). Units: fraction 0..1, tokens, ms.
-- Definitions: docs/sql.md (the requests view).
SELECT
    count(reasoning_share) AS count,
    sum(CASE WHEN reasoning_len > 0 THEN 1 ELSE 0 END) AS reasoning_requests,
    quantile_cont(reasoning_share, 0.50) AS share_p50,
    quantile_cont(reasoning_share, 0.90) AS share_p90,
    quantile_cont(reasoning_len, 0.50) AS reasoning_len_p50,
    quantile_cont(reasoning_len, 0.90) AS reasoning_len_p90,
    count(ttfa_ms) AS ttfa_count,
    quantile_cont(ttfa_ms, 0.50) AS ttfa_p50_ms,
    quantile_cont(ttfa_ms, 0.95) AS ttfa_p95_ms
FROM requests
