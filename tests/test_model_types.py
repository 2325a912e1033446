"""The models are declared once (analyzer/model/types.py): every key every model holds is declared
there, every declaration is one the models hold, the shipped schemas are generated from the
declarations, and the Python API's typed objects are those declarations, exposing every field."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Literal

import jsonschema
import pytest
from typer.testing import CliRunner

import dslogs
from dslogs.analyzer.cli import app
from dslogs.analyzer.model import types as T
from dslogs.analyzer.model.load import first_error, shipped_schema
from dslogs.analyzer.model.report import INGEST_SERIES, SERIES
from dslogs.analyzer.model.schemas import object_schema, schema_of


def _walk(value, tp, path, undeclared, seen):
    """Every key of ``value`` that the declaration ``tp`` lacks (into ``undeclared``), and the
    fields of each class the value holds (into ``seen``), the way ``from_model`` reads it."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _walk(value, typing.get_args(tp)[0], path, undeclared, seen)
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            if member is not type(None) and T._fits(member, value):
                return _walk(value, member, path, undeclared, seen)
        return None
    if isinstance(tp, type) and issubclass(tp, T.Model) and isinstance(value, dict):
        fields = {f.name: f for f in dataclasses.fields(tp)}
        hints = typing.get_type_hints(tp, include_extras=True)
        for key, item in value.items():
            if key in fields:
                seen.setdefault(tp, set()).add(key)
                _walk(item, hints[key], f"{path}.{key}", undeclared, seen)
            else:
                undeclared.add(f"{tp.__name__}.{key} (at {path})")
    elif origin is list and isinstance(value, list):
        for item in value:
            _walk(item, typing.get_args(tp)[0], f"{path}[]", undeclared, seen)
    elif origin is dict and isinstance(value, dict):
        for item in value.values():
            _walk(item, typing.get_args(tp)[1], f"{path}{{}}", undeclared, seen)
    return None


def _classes(tp, found=None) -> set[type]:
    """Every model class reachable from the annotation ``tp``."""
    found = set() if found is None else found
    if isinstance(tp, type) and issubclass(tp, T.Model):
        if tp in found:
            return found
        found.add(tp)
        for hint in typing.get_type_hints(tp, include_extras=True).values():
            _classes(hint, found)
    for arg in typing.get_args(tp):
        _classes(arg, found)
    return found


def _cli_json(*args: str) -> dict:
    r = CliRunner().invoke(app, [*args, "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def other_models(tmp_path_factory):
    """A diff with errors on one side, a weekly report, a capacity model, one of an empty window,
    reports of logs with deploys and of one Prometheus snapshot, and a report whose lists are cut (the fields that say so appear only then): 60 bad lines in a
    file, and one session, one drill-down session and one request each at most."""
    import shutil

    logs = tmp_path_factory.mktemp("cut") / "logs"
    shutil.copytree("sample_logs/memory_leak", logs)
    with open(sorted(logs.rglob("*.jsonl"))[0], "a", encoding="utf-8") as fh:
        fh.write("not json\n" * 60)
    caps = logs.parent / "caps.toml"
    caps.write_text("[report]\nmax_sessions = 1\ndetail_sessions = 1\ndetail_requests = 1\n", encoding="utf-8")
    deploys = _deploys_models(logs.parent)
    # one Prometheus snapshot: a server with no window, which its note says
    one = logs.parent / "one_snapshot"
    one.mkdir()
    shutil.copy(sorted(Path("sample_logs/llamacpp").glob("*.prom"))[0], one)
    return {
        "report": [_cli_json("analyze", str(logs), "--thresholds", str(caps)),
                   _cli_json("analyze", str(logs.parent / "deploys"), "--tz", "UTC"), _cli_json("analyze", str(one))],
        "diff": [_cli_json("diff", "sample_logs/healthy", "sample_logs/oom")],
        "weekly": [_cli_json("report", "weekly", "sample_logs/mixed")],
        "capacity": [_cli_json("capacity", "sample_logs/concurrency_cliff"),
                     _cli_json("capacity", "sample_logs/healthy", "--since", "2001-01-01", "--until", "2001-01-02")],
        "deploys": deploys,
    }  # fmt: skip


def _deploys_models(root) -> list[dict]:
    """Deploys from records (an upgrade that regressed) and without (a change point)."""
    from tests.deploy_helpers import simulated

    simulated(root / "deploys", 0, "prefill_slower", [(0, {"pkg.torch": "2.4"}), (2, {"pkg.torch": "2.5"})])
    simulated(root / "no_records", 1, "prefill_slower", None)
    return [_cli_json("deploys", str(root / "deploys"), "--tz", "UTC"), _cli_json("deploys", str(root / "no_records"), "--tz", "UTC")]


def test_every_key_of_every_model_is_declared(sample_reports, other_models):
    """A key a builder adds without declaring it fails here (and is a key the schema and the API
    would not know)."""
    undeclared: set[str] = set()
    models = [("report", m) for m in sample_reports.values()]
    models += [(kind, m) for kind, ms in other_models.items() for m in ms]
    assert {kind for kind, _ in models} == set(T.MODELS)
    for kind, model in models:
        _walk(model, T.MODELS[kind], "$", undeclared, {})
    assert not undeclared, sorted(undeclared)


def test_every_declared_field_is_one_a_model_holds(sample_reports, other_models):
    """No stale declaration: every field of every class is present in some model the sample logs
    give (the report over every sample folder; a diff, a weekly report and two capacity models)."""
    seen: dict[type, set[str]] = {}
    for model in sample_reports.values():
        _walk(model, T.ReportModel, "$", set(), seen)
    for kind, ms in other_models.items():
        for model in ms:
            _walk(model, T.MODELS[kind], "$", set(), seen)
    never = {cls.__name__: sorted({f.name for f in dataclasses.fields(cls)} - seen.get(cls, set()))
             for kind in T.MODELS for cls in _classes(T.MODELS[kind])}  # fmt: skip
    assert not {k: v for k, v in never.items() if v}


def test_every_model_validates_against_its_generated_schema(other_models):
    for kind, ms in other_models.items():
        validator = jsonschema.Draft202012Validator(shipped_schema(kind))
        for model in ms:
            assert first_error(model, shipped_schema(kind)) is None, kind
            assert not list(validator.iter_errors(model)), kind
            assert model["schema"] == T.schema_id(kind) == shipped_schema(kind)["title"]


def test_every_series_column_a_query_declares_is_typed():
    declared = {f.name for f in dataclasses.fields(T.SeriesRow)}
    columns = {c for _, cols in SERIES.values() for c in cols} | {c for cols in INGEST_SERIES.values() for c in cols}
    assert columns - declared == set()


def test_the_schema_is_the_declaration():
    """Each class's schema has exactly its fields as properties, the ones without a default
    required, the comment on a field's line as its description."""
    for cls in _classes(T.ReportModel) | _classes(T.DiffModel) | _classes(T.WeeklyModel) | _classes(T.CapacityModel):
        schema = object_schema(cls)
        fields = dataclasses.fields(cls)
        assert list(schema["properties"]) == [f.name for f in fields], cls
        assert schema.get("required", []) == [f.name for f in fields if T._no_default(f)], cls
        assert ("additionalProperties" in schema) == issubclass(cls, T.Row), cls
    finding = object_schema(T.Finding)["properties"]
    assert finding["scope"]["description"] == "session, host, process or service"
    assert finding["severity"] == {"enum": ["critical", "warning", "info"]}
    assert schema_of(Literal["dslogs.report/1"]) == {"const": "dslogs.report/1"}
    assert schema_of(T.Count | None)["type"] == ["integer", "null"] and schema_of(T.Count)["minimum"] == 0
    note = schema_of(T.Note | str)
    assert note["type"] == ["object", "string"] and set(note["properties"]) == {"id", "level", "message"}


def test_a_field_added_to_a_declaration_reaches_the_schema_and_the_api():
    """One line added to a class is a key of the schema and an attribute of the API's object,
    without another edit."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Wider(T.Finding):
        confidence: T.Share | None = None

    props = object_schema(Wider)["properties"]
    assert props["confidence"]["type"] == ["number", "null"] and props["confidence"]["maximum"] == 1
    finding = {"rule": "oom", "severity": "critical", "scope": "session", "session_ids": ["s1"], "message": "m",
               "confidence": 0.8}  # fmt: skip
    assert Wider.from_model(finding).confidence == 0.8
    with pytest.raises(ValueError, match="missing field"):
        Wider.from_model({"rule": "oom"})


def test_the_api_types_are_the_model_declarations():
    for name in dslogs.__all__:
        obj = getattr(dslogs, name)
        if dataclasses.is_dataclass(obj):
            model_cls = getattr(T, name, None)
            assert obj is model_cls or (name == "FindingChange" and obj.__mro__[1] is T.FindingSummary), name


def _same(api, value) -> None:
    """The API object ``api`` says what the model value ``value`` says, key by key."""
    if dataclasses.is_dataclass(api):
        assert isinstance(value, dict)
        for key, item in value.items():
            _same(getattr(api, key), item)
    elif isinstance(api, list):
        assert len(api) == len(value)
        for a, v in zip(api, value, strict=True):
            _same(a, v)
    elif isinstance(api, dict):
        assert api.keys() == value.keys()
        for key in api:
            _same(api[key], value[key])
    else:
        assert api == value, (api, value)


def test_the_api_exposes_every_key_the_model_holds(sample_reports, other_models):
    for d in ("sample_logs/oom/", "sample_logs/mixed/", "sample_logs/concurrent_leak/"):
        model = sample_reports[d]
        report = dslogs.Report(model)
        _same(report.findings, model["findings"])
        _same(report.checklist, model["checklist"])
        _same(report.stages, model["stages"])
        _same(report.requests, model["requests"])
    cap = dslogs.Capacity(other_models["capacity"][0])
    assert cap.processes and cap.processes[0].levels
    _same(cap.processes, other_models["capacity"][0]["capacity"])
    diff_model = other_models["diff"][0]
    change = dslogs.Diff(diff_model)
    _same(change.changes, diff_model["stages"] + diff_model["request_metrics"])
    _same(change.rates, diff_model["rates"])
    found = diff_model["findings"]
    _same(change.findings, [{**f, "change": k} for k in ("new", "resolved", "persisting") for f in found[k]])
