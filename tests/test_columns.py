"""The event schema is defined once (collector/schema.py FIELDS) and everything else follows it:
the reader's columns and types (analyzer/ingest/columns.py), the events view (analyzer/ingest/views/events.sql),
the Arrow schema Spark and Parquet get, the test fixtures and the docs' events tables. A field
added in one place only fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.ingest.columns import (
    DERIVED,
    EVENT_COLUMNS,
    EVENT_TYPES,
    RAW_COLUMNS,
    STRUCTS,
    event_arrow_schema,
    events_table_md,
)
from dslogs.analyzer.ingest.logs import open_logs
from dslogs_collector.schema import FIELDS, STAGE_FIELDS, STAGES, json_schema
from tests.diag_fixture_db import EVENTS

REPO = Path(__file__).resolve().parents[1]
DOCS_TABLE = re.compile(
    r"<!-- events table: generated .*? -->\n(.*?)<!-- end of the events table -->", re.S
)


def _value(fragment: dict, name: str):
    """A value of the field's own type that its JSON Schema accepts (its minimum where it has one)."""
    if "const" in fragment:
        return fragment["const"]
    if "enum" in fragment:
        return fragment["enum"][0]
    kinds = [
        k
        for k in (fragment["type"] if isinstance(fragment["type"], list) else [fragment["type"]])
        if k != "null"
    ]
    kind = kinds[0]
    if kind == "string":
        return (
            "2026-11-23T10:00:00.000+00:00"
            if fragment.get("format") == "date-time"
            else f"<{name}>"
        )
    if kind == "object":
        return {k: _value(v, k) for k, v in fragment["properties"].items()}
    if kind == "boolean":
        return True
    low = fragment.get("minimum", 0)
    return max(low, 1) + (0.5 if kind == "number" else 0)


def _every_field_line() -> dict:
    line = {name: _value(f.schema, name) for name, f in FIELDS.items()}
    line["stage"] = "request"
    return line


def test_the_read_schema_is_every_field_plus_legacy_timestamp():
    assert set(RAW_COLUMNS) == set(FIELDS) | {"timestamp"}
    # every field belongs to at least one stage, and the stages name only fields
    used = {name for names in STAGE_FIELDS.values() for name in names}
    assert used <= set(FIELDS)
    assert set(FIELDS) - used == {
        "v",
        "ts",
        "stage",
        "session_id",
        "request_id",
        "host",
        "pid",
        "duration_ms",
    }


def test_a_line_with_every_field_keeps_every_field_in_the_events_view(tmp_path):
    """The events view selects every field of the schema (events.sql), with the derived types."""
    line = _every_field_line()
    assert not list(__import__("jsonschema").Draft202012Validator(json_schema()).iter_errors(line))
    path = tmp_path / "ds15b_20261123.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    with open_logs([str(path)], tz="UTC", use_cache=False) as db:
        described = [
            (r[0], r[1].replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"))
            for r in db.con.execute("DESCRIBE events").fetchall()
        ]
        assert described == list(EVENT_TYPES.items())
        row = dict(
            zip(EVENT_COLUMNS, db.con.execute("SELECT * FROM events").fetchall()[0], strict=True)
        )
        arrow = db.con.sql("SELECT * FROM events").to_arrow_table().schema
    missing = [c for c, v in row.items() if v is None]
    assert not missing, f"fields of collector/schema.py the events view drops: {missing}"
    for name, value in line.items():
        if name in STRUCTS:
            for member, sub in value.items():
                assert row[member] == sub, member
        elif name not in ("v", "ts"):
            assert row[name] == value, name
    assert row["source_format"] == "v1" and row["line_bytes"] == len(json.dumps(line)) + 1
    # the Arrow schema DuckDB hands Spark and Parquet
    assert arrow.remove_metadata() == event_arrow_schema("UTC")


def test_the_empty_events_of_the_spark_merge_have_the_same_schema():
    import duckdb

    from dslogs.analyzer.engines.merge import empty_events_sql

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    assert con.sql(
        empty_events_sql()
    ).to_arrow_table().schema.remove_metadata() == event_arrow_schema("UTC")


def test_fixtures_use_the_derived_columns():
    assert EVENTS == EVENT_TYPES
    assert list(EVENT_TYPES)[-len(DERIVED) :] == list(DERIVED)


def test_docs_events_tables_are_generated_from_the_schema():
    want = events_table_md()
    for doc in ("docs/internals.md", "docs/sql.md"):
        found = DOCS_TABLE.findall((REPO / doc).read_text(encoding="utf-8"))
        assert found == [want], (
            f"{doc}: regenerate its events table with `dslogs schema --format md`"
        )
    for name in EVENT_COLUMNS:
        assert f"\n| {name} |" in want


def test_cli_prints_the_events_table():
    result = CliRunner().invoke(app, ["schema", "--format", "md"])
    assert result.exit_code == 0 and result.stdout == events_table_md()


def test_every_stage_is_documented_in_the_table():
    table = events_table_md()
    assert all(stage in table for stage in STAGES)


def test_a_dataset_compacted_before_a_field_existed_reads_it_as_null(tmp_path):
    """Parquet written by an older dslogs lacks the newer fields' columns: NULL, not an error."""
    import duckdb

    from dslogs.analyzer.ingest.compact import compact_logs

    logs = tmp_path / "logs"
    logs.mkdir()
    line = _every_field_line()
    (logs / "ds15b_20261123.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    out = tmp_path / "pq"
    compact_logs([str(logs)], out, tz="UTC")
    (parquet,) = out.rglob("*.parquet")
    con = duckdb.connect()
    old = tmp_path / "old.parquet"
    con.execute(
        f"COPY (SELECT * EXCLUDE (fallback) FROM read_parquet('{parquet}')) TO '{old}' (FORMAT parquet)"
    )
    old.replace(parquet)
    with open_logs([str(out)], tz="UTC", use_cache=False) as db:
        row = db.con.execute("SELECT fallback, device, count(*) OVER () FROM events").fetchall()
    assert row == [(None, line["device"], 1)]
