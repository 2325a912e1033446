-- GPU memory per session from gpu_memory events: reserved and allocated first/last/min/max,
-- their linear trend regr_slope(mb, minutes since the session's first sample) in MiB/min with
-- regr_r2, and ghost memory = reserved - allocated (cache PyTorch holds; nvidia-smi shows it as
-- used: article 000 §1.1). Units: MiB, MiB/min, fraction.
-- Sources: 000 §5 table (> 50 MiB/min), 003 §4.1 (reserved rising while allocated does not),
-- 003 §5.3 (reserved within +-200 MB). pid: the process, to tell sessions served at the same time
-- by one process (whose reserved_mb is that process's, not theirs) from sequential ones.
WITH m AS (
    SELECT
        session_id, host, pid, ts, reserved_mb, allocated_mb, num_ooms,
        (epoch(ts) - epoch(min(ts) OVER (PARTITION BY session_id))) / 60.0 AS minute,
        reserved_mb - allocated_mb AS ghost_mb,
        CASE WHEN reserved_mb > 0 THEN (reserved_mb - allocated_mb) / reserved_mb END AS ghost_share
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL AND reserved_mb IS NOT NULL
)
SELECT
    session_id,
    min(host) AS host,
    count(*) AS samples,
    min(ts) AS first_ts,
    max(ts) AS last_ts,
    max(minute) AS minutes,
    min_by(reserved_mb, ts) AS reserved_first_mb,
    max_by(reserved_mb, ts) AS reserved_last_mb,
    min(reserved_mb) AS reserved_min_mb,
    max(reserved_mb) AS reserved_max_mb,
    regr_slope(reserved_mb, minute) AS reserved_slope_mb_per_min,
    regr_r2(reserved_mb, minute) AS reserved_r2,
    count(allocated_mb) AS allocated_samples,
    max(allocated_mb) AS allocated_max_mb,
    regr_slope(allocated_mb, minute) AS allocated_slope_mb_per_min,
    regr_r2(allocated_mb, minute) AS allocated_r2,
    max(ghost_mb) AS ghost_max_mb,
    quantile_cont(ghost_mb, 0.50) AS ghost_p50_mb,
    quantile_cont(ghost_share, 0.50) AS ghost_share_p50,
    max_by(ghost_mb, ts) AS ghost_last_mb,
    max_by(ghost_share, ts) AS ghost_share_last,
    max(num_ooms) AS max_num_ooms,
    min(pid) AS pid
FROM m
GROUP BY session_id
ORDER BY session_id
