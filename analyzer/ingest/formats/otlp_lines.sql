-- otlp_lines: the lines of OTLP/JSON files (an OTel Collector's `file` exporter: one export
-- request per line, traces, metrics and logs possibly in one file) as one row per span, read
-- leniently so that one bad value costs that value (or its span), never the file. Every field
-- is read as text or JSON (no value can make DuckDB reject the line) and typed here: the span
-- `s` comes out in the shape otlp_traces.sql reads (doubleValue DOUBLE, boolValue BOOLEAN,
-- status and events structs). `problems` holds what was dropped, per span or per line, as
-- reasons the reader counts as bad lines of their file at `line_no` (a span without a readable
-- start or end is dropped: s is NULL). Parameters: $files, $file_ids, $lines (the line number of
-- each non-blank line when the file read is a copy, else NULL: they are the lines) and
-- $line_files (the file of each line of a copy joining several files, else NULL).
WITH src AS (
    SELECT
        resourceSpans, resourceMetrics IS NOT NULL OR resourceLogs IS NOT NULL AS other_signal,
        v IS NOT NULL AND stage IS NOT NULL AS is_v1,
        CAST(list_position($files, filename) AS INTEGER) AS file_pos,
        row_number() OVER () AS g
    FROM read_json($files, format = 'newline_delimited', filename = true, maximum_object_size = {max_object_size},
                   columns = {'resourceSpans': 'STRUCT(resource STRUCT(attributes {kv}[]), scopeSpans STRUCT(scope STRUCT("name" VARCHAR), spans STRUCT(traceId VARCHAR, spanId VARCHAR, parentSpanId VARCHAR, "name" VARCHAR, kind VARCHAR, startTimeUnixNano VARCHAR, endTimeUnixNano VARCHAR, attributes {kv}[], events JSON, status JSON)[])[])[]',
                              'resourceMetrics': 'JSON', 'resourceLogs': 'JSON', 'v': 'JSON', 'stage': 'JSON'})
), numbered AS (
    -- DuckDB keeps the files' line order (preserve_insertion_order), so a row's rank in its
    -- file is its non-blank line's
    SELECT *, g - min(g) OVER (PARTITION BY file_pos) + 1 AS k FROM src
), located AS (
    SELECT * EXCLUDE (k), coalesce(CAST($line_files AS INTEGER[])[k], $file_ids[file_pos]) AS file_id,
           CAST(coalesce(CAST($lines AS BIGINT[])[k], k) AS BIGINT) AS line_no
    FROM numbered
), lines AS (
    SELECT file_id, line_no, unnest(resourceSpans) AS rs FROM located WHERE resourceSpans IS NOT NULL
), scoped AS (
    SELECT file_id, line_no, rs.resource.attributes AS r, unnest(rs.scopeSpans) AS ss FROM lines
), raw_spans AS (
    SELECT file_id, line_no, r, ss.scope."name" AS scope, unnest(ss.spans) AS s FROM scoped
), typed AS (
    SELECT
        file_id, line_no, r, scope, s,
        otlp_time(s.startTimeUnixNano) AS start_ns,
        otlp_time(s.endTimeUnixNano) AS end_ns,
        CASE WHEN s.status IS NULL OR json_type(s.status) = 'OBJECT' THEN s.status END AS status,
        CASE WHEN json_type(s.events) = 'ARRAY' THEN from_json(s.events, '[{"timeUnixNano": "VARCHAR", "name": "VARCHAR", "attributes": [{kv_json}]}]') END AS events
    FROM raw_spans
)
SELECT
    file_id,
    line_no,
    otlp_kvs(r) AS r,
    scope,
    CASE WHEN start_ns IS NOT NULL AND end_ns IS NOT NULL THEN {
        'traceId': s.traceId, 'spanId': s.spanId, 'parentSpanId': s.parentSpanId, 'name': s."name", 'kind': s.kind,
        'startTimeUnixNano': s.startTimeUnixNano, 'endTimeUnixNano': s.endTimeUnixNano,
        'attributes': otlp_kvs(s.attributes),
        'events': list_transform(events, lambda e: {'timeUnixNano': CASE WHEN otlp_time(e.timeUnixNano) IS NOT NULL THEN e.timeUnixNano END, 'name': e."name", 'attributes': otlp_kvs(e.attributes)}),
        'status': {'code': json_extract_string(status, '$.code'), 'message': json_extract_string(status, '$.message')}
    } END AS s,
    list_filter([
        CASE WHEN start_ns IS NULL THEN 'unreadable time: startTimeUnixNano=' || otlp_short(s.startTimeUnixNano) || ' (span dropped)'
             WHEN end_ns IS NULL THEN 'unreadable time: endTimeUnixNano=' || otlp_short(s.endTimeUnixNano) || ' (span dropped)' END,
        CASE WHEN s.status IS NOT NULL AND status IS NULL THEN 'wrong value type: status=' || otlp_json_short(s.status) || ' (an object expected; dropped)' END,
        CASE WHEN s.events IS NOT NULL AND events IS NULL THEN 'wrong value type: events=' || otlp_json_short(s.events) || ' (a list expected; dropped)' END,
        CASE WHEN list_bool_or(list_transform(events, lambda e: e.timeUnixNano IS NOT NULL AND otlp_time(e.timeUnixNano) IS NULL)) THEN 'unreadable time: an event''s timeUnixNano (dropped)' END
    ] || otlp_kv_problems(s.attributes) || otlp_kv_problems(r), lambda p: p IS NOT NULL) AS problems
FROM typed
UNION ALL
-- a line that is no OTLP export request (metrics and logs are: dslogs does not read them here)
SELECT file_id, line_no, NULL, NULL, NULL,
       [CASE WHEN is_v1 THEN 'a dslogs v1 line in an OTLP file (not read: write v1 lines to a *.jsonl file of their own)'
             ELSE 'not an OTLP/JSON export request (no resourceSpans, resourceMetrics or resourceLogs)' END]
FROM located
WHERE resourceSpans IS NULL AND NOT other_signal
