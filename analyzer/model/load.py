"""The one loader of saved models: every report-like input (``render``, both sides of ``diff``,
``report weekly --previous``) is parsed and checked against its shipped JSON Schema
(``schemas/*.json``, built by ``dslogs.analyzer.model.schemas``) before any renderer sees it. A file that
is not one is one ``UsageError`` naming the first wrong field by its JSON path and the type
expected there.

The check is a small validator of the part of Draft 2020-12 the shipped schemas use (type,
properties, required, additionalProperties, items, enum, const, minimum, maximum); a test runs
it against the ``jsonschema`` package on real and mutated reports. It is ours rather than
``jsonschema`` because that package costs ~140 ms of import on every run of the command line
and speaks of schema paths where a user needs the field.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

from dslogs.analyzer.core.errors import UsageError, one_line
from dslogs.analyzer.core.textsafe import visible

SCHEMA_DIR = Path(__file__).with_name("schemas")
_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


@cache
def shipped_schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{kind}.json").read_text(encoding="utf-8"))


def schema_id(kind: str) -> str:
    """The ``schema`` value of a kind of model (``dslogs.report/1``): its schema's title. Read from
    the shipped file, so a command that checks a model never imports the model's declarations."""
    return shipped_schema(kind)["title"]


def json_type(value) -> str:
    """The JSON type of a parsed value (an integral float counts as integer, as JSON Schema says)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _type_ok(actual: str, wanted) -> bool:
    wanted = wanted if isinstance(wanted, list) else [wanted]
    return actual in wanted or (actual == "integer" and "number" in wanted)


def _field(path: str, key: str) -> str:
    simple = key.isidentifier()
    return f"{path}.{key}" if simple else f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def first_error(value, schema: dict, path: str = "$") -> str | None:
    """The first place where ``value`` breaks ``schema``, as 'JSON path: what was expected'."""
    if "const" in schema and value != schema["const"]:
        return f"{path}: expected {json.dumps(schema['const'])}, got {_show(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: expected one of {', '.join(json.dumps(v) for v in schema['enum'])}, got {_show(value)}"
    actual = json_type(value)
    if "type" in schema and not _type_ok(actual, schema["type"]):
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return f"{path}: expected {' or '.join(wanted)}, got {actual}"
    if actual in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
            return f"{path}: number out of range ({_show(value)})"
    elif actual == "object":
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = props.get(key, extra)
            if sub is False:
                return f"{_field(path, key)}: unexpected field"
            if sub is not True and (err := first_error(item, sub, _field(path, key))):
                return err
        for key in schema.get("required", ()):
            if key not in value:
                return f"{path}: missing field {json.dumps(key)}"
    elif actual == "array" and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if err := first_error(item, schema["items"], f"{path}[{i}]"):
                return err
    return None


def _show(value) -> str:
    if isinstance(value, dict | list):
        return json_type(value)
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(path: Path | str, label: str | None = None):
    """The parsed JSON document at ``path``; UsageError (one line, naming the file) if it is none."""
    path = Path(path)
    label = label or visible(str(path))
    try:
        # utf-8-sig: a BOM that an editor (Notepad, PowerShell's Out-File) put first is read past
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{label}: is a directory, not a saved model") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{label}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{label}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # NaN/Infinity, an integer past Python's digit limit
        raise UsageError(f"{label}: not valid JSON ({visible(one_line(exc))})") from None
    except RecursionError:
        raise UsageError(f"{label}: not valid JSON (nested too deeply)") from None


def check_model(model, kind: str, label: str) -> dict:
    """``model`` if it matches the ``kind`` schema, else UsageError naming the first wrong field."""
    if not isinstance(model, dict):
        raise UsageError(f"{label}: not a {schema_id(kind)} model ($: expected object, got {json_type(model)})")
    try:
        err = first_error(model, shipped_schema(kind))
    except RecursionError:
        err = "$: nested too deeply"
    if err:
        raise UsageError(f"{label}: not a valid {schema_id(kind)} model: {visible(err)}")
    return model


def load_model(path: Path | str, kind: str = "report", label: str | None = None) -> dict:
    """A saved model of ``kind`` (report, diff, weekly, capacity), parsed and checked against its schema."""
    label = label or visible(str(path))
    return check_model(parse_json(path, label), kind, label)


def load_report_json(path: Path | str, label: str | None = None) -> dict:
    """A report saved with ``analyze --format json``; UsageError if it is not a valid one."""
    return load_model(path, "report", label)


def saved_report(spec: str) -> dict | None:
    """``spec`` read as a saved report when it is one JSON document (a ``.json`` file); None when
    it is something else (logs). Recognised by parsing, so reformatting (``jq -S``) keeps it a
    report; a JSON object that is not a valid report is an error, not logs."""
    p = Path(spec)
    if not (p.suffix == ".json" and p.is_file()):
        return None
    try:
        model = parse_json(p)
    except UsageError:
        if _first_line_is_log(p):
            return None  # JSON lines: logs
        raise
    if isinstance(model, dict) and "schema" not in model and {"ts", "stage"} & model.keys():
        return None  # one log line in a .json file
    return check_model(model, "report", visible(spec))


def _first_line_is_log(path: Path) -> bool:
    """The first line is a JSON object that is not a saved model (one with a ``schema``): a log
    of JSON lines. A one-line saved report holding NaN or Infinity is a report that fails to
    parse, not a log."""
    try:
        with path.open("rb") as fh:
            first = json.loads(fh.readline().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(first, dict) and "schema" not in first


__all__ = ["check_model", "first_error", "json_type", "load_model", "load_report_json",
           "parse_json", "saved_report", "schema_id", "shipped_schema"]  # fmt: skip
