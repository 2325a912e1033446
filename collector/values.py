"""Field values made JSON-safe by type, on the writer thread (docs/collector.md "Value rules").

The caller's thread only queues the value; this module runs when the line is encoded, and
costs the same for a 5-element list and a 5 M-element tensor: arrays and tensors become their
shape and dtype (never ``.tolist()``), containers are cut to ``MAX_ITEMS`` items and
``MAX_DEPTH`` levels, strings to ``MAX_STR_CHARS`` characters, NaN/inf of any numeric type
(float, numpy, torch, Decimal) to null. A line never exceeds ``MAX_EVENT_BYTES`` (nor the
tracer's ``max_bytes``): an event still too long after the cuts is cut harder and marked
``"truncated": true``.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice

MAX_STR_CHARS = 4096  # a string value longer than this keeps its first 4096 characters + "…"
MAX_KEY_CHARS = 200  # dict keys (and stage names) are cut harder
MAX_ITEMS = 100  # items kept per list/tuple/set/dict; then one "… N more" marker
MAX_DEPTH = 6  # nesting below this becomes "…"
MAX_NODES = 2000  # values visited per event at most
MAX_EVENT_BYTES = 64 * 1024  # one line (UTF-8, newline included), whatever the fields hold
ELLIPSIS = "…"

# Fields the writer owns; a caller's field of the same name is kept with a trailing "_".
RESERVED = frozenset({"v", "ts", "stage", "host", "pid", "duration_ms"})

# Value classes the writer's fast path encodes as they are (anything else comes here first).
PLAIN = frozenset({str, int, float, bool, type(None)})

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # wider ints are written as floats (JSON readers' range)
_SEQUENCES = (list, tuple, set, frozenset, deque)

# (max string chars, max items, max depth): the normal limits, then a harder cut for an event
# still over the line limit.
NORMAL = (MAX_STR_CHARS, MAX_ITEMS, MAX_DEPTH)
HARD = (256, 16, 2)


def cut_str(s: str, limit: int = MAX_STR_CHARS) -> str:
    return s if len(s) <= limit else s[:limit] + ELLIPSIS


def _num(o):
    """A finite float for any real number type (Decimal, Fraction, numpy ...), else None."""
    try:
        f = float(o)
    except (TypeError, ValueError, OverflowError):  # Decimal('sNaN') raises ValueError
        return None
    return f if math.isfinite(f) else None


def _int(i: int):
    if _INT_MIN <= i <= _INT_MAX:
        return i
    try:
        return float(i)  # beyond ~1.8e308 float() overflows: null
    except OverflowError:
        return None


def placeholder(o) -> str:
    """What is written for a value that cannot be read: ``<TypeName>``, or ``<unreadable>``
    when even its type's name cannot be (a metaclass whose attribute access raises)."""
    try:
        name = type(o).__name__  # type(), unlike o.__class__, never runs the object's own code
        if name.__class__ is str:
            return f"<{cut_str(name, 100)}>"
    except Exception:
        pass
    return "<unreadable>"


def _str_of(o, limit: int) -> str:
    try:
        s = str(o)
        if s.__class__ is not str:
            s = str.__str__(s)
    except Exception:
        return placeholder(o)
    return cut_str(s, limit)


def _shaped(o, shape, limits, budget):
    """numpy arrays/scalars, torch tensors, pandas objects: shape and dtype, never contents
    (a 0-d one is its value: ``.item()`` of one element)."""
    try:
        dims = tuple(shape)
        if not dims:
            item = getattr(o, "item", None)
            if item is not None:
                v = item()
                if v is not o:
                    return safe(v, limits, budget, 1)
        out = {"shape": [int(d) for d in dims[:32]]}
        dtype = getattr(o, "dtype", None)
        out["dtype"] = _str_of(dtype, 64) if dtype is not None else placeholder(o)[1:-1]
        return out
    except Exception:
        return placeholder(o)


def safe(o, limits=NORMAL, budget=None, depth: int = 0):
    """``o`` as a value ``json`` encodes without error, within ``limits``. Never raises: a
    value whose attribute access raises (``__getattribute__``, a ``__class__`` property) is
    its placeholder."""
    try:
        c = o.__class__
    except Exception:
        return placeholder(o)
    if c is str:
        return o if len(o) <= limits[0] else o[: limits[0]] + ELLIPSIS
    if c is float:
        return o if math.isfinite(o) else None
    if c is int:
        return _int(o)
    if o is None or c is bool:
        return o
    if budget is None:
        budget = [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > limits[2]:
        return ELLIPSIS
    try:
        if isinstance(o, dict):
            out = {}
            for k, v in islice(o.items(), limits[1]):
                key = k if k.__class__ is str and len(k) <= MAX_KEY_CHARS else _str_of(k, MAX_KEY_CHARS)
                out[key] = safe(v, limits, budget, depth + 1)
            if len(o) > limits[1]:
                out[ELLIPSIS] = f"{len(o) - limits[1]} more"
            return out
        if isinstance(o, _SEQUENCES):
            out = [safe(v, limits, budget, depth + 1) for v in islice(o, limits[1])]
            if len(o) > limits[1]:
                out.append(f"{ELLIPSIS} {len(o) - limits[1]} more")
            return out
        if isinstance(o, str):  # str subclasses
            return cut_str(str.__str__(o), limits[0])
        if isinstance(o, bool):
            return bool(o)
        if isinstance(o, int):
            return _int(int.__int__(o))
        if isinstance(o, float):
            return _num(o)
        shape = getattr(o, "shape", None)
        if shape is not None and not isinstance(o, type):
            return _shaped(o, shape, limits, budget)
        if isinstance(o, (bytes, bytearray, memoryview)):
            return bytes(o[: limits[0]]).decode("utf-8", "replace") + (ELLIPSIS if len(o) > limits[0] else "")
        iso = getattr(o, "isoformat", None)  # datetime, date, time
        if iso is not None and not isinstance(o, type):
            return _str_of(iso(), limits[0])
        if isinstance(o, complex):
            return _str_of(o, 64)
        item = getattr(o, "item", None)  # array-likes without a shape
        if item is not None and callable(item) and not isinstance(o, type):
            try:
                v = item()
            except Exception:
                v = o
            if v is not o:
                return safe(v, limits, budget, depth + 1)
        import numbers  # stdlib; only odd values get here

        if isinstance(o, numbers.Number):  # Decimal, Fraction, other real types
            return _num(o)
        return _str_of(o, limits[0])
    except Exception:  # a container changed size under us, a hostile __len__ ...
        return placeholder(o)


def rename_reserved(fields: dict) -> dict:
    """A copy of ``fields`` with writer-owned names kept under ``name_`` (``name__`` if taken)."""
    out = {}
    clash = RESERVED.intersection(fields)
    for k, v in fields.items():
        if k in clash:
            new = k + "_"
            while new in fields or new in out:
                new += "_"
            out[new] = v
        else:
            out[k] = v
    return out


def safe_fields(fields: dict, limits=NORMAL) -> dict:
    """Every value of ``fields`` made safe, with one budget for the whole event."""
    budget = [MAX_NODES]
    out = {}
    for k, v in fields.items():
        key = k if k.__class__ is str and len(k) <= MAX_KEY_CHARS else _str_of(k, MAX_KEY_CHARS)
        out[key] = safe(v, limits, budget, 1)
    return out


def safe_duration(dur):
    """(duration_ms to write or None, a value to keep as ``duration_ms_`` or a sentinel)."""
    try:
        c = dur.__class__
        if c is int or c is float:
            return safe(dur), _NOTHING
        plain = isinstance(dur, bool) or isinstance(dur, (str, bytes, dict, list, tuple))
    except Exception:  # kept as duration_ms_, where safe() writes its placeholder
        return None, dur
    if plain:
        return None, dur
    v = safe(dur)
    if v is None or v.__class__ in (int, float):
        return v, _NOTHING
    return None, dur


_NOTHING = object()
NOTHING = _NOTHING
# log_event()'s duration when none was passed: -1 (article 003's "not measured") unless a
# duration_ms= keyword is among the fields.
LOG_EVENT_DEFAULT = object()
