"""Query results and how ``dslogs query`` / ``dslogs session`` print them.

Formats: ``table`` (aligned text for a terminal), ``csv``, ``json`` (one array of objects) and
``jsonl`` (one object per line, for ``jq``). JSON output is strict: timestamps are ISO 8601
strings with their offset, NaN and infinities become null, decimals become numbers, nested
values (structs, lists, maps) become JSON objects and arrays.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import IO, Any

from dslogs.analyzer.core import textsafe
from dslogs.analyzer.core.jsonable import jsonable

FORMATS = ("table", "csv", "json", "jsonl")
# A table cell longer than this is cut (the full value is in the other formats).
MAX_CELL = 80


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple] = field(default_factory=list)
    types: list[str] | None = None

    def dicts(self) -> list[dict]:
        return [dict(zip(self.columns, row, strict=False)) for row in self.rows]


def _text(value: Any, short: bool = False) -> str:
    """A cell for table/csv: ISO times, empty for NULL, JSON for nested values; ``short`` rounds
    floats to 3 decimals for the table."""
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        if short and abs(value) < 1e15:
            text = f"{value:.3f}".rstrip("0").rstrip(".")
            return "0" if text == "-0" else text
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, (datetime, date, time)):
        return jsonable(value)
    return str(value)


def _cell_line(text: str) -> str:
    # Tabs and newlines as spaces (the table stays aligned); every other control character,
    # bidi override and terminal escape (ESC, OSC 52, CSI) shown as an escape, never sent raw.
    return textsafe.visible(text.replace("\r", " ").replace("\n", " ").replace("\t", " "))


def _write_table(result: QueryResult, stream: IO[str]) -> None:
    cols = [_cell_line(str(c)) for c in result.columns]
    cells = [[_cell_line(_text(v, short=True)) for v in row] for row in result.rows]
    for row in cells:
        for i, cell in enumerate(row):
            if len(cell) > MAX_CELL:
                row[i] = cell[: MAX_CELL - 1] + "…"
    widths = [len(c) for c in cols]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        bool(result.rows) and all(isinstance(r[i], (int, float, Decimal)) and not isinstance(r[i], bool)
                                  for r in result.rows if r[i] is not None)
        for i in range(len(cols))
    ]  # fmt: skip

    def line(values: Iterable[str]) -> str:
        parts = [v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    stream.write(line(cols) + "\n")
    stream.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        stream.write(line(row) + "\n")
    n = len(result.rows)
    stream.write(f"({n} row{'s' if n != 1 else ''})\n")


def _csv_text(value: Any, guard: bool) -> str:
    """A CSV cell; text a spreadsheet would run as a formula gets a leading ``'`` (``guard``).
    Numbers are numbers (a negative one is not a formula) and stay as they are."""
    text = _text(value)
    if guard and not isinstance(value, (int, float, Decimal)):
        return textsafe.csv_cell(text)
    return text


def write_result(result: QueryResult, fmt: str, stream: IO[str], csv_guard: bool = True) -> None:
    """Print ``result`` in ``fmt`` (table, csv, json, jsonl) to ``stream``. ``csv_guard`` False
    writes CSV cells verbatim (``dslogs query --raw-csv``)."""
    if fmt == "table":
        _write_table(result, stream)
    elif fmt == "csv":
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow([_csv_text(c, csv_guard) for c in result.columns])
        for row in result.rows:
            writer.writerow([_csv_text(v, csv_guard) for v in row])
    elif fmt == "json":
        stream.write(json.dumps([jsonable(d) for d in result.dicts()], ensure_ascii=False, allow_nan=False, indent=1))
        stream.write("\n")
    elif fmt == "jsonl":
        for d in result.dicts():
            stream.write(json.dumps(jsonable(d), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
            stream.write("\n")
    else:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
