-- Prefill against decode: percentiles of prefill_ms / decode_ms per request, and the ratio of
-- their sums (where the time goes overall). Unit: ratio. A high ratio means prompt processing
-- (long context, article 003 §4.3) dominates; a low one means token generation does.
-- Definition: docs/sql.md (the requests view's prefill_decode_ratio).
-- The totals are sums of whole microseconds (HUGEINT), divided once: a floating sum depended on
-- how DuckDB's threads split the rows (two runs differed in the last digits). A duration of 1e15
-- ms or more (no measurement) is left out of them, so no sum can overflow.
SELECT
    count(prefill_decode_ratio) AS count,
    quantile_cont(prefill_decode_ratio, 0.50) AS p50,
    quantile_cont(prefill_decode_ratio, 0.90) AS p90,
    quantile_cont(prefill_decode_ratio, 0.95) AS p95,
    max(prefill_decode_ratio) AS max,
    CAST(sum(CASE WHEN abs(prefill_ms) < 1e15 AND abs(decode_ms) < 1e15 THEN CAST(round(prefill_ms * 1000) AS HUGEINT) END)
         AS DOUBLE) / 1000 AS prefill_ms_total,
    CAST(sum(CASE WHEN abs(prefill_ms) < 1e15 AND abs(decode_ms) < 1e15 THEN CAST(round(decode_ms * 1000) AS HUGEINT) END)
         AS DOUBLE) / 1000 AS decode_ms_total
FROM requests
