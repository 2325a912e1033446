"""The event columns, derived from the trace schema (``dslogs_collector.schema.FIELDS``, the one
definition of the fields): the read schema ``RAW_COLUMNS`` (every v1 field plus the legacy
``timestamp``) and the user-facing ``events`` columns ``EVENT_COLUMNS`` with their DuckDB types
(``EVENT_TYPES``), the Arrow schema of the events, the events table of docs/internals.md and
docs/sql.md (``events_table_md``, also ``dslogs schema --format md``), and the small SQL
quoting helpers the ingest modules share.

A new field is added in ``collector/schema.py`` and normalised in ``analyzer/ingest/views/events.sql``;
tests/test_columns.py fails until both (and the docs tables) agree.
"""

from __future__ import annotations

from dslogs_collector.schema import COMMON, FIELDS, STAGES, field_stages, logical_type

DUCKDB_TYPES = {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR", "bool": "BOOLEAN",
                "timestamp": "TIMESTAMPTZ"}  # fmt: skip


def duckdb_type(fragment: dict) -> str:
    """The DuckDB type a reader stores a JSON Schema fragment as (a struct: its properties)."""
    kind = logical_type(fragment)
    if kind == "struct":
        inner = ", ".join(f"{k} {duckdb_type(v)}" for k, v in fragment["properties"].items())
        return f"STRUCT({inner})"
    return DUCKDB_TYPES[kind]


# The structured fields the events view spreads into one column each (params.num_beams ->
# num_beams).
STRUCTS = {name: f.schema["properties"] for name, f in FIELDS.items() if f.type == "struct"}
STRUCT_TYPES = {
    name: {k: duckdb_type(v) for k, v in members.items()} for name, members in STRUCTS.items()
}

# The one read schema for both formats: every v1 field and legacy's timestamp (after ts).
# v is read as text: any value present means v1. Unknown fields are not read.
RAW_COLUMNS: dict[str, str] = {}
for _name, _field in FIELDS.items():
    RAW_COLUMNS[_name] = "VARCHAR" if _name == "v" else duckdb_type(_field.schema)
    if _name == "ts":
        RAW_COLUMNS["timestamp"] = "VARCHAR"  # legacy (article 003): naive local time

# Columns the reader adds to every event (not fields of a line): type and note.
DERIVED: dict[str, tuple[str, str]] = {
    "source_format": ("VARCHAR", "`v1` or `legacy` (a line with `v` is v1)"),
    "source_file": ("VARCHAR", "the file as discovered"),
    "line_bytes": ("BIGINT", "bytes of the raw line with its newline (log volume, 000 §3.2); if absent, "
                   "the `log_volume` rule reports no_data"),
}  # fmt: skip

# The user-facing events columns (docs/internals.md), in order, and their DuckDB types: every
# field but v (source_format says it), a struct spread into its members, then DERIVED.
EVENT_TYPES: dict[str, str] = {}
for _name, _field in FIELDS.items():
    if _name == "v":
        continue
    if _name in STRUCTS:
        EVENT_TYPES.update(STRUCT_TYPES[_name])
    else:
        EVENT_TYPES[_name] = duckdb_type(_field.schema)
EVENT_TYPES.update({name: kind for name, (kind, _note) in DERIVED.items()})
EVENT_COLUMNS = list(EVENT_TYPES)

# What the events view does to a field beyond reading it (analyzer/ingest/views/events.sql).
NORMALISED = {
    "ts": "legacy `timestamp` read in `--tz` (default local; an offset, if present, is honoured)",
    "request_id": "legacy: `<session_id>#<n>`, n = 1-based index of the session's `input` event in time "
                  "order (across files); NULL before a session's first input",
    "duration_ms": "NULL when absent or -1",
    "allocated_mb": "legacy `gpu_memory.kv_cache_size_mb` is allocated memory: read here",
    "kv_cache_size_mb": "legacy: also on `inference` lines; NULL on legacy `gpu_memory` lines (see allocated_mb)",
}  # fmt: skip


def event_type(column: str) -> str:
    return EVENT_TYPES[column]


def event_arrow_schema(tz: str = "UTC"):
    """The Arrow schema of the events view (what DuckDB hands Spark and Parquet), in ``tz``."""
    import pyarrow as pa

    arrow = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(),
             "TIMESTAMPTZ": pa.timestamp("us", tz=tz)}  # fmt: skip
    return pa.schema([(name, arrow[kind]) for name, kind in EVENT_TYPES.items()])


def _stages(name: str) -> str:
    if name in COMMON:
        return "all"
    return ", ".join(f"`{s}`" for s in field_stages(name))


def events_table_md() -> str:
    """The events table of docs/internals.md and docs/sql.md: one row per column."""
    rows = ["| column | type | stages | note |", "|---|---|---|---|"]
    for name, kind in EVENT_TYPES.items():
        if name in DERIVED:
            stages, notes = "(reader)", [DERIVED[name][1]]
        elif name in FIELDS:
            stages, notes = _stages(name), [FIELDS[name].note, NORMALISED.get(name, "")]
            if name == "stage":
                notes.append("one of " + ", ".join(STAGES))
        else:  # a struct's member
            struct = next(s for s, members in STRUCTS.items() if name in members)
            stages, notes = _stages(struct), [f"from `{struct}`"]
        rows.append(f"| {name} | {kind} | {stages} | {'; '.join(n for n in notes if n)} |")
    return "\n".join(rows) + "\n"


def sql_literal(text: str) -> str:
    """A SQL string literal of our own making (paths we discovered, zone names we validated)."""
    return "'" + str(text).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns_struct() -> str:
    return (
        "{" + ", ".join(f"{sql_ident(k)}: {sql_literal(v)}" for k, v in RAW_COLUMNS.items()) + "}"
    )
