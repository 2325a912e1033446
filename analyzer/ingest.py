"""Read trace logs (v1 and the legacy seed format) into DuckDB and define the SQL views.

``open_logs`` discovers the files (``analyzer.discovery``), reads each JSON line once with
DuckDB ``read_json`` and one explicit schema (``RAW_COLUMNS``: every v1 field plus the legacy
``timestamp``), normalises it (``analyzer/views/events.sql``) into a table of events, and defines
the views ``events``, ``requests`` and ``sessions`` (docs/internals.md, docs/sql.md) over it, so
queries never re-scan JSON. The table lives in the cache file (``analyzer.cache``) or in memory.

Damaged input never aborts a run and costs exactly its own lines (``LINE_RULES``). A file is
first read strictly (fast: one statement for a batch of files); a file that fails is re-read in
chunks, and only a chunk DuckDB rejects is judged line by line (Python for what it is sure of,
DuckDB for each suspect line alone), so its good lines go to DuckDB; the bad ones are counted
per file with file, line and reason for the first few. A corrupt ``.gz`` keeps the lines before the damage and is counted in
``skipped_files``; an unreadable or empty file is skipped and counted. ``InputError`` only when
nothing is readable: a missing path, no log files.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path

import duckdb

from analyzer import cache as cache_mod
from analyzer.discovery import Discovery, LogFile, discover
from analyzer.errors import UsageError
from analyzer.output import QueryResult
from analyzer.timewindow import iso, parse_window, zone_name

VIEWS_DIR = Path(__file__).resolve().parent / "views"
MAX_LINE_BYTES = 16 << 20  # a longer line is damage (a dumped tensor, a missing newline), not an event
SAMPLES_PER_FILE = 5
SAMPLES_TOTAL = 50
BATCH_BYTES = 512 << 20  # decompressed bytes per read statement (bounds memory, paces progress)
GZ_RATIO = 8  # decompressed / compressed, to size batches before reading

_PARAMS = "STRUCT(num_beams BIGINT, max_new_tokens BIGINT, temperature DOUBLE, top_p DOUBLE, do_sample BOOLEAN)"
# The one read schema for both formats: every v1 field (DESIGN.md §3) and legacy's timestamp.
# v is read as text: any value present means v1. Unknown fields are not read.
RAW_COLUMNS: dict[str, str] = {
    "v": "VARCHAR", "ts": "TIMESTAMPTZ", "timestamp": "VARCHAR", "stage": "VARCHAR",
    "session_id": "VARCHAR", "request_id": "VARCHAR", "host": "VARCHAR", "pid": "BIGINT",
    "duration_ms": "DOUBLE", "input_len": "BIGINT", "output_len": "BIGINT",
    "reasoning_len": "BIGINT", "kv_seq_len": "BIGINT", "cpu_time_ms": "DOUBLE",
    "gpu_wait_pct": "DOUBLE", "gpu_util_pct": "DOUBLE", "params": _PARAMS, "ttft_ms": "DOUBLE",
    "ttfa_ms": "DOUBLE", "status": "VARCHAR", "finish_reason": "VARCHAR", "error_type": "VARCHAR",
    "error_msg": "VARCHAR", "failed_stage": "VARCHAR", "allocated_mb": "DOUBLE",
    "reserved_mb": "DOUBLE", "max_allocated_mb": "DOUBLE", "num_ooms": "BIGINT",
    "num_alloc_retries": "BIGINT", "gpu_index": "BIGINT", "kv_cache_size_mb": "DOUBLE",
    "gpu_mem_util_pct": "DOUBLE", "gpu_mem_used_mb": "DOUBLE", "gpu_mem_total_mb": "DOUBLE",
    "power_w": "DOUBLE", "temp_c": "DOUBLE", "sm_clock_mhz": "DOUBLE", "rss_mb": "DOUBLE",
    "cpu_pct": "DOUBLE", "threads": "BIGINT", "queued": "BIGINT", "written": "BIGINT",
    "dropped": "BIGINT", "bytes_written": "BIGINT",
}  # fmt: skip
# Per-request fields of the collector -> analyzer contract (TEAM.md, issue 12): the device, the
# requests in flight and what the request changed in the process's memory (before/after).
REQUEST_FIELDS: dict[str, str] = {
    "device": "VARCHAR", "inflight": "BIGINT", "attempts": "BIGINT",
    "reserved_mb_before": "DOUBLE", "reserved_mb_after": "DOUBLE",
    "allocated_mb_before": "DOUBLE", "allocated_mb_after": "DOUBLE",
    "rss_mb_before": "DOUBLE", "rss_mb_after": "DOUBLE", "source": "VARCHAR",
    "done_before": "BIGINT", "done_seq": "BIGINT",
}  # fmt: skip
RAW_COLUMNS.update(REQUEST_FIELDS)
_PARAM_TYPES = {"num_beams": "BIGINT", "max_new_tokens": "BIGINT", "temperature": "DOUBLE",
                "top_p": "DOUBLE", "do_sample": "BOOLEAN"}  # fmt: skip

# The user-facing events columns (docs/internals.md), in order.
EVENT_COLUMNS = [
    "ts", "stage", "session_id", "request_id", "host", "pid", "duration_ms", "input_len",
    "output_len", "reasoning_len", "kv_seq_len", "cpu_time_ms", "gpu_wait_pct", "gpu_util_pct",
    "num_beams", "max_new_tokens", "temperature", "top_p", "do_sample", "ttft_ms", "ttfa_ms",
    "status", "finish_reason", "error_type", "error_msg", "failed_stage", "allocated_mb",
    "reserved_mb", "max_allocated_mb", "num_ooms", "num_alloc_retries", "gpu_index",
    "kv_cache_size_mb", "gpu_mem_util_pct", "gpu_mem_used_mb", "gpu_mem_total_mb", "power_w",
    "temp_c", "sm_clock_mhz", "rss_mb", "cpu_pct", "threads", "queued", "written", "dropped",
    "bytes_written", "source_format", "source_file", "line_bytes",
]  # fmt: skip
EVENT_COLUMNS[EVENT_COLUMNS.index("source_format"):EVENT_COLUMNS.index("source_format")] = list(REQUEST_FIELDS)


@cache
def view_sql(name: str) -> str:
    return (VIEWS_DIR / f"{name}.sql").read_text(encoding="utf-8")


def _q(text: str) -> str:
    """A SQL string literal of our own making (paths we discovered, zone names we validated)."""
    return "'" + str(text).replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns_struct() -> str:
    return "{" + ", ".join(f"{_ident(k)}: {_q(v)}" for k, v in RAW_COLUMNS.items()) + "}"


# -- the database ------------------------------------------------------------------------------


@dataclass
class LogDB:
    """Logs opened in DuckDB: ``con`` has the views events, requests, sessions."""

    con: duckdb.DuckDBPyConnection
    ingest: dict
    window: dict
    tz: str
    files: list[str] = field(default_factory=list)
    cache_path: Path | None = None
    _tmp: tempfile.TemporaryDirectory | None = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.con.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LogDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class FileStats:
    file_id: int
    path: str  # resolved
    display: str
    size: int
    mtime_ns: int
    fingerprint: str | None
    rows: int = 0
    legacy_rows: int = 0
    bad_lines: int = 0
    samples: list[dict] = field(default_factory=list)
    unreadable: str | None = None  # why the file (or its tail) could not be read
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    tz: str | None = None


# -- reading -----------------------------------------------------------------------------------


def _read_sql(store: str) -> str:
    """INSERT of the normalised events of the files in $files (read paths) into store.events.

    read_json gives the typed fields; a parallel read_csv of the same files gives each line's
    byte length (line_bytes). Both skip blank lines and keep file order, so they line up row by
    row (POSITIONAL JOIN); the post-read check sends any file where they do not to the slow path.
    """
    raw = (
        # A row whose two sides come from different files means the readers fell out of step
        # (a whitespace-only line, a stray CR): no line_bytes, so the check re-reads that file.
        "SELECT j.*, CASE WHEN j.file_index IS NOT DISTINCT FROM c.file_index THEN c.line_bytes END AS line_bytes, "
        "CAST(list_extract($file_ids, CAST(coalesce(j.file_index, c.file_index) AS BIGINT) + 1) AS INTEGER) AS file_id "
        f"FROM read_json($files, columns={_columns_struct()}, format='newline_delimited', "
        f"maximum_object_size={MAX_LINE_BYTES + 1024}) AS j "
        "POSITIONAL JOIN ("
        "  SELECT strlen(line) + 1 AS line_bytes, file_index"
        "  FROM read_csv($files, columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='',"
        f"   header=false, auto_detect=false, max_line_size={MAX_LINE_BYTES + 2})"
        "  WHERE line IS NOT NULL"
        ") AS c"
    )
    return f"INSERT INTO {store}.events WITH dslogs_raw AS ({raw}) {view_sql('events')}"


def _empty_raw_sql() -> str:
    cols = ", ".join(f"NULL::{t} AS {_ident(k)}" for k, t in RAW_COLUMNS.items())
    return f"SELECT {cols}, NULL::BIGINT AS line_bytes, NULL::INTEGER AS file_id WHERE false"


def _create_store(con, store: str) -> None:
    con.execute(f"CREATE TABLE IF NOT EXISTS {store}.meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {store}.files (
            file_id INTEGER PRIMARY KEY, path VARCHAR, display VARCHAR, size BIGINT, mtime_ns BIGINT,
            fingerprint VARCHAR, tz VARCHAR, rows BIGINT, legacy_rows BIGINT, bad_lines BIGINT,
            samples VARCHAR, unreadable VARCHAR, first_ts TIMESTAMPTZ, last_ts TIMESTAMPTZ)"""
    )
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = 'events'", [store]
    ).fetchall()[0][0]
    if not exists:
        con.execute(
            f"CREATE TABLE {store}.events AS WITH dslogs_raw AS ({_empty_raw_sql()}) {view_sql('events')}",
            {"tz": "UTC"},
        )
    con.execute(
        f"INSERT OR REPLACE INTO {store}.meta VALUES ('schema_version', ?)", [str(cache_mod.SCHEMA_VERSION)]
    )


# Errors that are bugs in our SQL, not damage in a file: never hidden by the slow path.
_OUR_BUGS = (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException)


class Reader:
    """Reads files into ``store.events`` and records what it found per file."""

    def __init__(self, con, store: str, tz: str, workdir: Path):
        self.con = con
        self.store = store
        self.tz = tz
        self.workdir = workdir

    # One statement for many files; raises when DuckDB rejects one of them (nothing is kept).
    def _insert(self, loads: list[tuple[str, int]], lenient: bool = False) -> None:
        sql = _read_sql(self.store)
        if lenient:
            sql = sql.replace("format='newline_delimited',", "format='newline_delimited', ignore_errors=true,")
        self.con.execute(sql, {"files": [p for p, _ in loads], "file_ids": [i for _, i in loads], "tz": self.tz})

    def _delete(self, file_ids: list[int]) -> None:
        if file_ids:
            self.con.execute(f"DELETE FROM {self.store}.events WHERE list_contains(?, file_id)", [file_ids])

    def _suspect_rows(self, file_ids: list[int]) -> dict[int, int]:
        """Rows a clean read cannot have: no stage, no time, no line length, an oversized line."""
        rows = self.con.execute(
            f"SELECT file_id, count(*) FROM {self.store}.events WHERE list_contains(?, file_id) "
            f"AND (stage IS NULL OR ts IS NULL OR line_bytes IS NULL OR line_bytes > {MAX_LINE_BYTES + 1}) "
            "GROUP BY file_id",
            [file_ids],
        ).fetchall()
        return {fid: n for fid, n in rows}

    def read(self, files: list[FileStats], on_progress=None) -> None:
        """Read ``files`` (plain or .gz); fast strict path first, line-by-line for damaged ones."""
        batches: list[list[FileStats]] = []
        current: list[FileStats] = []
        weight = 0
        for f in files:
            w = f.size * (GZ_RATIO if f.display.endswith(".gz") else 1)
            if current and weight + w > BATCH_BYTES:
                batches.append(current)
                current, weight = [], 0
            current.append(f)
            weight += w
        if current:
            batches.append(current)
        for batch in batches:
            readable = [f for f in batch if f.size > 0]
            for f in batch:
                if f.size == 0:
                    f.unreadable = "empty file"
            slow: list[FileStats] = []
            try:
                if readable:
                    self._insert([(str(f.path), f.file_id) for f in readable])
            except _OUR_BUGS:
                raise
            except duckdb.Error:
                # One of them is damaged: read them one by one (a batch of one: it is that one).
                for f in readable if len(readable) > 1 else []:
                    try:
                        self._insert([(str(f.path), f.file_id)])
                    except _OUR_BUGS:
                        raise
                    except duckdb.Error:
                        slow.append(f)
                if len(readable) == 1:
                    slow.append(readable[0])
            suspects = self._suspect_rows([f.file_id for f in readable if f not in slow])
            if suspects and len(readable) > 1:
                # Read again alone: a file read out of step with its neighbours may be fine. The
                # file before a suspect one too: a line only one reader skips (whitespace) shifts
                # its own line lengths silently and shows only at the next file's first row.
                again_ids = set(suspects)
                for before, f in zip(readable, readable[1:], strict=False):
                    if f.file_id in suspects:
                        again_ids.add(before.file_id)
                again = [f for f in readable if f.file_id in again_ids and f not in slow]
                self._delete([f.file_id for f in again])
                for f in again:
                    try:
                        self._insert([(str(f.path), f.file_id)])
                    except _OUR_BUGS:
                        raise
                    except duckdb.Error:
                        slow.append(f)
                suspects = self._suspect_rows([f.file_id for f in again if f not in slow])
            for f in readable:
                if f.file_id in suspects and f not in slow:
                    slow.append(f)
            self._delete([f.file_id for f in slow])
            for f in slow:
                self._read_slow(f)
            if on_progress:
                on_progress(sum(f.size for f in batch))

    # -- the slow path: one damaged file, line by line --------------------------------------

    def _read_slow(self, f: FileStats) -> None:
        """One damaged file, line by line; costs one pass plus work per damaged line.

        Python splits the lines (on LF only, as the JSON reader does) and judges what it can
        be sure of (``LINE_RULES``). What only DuckDB can judge exactly (value types, times,
        duplicate keys, lone surrogates, nesting Python cannot parse) is flagged as *suspect*
        by a deliberately stricter mirror, and each suspect line alone is then read by DuckDB
        with the very schema of the fast path: rejected, it is bad; accepted, it is kept. All
        times are checked in one batch the same way (DuckDB reads "2026-W48-1" differently
        from Python). No good line is lost and there are no blind retries."""
        pending: list[tuple[int, str]] = []  # (line, reason), counted in line order at the end
        try:
            self._read_lines(f, pending)
        finally:
            for line, reason in sorted(pending):
                _add_bad(f, line, reason)

    def _read_lines(self, f: FileStats, pending: list[tuple[int, str]]) -> None:
        clean = self.workdir / f"clean-{f.file_id}.jsonl"
        kept_no: list[int] = []  # line numbers of the rows inserted, in order
        for chunk in _raw_chunks(f, pending):
            # Most of a damaged file is fine: a chunk DuckDB reads as it is costs one read.
            if self._insert_chunk(chunk, f.file_id, clean):
                kept_no.extend(no for no, _ in chunk)
                continue
            kept = self._judge_chunk(chunk, pending)
            if not kept:
                continue
            with open(clean, "wb") as out:
                for _no, raw in kept:
                    out.write(_clean_bytes(raw))
            try:
                self._insert([(str(clean), f.file_id)])
            except _OUR_BUGS:
                raise
            except duckdb.Error as exc:
                # A rule the mirror does not know yet: the chunk's good lines are still read
                # (lenient: a rejected line becomes an all-NULL row, counted below), never lost.
                try:
                    self._insert([(str(clean), f.file_id)], lenient=True)
                except duckdb.Error:
                    f.unreadable = f"rejected by the reader ({_one_line(exc)[:160]})"
                    continue
            kept_no.extend(no for no, _ in kept)
        clean.unlink(missing_ok=True)
        if not kept_no:
            return
        # Rows DuckDB read but cannot place in time (or that lost their stage): bad lines too.
        bad = self.con.execute(
            f"""SELECT k, stage IS NULL, ts IS NULL FROM (
                    SELECT row_number() OVER (ORDER BY rowid) AS k, stage, ts, line_bytes
                    FROM {self.store}.events WHERE file_id = ?)
                WHERE stage IS NULL OR ts IS NULL OR line_bytes IS NULL""",
            [f.file_id],
        ).fetchall()
        lines = {kept_no[k - 1]: (no_stage, no_ts) for k, no_stage, no_ts in bad if k - 1 < len(kept_no)}
        rules = _rule_reasons(f, set(lines)) if lines else {}
        for line, (no_stage, no_ts) in lines.items():
            # The rule by the line itself (no ts, no timestamp) where it says; DuckDB's else.
            fallback = "no stage" if no_stage else ("unreadable time (timestamp)" if no_ts else "unreadable line")
            pending.append((line, rules.get(line) or fallback))
        if bad:
            self.con.execute(
                f"DELETE FROM {self.store}.events WHERE file_id = ? AND (stage IS NULL OR ts IS NULL OR line_bytes IS NULL)",
                [f.file_id],
            )
        clean.unlink(missing_ok=True)

    def _insert_chunk(self, chunk: list[tuple[int, bytes]], file_id: int, path: Path) -> bool:
        """Insert a chunk of raw lines as they are when DuckDB reads them all (one statement;
        nothing is kept when it fails). A chunk with a CR is judged line by line: the
        line-length reader would end a line there."""
        if any(b"\r" in raw for _no, raw in chunk):
            return False
        with open(path, "wb") as out:
            for _no, raw in chunk:
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        try:
            self._insert([(str(path), file_id)])
        except _OUR_BUGS:
            raise
        except duckdb.Error:
            return False
        return True

    def _judge_chunk(self, chunk: list[tuple[int, bytes]], pending: list[tuple[int, str]]) -> list[tuple[int, bytes]]:
        """The lines of a chunk DuckDB rejected that are events after all (LINE_RULES)."""
        lines: list[_Line] = []
        for no, raw in chunk:
            item = _judge(raw, no)
            if isinstance(item, str):
                pending.append((no, item))
            elif item is not None:
                lines.append(item)
        self._check_times(lines)
        kept = []
        for item in lines:
            if item.suspect is not None:
                verdict = self._duckdb_rejects(item.raw)
                if verdict is not None:
                    pending.append((item.line_no, item.suspect or verdict))
                    continue
            if item.rule is not None:
                pending.append((item.line_no, item.rule))
                continue
            kept.append((item.line_no, item.raw))
        return kept

    def _duckdb_rejects(self, raw: bytes) -> str | None:
        """DuckDB's own verdict on one line, read alone with the fast path's schema: None when
        it reads it, else its one-line reason."""
        probe = self.workdir / "probe.jsonl"
        probe.write_bytes(_clean_bytes(raw))
        try:
            self.con.execute(
                f"SELECT * FROM read_json(?, columns={_columns_struct()}, format='newline_delimited', "
                f"maximum_object_size={MAX_LINE_BYTES + 1024})", [str(probe)]).fetchall()  # fmt: skip
        except _OUR_BUGS:
            raise
        except duckdb.Error as exc:
            return _duckdb_reason(str(exc))
        return None

    def _check_times(self, lines: list[_Line]) -> None:
        """Mark lines whose ``ts`` DuckDB cannot read as suspect: every ts of the file in one
        lenient read of ``{"ts": value}`` lines (an unreadable time becomes NULL there)."""
        timed = [item for item in lines if not item.bad and item.ts is not None]
        if not timed:
            return
        path = self.workdir / "times.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for item in timed:
                out.write('{"ts":' + json.dumps(item.ts, ensure_ascii=False) + "}\n")
        rows = self.con.execute(
            "SELECT ts IS NULL FROM read_json(?, columns={'ts': 'TIMESTAMPTZ'}, format='newline_delimited', "
            "ignore_errors=true)", [str(path)]).fetchall()  # fmt: skip
        path.unlink(missing_ok=True)
        if len(rows) != len(timed):  # cannot line them up: let each be judged alone
            for item in timed:
                item.suspect = item.suspect or ""
            return
        for item, (unreadable,) in zip(timed, rows, strict=True):
            if unreadable and item.suspect is None:
                item.suspect = f"unreadable time: ts={_short(item.ts)}"


def _clean_bytes(raw: bytes) -> bytes:
    """A kept line as DuckDB's two readers should see it: LF-terminated, and any CR (outside
    strings: inside one the line is not JSON) turned into a space of the same length, so the
    line-length reader (read_csv, which ends lines at a bare CR) stays in step."""
    body = raw[:-1] if raw.endswith(b"\n") else raw
    return body.replace(b"\r", b" ") + b"\n"


def _duckdb_reason(message: str) -> str:
    first = message.splitlines()[0] if message else "rejected"
    first = re.sub(r'^.*?Error: (JSON transform error in file ".*?", in line \d+: )?', "", first)
    first = re.sub(r'^Malformed JSON in file ".*?", at byte \d+ in line \d+: ', "malformed JSON (", first)
    if first.startswith("malformed JSON ("):
        return first.rstrip(". ")[:190] + ")"
    if "duplicate key" in first:
        m = re.search(r'duplicate key "([^"]*)"', first)
        return f"duplicate key: {m.group(1) if m else '?'}"
    return ("wrong value type: " + first)[:200]


def _add_bad(f: FileStats, line: int, reason: str) -> None:
    f.bad_lines += 1
    if len(f.samples) < SAMPLES_PER_FILE:
        f.samples.append({"file": f.display, "line": int(line), "reason": reason})


# -- line validation (the slow path) -------------------------------------------------------------

# LINE_RULES: what makes a line bad, in the order it is judged (the fuzz oracle in tests/fuzz
# applies the same list line by line, independently of the reader's batching):
#   1. blank or whitespace only: not a line, not counted;
#   2. longer than 16 MiB: "line over 16 MiB";
#   3. not UTF-8: "invalid UTF-8 at byte N";
#   4. not JSON: "malformed JSON (...)" ("truncated line at end of file" when unterminated);
#   5. JSON but not an object: "not a JSON object (list)";
#   6. rejected by DuckDB's read_json with RAW_COLUMNS (the fast path's schema): a value of the
#      wrong type, a duplicate key among the read fields, a time DuckDB cannot read, a lone
#      surrogate; the reason names the field where it can;
#   7. no stage (absent or null): "no stage";
#   8. no time: v1 without ts "no ts"; legacy without timestamp "no timestamp (ts or timestamp)";
#      a legacy timestamp analyzer/views/events.sql cannot read: "unreadable time (timestamp)".
# Rules 1-5 and 7-8 are sure in Python; rule 6 is DuckDB's alone: Python flags a superset of
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
    for name in [k for k in obj if k in RAW_COLUMNS]:  # a line holds a few of the 46 fields
        value = obj[name]
        kind = RAW_COLUMNS[name]
        if value is None:
            continue
        if kind in ("BIGINT", "DOUBLE"):
            if _number_suspect(value, kind == "BIGINT"):
                return f"wrong value type: {name}={_short(value)} (a number expected)"
        elif kind == "TIMESTAMPTZ":
            if not isinstance(value, str):
                return f"unreadable time: {name}={_short(value)} (an ISO timestamp expected)"
        elif name == "params":
            if not isinstance(value, dict):
                return f"wrong value type: params={_short(value)} (an object expected)"
            pdups = sorted(getattr(value, "dups", frozenset()) & _PARAM_TYPES.keys())
            if pdups:
                return f"duplicate key: params.{pdups[0]}"
            for key, sub in _PARAM_TYPES.items():
                v = value.get(key)
                if v is None:
                    continue
                if sub == "BOOLEAN":
                    # DuckDB casts a number to BOOLEAN through BIGINT: 1e30 is no boolean
                    if not ((isinstance(v, bool | int | float) and not _number_suspect(v, True))
                            or (isinstance(v, str) and v.lower() in ("true", "false"))):
                        return f"wrong value type: params.{key}={_short(v)} (true/false expected)"
                elif _number_suspect(v, sub == "BIGINT"):
                    return f"wrong value type: params.{key}={_short(v)} (a number expected)"
    return None


def _rule_problem(obj: dict) -> str | None:
    """Rules 7-8: a line DuckDB reads that is still no event."""
    if obj.get("stage") is None:
        return "no stage"
    if obj.get("v") is None and obj.get("ts") is None:
        if obj.get("timestamp") is None:
            return "no timestamp (ts or timestamp)"
    elif obj.get("ts") is None:
        return "no ts"
    return None


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


def _short(value) -> str:
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
class _Line:
    line_no: int
    raw: bytes
    ts: object = None  # the ts value, to be checked by DuckDB
    suspect: str | None = None  # a reason DuckDB may reject it for ("" when unknown)
    rule: str | None = None  # rules 7-8, applied when DuckDB reads the line
    bad: bool = False


def _rule_reasons(f: FileStats, wanted: set[int]) -> dict[int, str]:
    """Rules 7-8 reasons of the lines ``wanted`` of ``f`` (one more pass, only when a read
    line turned out to be no event)."""
    out: dict[int, str] = {}
    last = max(wanted)
    with contextlib.suppress(OSError, EOFError, zlib.error):
        with (gzip.open if f.display.endswith(".gz") else open)(f.path, "rb") as src:
            for no, raw in enumerate(src, start=1):
                if no in wanted:
                    obj, _reason = _parse(raw)
                    if isinstance(obj, dict) and (rule := _rule_problem(obj)):
                        out[no] = rule
                if no >= last:
                    break
    return out


CHUNK_LINES = 4096  # lines per strict read in the slow path (a bad line costs its chunk's judging)


def _raw_chunks(f: FileStats, pending: list[tuple[int, str]]):
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
            f.unreadable = f"corrupt gzip after line {line_no} ({_one_line(exc)})"
    if chunk:
        yield chunk


def _parse(raw: bytes):
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


def _judge(raw: bytes, line_no: int) -> _Line | str | None:
    obj, reason = _parse(raw)
    if reason is not None:
        return reason
    if obj is None:
        return None
    if obj is ...:
        return _Line(line_no, raw, suspect="")  # nested deeper than Python reads: DuckDB decides
    rule = _rule_problem(obj)
    suspect = _type_problem(obj)
    # Only a \uD800-\uDFFF escape can make a lone surrogate (decoded UTF-8 never does).
    if suspect is None and _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(obj):
        suspect = ""
    if rule is not None and suspect is None:
        return rule
    # With a rule problem too, DuckDB may reject it first (its reason wins); else the rule's.
    return _Line(line_no, raw, ts=obj.get("ts"), suspect=suspect, rule=rule)


def _line_problem(raw: bytes) -> str | None:
    """The reason a single line is bad by the Python rules (the Spark engine's reasons), or
    None; rule 6 is reported as its suspicion."""
    obj, reason = _parse(raw)
    if reason is not None:
        return reason
    if obj is None:
        return "blank"
    if obj is ...:
        return None
    return _type_problem(obj) or _rule_problem(obj)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- the store: cache file or memory -------------------------------------------------------------


def _stderr(message: str) -> None:
    sys.stderr.write(f"dslogs: {message}\n")


def _attach_cache(con, path: Path, found: Discovery, zone: str, explicit: bool = False) -> str | None:
    """Attach the cache as ``dslogs_cache``: ``"rw"``, or ``"ro"`` when another dslogs holds it
    only to read and it already has every file of this run; rebuilt on a schema version mismatch.
    None (and one line on stderr) when it cannot be used: the run goes on without a cache.

    ``explicit`` (``--cache PATH``): an existing file there is replaced only when it is proven a
    dslogs cache (``cache.is_dslogs_cache``); anything else (notes, a report, a log, another
    program's database) is a UsageError, and the file is left as it was. The default location
    is dslogs' own folder: a file there that cannot be opened is rebuilt."""
    refuse = (f"--cache {path}: exists and is not a dslogs cache; refusing to replace it "
              "(name a new file, or remove it yourself)")
    if os.path.lexists(path) and not path.is_file():
        if explicit:
            raise UsageError(f"--cache {path}: not a regular file")
        _stderr(f"cache {path}: not a regular file; reading without a cache")
        return None
    if explicit and path.is_file() and not _looks_like_duckdb(path):
        # Never handed to DuckDB: a failed ATTACH may still leave a .wal beside the file.
        raise UsageError(refuse)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _stderr(f"cache {path}: cannot create its folder ({exc.strerror or exc}); reading without a cache")
        return None
    for attempt in range(2):
        try:
            con.execute(f"ATTACH {_q(str(path))} AS dslogs_cache")
        except duckdb.Error as exc:
            if cache_mod.is_lock_error(exc):
                if _attach_read_only(con, path, found, zone):
                    return "ro"
                _stderr(f"cache {path} is in use by another dslogs process; reading without a cache")
            elif attempt == 0 and path.exists():
                if explicit and path.stat().st_size > 0:
                    raise UsageError(f"{refuse}: {_one_line(exc)}") from None
                # (an empty file holds nothing to lose: `touch cache.duckdb` is fine)
                # Not a DuckDB file, or one of another DuckDB version: start a new one.
                _remove_cache(path)
                continue
            else:
                _stderr(f"cache {path}: {_one_line(exc)}; reading without a cache")
            return None
        version = _cache_version(con)
        if version == "?" and explicit:
            # A DuckDB database of something else: not ours to replace.
            con.execute("DETACH dslogs_cache")
            raise UsageError(refuse)
        if version not in (None, str(cache_mod.SCHEMA_VERSION)):
            con.execute("DETACH dslogs_cache")
            _remove_cache(path)
            continue
        return "rw"
    return None


def _looks_like_duckdb(path: Path) -> bool:
    """A DuckDB database file: its main header carries the magic "DUCK" at byte 8 (or it is a
    new, empty file DuckDB may have created and not yet written)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return head == b"" or head[8:12] == b"DUCK"


def _cache_version(con) -> str | None:
    """The attached cache's schema version; None for a new (empty) file, '?' for a foreign one."""
    tables = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'dslogs_cache'").fetchall()[0][0]
    tables += con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = 'dslogs_cache'").fetchall()[0][0]
    if not tables:
        return None
    try:
        version = con.execute("SELECT value FROM dslogs_cache.meta WHERE key = 'schema_version'").fetchall()
    except duckdb.Error:
        return "?"
    return version[0][0] if version else "?"


def _attach_read_only(con, path: Path, found: Discovery, zone: str) -> bool:
    """Another process reads the cache: use it read-only if it holds every file unchanged."""
    try:
        con.execute(f"ATTACH {_q(str(path))} AS dslogs_cache (READ_ONLY)")
    except duckdb.Error:
        return False
    ok = _cache_version(con) == str(cache_mod.SCHEMA_VERSION)
    if ok:
        known = {r[0]: r[1:] for r in con.execute(
            "SELECT path, size, mtime_ns, tz, legacy_rows FROM dslogs_cache.files").fetchall()}  # fmt: skip
        for f in found.files:
            rec = known.get(str(f.path.resolve()))
            if not rec or rec[0] != f.size or rec[1] != f.mtime_ns or (rec[3] and rec[2] != zone):
                ok = False
                break
    if not ok:
        con.execute("DETACH dslogs_cache")
    return ok


def _remove_cache(path: Path) -> None:
    for p in (path, Path(str(path) + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


# -- open_logs -----------------------------------------------------------------------------------


def _progress(total_bytes: int, files: int):
    """A rich progress bar on stderr for long reads on a terminal; a no-op otherwise."""
    if files < 8 or total_bytes < (64 << 20) or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("reading logs"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )  # fmt: skip
    return bar


def open_logs(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    cache: Path | None = None,
    use_cache: bool = True,
    materialize: bool = True,
) -> LogDB:
    """Open the logs under ``paths`` in DuckDB (docs/internals.md "Ingest API").

    ``materialize`` computes requests and sessions once into temporary tables (many queries, as
    in ``analyze``); False keeps them as views (one query, as in ``dslogs query``)."""
    started = time.perf_counter()
    zone = zone_name(tz)
    lo, hi = parse_window(since, until, tz)
    if isinstance(paths, (str, os.PathLike)):
        paths = [str(paths)]
    found: Discovery = discover([str(p) for p in paths], lo, hi)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # dslogs draws its own, on stderr only
    if os.environ.get("DSLOGS_THREADS"):  # a Spark task's share of the cores (spark_engine)
        con.execute(f"SET threads = {int(os.environ['DSLOGS_THREADS'])}")
    # Timestamps print, and date_trunc buckets, in the zone of the logs' reader (--tz or local).
    con.execute(f"SET TimeZone = {_q(zone)}")
    workdir = tempfile.TemporaryDirectory(prefix="dslogs-")
    con.execute(f"SET temp_directory = {_q(workdir.name)}")
    # Bounded memory (DESIGN §8: weeks of logs on a small box): beyond it DuckDB spills to disk.
    con.execute(f"SET memory_limit = {_q(os.environ.get('DSLOGS_MEMORY_LIMIT', '1GB'))}")
    db = LogDB(con=con, ingest={}, window={"since": iso(lo), "until": iso(hi)}, tz=zone, _tmp=workdir)
    try:
        _load(db, found, zone, lo, hi, cache, use_cache, materialize, Path(workdir.name))
    except BaseException:
        db.close()
        raise
    db.ingest["seconds"] = round(time.perf_counter() - started, 3)
    return db


def _load(db: LogDB, found: Discovery, zone: str, lo, hi, cache, use_cache, materialize, workdir: Path) -> None:
    con = db.con
    store = "memory"
    cache_path = None
    mode = None
    if use_cache and found.files:
        cache_path = Path(cache) if cache else cache_mod.default_cache_path([f.path for f in found.files])
        mode = _attach_cache(con, cache_path, found, zone, explicit=cache is not None)
        if mode:
            store = "dslogs_cache"
        else:
            cache_path = None
    readonly = mode == "ro"
    db.cache_path = cache_path
    con.execute("SET preserve_insertion_order = true")
    if not readonly:
        _create_store(con, store)
    reader = Reader(con, store, zone, workdir)

    known = {row[1]: row for row in con.execute(
        f"SELECT file_id, path, size, mtime_ns, fingerprint, tz, legacy_rows FROM {store}.files"
    ).fetchall()}  # fmt: skip
    by_print = {row[4]: row for row in known.values() if row[4]}
    # Ids are never reused (the cached requests/sessions are keyed by them): a counter in meta.
    counter = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'next_file_id'").fetchall()
    next_id = 1 + max([row[0] for row in known.values()], default=0)
    if counter:
        next_id = max(next_id, int(counter[0][0]))
    run: list[FileStats] = []  # files of this run (read now or from the cache)
    to_read: list[FileStats] = []
    reused = renamed = duplicates = 0
    dropped_ids: list[int] = []
    claimed: set[int] = set()
    prints_in_run: dict[str, str] = {}
    skipped: list[dict] = [{"file": f.display, "reason": "outside the window"} for f in found.pruned]
    # Named or found but not readable as a log (FIFO, socket, broken link, unreadable folder...).
    skipped += [{"file": name, "reason": why} for name, why in found.unreadable]
    for lf in found.files:
        resolved = str(lf.path.resolve())
        rec = known.get(resolved)
        if rec and rec[2] == lf.size and rec[3] == lf.mtime_ns and (rec[6] == 0 or rec[5] == zone):
            run.append(_stats_from(lf, resolved, rec[0], rec[4]))
            claimed.add(rec[0])
            reused += 1
            if rec[4]:
                prints_in_run[rec[4]] = lf.display
            continue
        # Without a cache nothing is skipped as a copy: only a cache can show the rows are there.
        fp = cache_mod.fingerprint(lf.path) if store == "dslogs_cache" else None
        if fp and fp in prints_in_run:
            duplicates += 1
            skipped.append({"file": lf.display, "reason": f"same content as {prints_in_run[fp]}"})
            continue
        other = by_print.get(fp) if fp else None
        if other and other[0] not in claimed and (other[6] == 0 or other[5] == zone):
            # Renamed by rotation or gzipped: the rows are already there.
            if rec and rec[0] != other[0]:
                dropped_ids.append(rec[0])
            con.execute(
                f"UPDATE {store}.files SET path = ?, display = ?, size = ?, mtime_ns = ? WHERE file_id = ?",
                [resolved, lf.display, lf.size, lf.mtime_ns, other[0]],
            )
            known.pop(other[1], None)
            run.append(_stats_from(lf, resolved, other[0], fp))
            claimed.add(other[0])
            renamed += 1
            prints_in_run[fp] = lf.display
            continue
        if rec:
            dropped_ids.append(rec[0])
        stats = FileStats(next_id, resolved, lf.display, lf.size, lf.mtime_ns, fp, tz=zone)
        next_id += 1
        run.append(stats)
        to_read.append(stats)
        if fp:
            prints_in_run[fp] = lf.display
    # Records of files gone from disk (and of files replaced above) are dropped.
    for path, rec in known.items():
        if rec[0] in claimed or rec[0] in dropped_ids:
            continue
        if not os.path.exists(path):
            dropped_ids.append(rec[0])
    if readonly:
        # Everything is cached (checked when attaching); a reader leaves stale records alone.
        dropped_ids = []
    if dropped_ids:
        legacy_sessions = [r[0] for r in con.execute(
            f"SELECT DISTINCT session_id FROM {store}.events WHERE list_contains(?, file_id) "
            "AND source_format = 'legacy' AND session_id IS NOT NULL", [dropped_ids]).fetchall()]  # fmt: skip
        con.execute(f"DELETE FROM {store}.events WHERE list_contains(?, file_id)", [dropped_ids])
        con.execute(f"DELETE FROM {store}.files WHERE list_contains(?, file_id)", [dropped_ids])
    else:
        legacy_sessions = []

    total = sum(f.size for f in to_read)
    with _progress(total, len(to_read)) as bar:
        task = bar.add_task("read", total=total) if bar is not None else None
        reader.read(to_read, on_progress=(lambda n: bar.advance(task, n)) if bar is not None else None)

    if to_read and not readonly:
        con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES ('next_file_id', ?)", [str(next_id)])
    if to_read:
        counts = {fid: (n, leg, t0, t1) for fid, n, leg, t0, t1 in con.execute(
            f"SELECT file_id, count(*), count(*) FILTER (WHERE source_format = 'legacy'), min(ts), max(ts) "
            f"FROM {store}.events WHERE list_contains(?, file_id) GROUP BY file_id",
            [[f.file_id for f in to_read]]).fetchall()}  # fmt: skip
        for f in to_read:
            f.rows, f.legacy_rows, f.first_ts, f.last_ts = counts.get(f.file_id, (0, 0, None, None))
        con.executemany(
            f"INSERT INTO {store}.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[f.file_id, f.path, f.display, f.size, f.mtime_ns, f.fingerprint, zone, f.rows, f.legacy_rows,
              f.bad_lines, json.dumps(f.samples, ensure_ascii=False), f.unreadable, f.first_ts, f.last_ts]
             for f in to_read],
        )  # fmt: skip
        legacy_sessions += [r[0] for r in con.execute(
            f"SELECT DISTINCT session_id FROM {store}.events WHERE list_contains(?, file_id) "
            "AND source_format = 'legacy' AND session_id IS NOT NULL",
            [[f.file_id for f in to_read if f.legacy_rows]]).fetchall()]  # fmt: skip
    if legacy_sessions:
        con.execute(
            view_sql("legacy_request_ids").replace("UPDATE events", f"UPDATE {store}.events").replace(
                "FROM events", f"FROM {store}.events"),
            {"sessions": sorted(set(legacy_sessions))},
        )  # fmt: skip
    ids = [f.file_id for f in run]
    derived = None
    if store == "dslogs_cache" and not found.datasets:
        derived = _refresh_derived(db, store, run, lo, hi, changed=bool(to_read or dropped_ids or renamed),
                                   materialize=materialize, readonly=readonly)  # fmt: skip
    if store == "dslogs_cache" and not readonly:
        # The write phase is over: reattach read-only, so user SQL cannot change the cache and
        # other dslogs processes can read it while this one runs.
        con.execute("CHECKPOINT dslogs_cache")
        con.execute("DETACH dslogs_cache")
        con.execute(f"ATTACH {_q(str(db.cache_path))} AS dslogs_cache (READ_ONLY)")

    # Per-file records of this run (cached files keep what was found when they were read).
    records = con.execute(
        f"SELECT file_id, rows, legacy_rows, bad_lines, samples, unreadable, size FROM {store}.files "
        "WHERE list_contains(?, file_id)", [ids]).fetchall() if ids else []  # fmt: skip
    dataset = _load_datasets(con, found.datasets, lo, hi)
    _define_views(db, store, run, lo, hi, materialize, derived, with_dataset=dataset is not None)
    db.files = [f.display for f in run] + (dataset or {}).get("sources", [])
    bad_lines = sum(r[3] for r in records) + (dataset or {}).get("bad_lines", 0)
    samples: list[dict] = list((dataset or {}).get("bad_line_samples", []))
    order = {fid: i for i, fid in enumerate(ids)}
    for r in sorted(records, key=lambda r: order[r[0]]):
        samples.extend(json.loads(r[4] or "[]"))
        if r[5]:
            display = next(f.display for f in run if f.file_id == r[0])
            skipped.append({"file": display, "reason": r[5]})
    unreadable = sum(1 for r in records if r[5]) + len(found.unreadable)
    v1, legacy = db.con.execute(
        "SELECT count(*) FILTER (WHERE source_format = 'v1'), count(*) FILTER (WHERE source_format = 'legacy') FROM events"
    ).fetchall()[0]
    events = v1 + legacy
    formats = {k: v for k, v in (("v1", v1), ("legacy", legacy)) if v}
    db.ingest = {
        "files": len(run) + (dataset or {}).get("files", 0),
        "events": int(events),
        "bad_lines": int(bad_lines),
        "skipped_files": len(found.pruned) + unreadable + duplicates + (dataset or {}).get("skipped_files", 0),
        "bad_line_samples": samples[:SAMPLES_TOTAL],
        "formats": formats,
        "bytes": int(sum(r[6] for r in records)) + int((dataset or {}).get("bytes", 0)),
        "skipped": skipped[:SAMPLES_TOTAL],
        "pruned_files": len(found.pruned),
        "unreadable_files": unreadable,
        "duplicate_files": duplicates,
        "read_files": len(to_read),
        "cached_files": reused + renamed,
        "renamed_files": renamed,
        "cache": str(db.cache_path) if db.cache_path else None,
    }


def _load_datasets(con, datasets: list[Path], lo, hi) -> dict | None:
    """Events of folders written by ``dslogs compact`` (read from their manifest's Parquet files,
    the days in the window only) into a temporary table; their ingest counts as compacted."""
    if not datasets:
        return None
    from analyzer import dataset

    rows: list[tuple[str, str | None, str]] = []
    counts = {"files": 0, "bad_lines": 0, "bytes": 0, "skipped_files": 0, "bad_line_samples": [], "sources": []}
    for root in datasets:
        manifest = dataset.load_manifest(root)
        files = dataset.dataset_files(manifest, lo, hi)
        block = dataset.dataset_ingest(manifest, files)
        for key in ("files", "bad_lines", "bytes", "skipped_files"):
            counts[key] += int(block.get(key, 0))
        counts["bad_line_samples"].extend(block.get("bad_line_samples", []))
        for item in files:
            rows.append((str(Path(root) / item["file"]), item.get("host"), item["source"]))
        counts["sources"].extend(sorted({manifest["sources"][f["source"]].get("path", f["source"]) for f in files}))
    cols = ", ".join("m.host" if c == "host" else f"p.{c}" for c in EVENT_COLUMNS)
    con.execute("CREATE OR REPLACE TEMP TABLE _dslogs_dataset_map (path VARCHAR, host VARCHAR, source VARCHAR)")
    if rows:
        con.executemany("INSERT INTO _dslogs_dataset_map VALUES (?, ?, ?)", rows)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _dslogs_dataset_events AS SELECT {cols} "
            "FROM read_parquet($paths, filename=true, union_by_name=true) AS p "
            "JOIN _dslogs_dataset_map AS m ON m.path = p.filename",
            {"paths": [r[0] for r in rows]},
        )
    else:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _dslogs_dataset_events AS SELECT "
            + ", ".join(f"NULL::{_event_type(c)} AS {c}" for c in EVENT_COLUMNS) + " WHERE false"
        )
    return counts


def _event_type(column: str) -> str:
    if column == "ts":
        return "TIMESTAMPTZ"
    if column in ("source_file", "source_format", "stage", "session_id", "request_id", "host", "status",
                  "finish_reason", "error_type", "error_msg", "failed_stage", "device", "source"):
        return "VARCHAR"
    if column == "do_sample":
        return "BOOLEAN"
    if column in ("temperature", "top_p"):
        return "DOUBLE"
    return RAW_COLUMNS.get(column, "BIGINT")


def _stats_from(lf: LogFile, resolved: str, file_id: int, fp: str | None) -> FileStats:
    return FileStats(file_id, resolved, lf.display, lf.size, lf.mtime_ns, fp)


def _derived_key(run: list[FileStats], lo, hi) -> str | None:
    """What the cached requests/sessions tables were computed from: the run's files, no window."""
    if lo is not None or hi is not None or not run:
        return None
    import hashlib

    ids = ",".join(f"{f.file_id}:{f.size}:{f.mtime_ns}" for f in sorted(run, key=lambda f: f.file_id))
    return hashlib.sha1(f"{cache_mod.SCHEMA_VERSION}|{ids}".encode()).hexdigest()


def _refresh_derived(db: LogDB, store: str, run, lo, hi, changed: bool, materialize: bool,
                     readonly: bool = False) -> bool:
    """Keep requests and sessions of this file set in the cache (they cost more than a query):
    built by a run that materialises anyway, or by the first run that finds the files unchanged.
    True when the cached tables match this run."""
    con = db.con
    key = _derived_key(run, lo, hi)
    if key is None:
        return False
    stored = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'derived_key'").fetchall()
    if stored and stored[0][0] == key:
        return True
    if readonly or (changed and not materialize):
        return False
    _define_views(db, store, run, lo, hi, materialize=False, derived=False)
    con.execute(f"CREATE OR REPLACE TABLE {store}.requests_all AS SELECT * FROM requests")
    con.execute(f"CREATE OR REPLACE TABLE {store}.sessions_all AS {view_sql('sessions').replace('FROM requests', f'FROM {store}.requests_all')}")
    con.execute(f"INSERT OR REPLACE INTO {store}.meta VALUES ('derived_key', ?)", [key])
    for name in ("sessions", "requests", "events"):
        con.execute(f"DROP VIEW IF EXISTS {name}")
    return True


def _define_views(db: LogDB, store: str, run: list[FileStats], lo, hi, materialize: bool, derived: bool | None,
                  with_dataset: bool = False) -> None:
    con = db.con
    con.execute("CREATE OR REPLACE TEMP TABLE _dslogs_run_files (file_id INTEGER PRIMARY KEY, source_file VARCHAR)")
    if run:
        con.executemany("INSERT INTO _dslogs_run_files VALUES (?, ?)", [(f.file_id, f.display) for f in run])
    where = []
    if lo is not None:
        where.append(f"e.ts >= {_q(lo.isoformat())}::TIMESTAMPTZ")
    if hi is not None:
        where.append(f"e.ts < {_q(hi.isoformat())}::TIMESTAMPTZ")
    cols = ", ".join("f.source_file" if c == "source_file" else f"e.{c}" for c in EVENT_COLUMNS)
    cond = " WHERE " + " AND ".join(where) if where else ""
    sql = f"SELECT {cols} FROM {store}.events AS e JOIN _dslogs_run_files AS f ON f.file_id = e.file_id{cond}"
    if with_dataset:
        sql += f" UNION ALL SELECT {', '.join(EVENT_COLUMNS)} FROM _dslogs_dataset_events AS e{cond}"
    con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {sql}")
    if derived:
        con.execute(f"CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM {store}.requests_all")
        con.execute(f"CREATE OR REPLACE TEMP VIEW sessions AS SELECT * FROM {store}.sessions_all")
        return
    kind = "TABLE" if materialize else "VIEW"
    con.execute(f"CREATE OR REPLACE TEMP {kind} requests AS {view_sql('requests')}")
    con.execute(f"CREATE OR REPLACE TEMP {kind} sessions AS {view_sql('sessions')}")


# -- queries -------------------------------------------------------------------------------------


def _sql_error(exc: Exception) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:500]


def run_query(db: LogDB, sql: str, params: list | dict | None = None) -> QueryResult:
    """Run one SQL statement over the views; a DuckDB error becomes a one-line UsageError."""
    if not sql or not sql.strip():
        raise UsageError("empty SQL: try \"SELECT stage, count(*) FROM events GROUP BY stage\"")
    try:
        cur = db.con.execute(sql, params) if params is not None else db.con.execute(sql)
        if cur.description is None:
            return QueryResult(columns=[], rows=[])
        columns = [d[0] for d in cur.description]
        types = [str(d[1]) for d in cur.description]
        rows = cur.fetchall()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {_sql_error(exc)}") from None
    return QueryResult(columns=columns, rows=rows, types=types)


# The timeline of one session, one row per request (dslogs session --format table).
_TIMELINE_COLUMNS = (
    "turn_index", "request_id", "start_ts", "status", "input_len", "output_len", "tokenize_ms",
    "queue_ms", "prefill_ms", "decode_ms", "inference_ms", "format_ms", "ttft_ms", "tpot_ms",
    "e2e_ms", "gpu_wait_pct", "gpu_util_pct", "num_beams", "max_new_tokens", "error_type",
)  # fmt: skip


def session_events(db: LogDB, session_id: str, timeline: bool = True) -> QueryResult:
    """One session: its request timeline (``timeline``) or all its events in ts order."""
    if timeline:
        sql = (
            f"SELECT {', '.join(_TIMELINE_COLUMNS)} FROM requests WHERE session_id = ? "
            "ORDER BY turn_index"
        )
    else:
        sql = "SELECT * FROM events WHERE session_id = ? ORDER BY ts, source_file, stage"
    return run_query(db, sql, [session_id])


__all__ = ["LogDB", "open_logs", "run_query", "session_events", "RAW_COLUMNS", "EVENT_COLUMNS"]
