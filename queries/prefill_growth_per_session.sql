-- Prefill growth with turns per session: prefill_ms of the first and last measured turn, the max,
-- and regr_slope(prefill_ms, turn_index) with regr_r2. Units: ms, ms/turn, tokens.
-- Long chats that resend their whole history make prefill climb turn after turn
-- (article 003 §4.3: 800 ms -> 4.2 s after 20 turns; §5.4 allows at most doubling).
-- The slope and r2 are regr_slope/regr_r2's in exact integers (microseconds, HUGEINT sums, one
-- division at the end): floating sums depended on how DuckDB's threads split the rows. A prefill
-- of 1e12 ms or more, or a turn index of 1e9 or more (no measurement), is left out of the trend,
-- so no sum can overflow.
WITH p AS (
    SELECT session_id, host, turn_index, prefill_ms, input_len,
           CASE WHEN abs(prefill_ms) < 1e12 AND abs(turn_index) < 1e9 THEN turn_index END AS x,
           CASE WHEN abs(prefill_ms) < 1e12 AND abs(turn_index) < 1e9 THEN CAST(round(prefill_ms * 1000) AS BIGINT) END AS y
    FROM requests
    WHERE prefill_ms IS NOT NULL AND session_id IS NOT NULL AND turn_index IS NOT NULL
), agg AS (
SELECT
    session_id,
    min(host) AS host,
    count(*) AS turns,
    max(turn_index) AS max_turn,
    min_by(prefill_ms, turn_index) AS prefill_first_ms,
    max_by(prefill_ms, turn_index) AS prefill_last_ms,
    max(prefill_ms) AS prefill_max_ms,
    min_by(input_len, turn_index) AS input_len_first,
    max_by(input_len, turn_index) AS input_len_last,
    count(x) AS n, sum(x) AS sx, sum(y) AS sy, sum(CAST(x AS HUGEINT) * x) AS sxx,
    sum(CAST(x AS HUGEINT) * y) AS sxy, sum(CAST(y AS HUGEINT) * y) AS syy
FROM p
GROUP BY session_id
), d AS (
    -- n * sum(xy) - sum(x) * sum(y) and the like, exact (try: NULL, not an error, past HUGEINT)
    SELECT *, try(n * sxy - sx * sy) AS dxy, try(n * sxx - sx * sx) AS dxx, try(n * syy - sy * sy) AS dyy
    FROM agg
)
SELECT
    session_id, host, turns, max_turn, prefill_first_ms, prefill_last_ms, prefill_max_ms,
    -- as regr_slope: us per turn / 1000 = ms per turn; NaN without spread in turns
    CASE WHEN dxx > 0 THEN CAST(dxy AS DOUBLE) / CAST(try(dxx * 1000) AS DOUBLE)
         WHEN n > 0 AND dxx = 0 THEN 'NaN'::DOUBLE END AS prefill_slope_ms_per_turn,
    -- as regr_r2: NULL without spread in turns, 1 without spread in prefill
    CASE WHEN dxx > 0 AND dyy = 0 THEN 1.0
         WHEN dxx > 0 AND dyy > 0
         THEN (CAST(dxy AS DOUBLE) / CAST(dxx AS DOUBLE)) * (CAST(dxy AS DOUBLE) / CAST(dyy AS DOUBLE)) END AS prefill_r2,
    input_len_first, input_len_last
FROM d
ORDER BY session_id
