-- Histograms of ttft_ms, tpot_ms and e2e_ms on log-spaced bins: $bins_per_decade bins per
-- power of ten (edges 10^(k / $bins_per_decade) ms), so 0.2 ms, 40 ms and 40 s each get their
-- own bins; values under $hist_min_ms share the first bin, values past $max_bins bins the
-- last, so rows are bounded. Unit: ms (bin edges), requests (count). Definitions: docs/sql.md.
-- series latency_hist: metric, bin_start, bin_end, count
-- params: hist_min_ms, bins_per_decade, max_bins
WITH v AS (
    SELECT 'ttft_ms' AS metric, ttft_ms AS x FROM requests WHERE ttft_ms IS NOT NULL
    UNION ALL
    SELECT 'tpot_ms', tpot_ms FROM requests WHERE tpot_ms IS NOT NULL
    UNION ALL
    SELECT 'e2e_ms', e2e_ms FROM requests WHERE e2e_ms IS NOT NULL
), b AS (
    SELECT metric,
           least(greatest(floor(log10(greatest(x, $hist_min_ms)) * $bins_per_decade),
                          floor(log10($hist_min_ms) * $bins_per_decade)),
                 floor(log10($hist_min_ms) * $bins_per_decade) + $max_bins - 1) AS bin
    FROM v
)
SELECT metric, round(pow(10, bin / $bins_per_decade), 6) AS bin_start,
       round(pow(10, (bin + 1) / $bins_per_decade), 6) AS bin_end, count(*) AS count
FROM b
GROUP BY metric, bin
ORDER BY metric, bin_start
