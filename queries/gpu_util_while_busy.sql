-- GPU utilisation while requests ran, per host and GPU: gpu_sample events in a minute in which a
-- request of that host was in flight (request start..end expanded to minutes: an equi-join that
-- stays cheap over a year of 1 Hz samples): peak and median util. Units: %, samples.
-- Source: article 003 §5.3 (gpu_util_pct peak > 65 % means the GPU is used).
-- A sample's minute: date_trunc in the reader's zone once per distinct UTC minute, not per sample.
WITH ends AS (
    SELECT host, t0, t1,
           CASE WHEN isfinite(t0)
                THEN make_timestamptz(epoch_us(t0) - ((epoch_us(t0) % 60000000) + 60000000) % 60000000)
                ELSE t0 END AS u0,
           CASE WHEN isfinite(t1)
                THEN make_timestamptz(epoch_us(t1) - ((epoch_us(t1) % 60000000) + 60000000) % 60000000)
                ELSE t1 END AS u1
    FROM (SELECT host, coalesce(start_ts, end_ts) AS t0, coalesce(end_ts, start_ts) AS t1
          FROM requests
          WHERE coalesce(start_ts, end_ts) IS NOT NULL) AS r
), local_minutes AS (
    -- a UTC minute's minute in the reader's zone, once per distinct UTC minute; NULL when the
    -- UTC minute spans two of them (an offset with seconds), where each request's own is taken
    SELECT u,
           CASE WHEN date_trunc('minute', u) = date_trunc('minute', u + INTERVAL 59999999 MICROSECOND)
                THEN date_trunc('minute', u) END AS minute
    FROM (SELECT u0 AS u FROM ends UNION SELECT u1 FROM ends) AS d
), spans AS (
    -- each request's first and last minute; many requests share both (most start and end in one
    -- minute), so the minutes are listed once per distinct span, not once per request
    SELECT DISTINCT e.host,
           coalesce(a.minute, date_trunc('minute', e.t0)) AS first_minute,
           coalesce(b.minute, date_trunc('minute', e.t1)) AS last_minute
    FROM ends AS e
    JOIN local_minutes AS a ON a.u = e.u0
    JOIN local_minutes AS b ON b.u = e.u1
), busy AS (
    SELECT DISTINCT host, minute
    FROM (
        SELECT host,
               unnest(generate_series(first_minute, last_minute, INTERVAL 1 MINUTE)) AS minute
        FROM spans
    ) AS expanded
), samples AS (
    SELECT
        host,
        gpu_index,
        gpu_util_pct,
        CASE WHEN isfinite(ts)
             THEN make_timestamptz(epoch_us(ts) - ((epoch_us(ts) % 60000000) + 60000000) % 60000000)
             ELSE ts END AS utc_minute
    FROM events
    WHERE stage = 'gpu_sample' AND gpu_util_pct IS NOT NULL
), busy_minutes AS (
    SELECT b.host, m.utc_minute
    FROM (SELECT utc_minute, date_trunc('minute', utc_minute) AS minute
          FROM (SELECT DISTINCT utc_minute FROM samples) AS d) AS m
    JOIN busy AS b ON b.minute = m.minute
), s AS (
    SELECT e.host, e.gpu_index, e.gpu_util_pct
    FROM samples AS e
    JOIN busy_minutes AS b
      ON e.host IS NOT DISTINCT FROM b.host AND e.utc_minute = b.utc_minute
)
SELECT
    host,
    gpu_index,
    count(*) AS busy_samples,
    max(gpu_util_pct) AS util_peak_busy,
    quantile_cont(gpu_util_pct, 0.50) AS util_p50_busy
FROM s
GROUP BY host, gpu_index
ORDER BY host, gpu_index
