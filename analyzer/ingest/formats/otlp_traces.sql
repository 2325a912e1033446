-- otlp_traces: OTLP/JSON trace files (an OTel Collector's `file` exporter: one
-- ExportTraceServiceRequest per line, resourceSpans -> scopeSpans -> spans) as raw event rows,
-- the input of analyzer/ingest/views/events.sql (dslogs_raw), from the spans of the temporary
-- table otlp_lines (otlp_lines.sql: several files at once, each row with its file_id).
-- One span of inference is one request. Which spans are, and the names read, are declared once in
-- otlp_traces.py (the otlp_* macros this statement calls). Profiles, keyed on the attributes present:
--   vllm:  vLLM's `llm_request` span (OutputProcessor.do_tracing): starts at the arrival;
--          gen_ai.latency.* in seconds (time_in_queue, time_in_model_prefill/decode,
--          time_to_first_token, e2e), the old gen_ai.usage.prompt_tokens/completion_tokens,
--          finish reasons as a JSON-encoded string; finish reasons "abort" and "error" fail;
--   openinference: spans with `openinference.span.kind` (Arize Phoenix's convention): LLM spans
--          are requests, the other kinds (CHAIN, AGENT, TOOL, RETRIEVER, EMBEDDING...) are not;
--          llm.token_count.*, llm.invocation_parameters (a JSON string), the first-token event;
--   genai: any other span with gen_ai.* attributes (OpenTelemetry GenAI semantic conventions,
--          current and deprecated names; openlit, OpenLLMetry): a request when its
--          gen_ai.operation.name is an inference operation (or it names none); the span's duration
--          is end-to-end, gen_ai.server.time_to_first_token / gen_ai.response.time_to_first_chunk
--          the TTFT, gen_ai.server.time_per_output_token times (output - 1) the decode, an
--          `exception` event or an ERROR status an error. openlit's spans (its instrumentation
--          scope, or telemetry.sdk.name on the span) are this profile under a name of their own,
--          otlp:openlit: openlit counts tokens from the text's characters (estimates).
-- A span that is the parent of a request in its trace is not one itself: an agent, workflow or
-- framework span repeating its calls' totals (or a client span around vLLM's own) counts once.
-- Ids are opaque strings (hex as OTLP/JSON writes them; base64 from a protobuf JSON dump reads
-- the same); a request's id is its span id, or trace:span where spans of several traces of the
-- file share a span id. A line may hold megabytes (a batch of spans): DuckDB streams them, up to
-- the line judge's limit (analyzer/ingest/validate.py MAX_LINE_BYTES). Times are unix nanoseconds
-- as strings (or numbers); intValue a string or number.
-- Each request gives the events of the stages it measured: input (arrival), queue, prefill,
-- decode, request (the summary, at the span's end) and error. v names the profile, which
-- events.sql turns into source_format (otlp:vllm, otlp:genai, ...). Spans the statement cannot
-- take as they are (an end before the start; a span id shared across traces) give one row with
-- no stage each: error_msg says what, input_len its line in its file, and the reader counts it
-- as a bad line and removes it. Spans are related (parents, shared ids, in-flight counts) within
-- their file only, so that how files are grouped into one read never changes what they give.
WITH spans AS (
    -- the spans of the files read (otlp_lines.sql: typed, their bad values counted and dropped;
    -- line_no the span's line in its file)
    SELECT file_id, line_no, r, scope, s FROM otlp_lines WHERE s IS NOT NULL
), kv AS (
    -- attributes stay key/value lists, read by otlp_attr (a lookup costs less than building a
    -- map of every span's attributes)
    SELECT
        file_id,
        line_no,
        s,
        scope,
        r,
        s.attributes AS a,
        list_filter(s.events, lambda e: e."name" = 'exception')[1] AS exc,
        list_filter(s.events, lambda e: otlp_first_token_event(e."name"))[1].timeUnixNano AS first_token_ns
    FROM spans
    -- GenAI work: gen_ai.*/llm.* attributes or an OpenInference kind, or a span an instrumentor
    -- opened before the call failed and could set none (openlit's scope; a semantic-conventions
    -- name, "chat <model>")
    WHERE list_bool_or(list_transform(s.attributes, lambda a: starts_with(a."key", 'gen_ai.') OR starts_with(a."key", 'llm.') OR a."key" = 'openinference.span.kind'))
       OR starts_with(scope, 'openlit.instrumentation.')
       OR regexp_matches(s."name", '^(chat|text_completion|generate_content)( |$)')
), k AS (
    -- the attributes that classify a span, taken in one pass; the OpenInference-only ones read
    -- only on its spans
    SELECT *, otlp_is_request(oi_kind, op, tl_kind) AS by_kind,
        CASE WHEN oi_kind IS NOT NULL THEN otlp_attr(a, 'llm.invocation_parameters').stringValue END AS inv_raw
    FROM (SELECT *,
                 otlp_attr(c, 'openinference.span.kind').stringValue AS oi_kind,
                 otlp_attr(c, 'gen_ai.operation.name').stringValue AS op,
                 otlp_attr(c, 'traceloop.span.kind').stringValue AS tl_kind
          FROM (SELECT kv.*, list_filter(a, lambda x: x."key" IN ('openinference.span.kind', 'gen_ai.operation.name', 'traceloop.span.kind')) AS c
                FROM kv))
), wrappers AS (
    -- spans whose child in the same trace is a request (nested totals are counted once)
    SELECT DISTINCT file_id, s.traceId AS trace_id, s.parentSpanId AS span_id
    FROM k WHERE by_kind AND coalesce(s.parentSpanId, '') <> ''
), req AS (
    SELECT k.* FROM k ANTI JOIN wrappers
        ON wrappers.file_id = k.file_id AND wrappers.trace_id = k.s.traceId AND wrappers.span_id = k.s.spanId
    WHERE by_kind
), f AS (
    SELECT
        file_id,
        line_no,
        CAST(s.startTimeUnixNano AS HUGEINT) // 1000 AS start_us,
        CAST(s.endTimeUnixNano AS HUGEINT) // 1000 AS end_us,
        s.traceId AS trace_id,
        s.spanId AS span_id,
        otlp_attr(a, 'gen_ai.request.id').stringValue AS own_id,
        coalesce(otlp_attr(a, $session_attr).stringValue, otlp_attr(a, $session_attr).intValue,
                 otlp_attr(a, 'gen_ai.conversation.id').stringValue, otlp_attr(a, 'session.id').stringValue) AS session_id,
        coalesce(otlp_attr(r, 'host.name').stringValue, otlp_attr(r, 'service.instance.id').stringValue) AS host,
        TRY_CAST(coalesce(otlp_attr(r, 'process.pid').intValue, otlp_attr(r, 'process.pid').stringValue) AS BIGINT) AS pid,
        -- the deploy a span ran under: the resource's service.version, and its string attributes
        -- (what changed between two versions) but those of one process (pid, instance id)
        otlp_attr(r, 'service.version').stringValue AS service_version,
        CAST(map_from_entries(list_transform(
            list_filter(r, lambda x: x."value".stringValue IS NOT NULL AND x."key" NOT IN ('service.instance.id', 'host.name')),
            lambda x: {'k': x."key", 'v': x."value".stringValue})) AS JSON)::VARCHAR AS resource_json,
        (otlp_attr(a, 'gen_ai.latency.e2e') IS NOT NULL OR s."name" = 'llm_request') AS is_vllm,
        oi_kind IS NOT NULL AS is_openinference,
        coalesce(otlp_attr(a, 'telemetry.sdk.name').stringValue = 'openlit' OR starts_with(scope, 'openlit.'), false) AS is_openlit,
        otlp_num(otlp_attr(a, 'gen_ai.latency.time_in_queue')) * 1000 AS queue_ms,
        otlp_num(otlp_attr(a, 'gen_ai.latency.time_in_model_prefill')) * 1000 AS prefill_ms,
        otlp_num(otlp_attr(a, 'gen_ai.latency.time_in_model_decode')) * 1000 AS decode_ms,
        coalesce(otlp_num(otlp_attr(a, 'gen_ai.latency.time_to_first_token')),
                 otlp_num(otlp_attr(a, 'gen_ai.server.time_to_first_token')),
                 otlp_num(otlp_attr(a, 'gen_ai.response.time_to_first_chunk'))) * 1000 AS ttft_attr_ms,
        CAST(first_token_ns AS HUGEINT) // 1000 AS first_token_us,
        otlp_num(otlp_attr(a, 'gen_ai.server.time_per_output_token')) * 1000 AS tpot_attr_ms,
        otlp_num(otlp_attr(a, 'gen_ai.latency.e2e')) * 1000 AS e2e_s_ms,
        coalesce(otlp_int(a, 'gen_ai.usage.input_tokens'), otlp_int(a, 'gen_ai.usage.prompt_tokens'), otlp_int(a, 'llm.token_count.prompt')) AS input_len,
        coalesce(otlp_int(a, 'gen_ai.usage.output_tokens'), otlp_int(a, 'gen_ai.usage.completion_tokens'), otlp_int(a, 'llm.token_count.completion')) AS output_len,
        CASE WHEN oi_kind IS NOT NULL THEN otlp_int(a, 'llm.token_count.completion_details.reasoning') END AS reasoning_len,
        -- OpenInference's request parameters: the JSON object the client sent (max_tokens, n...)
        CASE WHEN json_valid(inv_raw) THEN inv_raw END AS inv,
        coalesce(otlp_int(a, 'gen_ai.request.max_tokens'), otlp_int(a, 'gen_ai.request.max_new_tokens'),
                 TRY_CAST(json_extract_string(inv, '$.max_tokens') AS BIGINT),
                 TRY_CAST(json_extract_string(inv, '$.max_completion_tokens') AS BIGINT),
                 TRY_CAST(json_extract_string(inv, '$.max_new_tokens') AS BIGINT)) AS max_new_tokens,
        coalesce(otlp_num(otlp_attr(a, 'gen_ai.request.temperature')), TRY_CAST(json_extract_string(inv, '$.temperature') AS DOUBLE)) AS temperature,
        coalesce(otlp_num(otlp_attr(a, 'gen_ai.request.top_p')), TRY_CAST(json_extract_string(inv, '$.top_p') AS DOUBLE)) AS top_p,
        coalesce(otlp_int(a, 'gen_ai.request.choice.count'), otlp_int(a, 'gen_ai.request.n'), TRY_CAST(json_extract_string(inv, '$.n') AS BIGINT)) AS n,
        -- beams: a num_beams parameter (transformers), or vLLM's use_beam_search with its width n
        coalesce(TRY_CAST(json_extract_string(inv, '$.num_beams') AS BIGINT),
                 CASE WHEN TRY_CAST(json_extract_string(inv, '$.use_beam_search') AS BOOLEAN)
                      THEN coalesce(TRY_CAST(json_extract_string(inv, '$.best_of') AS BIGINT), n, 1) END) AS num_beams,
        -- finish reasons: an array (semconv), the JSON string of one (vLLM), OpenInference's one
        coalesce(
            json_extract_string(otlp_attr(a, 'gen_ai.response.finish_reasons').arrayValue, '$.values[0].stringValue'),
            CASE WHEN json_valid(otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue)
                 THEN json_extract_string(otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue, '$[0]')
                 ELSE otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue END,
            otlp_attr(a, 'llm.finish_reason').stringValue) AS finish_reason,
        upper(coalesce(s.status.code, '')) IN ('2', 'STATUS_CODE_ERROR') AS status_error,
        s.status.message AS status_message,
        exc IS NOT NULL AS has_exc,
        CAST(exc.timeUnixNano AS HUGEINT) // 1000 AS exc_us,
        list_filter(exc.attributes, lambda x: x."key" = 'exception.type')[1]."value".stringValue AS exc_type,
        list_filter(exc.attributes, lambda x: x."key" = 'exception.message')[1]."value".stringValue AS exc_message
    FROM req
), ids AS (
    -- a span id is unique within its trace only: spans of several traces sharing one are told
    -- apart by their trace id, and the first of them says so (a problem row)
    SELECT *,
        own_id IS NULL AND span_id IS NOT NULL AND min(trace_id) OVER sid <> max(trace_id) OVER sid AS id_shared,
        count(*) OVER sid AS id_spans,
        row_number() OVER sid AS id_rank
    FROM f
    WHERE start_us IS NOT NULL AND end_us IS NOT NULL
    WINDOW sid AS (PARTITION BY file_id, span_id, own_id IS NULL)
), g AS (
    -- a GenAI span's time per output token (semconv, seconds) gives its decode time, so that
    -- TPOT = decode / (output - 1) is the span's own figure
    SELECT * REPLACE (coalesce(decode_ms, CASE WHEN output_len > 1 THEN tpot_attr_ms * (output_len - 1) END) AS decode_ms),
        coalesce(own_id, CASE WHEN id_shared THEN trace_id || ':' || span_id ELSE span_id END) AS request_id,
        coalesce(e2e_s_ms, (end_us - start_us) / 1000.0) AS e2e_ms,
        coalesce(ttft_attr_ms, CASE WHEN first_token_us >= start_us THEN (first_token_us - start_us) / 1000.0 END) AS ttft_ms,
        (has_exc OR status_error OR otlp_failed_finish(finish_reason)) AS failed,
        -- a CUDA OOM by its type's last name or its message, as the oom rule knows it
        CASE
            WHEN has_exc AND (exc_type ILIKE '%OutOfMemoryError' OR exc_message ILIKE '%out of memory%') THEN 'OutOfMemoryError'
            WHEN has_exc THEN coalesce(regexp_extract(exc_type, '([^.]+)$', 1), 'exception')
            WHEN otlp_failed_finish(finish_reason) THEN finish_reason
            WHEN status_error THEN 'error'
        END AS err_type,
        -- what the reader counts as a bad line: a span ending before it starts is not read
        end_us < start_us AS reversed,
        CASE WHEN end_us < start_us
             THEN 'span ' || coalesce(span_id, '(no id)') || ' (trace ' || coalesce(trace_id, '(no id)') || ') ends ' || ((start_us - end_us) / 1000.0) || ' ms before it starts: not read'
             WHEN id_shared AND id_rank = 1
             THEN 'span id ' || span_id || ' is shared by ' || id_spans || ' spans of several traces: read as one request each, ids trace:span'
        END AS problem
    FROM ids
), marks AS (
    -- a reversed span takes no part in the in-flight counts (d 0)
    SELECT *, unnest([start_us, end_us]) AS t, unnest(CASE WHEN reversed THEN [0, NULL] ELSE [1, -1] END) AS d FROM g
), w AS (
    -- requests in flight at each arrival on the same host and process, itself included (the
    -- collector's `inflight`), derived from overlapping spans; ends before arrivals at the same
    -- instant: a request that ended as another arrived is gone
    SELECT * EXCLUDE (t, d) FROM (
        SELECT *, sum(d) OVER (PARTITION BY file_id, host, pid ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS inflight
        FROM marks)
    WHERE d >= 0
), ev AS (
    SELECT w.*, unnest(CASE WHEN reversed THEN ['problem']
                            WHEN problem IS NOT NULL THEN ['problem', 'input', 'queue', 'prefill', 'decode', 'request', 'error']
                            ELSE ['input', 'queue', 'prefill', 'decode', 'request', 'error'] END) AS stage FROM w
)
SELECT
    CASE WHEN is_vllm THEN 'otlp:vllm' WHEN is_openinference THEN 'otlp:openinference'
         WHEN is_openlit THEN 'otlp:openlit' ELSE 'otlp:genai' END AS v,
    timezone('UTC', make_timestamp(CAST(CASE stage
        WHEN 'input' THEN start_us
        WHEN 'queue' THEN start_us + coalesce(queue_ms, 0) * 1000
        WHEN 'prefill' THEN start_us + (coalesce(queue_ms, 0) + prefill_ms) * 1000
        WHEN 'error' THEN coalesce(exc_us, end_us)
        ELSE end_us END AS BIGINT))) AS ts,
    NULL::VARCHAR AS "timestamp",
    nullif(stage, 'problem') AS stage,
    session_id,
    request_id,
    host,
    pid,
    CASE stage WHEN 'queue' THEN queue_ms WHEN 'prefill' THEN prefill_ms WHEN 'decode' THEN decode_ms
               WHEN 'request' THEN e2e_ms END AS duration_ms,
    CASE WHEN stage IN ('prefill', 'request') THEN input_len WHEN stage = 'problem' THEN line_no END AS input_len,
    CASE WHEN stage IN ('decode', 'request') THEN output_len END AS output_len,
    CASE WHEN stage IN ('decode', 'request') THEN reasoning_len END AS reasoning_len,
    CASE WHEN stage = 'request' THEN ttft_ms END AS ttft_ms,
    CASE WHEN stage = 'request' THEN CASE WHEN failed THEN 'error' ELSE 'ok' END END AS status,
    CASE WHEN stage = 'request' THEN finish_reason END AS finish_reason,
    CASE WHEN stage = 'error' THEN err_type END AS error_type,
    CASE stage WHEN 'error' THEN coalesce(exc_message, status_message, finish_reason) WHEN 'problem' THEN problem END AS error_msg,
    CASE WHEN stage = 'error' THEN CASE WHEN is_vllm THEN 'decode' ELSE 'request' END END AS failed_stage,
    CASE WHEN stage IN ('decode', 'error') THEN
        {'num_beams': num_beams, 'max_new_tokens': max_new_tokens, 'temperature': temperature,
         'top_p': top_p, 'do_sample': CASE WHEN temperature IS NOT NULL THEN temperature > 0 END} END AS params,
    CASE WHEN stage = 'queue' THEN 'vllm' END AS source,
    CASE WHEN stage = 'request' THEN inflight END AS inflight,
    service_version AS label,
    CASE WHEN stage = 'request' AND service_version IS NOT NULL THEN resource_json END AS config,
    start_us,
    end_us,
    stage = 'request' AS is_request,
    file_id
FROM ev
WHERE CASE stage
    WHEN 'input' THEN true
    WHEN 'queue' THEN queue_ms IS NOT NULL
    WHEN 'prefill' THEN prefill_ms IS NOT NULL
    WHEN 'decode' THEN decode_ms IS NOT NULL OR (NOT is_vllm AND (max_new_tokens IS NOT NULL OR output_len IS NOT NULL))
    WHEN 'request' THEN true
    WHEN 'error' THEN failed
    WHEN 'problem' THEN true
END
