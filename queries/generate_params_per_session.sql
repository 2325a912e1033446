-- Generation settings and output sizes per session: max num_beams, max max_new_tokens, max
-- output_len, and how many requests logged params. Units: beams, tokens.
-- Sources: article 003 §3.2 (num_beams=5 by mistake), 000 §2.2 (max_tokens 4096),
-- 000 §4.2 (3000+ token outputs slow post-processing). Failed attempts' params (error events)
-- count: beam_failed_requests ran num_beams > 1 in an attempt that failed, beam_fallback_requests
-- then succeeded with a retry (003 §3.2's oom_fallback); beam_oom_requests, those whose failure was
-- an out-of-memory error (what tells an OOM from beams apart from one from the load).
SELECT
    session_id,
    min(host) AS host,
    count(*) AS requests,
    count(num_beams) AS num_beams_count,
    max(num_beams) AS num_beams_max,
    sum(CASE WHEN num_beams > 1 THEN 1 ELSE 0 END) AS beam_requests,
    count(max_new_tokens) AS max_new_tokens_count,
    max(max_new_tokens) AS max_new_tokens_max,
    count(output_len) AS output_len_count,
    max(output_len) AS output_len_max,
    sum(CASE WHEN failed_num_beams > 1 THEN 1 ELSE 0 END) AS beam_failed_requests,
    max(failed_num_beams) AS failed_num_beams_max,
    sum(CASE WHEN failed_num_beams > 1 AND status = 'ok' THEN 1 ELSE 0 END) AS beam_fallback_requests,
    sum(CASE WHEN greatest(failed_num_beams, num_beams) > 1
              AND (error_type IN ('OutOfMemoryError', 'OOMError') OR error_msg ILIKE '%out of memory%')
             THEN 1 ELSE 0 END) AS beam_oom_requests
FROM requests
WHERE session_id IS NOT NULL
GROUP BY session_id
ORDER BY session_id
