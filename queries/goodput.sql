-- Goodput: share of requests that succeeded and met every SLO (ttft_ms <= $slo_ttft_ms and
-- tpot_ms <= $slo_tpot_ms; a request with one output token has no tpot and meets that SLO).
-- Unit: fraction 0..1, NULL when no request has a measured ttft (legacy logs).
-- Also the request counts (requests, ok, errors, retried, slo_missed) and when the requests ran
-- (first_request, last_request). Source: docs/rules.md ([slo] defaults
-- 1000 / 130 ms, article 003 §5.2).
-- params: slo_ttft_ms, slo_tpot_ms
SELECT
    count(*) AS requests,
    sum(CASE WHEN coalesce(is_error, false) THEN 0 ELSE 1 END) AS ok,
    sum(CASE WHEN coalesce(is_error, false) THEN 1 ELSE 0 END) AS errors,
    -- answered after an error: the app caught its first attempt's error (the request's
    -- error_type) and retried, so the user got an answer, not the error
    sum(CASE WHEN NOT coalesce(is_error, false) AND error_type IS NOT NULL THEN 1 ELSE 0 END) AS retried,
    count(ttft_ms) AS ttft_measured,
    -- answered, with a measured TTFT, and over an SLO: the requests the users waited too long for
    sum(CASE WHEN NOT coalesce(is_error, false) AND ttft_ms IS NOT NULL
              AND (ttft_ms > $slo_ttft_ms OR tpot_ms > $slo_tpot_ms)
             THEN 1 ELSE 0 END) AS slo_missed,
    sum(CASE WHEN NOT coalesce(is_error, false)
              AND ttft_ms <= $slo_ttft_ms
              AND (tpot_ms IS NULL OR tpot_ms <= $slo_tpot_ms)
             THEN 1 ELSE 0 END) AS good,
    -- when the requests ran: the first one's start (its end less its end-to-end time, else its
    -- first event) to the last one's end, inside the span of the events
    min(CASE WHEN e2e_ms IS NOT NULL THEN end_ts - to_microseconds(CAST(e2e_ms * 1000 AS BIGINT))
             ELSE start_ts END) AS first_request,
    max(end_ts) AS last_request,
    CASE WHEN count(ttft_ms) = 0 THEN NULL
         ELSE sum(CASE WHEN NOT coalesce(is_error, false)
                        AND ttft_ms <= $slo_ttft_ms
                        AND (tpot_ms IS NULL OR tpot_ms <= $slo_tpot_ms)
                       THEN 1 ELSE 0 END) * 1.0 / count(*)
    END AS goodput
FROM requests
