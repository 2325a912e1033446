-- Spark SQL twin of queries/prefill_decode_ratio.sql (mirrors sha256:5129ee2e7bbaccd9); rewrites: analyzer/spark_sql/twin.py.
-- Prefill against decode: percentiles of prefill_ms / decode_ms per request, and the ratio of
-- their sums (where the time goes overall). Unit: ratio. A high ratio means prompt processing
-- (long context, article 003 §4.3) dominates; a low one means token generation does.
-- Source: DESIGN.md §5 (prefill_decode_ratio).
SELECT
    count(prefill_decode_ratio) AS count,
    percentile(prefill_decode_ratio, 0.50) AS p50,
    percentile(prefill_decode_ratio, 0.90) AS p90,
    percentile(prefill_decode_ratio, 0.95) AS p95,
    max(prefill_decode_ratio) AS max,
    sum(CASE WHEN prefill_ms IS NOT NULL AND decode_ms IS NOT NULL THEN prefill_ms END) AS prefill_ms_total,
    sum(CASE WHEN prefill_ms IS NOT NULL AND decode_ms IS NOT NULL THEN decode_ms END) AS decode_ms_total
FROM requests
