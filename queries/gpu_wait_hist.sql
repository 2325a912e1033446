-- Histogram of per-request gpu_wait_pct in 10-point bins from 0 to 100 (negative values, where
-- CPU time exceeded wall time on several threads, fall in the first bin). Unit: %, requests.
-- Source: article 003 §4.2.
-- series gpu_wait_hist: bin_start, bin_end, count
WITH b AS (
    SELECT least(greatest(floor(gpu_wait_pct / 10), 0), 9) AS bin
    FROM requests
    WHERE gpu_wait_pct IS NOT NULL
)
SELECT bin * 10 AS bin_start, bin * 10 + 10 AS bin_end, count(*) AS count
FROM b
GROUP BY bin
ORDER BY bin_start
