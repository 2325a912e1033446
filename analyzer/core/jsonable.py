"""Values as JSON carries them: one form for every output (the report, ``query``, ``session``).

Times are ISO 8601 with their offset, to the millisecond (what the collector writes, and what the
report prints), NaN and infinities are null, decimals are numbers, nested values (structs, lists,
maps) are JSON arrays and objects.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID


def jsonable(value: Any) -> Any:
    """A value JSON can carry exactly: ISO times to the millisecond, no NaN."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return jsonable(float(value))
    if isinstance(value, datetime | time):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return str(value)


_SCALARS = (str, int, bool, type(None))


def clean(obj: Any) -> Any:
    """A model's numbers as every model (report, diff, weekly, capacity) keeps them: floats
    rounded to 3 decimals, NaN and infinities None, recursively."""
    if isinstance(obj, float):
        return round(obj, 3) if math.isfinite(obj) else None
    # scalars are settled inline (no call per value: a model holds ~10^5 of them)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            t = type(v)
            if t is float:
                out[k] = round(v, 3) if v - v == 0 else None  # v - v is NaN for NaN and inf
            elif t in _SCALARS:
                out[k] = v
            else:
                out[k] = clean(v)
        return out
    if isinstance(obj, list | tuple):
        out = []
        for v in obj:
            t = type(v)
            if t is float:
                out.append(round(v, 3) if v - v == 0 else None)
            elif t in _SCALARS:
                out.append(v)
            else:
                out.append(clean(v))
        return out
    return obj


_CONTAINERS = (dict, list, tuple)


def _encoder(item_separator: str):
    """The C encoder (as json.dumps makes it for one call, made once here): a callable from a
    value to its text."""
    import json.encoder as je

    if je.c_make_encoder is None:  # no C accelerator: the stdlib's own path
        return je.JSONEncoder(
            ensure_ascii=False, allow_nan=False, separators=(item_separator, ": ")
        ).encode
    default = je.JSONEncoder().default  # raises TypeError, as json.dumps does
    enc = je.c_make_encoder(
        None, default, je.encode_basestring, None, ": ", item_separator, False, False, False
    )
    return lambda o: "".join(enc(o, 0))


def clean_json(obj: Any) -> str:
    """``json.dumps(clean(obj), ensure_ascii=False, indent=2, allow_nan=False)``: the same text
    in a fraction of the time. The standard library writes indented JSON in pure Python, a
    generator step per value (with the clean pass before it, 0.3-0.4 CPU-s for a report of a
    few thousand session rows); here every run of scalar values in an object or array is
    written by the C encoder in one call, its items separated by what the indented writer puts
    between them (a comma, a newline and the depth's indent), and only containers are walked
    in Python. Floats are cleaned on the way (rounded to 3 decimals, NaN and infinities null)."""
    import json

    leaves: list = []
    one = _encoder(",")  # a scalar alone, or a one-key object (a key as the encoder writes it)

    def write(o: Any, level: int) -> str:
        inner = level + 1
        while len(leaves) <= inner:
            leaves.append(_encoder(",\n" + "  " * len(leaves)))
        leaf = leaves[inner]
        if isinstance(o, dict):
            if not o:
                return "{}"
            parts, run = [], {}
            for k, v in o.items():
                t = type(v)
                if t is float:
                    run[k] = round(v, 3) if v - v == 0 else None
                elif t in _SCALARS:
                    run[k] = v
                elif isinstance(v, _CONTAINERS):
                    if run:
                        parts.append(leaf(run)[1:-1])
                        run = {}
                    key = k if isinstance(k, str) else next(iter(json.loads(one({k: 0}))))
                    parts.append(one(key) + ": " + write(v, inner))
                else:
                    run[k] = clean(v)
            if run:
                parts.append(leaf(run)[1:-1])
            open_, close = "{", "}"
        elif isinstance(o, list | tuple):
            if not o:
                return "[]"
            parts, run = [], []
            for v in o:
                t = type(v)
                if t is float:
                    run.append(round(v, 3) if v - v == 0 else None)
                elif t in _SCALARS:
                    run.append(v)
                elif isinstance(v, _CONTAINERS):
                    if run:
                        parts.append(leaf(run)[1:-1])
                        run = []
                    parts.append(write(v, inner))
                else:
                    run.append(clean(v))
            if run:
                parts.append(leaf(run)[1:-1])
            open_, close = "[", "]"
        else:
            return one(clean(o))
        pad = "  " * inner
        return open_ + "\n" + pad + (",\n" + pad).join(parts) + "\n" + "  " * level + close

    return write(obj, 0)
