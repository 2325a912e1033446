-- Spark SQL twin of queries/prefill_growth_per_session.sql (mirrors sha256:f5958d2dc8455d90); rewrites: analyzer/spark_sql/twin.py.
-- Prefill growth with turns per session: prefill_ms of the first and last measured turn, the max,
-- and coalesce(regr_slope(prefill_ms, turn_index), CASE WHEN regr_count(prefill_ms, turn_index) > 0 THEN CAST('NaN' AS DOUBLE) END) with regr_r2. Units: ms, ms/turn, tokens.
-- Long chats that resend their whole history make prefill climb turn after turn
-- (article 003 §4.3: 800 ms -> 4.2 s after 20 turns; §5.4 allows at most doubling).
SELECT
    session_id,
    min(host) AS host,
    count(*) AS turns,
    max(turn_index) AS max_turn,
    min_by(prefill_ms, turn_index) FILTER (WHERE prefill_ms IS NOT NULL) AS prefill_first_ms,
    max_by(prefill_ms, turn_index) FILTER (WHERE prefill_ms IS NOT NULL) AS prefill_last_ms,
    max(prefill_ms) AS prefill_max_ms,
    coalesce(regr_slope(prefill_ms, turn_index), CASE WHEN regr_count(prefill_ms, turn_index) > 0 THEN CAST('NaN' AS DOUBLE) END) AS prefill_slope_ms_per_turn,
    regr_r2(prefill_ms, turn_index) AS prefill_r2,
    min_by(input_len, turn_index) FILTER (WHERE input_len IS NOT NULL) AS input_len_first,
    max_by(input_len, turn_index) FILTER (WHERE input_len IS NOT NULL) AS input_len_last
FROM requests
WHERE prefill_ms IS NOT NULL AND session_id IS NOT NULL AND turn_index IS NOT NULL
GROUP BY session_id
ORDER BY session_id NULLS LAST
