"""The fuzz suite's oracle: which lines of a log are events, judged one line at a time.

It applies ``dslogs.analyzer.ingest.validate``'s LINE_RULES (documented there, in one place) independently of
the reader: no batches, no fast path, no suspects. Rules 3-5 with Python's json, rule 6 by
reading the line alone with DuckDB's read_json and the reader's schema (``RAW_COLUMNS``),
rules 7-8 with the events view's own time expression (``analyzer/ingest/views/events.sql``), rule 9
on the row DuckDB read.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from dslogs.analyzer.ingest.columns import RAW_COLUMNS
from dslogs.analyzer.ingest.validate import FINITE_LIMIT, MAX_LINE_BYTES
from dslogs.analyzer.ingest.viewdefs import view_sql


@dataclass
class Expected:
    good: int = 0
    bad: list[int] = field(default_factory=list)  # 1-based line numbers


class Oracle:
    def __init__(self, tz: str = "UTC"):
        self.con = duckdb.connect()
        self.con.execute(f"SET TimeZone = '{tz}'")
        self.tz = tz
        self.seen: dict[tuple[bytes, bool], bool | None] = {}
        self.dir = tempfile.TemporaryDirectory(prefix="dslogs-oracle-")
        self.path = Path(self.dir.name) / "line.jsonl"
        cols = "{" + ", ".join(f"'{k}': '{v}'" for k, v in RAW_COLUMNS.items()) + "}"
        raw = (f"SELECT *, 1 AS line_bytes, 1 AS file_id FROM read_json($p, columns={cols}, "
               f"format='newline_delimited', maximum_object_size={MAX_LINE_BYTES + 1024})")
        # Every column projected, as the reader's INSERT does: DuckDB checks types and duplicate
        # keys only of the columns a query reads.
        self.sql = f"WITH dslogs_raw AS ({raw}) SELECT * FROM ({view_sql('events')})"

    def close(self) -> None:
        self.con.close()
        self.dir.cleanup()

    def line_is_event(self, raw: bytes, terminated: bool) -> bool | None:
        """True (an event), False (a bad line) or None (blank: not a line at all)."""
        key = (raw, terminated)
        if key not in self.seen:  # most lines of a mutated file are the base file's
            self.seen[key] = self._judge(raw)
        return self.seen[key]

    def _judge(self, raw: bytes) -> bool | None:
        if not raw.rstrip(b"\r").strip():
            return None
        if len(raw) + 1 > MAX_LINE_BYTES + 1:
            return False
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        try:
            obj = json.loads(text)
        except RecursionError:
            obj = {}  # deeper than Python reads: DuckDB decides
        except ValueError:
            return False
        if not isinstance(obj, dict):
            return False
        self.path.write_bytes(raw + b"\n")
        try:
            rows = self.con.execute(self.sql, {"p": str(self.path), "tz": self.tz}).fetchall()
        except duckdb.Error:
            return False
        if len(rows) != 1:
            return False
        cols = [d[0] for d in self.con.description]
        row = dict(zip(cols, rows[0], strict=True))
        # rule 9: a float that is no measurement (NaN, an infinity, 1e18 or more) makes no event
        if any(isinstance(v, float) and not abs(v) < FINITE_LIMIT for v in row.values()):
            return False
        return row["stage"] is not None and row["ts"] is not None

    def expect(self, data: bytes) -> Expected:
        out = Expected()
        lines = data.split(b"\n")
        last_terminated = data.endswith(b"\n")
        if last_terminated:
            lines.pop()
        for no, raw in enumerate(lines, start=1):
            verdict = self.line_is_event(raw, terminated=no < len(lines) or last_terminated)
            if verdict is True:
                out.good += 1
            elif verdict is False:
                out.bad.append(no)
        return out


def gunzip_prefix(blob: bytes) -> tuple[bytes, bool]:
    """(decompressed bytes, complete): what a streaming reader gets from a maybe-damaged .gz."""
    try:
        return gzip.decompress(blob), True
    except (OSError, EOFError, zlib.error):
        pass
    d = zlib.decompressobj(wbits=31)
    try:
        return d.decompress(blob), False
    except zlib.error:
        return b"", False
