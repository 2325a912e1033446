"""Log-derived text made safe for the medium it is shown in.

Logs are written by other programs and may carry anything a JSON string can: terminal escapes
(ESC, OSC 52 clipboard writes, screen clears), bidirectional overrides that reorder what a
reader sees, characters XML forbids (vl-convert aborts the whole process on them while drawing
an SVG), Markdown syntax, spreadsheet formulas. One place decides how each
medium gets them:

- ``visible(text)``: every control character, bidi control and non-character becomes a visible
  escape (``\\x1b``, ``\\u202e``); used for charts (vl-convert), terminal tables and Markdown.
  A backslash stays as it is: the escapes are for reading, not for decoding back.
- ``clean_tree(obj)``: ``visible`` applied to every string (and key) of a JSON-like value.
- ``markdown(text)``: ``visible``, then Markdown and HTML specials escaped.
- ``csv_cell(text)``: a cell a spreadsheet will not run as a formula (OWASP's prefix ``'``).
"""

from __future__ import annotations

import re

# C0 controls (tab, newline and CR included: every value here is shown on one line), DEL, C1
# controls, bidi marks/embeddings/overrides/isolates, the line/paragraph separators, BOM / zero
# width no-break space, interlinear annotations, lone surrogates and the two non-characters
# XML 1.0 excludes.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ufeff\ufff9-\ufffb\ud800-\udfff\ufffe\uffff]"
)


def _escape(m: re.Match) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every unsafe character shown as an escape (``ESC`` -> ``\\x1b``)."""
    return _UNSAFE.sub(_escape, text)


def is_safe(text: str) -> bool:
    return _UNSAFE.search(text) is None


def clean_tree(value):
    """A copy of a JSON-like value whose strings (keys too) are ``visible``; other values as is."""
    if isinstance(value, str):
        return visible(value) if _UNSAFE.search(value) else value
    if isinstance(value, dict):
        return {clean_tree(k) if isinstance(k, str) else k: clean_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_tree(v) for v in value]
    return value


# Markdown (CommonMark + GFM) characters that start inline formatting, links, code, autolinks
# or break a table cell. Values are always shown inside a line (a cell, after a label), so the
# block-level ones (#, -, +, 1.) cannot start anything there and stay readable.
_MD_SPECIALS = "\\`*{}[]|~"
# An underscore inside a word never emphasises (CommonMark's flanking rules): num_ooms stays
# readable; one at a word's edge is escaped.
_MD_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown(text: str) -> str:
    """A log-derived value as literal Markdown text on one line: no formatting, link, code, tag,
    entity or table break survives (``>`` only quotes at a line's start, where no value is put), and no control character reaches the reader's terminal."""
    s = visible(text)
    s = s.replace("&", "&amp;")  # before the escapes below: a logged "&lt;" stays visible as such
    s = _MD_EDGE_UNDERSCORE.sub("\x00", s)  # marked, then escaped with the rest
    out = []
    for ch in s:
        if ch == "<":
            out.append("&lt;")
        elif ch == "\x00":
            out.append("\\_")
        elif ch in _MD_SPECIALS:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


# A cell starting with one of these is a formula (or becomes one) in Excel, LibreOffice and
# Google Sheets: OWASP "CSV injection".
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """``text`` prefixed with ``'`` when a spreadsheet would read it as a formula."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def shell_word(text: str) -> str:
    """A value quoted for a POSIX shell command line shown to the user (after ``--``)."""
    import shlex

    return shlex.quote(visible(text))





_TIME_KEYS = ("bucket", "ts")


def _chartable_time(text) -> bool:
    """A time a chart can place and step from: ISO, years 2..9998 (a bucket either side of an
    event in year 1 or 9999 would leave what datetime holds; DuckDB prints BC years too)."""
    if not isinstance(text, str):
        return True
    from dslogs.analyzer.core.time import parse_iso

    try:
        value = parse_iso(text)
    except ValueError:
        return False
    return 2 <= value.year <= 9998


def for_charts(model: dict) -> dict:
    """The parts of a report model that charts draw (series, and the findings' session ids
    that pick lines), with every string ``visible``: vl-convert aborts on control characters.
    Series rows stamped outside years 2..9998 are left out of the charts (they stay in the
    model and its tables): a logged year 1 or 9999 must not break the report."""
    series = {}
    for name, rows in (model.get("series") or {}).items():
        if isinstance(rows, list):
            rows = [r for r in rows if not isinstance(r, dict) or all(_chartable_time(r.get(k)) for k in _TIME_KEYS)]
        series[name] = clean_tree(rows)
    window = dict(model.get("window") or {})
    for key, value in window.items():
        if not _chartable_time(value):
            window[key] = None
    return {**model, "series": series, "window": window, "findings": clean_tree(model.get("findings") or [])}
