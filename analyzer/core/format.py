"""Numbers, shares and sizes as every output prints them: the report (Markdown, HTML), the
findings' text, the diff, chart axes and the terminal.

One implementation with the knobs the media differ on, and a named preset per medium, so that
a number reads the same wherever that medium shows it:

- ``table``: report tables and HTML cells, where columns of mixed size must stay readable.
- ``prose``: finding messages ("reserved +512 MiB over 80 min").
- ``compact``: diff verdict lines and chart axes, three significant digits.
- ``terminal``: live values (latencies, utilisation, MiB) in the terminal.

Log-derived text is made safe by ``dslogs.analyzer.core.textsafe``; this module formats values only.
"""

from __future__ import annotations

import math
from numbers import Number

MISSING = "—"


def note_message(note) -> str:
    """A model's note as text: a note object's message (the report's), or the string itself (a
    saved model may hold either)."""
    if isinstance(note, dict):
        return str(note.get("message") or "")
    return "" if note is None else str(note)


def number(
    value,
    digits: int = 1,
    *,
    missing: str = MISSING,
    whole_from: float | None = 0.0,
    round_from: float | None = None,
    small_digits: int | None = None,
) -> str:
    """A number with thousands separators and ``digits`` decimals.

    ``whole_from``: a whole float of at least this size drops its decimals (None: never);
    ``round_from``: from this size no decimals (None: never); ``small_digits``: at least this
    many decimals below 10, where ratios and slopes need them. Ints always print whole; a
    missing value (None, "", NaN) prints ``missing``; anything that is not a number as ``str``.
    """
    if value is None or value == "":
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not isinstance(value, Number):
        return str(value)
    v = float(value)
    if v != v:
        return missing
    a = abs(v)
    if whole_from is not None and v.is_integer() and a >= whole_from:
        return f"{int(v):,}"
    if round_from is not None and a >= round_from:
        return f"{v:,.0f}"
    if small_digits is not None and a < 10:
        digits = max(digits, small_digits)
    return f"{v:,.{digits}f}"


def significant(value, *, missing: str = MISSING, trim: bool = True) -> str:
    """Three significant digits below 100, whole with thousands separators from 100.

    Trailing zeros go below 10; ``trim`` drops them between 10 and 100 too (an axis tick
    reads "20", a measured value keeps "20.0" to show its precision).
    """
    if value is None:
        return missing
    v = float(value)
    if v != v:
        return missing
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(a)))
    text = f"{v:.{digits}f}"
    if (trim or a < 10) and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def table(value, digits: int = 1) -> str:
    """A report cell: whole numbers without decimals (when ``digits`` ≤ 1), none from 1,000, two
    below 10 (R², ratios, MiB/min); booleans as yes/no. A zero is "0" whatever the digits: "0.00"
    reads as a small value rounded, which a value that rounds to it still prints."""
    if isinstance(value, Number) and not isinstance(value, bool) and value == 0:
        return "0"
    return number(value, digits, whole_from=1.0 if digits <= 1 else None, round_from=1000, small_digits=2)


def prose(value, digits: int = 1) -> str:
    """A number inside a finding's sentence: whole numbers without decimals; "n/a" if missing."""
    return number(value, digits, missing="n/a")


def compact(value) -> str:
    """A measured value in a one-line verdict: three significant digits, the precision kept."""
    return significant(value, trim=False)


def axis(value: float) -> str:
    """A chart tick: three significant digits, no trailing zeros, no SI prefix."""
    return significant(value)


def terminal(value) -> str:
    """A live value on the terminal (ms, %, MiB): one decimal below 100, none above."""
    return number(None if value is None else float(value), whole_from=None, round_from=100)


def with_unit(value, unit: str = "") -> str:
    """A table number followed by its unit ("—" alone when missing)."""
    s = table(value)
    return f"{s} {unit}".rstrip() if s != MISSING and unit else s


def share(value) -> str:
    """A 0..1 share as a percentage."""
    if value is None:
        return MISSING
    return f"{float(value) * 100:.1f} %"


def signed_pct(p) -> str:
    """A change in percent with its sign."""
    return MISSING if p is None else f"{p:+.1f} %"


def mib(x: float) -> str:
    """A memory size given in MiB: GiB from 1 GiB."""
    return f"{x / 1024:.1f} GiB" if abs(x) >= 1024 else f"{prose(x)} MiB"


def bytes_si(value) -> str:
    """A byte count in decimal units (B, KB, MB, GB, TB)."""
    if value is None:
        return MISSING
    v = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000 or unit == "TB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.1f} {unit}"
        v /= 1000
    return f"{v:,.1f} TB"


def duration(seconds: float | None) -> str:
    """An age a reader takes in at a glance: "12 s", "4 min 10 s", "3 h 12 min", "10 d 3 h"."""
    if seconds is None:
        return "—"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
