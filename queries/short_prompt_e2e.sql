-- End-to-end latency of short prompts (input_len < $checklist_short_input_tokens tokens), the
-- "simple question" case of article 003 §5.2: the same prompt ("1+1等于几？") five times, median total
-- < 1.2 s (docs/sources.md). That budget holds a short answer; an R1-style reply reasons for
-- hundreds of tokens first, so like is compared with like: a reply longer than
-- $checklist_short_answer_tokens tokens counts only its first that many (e2e − decode + that
-- many × its own TPOT). A short reply counts whole, and so does a longer one without decode
-- timing to cut it at (the seed logger times inference only): whole_long_count says how many.
-- Unit: ms.
-- params: checklist_short_answer_tokens, checklist_short_input_tokens
WITH short AS (
    SELECT
        CASE
            WHEN output_len > $checklist_short_answer_tokens AND decode_ms IS NOT NULL AND tpot_ms IS NOT NULL
                THEN e2e_ms - decode_ms + $checklist_short_answer_tokens * tpot_ms
            ELSE e2e_ms
        END AS e2e_ms,
        output_len > $checklist_short_answer_tokens AND decode_ms IS NOT NULL AND tpot_ms IS NOT NULL AS cut,
        output_len > $checklist_short_answer_tokens AS long_reply,
        reasoning_share
    FROM requests
    WHERE input_len < $checklist_short_input_tokens AND e2e_ms IS NOT NULL
)
SELECT
    count(e2e_ms) AS count,
    quantile_cont(e2e_ms, 0.50) AS p50_ms,
    quantile_cont(e2e_ms, 0.90) AS p90_ms,
    max(e2e_ms) AS max_ms,
    count(*) FILTER (WHERE cut) AS cut_count,
    count(*) FILTER (WHERE long_reply AND NOT cut) AS whole_long_count,
    quantile_cont(reasoning_share, 0.50) AS reasoning_share_p50
FROM short
