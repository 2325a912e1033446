"""Reading log files into ``store.events``: strict ``read_json`` statements, one per file (small
files share one), several at once (the fast path), and for a file DuckDB rejects, chunks read as
they are and only a rejected chunk judged line by line (``dslogs.analyzer.ingest.validate``), so its good
lines are kept and its bad ones counted per file. Compacted datasets (``dslogs compact``) are
read from Parquet.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import queue
import re
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from dslogs.analyzer.core.errors import one_line
from dslogs.analyzer.ingest import formats
from dslogs.analyzer.ingest.columns import (
    EVENT_COLUMNS,
    EVENT_TYPES,
    RAW_COLUMNS,
    columns_struct,
    event_type,
    sql_literal,
)
from dslogs.analyzer.ingest.filestats import FileStats
from dslogs.analyzer.ingest.validate import (
    FINITE_LIMIT,
    MAX_LINE_BYTES,
    Line,
    add_bad,
    clean_bytes,
    duckdb_reason,
    judge,
    parse_line,
    raw_chunks,
    rule_reasons,
    short,
)
from dslogs.analyzer.ingest.views import view_sql

BATCH_BYTES = 512 << 20  # decompressed bytes per batch (bounds memory, paces progress)
GZ_RATIO = 8  # decompressed / compressed, to size batches before reading
# Files below this (decompressed) share one read statement, up to this much in all: a statement
# costs ~10 ms of planning, and read_sql's two readers pair rows reliably only within few files.
GROUP_BYTES = 16 << 20
MAX_READERS = 4  # read statements at once (each runs on one thread: its POSITIONAL JOIN)
# A .gz up to this size (decompressed) is inflated once into the workdir for its read statement:
# read_sql's two readers then read it plain instead of inflating it twice (a third of a bare
# read_json scan's time is gunzip). Bounds the workdir to MAX_READERS times this.
PLAIN_MAX_BYTES = 256 << 20


def read_sql(store: str) -> str:
    """INSERT of the normalised events of the files in $files (read paths) into store.events.

    read_json gives the typed fields; a parallel read_csv of the same files gives each line's
    byte length (line_bytes). Both skip blank lines and keep file order, so they line up row by
    row (POSITIONAL JOIN); the post-read check sends any file where they do not to the slow path.
    Over many large files they do not (DuckDB 2.0 shifts one side by a few dozen rows from the
    third or fourth file on): ``Reader.read`` gives a large file a statement of its own.
    """
    raw = (
        # A row whose two sides come from different files means the readers fell out of step
        # (a whitespace-only line, a stray CR): no line_bytes, so the check re-reads that file.
        "SELECT j.*, CASE WHEN j.file_index IS NOT DISTINCT FROM c.file_index THEN c.line_bytes END AS line_bytes, "
        "CAST(list_extract($file_ids, CAST(coalesce(j.file_index, c.file_index) AS BIGINT) + 1) AS INTEGER) AS file_id "
        f"FROM read_json($files, columns={columns_struct()}, format='newline_delimited', "
        f"maximum_object_size={MAX_LINE_BYTES + 1024}) AS j "
        "POSITIONAL JOIN ("
        "  SELECT strlen(line) + 1 AS line_bytes, file_index"
        "  FROM read_csv($files, columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='',"
        f"   header=false, auto_detect=false, max_line_size={MAX_LINE_BYTES + 2})"
        "  WHERE line IS NOT NULL"
        ") AS c"
    )
    return f"INSERT INTO {store}.events WITH dslogs_raw AS ({raw}) {view_sql('events')}"


def statement_read_sql(store: str, fmt: formats.Format) -> str:
    """INSERT of the events ``fmt`` (a statement format) reads into store.events: of the file
    $file (file $file_id), or, for a format that stages its lines, of the files staged (each row
    with its file_id). Its rows carry no line of their own: line_bytes is NULL (no log-volume
    figure)."""
    sql = fmt.statement().replace("{max_object_size}", str(MAX_LINE_BYTES + 1024))
    raw = formats.raw_select(sql, RAW_COLUMNS, fmt.gives)
    if fmt.stage:
        raw = raw.replace(" FROM (", ", o.file_id FROM (", 1)
        raw = (f"SELECT r.* EXCLUDE (file_id), CAST(r.file_id AS INTEGER) AS file_id, "
               f"NULL::BIGINT AS line_bytes FROM ({raw}) AS r")  # fmt: skip
    else:
        raw = f"SELECT r.*, CAST($file_id AS INTEGER) AS file_id, NULL::BIGINT AS line_bytes FROM ({raw}) AS r"
    return f"INSERT INTO {store}.events WITH dslogs_raw AS ({raw}) {view_sql('events')}"


def _groups(files: list[FileStats]) -> list[list[FileStats]]:
    """Consecutive files per read statement: a file of GROUP_BYTES or more (decompressed, as
    estimated) alone, smaller ones together up to GROUP_BYTES."""
    groups: list[list[FileStats]] = []
    weight = 0
    for f in files:
        w = f.size * (GZ_RATIO if f.display.endswith(".gz") else 1)
        if groups and len(groups[-1]) and weight + w <= GROUP_BYTES and w < GROUP_BYTES:
            groups[-1].append(f)
            weight += w
        else:
            groups.append([f])
            weight = w
    return groups


_OUR_BUGS = (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException)

# A row holding a float that is no measurement (validate's rule 9: NaN, infinities, huge): its
# line is bad. NaN and the infinities compare above any number in DuckDB.
NOT_FINITE = " OR ".join(f'abs("{c}") >= {FINITE_LIMIT:.0e}' for c, kind in EVENT_TYPES.items() if kind == "DOUBLE")

_BOM = b"\xef\xbb\xbf"
# Half a UTF-16 pair as a JSON escape: Python reads it, DuckDB rejects the whole line.
_LONE_SURROGATE = re.compile(
    rb"(?<!\\)\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<![\\]u[dD][89abAB][0-9a-fA-F]{2})(?<!\\)\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _fix_surrogates(raw: bytes) -> tuple[bytes, bool]:
    """A line with each lone surrogate escape replaced by U+FFFD's (the one value is lost, not
    the line), and whether there was one."""
    if b"\\u" not in raw:
        return raw, False
    fixed, n = _LONE_SURROGATE.subn(rb"\\ufffd", raw)
    return fixed, bool(n)


def _judge_line(raw: bytes, fmt) -> tuple[bool, str | None]:
    """Whether a JSON line of format ``fmt`` is kept, and else why not (None for a blank line):
    judged as a JSON-lines log's lines are (LINE_RULES 1-5), with the same reasons."""
    value, reason = parse_line(raw)
    if reason is not None:
        return False, reason
    if value is None:
        return False, None
    if value is ...:
        return False, "malformed JSON (nested too deep)"
    problem = fmt.line_problem(value)
    return problem is None, problem


def _one_object(path: Path) -> dict | None:
    """A file that is one (pretty-printed) JSON object, else None."""
    try:
        with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as fh:
            value = json.loads(fh.read(PLAIN_MAX_BYTES + 1).removeprefix(_BOM))
    except (OSError, EOFError, zlib.error, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _own_words(exc: Exception, path: Path, display: str) -> str:
    """DuckDB's one line about a copy of a file, naming the file itself."""
    return one_line(exc, limit=160).replace(str(path), display)


def _renumber(f: FileStats, found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(the k-th non-blank line, reason) as (line number, reason): DuckDB numbers the lines it
    reads, skipping blank ones."""
    wanted = {k for k, _ in found}
    numbers: dict[int, int] = {}
    k = 0
    try:
        with (gzip.open if f.display.endswith(".gz") else open)(f.path, "rb") as src:
            for no, raw in enumerate(src, start=1):
                if raw.strip():
                    k += 1
                    if k in wanted:
                        numbers[k] = no
                        if len(numbers) == len(wanted):
                            break
    except (OSError, EOFError, zlib.error):
        pass
    return [(numbers.get(k, k), reason) for k, reason in found]


class Reader:
    """Reads files into ``store.events`` and records what it found per file."""

    def __init__(self, con, store: str, tz: str, workdir: Path, session_attr: str | None = None):
        self.con = con
        self.store = store
        self.tz = tz
        self.workdir = workdir
        self.session_attr = session_attr or ""
        self._local = threading.local()

    # One statement for many files; raises when DuckDB rejects one of them (nothing is kept).
    def _insert(self, loads: list[tuple[str, int]], lenient: bool = False) -> None:
        sql = read_sql(self.store)
        if lenient:
            sql = sql.replace(
                "format='newline_delimited',", "format='newline_delimited', ignore_errors=true,"
            )
        # The worker's cursor when run by _insert_groups (a cursor per thread), else ours.
        (getattr(self._local, "con", None) or self.con).execute(
            sql, {"files": [p for p, _ in loads], "file_ids": [i for _, i in loads], "tz": self.tz}
        )

    def _insert_groups(self, groups: list[list[FileStats]]) -> list[list[FileStats]]:
        """Each group in one statement, up to MAX_READERS statements at once (each on its own
        cursor: one statement keeps to one thread, so the cores are used by running several);
        the groups DuckDB rejected (nothing of them kept)."""
        if not groups:
            return []
        try:
            threads = int(self.con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        except (duckdb.Error, ValueError):
            threads = 1
        workers = max(1, min(threads, MAX_READERS, len(groups)))
        if workers == 1:
            return [g for g in groups if not self._try_insert(g, self.con)]
        cursors: queue.SimpleQueue = queue.SimpleQueue()
        opened = []
        for _ in range(workers):
            cur = self.con.cursor()
            # A cursor is a new session: our zone too, so no read depends on who ran it.
            cur.execute(f"SET TimeZone = {sql_literal(self.tz)}")
            cursors.put(cur)
            opened.append(cur)

        def task(group: list[FileStats]) -> bool:
            cur = cursors.get()  # a connection runs one statement at a time
            try:
                return self._try_insert(group, cur)
            finally:
                cursors.put(cur)

        pool = ThreadPoolExecutor(workers)
        try:
            ok = list(pool.map(task, groups))
        except BaseException:
            # Ctrl-C (or a bug of ours): stop the statements still running, then wait for them.
            for cur in opened:
                cur.interrupt()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for cur in opened:
                cur.close()
        return [g for g, good in zip(groups, ok, strict=True) if not good]

    def _try_insert(self, group: list[FileStats], con) -> bool:
        self._local.con = con
        plain = {f.file_id: self._inflate(f) for f in group}
        try:
            self._insert([(str(plain[f.file_id] or f.path), f.file_id) for f in group])
        except _OUR_BUGS:
            raise
        except duckdb.Error:
            return False
        finally:
            self._local.con = None
            for path in plain.values():
                if path is not None:
                    path.unlink(missing_ok=True)
        return True

    def _inflate(self, f: FileStats) -> Path | None:
        """The content of ``f``, a .gz, as a plain file in the workdir; None (the .gz is read
        as it is, and judged as before) unless it is one or more whole gzip members, nothing
        after them, inflating to at most PLAIN_MAX_BYTES."""
        if not str(f.path).endswith(".gz") or f.size > PLAIN_MAX_BYTES:
            return None
        try:
            with open(f.path, "rb") as src:
                src.seek(-4, os.SEEK_END)
                # gzip's trailer: the (last member's) decompressed length mod 2**32 (RFC 1952)
                if int.from_bytes(src.read(4), "little") > PLAIN_MAX_BYTES:
                    return None  # known too large: do not inflate it only to give up
        except OSError:
            return None
        out = self.workdir / f"plain-{f.file_id}.jsonl"
        written, members, fresh = 0, 0, True
        try:
            with open(f.path, "rb") as src, open(out, "wb") as dst:
                d = zlib.decompressobj(31)
                while chunk := src.read(1 << 20):
                    while chunk:
                        fresh = False
                        data = d.decompress(chunk)
                        written += len(data)
                        if written > PLAIN_MAX_BYTES:
                            raise ValueError("too large")
                        dst.write(data)
                        chunk = b""
                        if d.eof:  # the next member, if any (cat a.gz b.gz is a gzip file)
                            members += 1
                            chunk, d, fresh = d.unused_data, zlib.decompressobj(31), True
        except (OSError, ValueError, zlib.error):
            out.unlink(missing_ok=True)
            return None
        if not fresh or not members:  # cut inside a member
            out.unlink(missing_ok=True)
            return None
        return out

    def _delete(self, file_ids: list[int]) -> None:
        if file_ids:
            self.con.execute(
                f"DELETE FROM {self.store}.events WHERE list_contains(?, file_id)", [file_ids]
            )

    def _suspect_rows(self, file_ids: list[int]) -> dict[int, int]:
        """Rows a clean read cannot have: no stage, no time, no line length, an oversized line."""
        rows = self.con.execute(
            f"SELECT file_id, count(*) FROM {self.store}.events WHERE list_contains(?, file_id) "
            f"AND (stage IS NULL OR ts IS NULL OR line_bytes IS NULL OR line_bytes > {MAX_LINE_BYTES + 1} OR {NOT_FINITE}) "
            "GROUP BY file_id",
            [file_ids],
        ).fetchall()
        return {fid: n for fid, n in rows}

    def read(self, files: list[FileStats], watch=None) -> None:
        """Read ``files`` (plain or .gz); fast strict path first, line-by-line for damaged ones.
        Files of a statement format (``dslogs.analyzer.ingest.formats``) are read by its own statement.
        ``watch(con, size)``: a context that reports the bytes read while its body runs
        (``core.progress.statement``)."""
        own: list[tuple[FileStats, formats.Format]] = []
        for f in files:
            if f.size > 0:
                fmt = formats.sniff_file(f.path)
                if fmt is not None and fmt.read == formats.STATEMENT:
                    own.append((f, fmt))
        staged: dict[str, list[FileStats]] = {}
        for f, fmt in own:
            if fmt.stage is None:
                with watch(self.con, f.size) if watch else contextlib.nullcontext():
                    self._read_statement(f, fmt)
            else:
                staged.setdefault(fmt.name, []).append(f)
        for name, group in staged.items():
            with watch(self.con, sum(f.size for f in group)) if watch else contextlib.nullcontext():
                self._read_staged(formats.by_name(name), group)
        taken = {id(f) for f, _ in own}
        files = [f for f in files if id(f) not in taken]
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
            if watch:
                # bytes as DuckDB reads them, not one step per batch (a batch is up to BATCH_BYTES)
                with watch(self.con, sum(f.size for f in batch)):
                    self._read_batch(batch)
            else:
                self._read_batch(batch)

    def _read_batch(self, batch: list[FileStats]) -> None:
        readable = [f for f in batch if f.size > 0]
        for f in batch:
            if f.size == 0:
                f.unreadable = "empty file"
        slow: list[FileStats] = []
        groups = _groups(readable)
        for group in self._insert_groups(groups):
            # One of them is damaged: read them one by one (a group of one: it is that one).
            alone = self._insert_groups([[f] for f in group]) if len(group) > 1 else [group]
            slow += [g[0] for g in alone]
        suspects = self._suspect_rows([f.file_id for f in readable if f not in slow])
        shared = {f.file_id: g for g in groups if len(g) > 1 for f in g}
        if any(fid in shared for fid in suspects):
            # Read again alone: a file read out of step with its neighbours may be fine. The
            # file before a suspect one too: a line only one reader skips (whitespace) shifts
            # its own line lengths silently and shows only at the next file's first row. (A
            # file read alone shows it itself: its last row lacks a side.)
            again_ids = {fid for fid in suspects if fid in shared}
            for g in groups:
                for before, f in zip(g, g[1:], strict=False):
                    if f.file_id in again_ids:
                        again_ids.add(before.file_id)
            again = [f for f in readable if f.file_id in again_ids and f not in slow]
            self._delete([f.file_id for f in again])
            slow += [g[0] for g in self._insert_groups([[f] for f in again])]
            rechecked = self._suspect_rows([f.file_id for f in again if f not in slow])
            suspects = {
                fid: n for fid, n in suspects.items() if fid not in again_ids
            } | rechecked
        for f in readable:
            if f.file_id in suspects and f not in slow:
                slow.append(f)
        self._delete([f.file_id for f in slow])
        for f in slow:
            self._read_slow(f)

    # -- formats read by their own statement (OTLP/JSON traces) --------------------------------

    def _read_staged(self, fmt: formats.Format, files: list[FileStats]) -> None:
        """Files of a format that stages its lines (``Format.stage``): unpacked as their writer
        wrote them (compression, framing), their lines staged several files a statement (one
        statement's planning costs more than a small file's read), the events read from the
        stage in one statement, and the problems the stage found counted per file and line. A
        file DuckDB cannot stage as it is is staged line by line (``_stage_lines``)."""
        for sql in fmt.prepare:
            self.con.execute(sql)
        by_comp: dict[str, list[tuple[FileStats, Path]]] = {}
        made: list[Path] = []
        for f in files:
            got = fmt.unpack(Path(f.path), self.workdir, f"{fmt.name}-{f.file_id}") if fmt.unpack else (Path(f.path), "auto")
            if isinstance(got, str):
                f.unreadable = got
                continue
            path, comp = got
            if path != Path(f.path):
                made.append(path)
            by_comp.setdefault(comp, []).append((f, path))
        table = fmt.staged_as
        self._relined: set[int] = set()
        # (line, reason) of each file, counted in line order once its staged problems are known
        self._pending: dict[int, list[tuple[int, str]]] = {}
        try:
            for comp, items in by_comp.items():
                paths = {f.file_id: p for f, p in items}
                self.con.execute(f"DROP TABLE IF EXISTS {table}")
                self._staged_rows = False
                for group in _groups([f for f, _ in items]):
                    if comp == "none" and len(group) > 1 and self._stage_joined(fmt, group):
                        continue
                    if self._stage(fmt, comp, [(paths[f.file_id], f.file_id) for f in group]):
                        continue
                    for f in group:
                        if len(group) > 1 and self._stage(fmt, comp, [(paths[f.file_id], f.file_id)]):
                            continue
                        self._stage_lines(fmt, f, paths[f.file_id], comp)
                if not self._staged_rows:
                    continue
                self.con.execute(statement_read_sql(self.store, fmt), self._statement_params(fmt))
                spans = self._count_problems(table, {f.file_id: (f, paths[f.file_id], comp) for f, _ in items})
                self.con.execute(f"DROP TABLE IF EXISTS {table}")
                for f, _ in items:
                    if not spans.get(f.file_id) and not self._pending.get(f.file_id) and not f.unreadable:
                        # no span at all (metrics or logs only): named, as on the command line
                        f.unreadable = "holds " + formats.describe_file(f.path)
        finally:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
            for path in made:
                path.unlink(missing_ok=True)
            by_id = {f.file_id: f for f in files}
            for fid, found in self._pending.items():
                seen: set[int] = set()
                for line, reason in sorted(found):
                    if line not in seen:  # a line is one bad line, its first reason said
                        seen.add(line)
                        add_bad(by_id[fid], line, reason)

    def _statement_params(self, fmt: formats.Format) -> dict:
        sql = fmt.statement()
        params: dict = {"tz": self.tz}
        if "$session_attr" in sql:
            params["session_attr"] = self.session_attr
        return params

    def _stage_joined(self, fmt: formats.Format, group: list[FileStats]) -> bool:
        """Small plain files staged as one file of their lines (DuckDB sets up a typed JSON read
        per file: most of the cost of a file of one span), each line numbered with its file's
        id and its own line; False when DuckDB rejects it (nothing staged)."""
        joined = self.workdir / f"{fmt.name}-joined.jsonl"
        line_files: list[int] = []
        lines: list[int] = []
        try:
            with open(joined, "wb") as out:
                for f in group:
                    with open(f.path, "rb") as src:
                        data = src.read(GROUP_BYTES + 1)
                    if len(data) > GROUP_BYTES:
                        return False
                    for no, raw in enumerate(data.removeprefix(_BOM).split(b"\n"), start=1):
                        if raw.strip():
                            out.write(raw + b"\n")
                            line_files.append(f.file_id)
                            lines.append(no)
            if not self._stage(fmt, "none", [(joined, group[0].file_id)], lines=lines, line_files=line_files):
                return False
        except OSError:
            return False
        finally:
            joined.unlink(missing_ok=True)
        self._relined.update(f.file_id for f in group)
        return True

    def _stage(self, fmt: formats.Format, comp: str, loads: list[tuple[Path, int]],
               lines: list[int] | None = None, line_files: list[int] | None = None) -> bool:  # fmt: skip
        """Stage files (or one copy, its lines numbered ``lines``, of the files ``line_files``);
        False when DuckDB rejects one (nothing of them staged)."""
        sql = fmt.stage(comp).replace("{max_object_size}", str(MAX_LINE_BYTES + 1024))
        head = (f"INSERT INTO {fmt.staged_as} " if self._staged_rows else
                f"CREATE OR REPLACE TEMP TABLE {fmt.staged_as} AS ")  # fmt: skip
        try:
            self.con.execute(head + sql, {"files": [str(p) for p, _ in loads], "file_ids": [i for _, i in loads],
                                          "lines": lines, "line_files": line_files})  # fmt: skip
        except _OUR_BUGS:
            raise
        except duckdb.Error:
            return False
        self._staged_rows = True
        return True

    def _stage_lines(self, fmt: formats.Format, f: FileStats, path: Path, comp: str) -> None:
        """One file DuckDB rejects as it is: its lines judged one at a time (one line in memory),
        the JSON ones staged by halves until each rejected line stands alone (counted bad with
        DuckDB's reason); a lone surrogate is replaced (counted), a BOM dropped, a file that is
        one pretty-printed request read as one line."""
        pending: list[tuple[int, str]] = []
        if comp == "zstd":  # Python has no zstd reader of its own here: DuckDB's word
            try:
                self.con.execute(f"SELECT count(*) FROM read_json(?, format='newline_delimited', compression='zstd', "
                                 f"maximum_object_size={MAX_LINE_BYTES + 1024})", [str(path)])  # fmt: skip
            except duckdb.Error as exc:
                f.unreadable = f"{fmt.unreadable} DuckDB cannot read ({_own_words(exc, path, f.display)})"
            return
        kept: list[tuple[int, bytes]] = []
        for chunk in raw_chunks(f, pending):
            for no, raw in chunk:
                if no == 1:
                    raw = raw.removeprefix(_BOM)
                raw, fixed = _fix_surrogates(raw)
                keep, reason = _judge_line(raw, fmt)
                if not keep:
                    if reason is not None:
                        pending.append((no, reason))
                    continue
                if fixed:
                    pending.append((no, "lone surrogate in a string (replaced by U+FFFD)"))
                kept.append((no, raw))
        if not kept and pending and f.size <= PLAIN_MAX_BYTES:
            whole = _one_object(Path(f.path))
            if whole is not None and fmt.line_problem(whole) is None:
                pending = []
                kept = [(1, json.dumps(whole, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace"))]
        clean = self.workdir / f"{fmt.name}-{f.file_id}.jsonl"
        self._relined.add(f.file_id)
        try:
            todo = [kept] if kept else []
            while todo:
                part = todo.pop()
                with open(clean, "wb") as out:
                    for _no, raw in part:
                        out.write(clean_bytes(raw))
                if self._stage(fmt, "auto", [(clean, f.file_id)], lines=[no for no, _ in part]):
                    continue
                if len(part) == 1:
                    pending.append((part[0][0], self._stage_reason(fmt, clean, f)))
                    continue
                half = len(part) // 2
                todo += [part[half:], part[:half]]
        finally:
            clean.unlink(missing_ok=True)
            self._pending.setdefault(f.file_id, []).extend(pending)

    def _stage_reason(self, fmt: formats.Format, clean: Path, f: FileStats) -> str:
        """DuckDB's reason for rejecting one staged line, in the file's own words."""
        try:
            self.con.execute(fmt.stage("auto").replace("{max_object_size}", str(MAX_LINE_BYTES + 1024)),
                             {"files": [str(clean)], "file_ids": [f.file_id], "lines": None,
                              "line_files": None}).fetchall()  # fmt: skip
        except duckdb.Error as exc:
            return duckdb_reason(_own_words(exc, clean, f.display))
        return "rejected by the reader"

    def _count_problems(self, table: str, files: dict[int, tuple[FileStats, Path, str]]) -> dict[int, int]:
        """The staged problems as bad lines to count (``_pending``): one per line of a file (its
        first reason); the spans staged of each file."""
        rows = self.con.execute(
            f"SELECT file_id, line_no, flatten(list(problems) FILTER (WHERE len(problems) > 0))[1], count(s) "
            f"FROM {table} GROUP BY ALL").fetchall()  # fmt: skip
        by_file: dict[int, list[tuple[int, str]]] = {}
        spans: dict[int, int] = {}
        for fid, line, reason, n in rows:
            spans[fid] = spans.get(fid, 0) + n
            if reason is not None:
                by_file.setdefault(fid, []).append((int(line), reason))
        # Rows the statement gives with no stage are spans it could not take as they were
        # (error_msg why, input_len the staged line): bad lines too, removed from the events.
        where = f"FROM {self.store}.events WHERE list_contains(?, file_id) AND stage IS NULL"
        taken = self.con.execute(f"SELECT file_id, coalesce(input_len, 0), error_msg {where}", [list(files)]).fetchall()
        if taken:
            self.con.execute(f"DELETE {where}", [list(files)])
            for fid, line, reason in taken:
                by_file.setdefault(fid, []).append((int(line), reason or "rejected by the reader"))
        for fid, found in by_file.items():
            f, path, comp = files[fid]
            if fid not in self._relined and comp != "zstd":
                # read as it is: the stage numbered its non-blank lines
                found = _renumber(f, found)
            self._pending.setdefault(fid, []).extend(found)
        return spans

    def _insert_statement(self, fmt: formats.Format, path: str, file_id: int) -> None:
        for sql in fmt.prepare:
            self.con.execute(sql)
        sql = statement_read_sql(self.store, fmt)
        params = {"file": path, "file_id": file_id, "tz": self.tz}
        if "$session_attr" in sql:
            params["session_attr"] = self.session_attr
        self.con.execute(sql, params)

    def _statement_problems(self, f: FileStats) -> None:
        """A statement's rows with no stage are what it could not take as it was (error_msg why,
        input_len the line): counted as bad lines of the file and removed."""
        where = f"FROM {self.store}.events WHERE file_id = ? AND stage IS NULL"
        rows = self.con.execute(f"SELECT coalesce(input_len, 0), error_msg {where}", [f.file_id]).fetchall()
        if rows:
            self.con.execute(f"DELETE {where}", [f.file_id])
            for line, reason in sorted(rows):
                add_bad(f, line, reason)

    def _read_statement(self, f: FileStats, fmt: formats.Format) -> None:
        """One file of a statement format in one statement (DuckDB streams its lines, megabytes
        each); when DuckDB rejects it, its lines are judged one at a time (one line in memory)
        and the good ones read, the others counted as bad lines."""
        try:
            self._insert_statement(fmt, str(f.path), f.file_id)
            self._statement_problems(f)
            return
        except _OUR_BUGS:
            raise
        except duckdb.Error:
            pass
        clean = self.workdir / f"{fmt.name}-{f.file_id}.jsonl"
        pending: list[tuple[int, str]] = []
        kept = 0
        with open(clean, "wb") as out:
            for chunk in raw_chunks(f, pending):
                for no, raw in chunk:
                    keep, reason = _judge_line(raw, fmt)
                    if not keep:
                        if reason is not None:
                            pending.append((no, reason))
                        continue
                    out.write(clean_bytes(raw))
                    kept += 1
        try:
            if kept:
                try:
                    self._insert_statement(fmt, str(clean), f.file_id)
                    self._statement_problems(f)
                except _OUR_BUGS:
                    raise
                except duckdb.Error as exc:
                    f.unreadable = f"{fmt.unreadable} DuckDB cannot read ({one_line(exc, limit=160)})"
        finally:
            clean.unlink(missing_ok=True)
            for line, reason in sorted(pending):
                add_bad(f, line, reason)

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
                add_bad(f, line, reason)

    def _read_lines(self, f: FileStats, pending: list[tuple[int, str]]) -> None:
        clean = self.workdir / f"clean-{f.file_id}.jsonl"
        kept_no: list[int] = []  # line numbers of the rows inserted, in order
        for chunk in raw_chunks(f, pending):
            # Most of a damaged file is fine: a chunk DuckDB reads as it is costs one read.
            if self._insert_chunk(chunk, f.file_id, clean):
                kept_no.extend(no for no, _ in chunk)
                continue
            kept = self._judge_chunk(chunk, pending)
            if not kept:
                continue
            with open(clean, "wb") as out:
                for _no, raw in kept:
                    out.write(clean_bytes(raw))
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
                    f.unreadable = f"rejected by the reader ({one_line(exc, limit=160)})"
                    continue
            kept_no.extend(no for no, _ in kept)
        clean.unlink(missing_ok=True)
        if not kept_no:
            return
        # Rows DuckDB read but cannot place in time (or that lost their stage): bad lines too.
        bad = self.con.execute(
            f"""SELECT k, stage IS NULL, ts IS NULL FROM (
                    SELECT row_number() OVER (ORDER BY rowid) AS k, *
                    FROM {self.store}.events WHERE file_id = ?)
                WHERE stage IS NULL OR ts IS NULL OR line_bytes IS NULL OR {NOT_FINITE}""",
            [f.file_id],
        ).fetchall()
        lines = {
            kept_no[k - 1]: (no_stage, no_ts) for k, no_stage, no_ts in bad if k - 1 < len(kept_no)
        }
        rules = rule_reasons(f, set(lines)) if lines else {}
        for line, (no_stage, no_ts) in lines.items():
            # The rule by the line itself (no ts, no timestamp) where it says; DuckDB's else.
            fallback = (
                "no stage"
                if no_stage
                else ("unreadable time (timestamp)" if no_ts else "not a finite number")
            )
            pending.append((line, rules.get(line) or fallback))
        if bad:
            self.con.execute(
                f"DELETE FROM {self.store}.events WHERE file_id = ? AND (stage IS NULL OR ts IS NULL OR line_bytes IS NULL OR {NOT_FINITE})",
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

    def _judge_chunk(
        self, chunk: list[tuple[int, bytes]], pending: list[tuple[int, str]]
    ) -> list[tuple[int, bytes]]:
        """The lines of a chunk DuckDB rejected that are events after all (LINE_RULES)."""
        lines: list[Line] = []
        for no, raw in chunk:
            item = judge(raw, no)
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
        probe.write_bytes(clean_bytes(raw))
        try:
            self.con.execute(
                f"SELECT * FROM read_json(?, columns={columns_struct()}, format='newline_delimited', "
                f"maximum_object_size={MAX_LINE_BYTES + 1024})", [str(probe)]).fetchall()  # fmt: skip
        except _OUR_BUGS:
            raise
        except duckdb.Error as exc:
            return duckdb_reason(str(exc))
        return None

    def _check_times(self, lines: list[Line]) -> None:
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
                item.suspect = f"unreadable time: ts={short(item.ts)}"


def load_datasets(con, datasets: list[Path], lo, hi) -> dict | None:
    """Events of folders written by ``dslogs compact`` (read from their manifest's Parquet files,
    the days in the window only) into a temporary table; their ingest counts as compacted."""
    if not datasets:
        return None
    from dslogs.analyzer.ingest import dataset

    rows: list[tuple[str, str | None, str]] = []
    counts = {
        "files": 0,
        "bad_lines": 0,
        "bytes": 0,
        "skipped_files": 0,
        "bad_line_samples": [],
        "sources": [],
    }
    for root in datasets:
        manifest = dataset.load_manifest(root)
        files = dataset.dataset_files(manifest, lo, hi)
        block = dataset.dataset_ingest(manifest, files)
        for key in ("files", "bad_lines", "bytes", "skipped_files"):
            counts[key] += int(block.get(key, 0))
        counts["bad_line_samples"].extend(block.get("bad_line_samples", []))
        for item in files:
            rows.append((str(Path(root) / item["file"]), item.get("host"), item["source"]))
        counts["sources"].extend(
            sorted({manifest["sources"][f["source"]].get("path", f["source"]) for f in files})
        )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _dslogs_dataset_map (path VARCHAR, host VARCHAR, source VARCHAR)"
    )
    if rows:
        paths = [r[0] for r in rows]
        # A dataset compacted before a field was added to the schema lacks its column: NULL.
        have = {r[0] for r in con.execute(
            "DESCRIBE SELECT * FROM read_parquet($paths, union_by_name=true)", {"paths": paths}).fetchall()}  # fmt: skip
        cols = ", ".join(
            "m.host" if c == "host" else f"p.{c}" if c in have else f"NULL::{event_type(c)} AS {c}"
            for c in EVENT_COLUMNS
        )
        con.executemany("INSERT INTO _dslogs_dataset_map VALUES (?, ?, ?)", rows)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _dslogs_dataset_events AS SELECT {cols} "
            "FROM read_parquet($paths, filename=true, union_by_name=true) AS p "
            "JOIN _dslogs_dataset_map AS m ON m.path = p.filename",
            {"paths": paths},
        )
    else:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _dslogs_dataset_events AS SELECT "
            + ", ".join(f"NULL::{event_type(c)} AS {c}" for c in EVENT_COLUMNS)
            + " WHERE false"
        )
    return counts
