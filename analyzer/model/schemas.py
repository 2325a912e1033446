"""JSON Schemas (Draft 2020-12) of the models dslogs writes and reads back, generated from their
declarations in ``dslogs.analyzer.model.types``: the report ``dslogs.report/1``, the diff
``dslogs.diff/1``, the weekly report ``dslogs.weekly/1`` and the capacity model
``dslogs.capacity/1``.

Shipped as JSON beside this module (``schemas/*.json``, regenerated with
``python -m dslogs.analyzer.model.schemas``; a test fails when a shipped file is stale). The schemas use
only what ``dslogs.analyzer.model.load``'s validator reads (type, properties, required,
additionalProperties, items, enum, const, minimum, maximum, and description): a union of an
object and scalars is one ``type`` list with the object's keywords beside it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import tokenize
import types
import typing
from functools import cache
from typing import Any, Literal

from dslogs.analyzer.model import types as model_types
from dslogs.analyzer.model.load import SCHEMA_DIR
from dslogs.analyzer.model.types import LIMIT, MODELS, Model, Range, schema_id

DRAFT = "https://json-schema.org/draft/2020-12/schema"
NUMBER_BOUNDS = Range(-LIMIT, LIMIT)  # a renderer formats numbers as floats: 10**400 would not convert
_SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}


def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of an annotation of ``dslogs.analyzer.model.types``."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *marks = typing.get_args(tp)
        out = schema_of(base)
        for mark in marks:
            if isinstance(mark, Range):
                out |= {"minimum": mark.minimum, "maximum": mark.maximum}
        return out
    if origin in (typing.Union, types.UnionType):
        return _union([schema_of(a) for a in typing.get_args(tp)])
    if origin is Literal:
        values = list(typing.get_args(tp))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin is list:
        return {"type": "array", "items": schema_of(typing.get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": schema_of(typing.get_args(tp)[1])}
    if tp is Any:
        return {}
    if isinstance(tp, type) and issubclass(tp, Model):
        return object_schema(tp)
    if tp in _SCALARS:
        out = {"type": _SCALARS[tp]}
        if tp in (int, float):
            out |= {"minimum": NUMBER_BOUNDS.minimum, "maximum": NUMBER_BOUNDS.maximum}
        return out
    raise TypeError(f"no JSON Schema for annotation {tp!r}")


def _union(members: list[dict[str, Any]]) -> dict[str, Any]:
    """One schema for ``A | B | ...``: the types listed together, each member's own keywords
    beside them (they apply to values of that type only). An enum with null stays an enum."""
    enums = [m for m in members if "enum" in m or "const" in m]
    if enums:
        values = [v for m in enums for v in (m["enum"] if "enum" in m else [m["const"]])]
        if any(m.get("type") == "null" for m in members if m not in enums):
            values.append(None)
        if len(enums) + sum(m.get("type") == "null" for m in members) != len(members):
            raise TypeError("a Literal joins only null in a union")
        return {"enum": values}
    kinds: list[str] = []
    out: dict[str, Any] = {}
    for m in members:
        for kind in m["type"] if isinstance(m["type"], list) else [m["type"]]:
            if kind not in kinds:
                kinds.append(kind)
        for key, value in m.items():
            if key != "type":
                if key in out and out[key] != value:
                    raise TypeError(f"a union whose members disagree on {key!r}")
                out[key] = value
    return {"type": kinds, **out}


@cache
def _comments(module: types.ModuleType) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment on the field's line: its description."""
    source = inspect.getsource(module)
    by_line = {tok.start[0]: tok.string.lstrip("#").strip()
               for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.lineno in by_line:
                    out[(node.name, item.target.id)] = by_line[item.lineno]
    return out


def _description(cls: type) -> str | None:
    doc = vars(cls).get("__doc__")
    return " ".join(doc.split()) if doc else None


def object_schema(cls: type[Model]) -> dict[str, Any]:
    """A model class as an object schema: its fields as properties (each with its comment as
    description), those without a default required, and what other keys may hold."""
    hints = typing.get_type_hints(cls, include_extras=True)
    comments = _comments(model_types)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        prop = schema_of(hints[f.name])
        owner = next(c.__name__ for c in cls.__mro__ if f.name in vars(c).get("__annotations__", {}))
        if text := comments.get((owner, f.name)):
            prop = {"description": text, **prop}
        props[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object"}
    if text := _description(cls):
        out["description"] = text
    out["properties"] = props
    if required:
        out["required"] = required
    if cls.EXTRA is not Any:
        out["additionalProperties"] = schema_of(cls.EXTRA)
    return out


def model_schema(kind: str) -> dict[str, Any]:
    """The shipped schema of a model kind (report, diff, weekly, capacity)."""
    return {
        "$schema": DRAFT,
        "$id": f"https://dslogs.dev/schemas/{kind}-1.json",
        "title": schema_id(kind),
        **object_schema(MODELS[kind]),
    }


def schema_text(name: str) -> str:
    return json.dumps(model_schema(name), indent=2, ensure_ascii=False) + "\n"


BUILDERS = tuple(MODELS)


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name in BUILDERS:
        (SCHEMA_DIR / f"{name}.json").write_text(schema_text(name), encoding="utf-8")
        print(SCHEMA_DIR / f"{name}.json")


if __name__ == "__main__":
    main()
