-- Collector health per host: its own counters (cumulative per writer process, so the max per
-- process is summed per host): events written, dropped, bytes written; the largest queue seen.
-- Unit: events, bytes. A dropped event is a hole in every other metric.
-- series collector: host, processes, written, dropped, queued, bytes_written
WITH per_process AS (
    SELECT host, pid,
           max(written) AS written, max(dropped) AS dropped, max(queued) AS queued,
           max(bytes_written) AS bytes_written, count(*) AS samples
    FROM events
    WHERE stage = 'collector'
    GROUP BY host, pid
)
SELECT
    host,
    count(*) AS processes,
    sum(samples) AS samples,
    sum(written) AS written,
    sum(dropped) AS dropped,
    max(queued) AS queued,
    sum(bytes_written) AS bytes_written
FROM per_process
GROUP BY host
ORDER BY host
