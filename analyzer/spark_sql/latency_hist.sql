-- Spark SQL twin of queries/latency_hist.sql (mirrors sha256:2c349698e664475e); rewrites: analyzer/spark_sql/twin.py.
-- Histograms of ttft_ms, tpot_ms and e2e_ms with fixed bin widths ($ttft_bin_ms, $tpot_bin_ms,
-- $e2e_bin_ms); values past $max_bins bins share the last bin, so rows are bounded.
-- Unit: ms (bin edges), requests (count). Source: DESIGN.md §5.
WITH v AS (
    SELECT 'ttft_ms' AS metric, ttft_ms AS x, :ttft_bin_ms AS w FROM requests WHERE ttft_ms IS NOT NULL
    UNION ALL
    SELECT 'tpot_ms', tpot_ms, :tpot_bin_ms FROM requests WHERE tpot_ms IS NOT NULL
    UNION ALL
    SELECT 'e2e_ms', e2e_ms, :e2e_bin_ms FROM requests WHERE e2e_ms IS NOT NULL
), b AS (
    SELECT metric, w, least(greatest(floor(x / w), 0), :max_bins - 1) AS bin FROM v
)
SELECT metric, bin * w AS bin_start, (bin + 1) * w AS bin_end, count(*) AS count
FROM b
GROUP BY metric, bin, w
ORDER BY metric NULLS LAST, bin_start NULLS LAST
