"""Which lines of a log are events (``LINE_RULES``), judged line by line on the slow path.

The reader (``dslogs.analyzer.ingest.reader``) reads a file strictly first; only a chunk DuckDB rejects comes
here. Python judges what it is sure of (rules 1-5 and 7-8) and flags a deliberately stricter
superset of rule 6 as *suspect*; DuckDB decides each suspect line alone. The fuzz oracle in
tests/fuzz applies the same list, line by line, independently of the reader's batching.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass

from dslogs.analyzer.core.errors import one_line
from dslogs.analyzer.ingest.columns import RAW_COLUMNS, STRUCT_TYPES
from dslogs.analyzer.ingest.filestats import SAMPLES_PER_FILE, FileStats

MAX_LINE_BYTES = (
    16 << 20
)  # a longer line is damage (a dumped tensor, a missing newline), not an event

# What makes a line bad, in the order it is judged:
LINE_RULES = (
    "1. blank or whitespace only: not a line, not counted",
    '2. longer than 16 MiB: "line over 16 MiB"',
    '3. not UTF-8: "invalid UTF-8 at byte N"',
    '4. not JSON: "malformed JSON (...)" ("truncated line at end of file" when unterminated)',
    '5. JSON but not an object: "not a JSON object (list)"',
    "6. rejected by DuckDB's read_json with RAW_COLUMNS (the fast path's schema): a value of the"
    " wrong type, a duplicate key among the read fields, a time DuckDB cannot read, a lone"
    " surrogate; the reason names the field where it can",
    '7. no stage (absent or null): "no stage"',
    '8. no time: v1 without ts "no ts"; legacy without timestamp "no timestamp (ts or timestamp)";'
    ' a legacy timestamp analyzer/ingest/views/events.sql cannot read: "unreadable time (timestamp)"',
    '9. a float field that is no measurement (NaN, an infinity, a magnitude of 1e18 or more, as a'
    ' number or as text): "not a finite number: name=value"',
)
# Rules 1-5 and 7-9 are sure in Python; rule 6 is DuckDB's alone: Python flags a superset of
# suspects, DuckDB decides each.

_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
_INT_TEXT = re.compile(r"^-?(0|[1-9][0-9]*)$")
_FLOAT_TEXT = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$")
_INT64 = 2**63


def _number_suspect(value, integer: bool) -> bool:
    """True unless DuckDB surely casts ``value`` to BIGINT/DOUBLE (stricter than DuckDB)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return integer and not -_INT64 <= value < _INT64
    if isinstance(value, float):
        return integer and not (math.isfinite(value) and -_INT64 < value < _INT64)
    if isinstance(value, str):
        if integer:
            return not (_INT_TEXT.match(value) and -_INT64 <= int(value) < _INT64)
        return not _FLOAT_TEXT.match(value)
    return True


class _Dups(dict):
    """A JSON object that remembers its duplicated keys (json's object_pairs_hook)."""

    dups: frozenset = frozenset()


def _pairs(pairs: list) -> _Dups:
    obj = _Dups(pairs)
    if len(obj) != len(pairs):
        seen: set = set()
        obj.dups = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _type_problem(obj: dict) -> str | None:
    """Why DuckDB might reject this object's read fields (rule 6, a superset), or None."""
    dups = sorted(getattr(obj, "dups", frozenset()) & RAW_COLUMNS.keys())
    if dups:
        return f"duplicate key: {dups[0]}"
    # In the line's own order (a set's order follows PYTHONHASHSEED: Spark's workers fix it, a
    # shell does not, and the reason for a line with two bad fields must not depend on that).
    for name in [k for k in obj if k in RAW_COLUMNS]:  # a line holds a few of the fields
        value = obj[name]
        kind = RAW_COLUMNS[name]
        if value is None:
            continue
        if kind in ("BIGINT", "DOUBLE"):
            if _number_suspect(value, kind == "BIGINT"):
                return f"wrong value type: {name}={short(value)} (a number expected)"
        elif kind == "TIMESTAMPTZ":
            if not isinstance(value, str):
                return f"unreadable time: {name}={short(value)} (an ISO timestamp expected)"
        elif name in STRUCT_TYPES:  # params
            if not isinstance(value, dict):
                return f"wrong value type: {name}={short(value)} (an object expected)"
            members = STRUCT_TYPES[name]
            pdups = sorted(getattr(value, "dups", frozenset()) & members.keys())
            if pdups:
                return f"duplicate key: {name}.{pdups[0]}"
            for key, sub in members.items():
                v = value.get(key)
                if v is None:
                    continue
                if sub == "BOOLEAN":
                    # DuckDB casts a number to BOOLEAN through BIGINT: 1e30 is no boolean
                    if not (
                        (isinstance(v, bool | int | float) and not _number_suspect(v, True))
                        or (isinstance(v, str) and v.lower() in ("true", "false"))
                    ):
                        return f"wrong value type: {name}.{key}={short(v)} (true/false expected)"
                elif sub in ("BIGINT", "DOUBLE") and _number_suspect(v, sub == "BIGINT"):
                    return f"wrong value type: {name}.{key}={short(v)} (a number expected)"
    return None


# A float past this magnitude is no measurement (a DOUBLE column of the events reads it as one;
# NaN and the infinities compare above it in DuckDB): percentiles over it would read NaN.
FINITE_LIMIT = 1e18
_FLOAT_FIELDS = tuple(k for k, kind in RAW_COLUMNS.items() if kind == "DOUBLE")
_FLOAT_MEMBERS = tuple((name, k) for name, members in STRUCT_TYPES.items() for k, kind in members.items() if kind == "DOUBLE")


def _not_finite(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False  # rule 6 (DuckDB) judges text that is no number
    return isinstance(value, (int, float)) and not abs(value) < FINITE_LIMIT


def _finite_problem(obj: dict) -> str | None:
    """Rule 9: a float field that is no measurement."""
    for name in _FLOAT_FIELDS:
        if _not_finite(obj.get(name)):
            return f"not a finite number: {name}={short(obj[name])}"
    for name, key in _FLOAT_MEMBERS:
        value = obj.get(name)
        if isinstance(value, dict) and _not_finite(value.get(key)):
            return f"not a finite number: {name}.{key}={short(value[key])}"
    return None


def _rule_problem(obj: dict) -> str | None:
    """Rules 7-9: a line DuckDB reads that is still no event."""
    if obj.get("stage") is None:
        return "no stage"
    if obj.get("v") is None and obj.get("ts") is None:
        if obj.get("timestamp") is None:
            return "no timestamp (ts or timestamp)"
    elif obj.get("ts") is None:
        return "no ts"
    return _finite_problem(obj)


def _has_lone_surrogate(obj) -> bool:
    """A string with half a UTF-16 pair (JSON "\\ud800"): Python reads it, DuckDB does not."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def short(value) -> str:
    """A wrong value for a reason: short ones quoted, long text only described (it could be a
    prompt that a broken writer put in the wrong field; prompts never reach the report)."""
    if isinstance(value, str) and len(value) > 16:
        return f"<text of {len(value)} characters>"
    if isinstance(value, (dict, list)):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        return json.dumps(value, ensure_ascii=True)
    except ValueError:
        return repr(value)


@dataclass
class Line:
    line_no: int
    raw: bytes
    ts: object = None  # the ts value, to be checked by DuckDB
    suspect: str | None = None  # a reason DuckDB may reject it for ("" when unknown)
    rule: str | None = None  # rules 7-8, applied when DuckDB reads the line
    bad: bool = False


def rule_reasons(f: FileStats, wanted: set[int]) -> dict[int, str]:
    """Rules 7-9 reasons of the lines ``wanted`` of ``f`` (one more pass, only when a read
    line turned out to be no event)."""
    out: dict[int, str] = {}
    last = max(wanted)
    with contextlib.suppress(OSError, EOFError, zlib.error):
        with (gzip.open if f.display.endswith(".gz") else open)(f.path, "rb") as src:
            for no, raw in enumerate(src, start=1):
                if no in wanted:
                    obj, _reason = parse_line(raw)
                    if isinstance(obj, dict) and (rule := _rule_problem(obj)):
                        out[no] = rule
                if no >= last:
                    break
    return out


CHUNK_LINES = 4096  # lines per strict read in the slow path (a bad line costs its chunk's judging)


def raw_chunks(f: FileStats, pending: list[tuple[int, str]]):
    """The non-blank lines of ``f`` as (line number, raw bytes), CHUNK_LINES at a time; lines
    over 16 MiB are counted bad without being held; a corrupt .gz ends the lines there."""
    opener = gzip.open if f.display.endswith(".gz") else open
    line_no = 0
    try:
        src = opener(f.path, "rb")
    except OSError as exc:
        f.unreadable = f"cannot open ({exc.strerror or exc})"
        return
    chunk: list[tuple[int, bytes]] = []
    with src:
        try:
            while True:
                raw = src.readline(MAX_LINE_BYTES + 2)
                if not raw:
                    break
                line_no += 1
                if len(raw) > MAX_LINE_BYTES + 1 and not raw.endswith(b"\n"):
                    # Skip the rest of an oversized line without holding it.
                    while raw and not raw.endswith(b"\n"):
                        raw = src.readline(1 << 20)
                    pending.append((line_no, f"line over {MAX_LINE_BYTES >> 20} MiB"))
                    continue
                if not raw.rstrip(b"\r\n").strip():
                    continue  # rule 1: blank
                chunk.append((line_no, raw))
                if len(chunk) >= CHUNK_LINES:
                    yield chunk
                    chunk = []
        except (OSError, EOFError, zlib.error) as exc:
            # A corrupt or truncated .gz: what came before the damage is kept.
            f.unreadable = f"corrupt gzip after line {line_no} ({one_line(exc)})"
    if chunk:
        yield chunk


def parse_line(raw: bytes):
    """(object, None) or (None, reason) for rules 1-5; (None, None) for a blank line; the
    object is ``...`` (Ellipsis) when Python cannot parse it but DuckDB might (deep nesting)."""
    body = raw.rstrip(b"\r\n")
    if not body.strip():
        return None, None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start}"
    try:
        obj = json.loads(text, object_pairs_hook=_pairs)
    except RecursionError:
        return ..., None
    except ValueError as exc:
        if not raw.endswith(b"\n"):
            return None, "truncated line at end of file"
        msg = getattr(exc, "msg", str(exc))
        col = getattr(exc, "colno", None)
        return None, f"malformed JSON ({msg}" + (f", column {col})" if col else ")")
    if not isinstance(obj, dict):
        return None, f"not a JSON object ({type(obj).__name__})"
    return obj, None


def judge(raw: bytes, line_no: int) -> Line | str | None:
    obj, reason = parse_line(raw)
    if reason is not None:
        return reason
    if obj is None:
        return None
    if obj is ...:
        return Line(line_no, raw, suspect="")  # nested deeper than Python reads: DuckDB decides
    rule = _rule_problem(obj)
    suspect = _type_problem(obj)
    # Only a \uD800-\uDFFF escape can make a lone surrogate (decoded UTF-8 never does).
    if suspect is None and _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(obj):
        suspect = ""
    if rule is not None and suspect is None:
        return rule
    # With a rule problem too, DuckDB may reject it first (its reason wins); else the rule's.
    return Line(line_no, raw, ts=obj.get("ts"), suspect=suspect, rule=rule)


def clean_bytes(raw: bytes) -> bytes:
    """A kept line as DuckDB's two readers should see it: LF-terminated, and any CR (outside
    strings: inside one the line is not JSON) turned into a space of the same length, so the
    line-length reader (read_csv, which ends lines at a bare CR) stays in step."""
    body = raw[:-1] if raw.endswith(b"\n") else raw
    return body.replace(b"\r", b" ") + b"\n"


def duckdb_reason(message: str) -> str:
    first = message.splitlines()[0] if message else "rejected"
    first = re.sub(r'^.*?Error: (JSON transform error in file ".*?", in line \d+: )?', "", first)
    first = re.sub(
        r'^Malformed JSON in file ".*?", at byte \d+ in line \d+: ', "malformed JSON (", first
    )
    if first.startswith("malformed JSON ("):
        return first.rstrip(". ")[:190] + ")"
    if "duplicate key" in first:
        m = re.search(r'duplicate key "([^"]*)"', first)
        return f"duplicate key: {m.group(1) if m else '?'}"
    return ("wrong value type: " + first)[:200]


def add_bad(f: FileStats, line: int, reason: str) -> None:
    # A grown file's tail is read from a copy: its line numbers count from the tail's start.
    line += f.line_base
    f.last_bad = max(f.last_bad, line)
    f.bad_lines += 1
    if len(f.samples) < SAMPLES_PER_FILE:
        f.samples.append({"file": f.display, "line": int(line), "reason": reason})
