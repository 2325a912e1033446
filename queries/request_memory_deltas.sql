-- One row per request that carries before/after memory values: its GPU delta
-- (allocated after - before, else reserved), its RSS delta, and the sessions of the other requests
-- of the same process that ended while its handler ran. Their leaks land in this request's delta (torch and
-- RSS are per process), so the rules subtract them (analyzer/rules/, attribute_deltas).
-- "B ended during A": when both carry the collector's completion sequence (done_before, done_seq:
-- each "after" reading is taken with its completion index, each "before" reading with the count of
-- completions so far, in one lock section), exactly A.done_before < B.done_seq < A.done_seq, even
-- when many requests end in the same millisecond. Otherwise (older logs, the simulator's legacy
-- scenarios) by timestamps, and ends in the same millisecond count as ended during: the collector
-- reads "after" last thing, so another request's leak from that instant is most likely in it.
-- With the sequence, also each request's step: what the process kept between the previous
-- completion's "after" reading (done_seq - 1) and this one's. Kept, not held: the process's
-- memory at a reading is what it kept so far plus what requests in flight hold, so what it kept
-- up to a reading is at most the lowest reading from then on (every "before" and "after" reading
-- of the process, in sequence order: a "before" follows completion done_before). The step is
-- that lower envelope's rise, never negative; working memory that is later released leaves it
-- flat, however large and whenever in its request it was allocated. A request keeps its leak
-- before its own "after" reading, so the leak is in its own step unless another request's
-- "after" reading came between the two, within a few ms (a few GIL switches on a busy box):
-- adjacent completions less than 25 ms apart share a step group, whose steps add up to the leaks
-- of all its requests. NULL steps (the deltas above are used): a process with a gap in its
-- sequence before a request (that request's group), or two requests with one done_seq (a reused
-- pid: the whole process).
-- Units: MiB.
WITH counted AS (
    SELECT *, count(*) OVER (PARTITION BY host, pid, done_seq) AS same_seq
    FROM requests
    WHERE done_seq IS NOT NULL AND done_before IS NOT NULL
), seq AS (
    SELECT request_id, session_id, host, pid, done_seq, done_before, end_ts,
           lag(done_seq) OVER w AS prev_seq, lag(end_ts) OVER w AS prev_end,
           max(same_seq) OVER (PARTITION BY host, pid) AS dup,
           rss_mb_after - lag(rss_mb_after) OVER w AS rss_step,
           coalesce(allocated_mb_after - lag(allocated_mb_after) OVER w,
                    reserved_mb_after - lag(reserved_mb_after) OVER w) AS gpu_step
    FROM counted
    WINDOW w AS (PARTITION BY host, pid ORDER BY done_seq, end_ts)
), bounds AS (
    -- what the process can have kept over the window: its last "after" reading minus its lowest
    -- reading (every reading is what it kept so far plus what requests in flight held, >= 0)
    SELECT coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey,
           arg_max(rss_mb_after, done_seq) - least(min(rss_mb_before), min(rss_mb_after)) AS rss_kept_bound_mb,
           arg_max(coalesce(allocated_mb_after, reserved_mb_after), done_seq)
               - least(min(coalesce(allocated_mb_before, reserved_mb_before)),
                       min(coalesce(allocated_mb_after, reserved_mb_after))) AS gpu_kept_bound_mb
    FROM counted
    GROUP BY ALL
), started AS (
    -- requests whose "before" reading came between completion at_seq - 1 and at_seq
    SELECT coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, done_before + 1 AS at_seq, count(*) AS n
    FROM counted
    GROUP BY ALL
), steps AS (
    SELECT *, prev_seq = done_seq - 1 AND dup = 1 AND end_ts >= prev_end - INTERVAL 1 SECOND AS chained
    FROM seq
), grouped AS (
    SELECT *,
           -- runs of completions each < 25 ms after the one before, cut into pairs: on a busy
           -- service every completion may follow the last that closely, and one group per run
           -- would tell nobody's steps apart
           (run * 1000000 + (row_number() OVER (PARTITION BY host, pid, run ORDER BY done_seq, end_ts) - 1) // 2)
               AS step_group
    FROM (
        SELECT *,
               -- only a request that started before the previous completion could have kept its
               -- memory before that completion's reading: one that started after it is apart
               sum(CASE WHEN chained AND end_ts <= prev_end + INTERVAL 25 MILLISECOND AND done_before < prev_seq
                        THEN 0 ELSE 1 END)
                   OVER (PARTITION BY host, pid ORDER BY done_seq, end_ts ROWS UNBOUNDED PRECEDING) AS run
        FROM steps
    )
), judged AS (
    -- a group's steps are used only when every request in it has one and a session (the leak
    -- of a request the rules cannot see would land on its neighbours)
    SELECT j.session_id, j.request_id, j.step_group,
           CASE WHEN bool_and(j.chained AND j.rss_step IS NOT NULL AND j.session_id IS NOT NULL) OVER g
                THEN j.rss_step END AS rss_step_mb,
           CASE WHEN bool_and(j.chained AND j.gpu_step IS NOT NULL AND j.session_id IS NOT NULL) OVER g
                THEN j.gpu_step END AS gpu_step_mb,
           -- working memory in the step, were it held from a request's "before" reading to its
           -- "after": + each request that started in the step, - the one that completed (this
           -- one: started in the step, it is in neither reading; earlier, in the previous one)
           coalesce(st.n, 0) - 1 AS step_transient_coef
    FROM grouped AS j
    LEFT JOIN started AS st
           ON st.hkey = coalesce(j.host, '') AND st.pkey = coalesce(j.pid, -1) AND st.at_seq = j.done_seq
    WINDOW g AS (PARTITION BY j.host, j.pid, j.step_group)
), r AS (
    SELECT
        session_id, request_id, host, pid, end_ts,
        -- the handler's start, where "before" was read: e2e includes the queue wait (contract)
        coalesce(end_ts - to_microseconds(CAST((e2e_ms - coalesce(queue_ms, 0)) * 1000 AS BIGINT)), start_ts) AS start_ts,
        coalesce(allocated_mb_after - allocated_mb_before, reserved_mb_after - reserved_mb_before) AS gpu_delta_mb,
        rss_mb_after - rss_mb_before AS rss_delta_mb, rss_mb_before, rss_mb_after,
        -- the two readings gpu_delta_mb is the difference of (allocated where both were read)
        CASE WHEN allocated_mb_after IS NOT NULL AND allocated_mb_before IS NOT NULL
             THEN allocated_mb_before ELSE reserved_mb_before END AS gpu_mb_before,
        CASE WHEN allocated_mb_after IS NOT NULL AND allocated_mb_before IS NOT NULL
             THEN allocated_mb_after ELSE reserved_mb_after END AS gpu_mb_after,
        done_before, done_seq
    FROM requests
    WHERE session_id IS NOT NULL
      AND (allocated_mb_after IS NOT NULL OR reserved_mb_after IS NOT NULL OR rss_mb_after IS NOT NULL)
), rb AS (
    -- Each request in every minute it touches: overlapping requests meet in a shared minute, so
    -- the self-join is by (process, minute), not every pair of a process's requests (quadratic).
    -- Padded by a second each side: a pair that the completion sequence says overlapped meets
    -- even when millisecond stamps put one's end a hair before the other's start.
    SELECT session_id, request_id, coalesce(host, '') AS hkey, coalesce(pid, -1) AS pkey, start_ts, end_ts,
           done_before, done_seq,
           (epoch_ms(start_ts) - 1000) // 60000 AS b0,
           unnest(range((epoch_ms(start_ts) - 1000) // 60000,
                        (greatest(epoch_ms(end_ts), epoch_ms(start_ts)) + 1000) // 60000 + 1)) AS bucket
    FROM r
), pairs AS (
    -- a pair is counted once: in the first minute both requests touch
    SELECT a.session_id AS a_sid, a.request_id AS a_rid, a.start_ts AS a_start, a.end_ts AS a_end,
           b.session_id AS b_sid, b.request_id AS b_rid, b.start_ts AS b_start, b.end_ts AS b_end,
           b.done_seq AS b_seq,
           a.done_seq IS NOT NULL AND a.done_before IS NOT NULL
               AND b.done_seq IS NOT NULL AND b.done_before IS NOT NULL AS exact,
           -- B's "after" reading came before A's: by sequence, else B's end stamp not after A's
           CASE WHEN exact THEN b.done_seq < a.done_seq ELSE b.end_ts <= a.end_ts END AS b_ended_first,
           -- B's "before" reading came first: fewer completions had preceded it; between the same
           -- two completions the sequence cannot tell, and the start stamps do
           CASE WHEN exact THEN b.done_before < a.done_before
                                OR (b.done_before = a.done_before AND b.start_ts <= a.start_ts)
                ELSE b.start_ts <= a.start_ts END AS b_started_first
    FROM rb AS a
    JOIN rb AS b ON a.hkey = b.hkey AND a.pkey = b.pkey AND a.bucket = b.bucket
    WHERE a.bucket = greatest(a.b0, b.b0)
      AND NOT (b.session_id = a.session_id AND b.request_id = a.request_id)
      AND CASE WHEN exact
               -- B's readings interleave A's exactly when B completed after A's "before" and
               -- started before A's "after"; the loose time check keeps a restarted process
               -- that reused the pid (its sequence starts over) apart
               THEN b.done_seq > a.done_before AND b.done_before < a.done_seq
                    AND b.end_ts >= a.start_ts - INTERVAL 1 SECOND AND b.start_ts <= a.end_ts + INTERVAL 1 SECOND
               ELSE b.end_ts > a.start_ts AND b.start_ts < a.end_ts END
), agg AS (
    SELECT
        a_sid, a_rid,
        list(b_sid ORDER BY b_end, b_seq, b_sid) FILTER (WHERE b_ended_first) AS ended_during,
        -- other requests' working memory (KV cache, activations) in the delta: + for one that
        -- started during this request and still runs at its end, - for one that ran at its start
        -- and ended during it; the rules fit its mean size per process with the sessions' leaks
        count(*) FILTER (WHERE NOT b_started_first AND NOT b_ended_first)
            - count(*) FILTER (WHERE b_started_first AND b_ended_first) AS transient_coef
    FROM pairs
    GROUP BY a_sid, a_rid
)
SELECT
    r.host, r.pid, r.session_id, r.request_id, r.start_ts, r.end_ts, r.gpu_delta_mb, r.rss_delta_mb,
    agg.ended_during, coalesce(agg.transient_coef, 0) AS transient_coef,
    g.gpu_step_mb, g.rss_step_mb, g.step_group, g.step_transient_coef, b.gpu_kept_bound_mb, b.rss_kept_bound_mb,
    r.done_before, r.done_seq, r.rss_mb_before, r.rss_mb_after, r.gpu_mb_before, r.gpu_mb_after
FROM r
LEFT JOIN agg ON agg.a_sid = r.session_id AND agg.a_rid = r.request_id
LEFT JOIN judged AS g ON g.session_id = r.session_id AND g.request_id = r.request_id
LEFT JOIN bounds AS b ON b.hkey = coalesce(r.host, '') AND b.pkey = coalesce(r.pid, -1)
ORDER BY r.host, r.pid, r.start_ts, r.session_id, r.request_id
