"""Trace schema v1: the shipped JSON Schema is current, `dslogs schema` prints it, and every
simulated v1 event of every scenario validates against it (except the deliberately bad lines,
which must really be bad)."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs_collector.schema import (
    SAMPLER_STAGES,
    SCHEMA_FILE,
    STAGES,
    json_schema,
    schema_text,
    stage_fields,
)
from tests.sim_cases import V1_SCENARIOS, lines, run

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$")


def test_shipped_schema_file_is_current():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text()


def test_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(json_schema())


def test_cli_schema_prints_the_schema():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json_schema()


def _walk(schema: dict):
    yield schema
    for value in schema.values():
        if isinstance(value, dict):
            yield from _walk(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    yield from _walk(item)


SCHEMA = json_schema()
# What the schema can distinguish: numbers only by comparison with its minimum/maximum bounds,
# strings only by the enum/const of the key they sit under. Two events with the same signature
# therefore get the same verdict, and each signature is validated once with the full schema.
BOUNDS = sorted({s[k] for s in _walk(SCHEMA) for k in ("minimum", "maximum") if k in s})
VALUE_KEYS = {
    key
    for s in _walk(SCHEMA)
    for key, sub in s.get("properties", {}).items()
    if isinstance(sub, dict) and ("enum" in sub or "const" in sub)
}


def _signature(value, key=None):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return (type(value).__name__, tuple((value > b) - (value < b) for b in BOUNDS))
    if isinstance(value, str):
        return value if key in VALUE_KEYS else "str"
    if isinstance(value, dict):
        return tuple(sorted((k, _signature(v, k)) for k, v in value.items()))
    return ("list", tuple(_signature(v) for v in value))


VALIDATOR = Draft202012Validator(SCHEMA)
_VERDICTS: dict = {}


def _errors(event: dict) -> list[str]:
    sig = _signature(event)
    if sig not in _VERDICTS:
        _VERDICTS[sig] = [e.message for e in VALIDATOR.iter_errors(event)]
    return _VERDICTS[sig]


def test_signature_cache_is_faithful():
    """Events the cache calls equal get the same verdict from the validator itself."""
    root, truth = run("oom")
    seen: dict = {}
    for n, (rel, i, raw) in enumerate(lines(root, truth)):
        if n % 7:
            continue
        event = json.loads(raw)
        verdict = [e.message for e in VALIDATOR.iter_errors(event)]
        assert seen.setdefault(_signature(event), verdict) == verdict, (rel, i)
    bad = {"v": 1, "ts": "2026-11-23T10:00:00.000+00:00", "stage": "gpu_sample", "gpu_util_pct": 101.0}
    assert _errors(bad) and not _errors({**bad, "gpu_util_pct": 100.0})


@pytest.mark.parametrize("scenario", V1_SCENARIOS)
def test_every_simulated_v1_event_validates(scenario):
    root, truth = run(scenario)
    bad = {(b["file"], b["line"]): b["kind"] for b in truth["bad_lines"]}
    stages_seen: dict[str, int] = {}
    n = 0
    for rel, i, raw in lines(root, truth):
        if (rel, i) in bad:
            continue
        event = json.loads(raw.decode("utf-8"))
        n += 1
        stage = event["stage"]
        assert stage in STAGES, (rel, i)
        assert not _errors(event), (rel, i, _errors(event))
        # the simulator writes only fields of collector/schema.py (a field added there only
        # would be written and never read), and the log_volume scenario's debug dump, which
        # stands for a field no reader knows
        unknown = set(event) - set(stage_fields(stage)) - ({"level", "debug"} if scenario == "log_volume" else set())
        assert not unknown, (rel, i, unknown)
        stages_seen[stage] = stages_seen.get(stage, 0) + 1
        # The trace schema's common fields (collector/schema.py): every line carries them, ids null
        # only for samplers.
        assert event["v"] == 1 and RFC3339_MS.match(event["ts"]), (rel, i)
        assert isinstance(event["host"], str) and isinstance(event["pid"], int), (rel, i)
        assert "session_id" in event and "request_id" in event, (rel, i)
        if stage in SAMPLER_STAGES:
            assert event["session_id"] is None and event["request_id"] is None, (rel, i)
        else:
            assert isinstance(event["session_id"], str) and isinstance(event["request_id"], str), (rel, i)
    assert n == truth["events"]
    assert {"gpu_sample", "process_sample", "collector", "request", "decode"} <= set(stages_seen)


def test_bad_lines_are_really_bad():
    root, truth = run("bad_lines")
    kinds = {b["kind"] for b in truth["bad_lines"]}
    assert kinds == {"truncated", "not_json", "wrong_type", "invalid_utf8", "truncated_eof", "empty_file"}
    by_pos = {(b["file"], b["line"]): b["kind"] for b in truth["bad_lines"]}
    seen = set()
    for rel, i, raw in lines(root, truth):
        kind = by_pos.get((rel, i))
        if kind is None:
            continue
        seen.add(kind)
        if kind == "invalid_utf8":
            with pytest.raises(UnicodeDecodeError):
                raw.decode("utf-8")
        elif kind == "wrong_type":
            assert list(VALIDATOR.iter_errors(json.loads(raw))), "a wrong-typed value must fail the schema"
        else:
            with pytest.raises(json.JSONDecodeError):
                json.loads(raw.decode("utf-8"))
    (empty,) = [b for b in truth["bad_lines"] if b["kind"] == "empty_file"]
    assert (root / empty["file"]).stat().st_size == 0
    assert seen == kinds - {"empty_file"}
    # The crash-truncated last line has no newline.
    (eof,) = [b for b in truth["bad_lines"] if b["kind"] == "truncated_eof"]
    assert not (root / eof["file"]).read_bytes().endswith(b"\n")
