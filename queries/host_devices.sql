-- Which hosts ran their model on a GPU: devices of the request and error events, and whether
-- anything GPU-ish was ever seen there (a gpu_sample with a reading, a cuda device,
-- reserved_mb > 0). A host is CPU-only when its requests name a device, none of them a GPU one,
-- and nothing GPU-ish shows: GPU rules then have no data for it. A host with no device field is
-- assumed to have a GPU unless nothing GPU-ish is ever seen (collector contract,
-- docs/collector.md).
-- Units: events.
SELECT
    host,
    count(*) FILTER (WHERE stage = 'request') AS requests,
    count(device) AS device_events,
    count(*) FILTER (WHERE device IS NOT NULL AND lower(device) NOT LIKE 'cpu%') AS gpu_device_events,
    count(*) FILTER (WHERE lower(device) LIKE 'cpu%') AS cpu_device_events,
    count(*) FILTER (WHERE stage = 'gpu_sample' AND (gpu_util_pct IS NOT NULL OR gpu_mem_used_mb IS NOT NULL)) AS gpu_samples,
    count(*) FILTER (WHERE reserved_mb > 0 OR reserved_mb_after > 0 OR allocated_mb_after > 0) AS gpu_memory_readings,
    min(device) FILTER (WHERE device IS NOT NULL) AS device
FROM events
GROUP BY host
ORDER BY host
