-- otlp_traces: OTLP/JSON trace files (an OTel Collector's `file` exporter: one
-- ExportTraceServiceRequest per line, resourceSpans -> scopeSpans -> spans) as raw event rows,
-- the input of analyzer/ingest/views/events.sql (dslogs_raw), from the spans of the temporary
-- table otlp_lines (otlp_lines.sql: several files at once, each row with its file_id).
-- One span of GenAI work is one request. Two profiles, keyed on the attributes present:
--   vllm:  vLLM's `llm_request` span (OutputProcessor.do_tracing): starts at the arrival;
--          gen_ai.latency.* in seconds (time_in_queue, time_in_model_prefill/decode,
--          time_to_first_token, e2e), the old gen_ai.usage.prompt_tokens/completion_tokens,
--          finish reasons as a JSON-encoded string, finish reason "abort" = an aborted request;
--   genai: any other span with gen_ai.* attributes (OpenTelemetry GenAI semantic conventions,
--          old and new token names; openlit, OpenLLMetry): the span's duration is end-to-end,
--          gen_ai.server.time_to_first_token the TTFT, gen_ai.server.time_per_output_token times
--          (output - 1) the decode, an `exception` event or an ERROR status an error. openlit's spans (its instrumentation scope, or telemetry.sdk.name on the span) are this
--          profile under a name of their own, otlp:openlit: openlit counts tokens from the text's
--          characters, so their token counts are estimates (the report says so).
-- Ids are opaque strings (hex as OTLP/JSON writes them; base64 from a protobuf JSON dump reads
-- the same). A line may hold megabytes (a batch of spans): DuckDB streams them, up to the line
-- judge's limit (analyzer/ingest/validate.py MAX_LINE_BYTES). Times are unix nanoseconds as strings (or numbers); intValue a string or number.
-- Each request gives the events of the stages it measured: input (arrival), queue, prefill,
-- decode, request (the summary, at the span's end) and error. v names the profile, which
-- events.sql turns into source_format (otlp:vllm, otlp:genai).
WITH spans AS (
    -- the spans of the files read (otlp_lines.sql: typed, their bad values counted and dropped)
    SELECT file_id, r, scope, s FROM otlp_lines WHERE s IS NOT NULL
), kv AS (
    -- attributes stay key/value lists, read by otlp_attr (a lookup costs less than building a
    -- map of every span's attributes)
    SELECT
        file_id,
        s,
        scope,
        r,
        s.attributes AS a,
        list_filter(s.events, lambda e: e."name" = 'exception')[1] AS exc
    FROM spans
    -- GenAI work: gen_ai.*/llm.* attributes, or a span an instrumentor opened before the call
    -- failed and could set none (openlit's scope; a semantic-conventions name, "chat <model>")
    WHERE list_bool_or(list_transform(s.attributes, lambda a: starts_with(a."key", 'gen_ai.') OR starts_with(a."key", 'llm.')))
       OR starts_with(scope, 'openlit.instrumentation.')
       OR regexp_matches(s."name", '^(chat|text_completion|generate_content)( |$)')
), f AS (
    SELECT
        file_id,
        CAST(s.startTimeUnixNano AS HUGEINT) // 1000 AS start_us,
        CAST(s.endTimeUnixNano AS HUGEINT) // 1000 AS end_us,
        coalesce(otlp_attr(a, 'gen_ai.request.id').stringValue, s.spanId) AS request_id,
        coalesce(otlp_attr(a, $session_attr).stringValue, otlp_attr(a, $session_attr).intValue,
                 otlp_attr(a, 'gen_ai.conversation.id').stringValue, otlp_attr(a, 'session.id').stringValue) AS session_id,
        coalesce(otlp_attr(r, 'host.name').stringValue, otlp_attr(r, 'service.instance.id').stringValue) AS host,
        TRY_CAST(coalesce(otlp_attr(r, 'process.pid').intValue, otlp_attr(r, 'process.pid').stringValue) AS BIGINT) AS pid,
        (otlp_attr(a, 'gen_ai.latency.e2e') IS NOT NULL OR s."name" = 'llm_request') AS is_vllm,
        coalesce(otlp_attr(a, 'telemetry.sdk.name').stringValue = 'openlit' OR starts_with(scope, 'openlit.'), false) AS is_openlit,
        coalesce(TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_queue').doubleValue AS DOUBLE), TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_queue').intValue AS DOUBLE)) * 1000 AS queue_ms,
        coalesce(TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_model_prefill').doubleValue AS DOUBLE), TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_model_prefill').intValue AS DOUBLE)) * 1000 AS prefill_ms,
        coalesce(TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_model_decode').doubleValue AS DOUBLE), TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_in_model_decode').intValue AS DOUBLE)) * 1000 AS decode_ms,
        coalesce(otlp_attr(a, 'gen_ai.latency.time_to_first_token').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.latency.time_to_first_token').intValue AS DOUBLE),
                 otlp_attr(a, 'gen_ai.server.time_to_first_token').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.server.time_to_first_token').intValue AS DOUBLE)) * 1000 AS ttft_ms,
        coalesce(otlp_attr(a, 'gen_ai.server.time_per_output_token').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.server.time_per_output_token').intValue AS DOUBLE)) * 1000 AS tpot_attr_ms,
        coalesce(otlp_attr(a, 'gen_ai.latency.e2e').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.latency.e2e').intValue AS DOUBLE)) * 1000 AS e2e_s_ms,
        TRY_CAST(coalesce(otlp_attr(a, 'gen_ai.usage.input_tokens').intValue, otlp_attr(a, 'gen_ai.usage.prompt_tokens').intValue) AS BIGINT) AS input_len,
        TRY_CAST(coalesce(otlp_attr(a, 'gen_ai.usage.output_tokens').intValue, otlp_attr(a, 'gen_ai.usage.completion_tokens').intValue) AS BIGINT) AS output_len,
        TRY_CAST(coalesce(otlp_attr(a, 'gen_ai.request.max_tokens').intValue, otlp_attr(a, 'gen_ai.request.max_new_tokens').intValue) AS BIGINT) AS max_new_tokens,
        coalesce(otlp_attr(a, 'gen_ai.request.temperature').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.request.temperature').intValue AS DOUBLE)) AS temperature,
        coalesce(otlp_attr(a, 'gen_ai.request.top_p').doubleValue, TRY_CAST(otlp_attr(a, 'gen_ai.request.top_p').intValue AS DOUBLE)) AS top_p,
        TRY_CAST(otlp_attr(a, 'gen_ai.request.n').intValue AS BIGINT) AS n,
        -- finish reasons: an array (semconv) or the JSON string of one (vLLM)
        coalesce(
            json_extract_string(otlp_attr(a, 'gen_ai.response.finish_reasons').arrayValue, '$.values[0].stringValue'),
            CASE WHEN json_valid(otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue)
                 THEN json_extract_string(otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue, '$[0]')
                 ELSE otlp_attr(a, 'gen_ai.response.finish_reasons').stringValue END) AS finish_reason,
        upper(coalesce(s.status.code, '')) IN ('2', 'STATUS_CODE_ERROR') AS status_error,
        s.status.message AS status_message,
        exc IS NOT NULL AS has_exc,
        CAST(exc.timeUnixNano AS HUGEINT) // 1000 AS exc_us,
        list_filter(exc.attributes, lambda x: x."key" = 'exception.type')[1]."value".stringValue AS exc_type,
        list_filter(exc.attributes, lambda x: x."key" = 'exception.message')[1]."value".stringValue AS exc_message
    FROM kv
), g AS (
    -- a GenAI span's time per output token (semconv, seconds) gives its decode time, so that
    -- TPOT = decode / (output - 1) is the span's own figure
    SELECT * REPLACE (coalesce(decode_ms, CASE WHEN output_len > 1 THEN tpot_attr_ms * (output_len - 1) END) AS decode_ms),
        coalesce(e2e_s_ms, (end_us - start_us) / 1000.0) AS e2e_ms,
        (has_exc OR status_error OR finish_reason = 'abort') AS failed,
        -- a CUDA OOM by its type's last name or its message, as the oom rule knows it
        CASE
            WHEN has_exc AND (exc_type ILIKE '%OutOfMemoryError' OR exc_message ILIKE '%out of memory%') THEN 'OutOfMemoryError'
            WHEN has_exc THEN coalesce(regexp_extract(exc_type, '([^.]+)$', 1), 'exception')
            WHEN finish_reason = 'abort' THEN 'abort'
            WHEN status_error THEN 'error'
        END AS err_type
    FROM f
    WHERE start_us IS NOT NULL AND end_us IS NOT NULL
), marks AS (
    SELECT *, unnest([start_us, end_us]) AS t, unnest([1, -1]) AS d FROM g
), w AS (
    -- requests in flight at each arrival on the same host and process, itself included (the
    -- collector's `inflight`), derived from overlapping spans; ends before arrivals at the same
    -- instant: a request that ended as another arrived is gone
    SELECT * EXCLUDE (t, d) FROM (
        SELECT *, sum(d) OVER (PARTITION BY file_id, host, pid ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS inflight
        FROM marks)
    WHERE d = 1
), ev AS (
    SELECT w.*, unnest(['input', 'queue', 'prefill', 'decode', 'request', 'error']) AS stage FROM w
)
SELECT
    CASE WHEN is_vllm THEN 'otlp:vllm' WHEN is_openlit THEN 'otlp:openlit' ELSE 'otlp:genai' END AS v,
    timezone('UTC', make_timestamp(CAST(CASE stage
        WHEN 'input' THEN start_us
        WHEN 'queue' THEN start_us + coalesce(queue_ms, 0) * 1000
        WHEN 'prefill' THEN start_us + (coalesce(queue_ms, 0) + prefill_ms) * 1000
        WHEN 'error' THEN coalesce(exc_us, end_us)
        ELSE end_us END AS BIGINT))) AS ts,
    NULL::VARCHAR AS "timestamp",
    stage,
    session_id,
    request_id,
    host,
    pid,
    CASE stage WHEN 'queue' THEN queue_ms WHEN 'prefill' THEN prefill_ms WHEN 'decode' THEN decode_ms
               WHEN 'request' THEN e2e_ms END AS duration_ms,
    CASE WHEN stage IN ('prefill', 'request') THEN input_len END AS input_len,
    CASE WHEN stage IN ('decode', 'request') THEN output_len END AS output_len,
    CASE WHEN stage = 'request' THEN ttft_ms END AS ttft_ms,
    CASE WHEN stage = 'request' THEN CASE WHEN failed THEN 'error' ELSE 'ok' END END AS status,
    CASE WHEN stage = 'request' THEN finish_reason END AS finish_reason,
    CASE WHEN stage = 'error' THEN err_type END AS error_type,
    CASE WHEN stage = 'error' THEN coalesce(exc_message, status_message, finish_reason) END AS error_msg,
    CASE WHEN stage = 'error' THEN CASE WHEN is_vllm THEN 'decode' ELSE 'request' END END AS failed_stage,
    CASE WHEN stage IN ('decode', 'error') THEN
        {'num_beams': NULL::BIGINT, 'max_new_tokens': max_new_tokens, 'temperature': temperature,
         'top_p': top_p, 'do_sample': CASE WHEN temperature IS NOT NULL THEN temperature > 0 END} END AS params,
    CASE WHEN stage = 'queue' THEN 'vllm' END AS source,
    CASE WHEN stage = 'request' THEN inflight END AS inflight,
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
END
