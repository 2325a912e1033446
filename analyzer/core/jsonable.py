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


def clean(obj: Any) -> Any:
    """A model's numbers as every model (report, diff, weekly, capacity) keeps them: floats
    rounded to 3 decimals, NaN and infinities None, recursively."""
    if isinstance(obj, float):
        return round(obj, 3) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    return obj
