-- Stage latency percentiles over the whole window: count, p50, p90, p95, p99, max.
-- Unit: ms. One row per stage with measured durations (duration_ms NULL or -1 = not measured).
-- Percentiles are linear-interpolated (quantile_cont = numpy's default). Source:
-- article 003 §3.1 (the latency slices of one request).
-- The four percentiles come from one quantile_cont over a list: four scalar calls each keep their
-- own copy of every duration (680 MB at 20 M events against 260 MB; same values).
SELECT stage, count, q[1] AS p50_ms, q[2] AS p90_ms, q[3] AS p95_ms, q[4] AS p99_ms, max_ms
FROM (
    SELECT
        stage,
        count(duration_ms) AS count,
        quantile_cont(duration_ms, [0.50, 0.90, 0.95, 0.99]) AS q,
        max(duration_ms) AS max_ms
    FROM events
    WHERE duration_ms IS NOT NULL
    GROUP BY stage
) AS s
ORDER BY
    CASE stage
        WHEN 'tokenize' THEN 1 WHEN 'queue' THEN 2 WHEN 'prefill' THEN 3 WHEN 'decode' THEN 4
        WHEN 'inference' THEN 5 WHEN 'format' THEN 6 WHEN 'request' THEN 7 ELSE 8
    END,
    stage
