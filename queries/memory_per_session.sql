-- GPU memory per session from gpu_memory events: reserved and allocated first/last/min/max,
-- their linear trend regr_slope(mb, minutes since the session's first sample) in MiB/min with
-- regr_r2, and ghost memory = reserved - allocated (cache PyTorch holds; nvidia-smi shows it as
-- used: article 000 §1.1). Units: MiB, MiB/min, fraction.
-- Sources: 000 §5 table (> 50 MiB/min), 003 §4.1 (reserved rising while allocated does not),
-- 003 §5.3 (reserved within +-200 MB). pid: the process, to tell sessions served at the same time
-- by one process (whose reserved_mb is that process's, not theirs) from sequential ones.
-- The slopes and r2 are regr_slope/regr_r2's, in exact integers (ms, 1/1000 MiB, HUGEINT sums, one
-- division at the end): floating sums depended on how DuckDB's threads split the rows, so two
-- runs on the same files differed in the 9th-10th digit. A value of 1e9 MiB or more (no memory
-- reading) is left out of the trend, so no sum can overflow.
WITH m AS (
    SELECT
        session_id, host, pid, ts, reserved_mb, allocated_mb, num_ooms,
        (epoch(ts) - epoch(min(ts) OVER (PARTITION BY session_id))) / 60.0 AS minute,
        epoch_ms(ts) - epoch_ms(min(ts) OVER (PARTITION BY session_id)) AS x,
        CASE WHEN abs(reserved_mb) < 1e9 THEN CAST(round(reserved_mb * 1000) AS BIGINT) END AS r,
        CASE WHEN abs(allocated_mb) < 1e9 THEN CAST(round(allocated_mb * 1000) AS BIGINT) END AS a,
        reserved_mb - allocated_mb AS ghost_mb,
        CASE WHEN reserved_mb > 0 THEN (reserved_mb - allocated_mb) / reserved_mb END AS ghost_share
    FROM events
    WHERE stage = 'gpu_memory' AND session_id IS NOT NULL AND reserved_mb IS NOT NULL
), pairs AS (
    -- regr_slope's pairs: both values present
    SELECT *, CASE WHEN r IS NOT NULL THEN x END AS rx, CASE WHEN x IS NOT NULL THEN r END AS ry,
           CASE WHEN a IS NOT NULL THEN x END AS ax, CASE WHEN x IS NOT NULL THEN a END AS ay
    FROM m
), agg AS (
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
    count(rx) AS rn, sum(rx) AS rsx, sum(ry) AS rsy, sum(CAST(rx AS HUGEINT) * rx) AS rsxx,
    sum(CAST(rx AS HUGEINT) * ry) AS rsxy, sum(CAST(ry AS HUGEINT) * ry) AS rsyy,
    count(allocated_mb) AS allocated_samples,
    max(allocated_mb) AS allocated_max_mb,
    count(ax) AS an, sum(ax) AS asx, sum(ay) AS asy, sum(CAST(ax AS HUGEINT) * ax) AS asxx,
    sum(CAST(ax AS HUGEINT) * ay) AS asxy, sum(CAST(ay AS HUGEINT) * ay) AS asyy,
    max(ghost_mb) AS ghost_max_mb,
    quantile_cont(ghost_mb, 0.50) AS ghost_p50_mb,
    quantile_cont(ghost_share, 0.50) AS ghost_share_p50,
    max_by(ghost_mb, ts) AS ghost_last_mb,
    max_by(ghost_share, ts) AS ghost_share_last,
    max(num_ooms) AS max_num_ooms,
    min(pid) AS pid
FROM pairs
GROUP BY session_id
), d AS (
    -- n * sum(xy) - sum(x) * sum(y) and the like, exact (try: NULL, not an error, past HUGEINT)
    SELECT *,
           try(rn * rsxy - rsx * rsy) AS r_dxy, try(rn * rsxx - rsx * rsx) AS r_dxx,
           try(rn * rsyy - rsy * rsy) AS r_dyy,
           try(an * asxy - asx * asy) AS a_dxy, try(an * asxx - asx * asx) AS a_dxx,
           try(an * asyy - asy * asy) AS a_dyy
    FROM agg
)
SELECT
    session_id, host, samples, first_ts, last_ts, minutes,
    reserved_first_mb, reserved_last_mb, reserved_min_mb, reserved_max_mb,
    -- as regr_slope: (MiB / 1000) per ms * 60 = MiB per minute; NaN without spread in time
    CASE WHEN r_dxx > 0 THEN CAST(try(r_dxy * 60) AS DOUBLE) / CAST(r_dxx AS DOUBLE)
         WHEN rn > 0 AND r_dxx = 0 THEN 'NaN'::DOUBLE END AS reserved_slope_mb_per_min,
    -- as regr_r2: NULL without spread in time, 1 without spread in the values
    CASE WHEN r_dxx > 0 AND r_dyy = 0 THEN 1.0
         WHEN r_dxx > 0 AND r_dyy > 0
         THEN (CAST(r_dxy AS DOUBLE) / CAST(r_dxx AS DOUBLE)) * (CAST(r_dxy AS DOUBLE) / CAST(r_dyy AS DOUBLE)) END
        AS reserved_r2,
    allocated_samples,
    allocated_max_mb,
    CASE WHEN a_dxx > 0 THEN CAST(try(a_dxy * 60) AS DOUBLE) / CAST(a_dxx AS DOUBLE)
         WHEN an > 0 AND a_dxx = 0 THEN 'NaN'::DOUBLE END AS allocated_slope_mb_per_min,
    CASE WHEN a_dxx > 0 AND a_dyy = 0 THEN 1.0
         WHEN a_dxx > 0 AND a_dyy > 0
         THEN (CAST(a_dxy AS DOUBLE) / CAST(a_dxx AS DOUBLE)) * (CAST(a_dxy AS DOUBLE) / CAST(a_dyy AS DOUBLE)) END
        AS allocated_r2,
    ghost_max_mb, ghost_p50_mb, ghost_share_p50, ghost_last_mb, ghost_share_last, max_num_ooms, pid
FROM d
ORDER BY session_id
