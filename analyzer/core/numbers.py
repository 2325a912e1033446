"""The one parser of numeric command-line values: every numeric option goes through
``parse_number``, so NaN, infinities, numbers too large for a float (``1e400``), a fraction where
a count is wanted, and values outside the option's range are refused the same way, with one line
naming the option."""

from __future__ import annotations

import math

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.textsafe import visible


def parse_number(text: str, option: str, integer: bool = False, minimum: float | None = None,
                 maximum: float | None = None) -> int | float:
    """``text`` as a finite number (an int when ``integer``) in [minimum, maximum]."""
    shown = visible(repr(str(text)))
    raw = str(text).strip()
    try:
        value: int | float = int(raw, 10) if integer else float(raw)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise UsageError(f"{option} {shown}: expected {kind}") from None
    if not integer and not math.isfinite(value):
        raise UsageError(f"{option} {shown}: expected a finite number")
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        lo = "" if minimum is None else _bound(minimum)
        hi = "" if maximum is None else _bound(maximum)
        span = f"between {lo} and {hi}" if lo and hi else (f"at least {lo}" if lo else f"at most {hi}")
        raise UsageError(f"{option} {shown}: out of range (expected {span})")
    return value


def _bound(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e21 else f"{v:g}"


__all__ = ["parse_number"]
