"""Source formats: the registry of what dslogs reads, one module per format (``formats/<name>.py``).

A format module defines ``FORMAT``, a ``Format``: how a file in it is sniffed (from its first
bytes, up to its first complete line), which file names a folder search takes for it, how it is
read into the events table, the ``source_format`` values of its events and what each does not
carry, and how a file of it that yields nothing is described. The registry imports every module
of this package the first time it is asked (``registry()``), so a new format is its module alone;
discovery, the reader, ``open_logs``, the events view's ``source_format`` and watch loop over it.

Formats are read three ways (``Format.read``): ``lines`` share one strict ``read_json`` of every
log field (v1 and legacy lines may share a file and are told apart per line by the events view's
``source_format``, built here from each format's ``tag``); ``statement`` formats are read by a
SELECT of their own from a file (OTLP traces); ``snapshot`` formats hold no events and are taken
aside into the report's server metrics (Prometheus).

``describe`` says what a file that is in no known format looks like (OTLP metrics or logs, a
JSON array, a dslogs report, CSV, text), for the one line that names it.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import json
import pkgutil
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SNIFF_BYTES = 64 << 10  # enough for the first line of any log; an OTLP line's first key

LINES, STATEMENT, SNAPSHOT = "lines", "statement", "snapshot"
READS = (LINES, STATEMENT, SNAPSHOT)

# The inputs a check or a rule may need and a source format may not carry (Format.not_carried).
INPUTS = {
    "tokenize": "the tokenize stage's time",
    "queue": "the time a request waited in a queue",
    "prefill": "the prefill stage's time",
    "format": "the post-processing (format) stage's time",
    "gpu_memory": "GPU memory per request or session",
    "gpu_util": "GPU utilisation samples",
    "kv_cache": "the KV-cache size",
    "reasoning": "reasoning token counts",
}

NOT_AVAILABLE = "N/A (source)"

# The names of logs of JSON lines, whichever line format writes them: ``*.jsonl``, our rotation
# ``*.N.jsonl``, logrotate's ``*.jsonl.N``, each optionally gzipped (discovery orders them).
JSONL_NAMES = r"^(?!\.).*\.jsonl(?:\.\d+)?(?:\.gz)?$"
JSONL_NAMES_TEXT = "*.jsonl, *.N.jsonl, *.jsonl.N"


@dataclass(frozen=True)
class Format:
    """One source format; its module is ``dslogs.analyzer.ingest.formats.<name>``."""

    name: str  # its module's name
    order: int  # sniff order, and the order of the source_format CASE's arms (lowest first)
    writer: str  # what writes it (docs, `dslogs schema`)
    # (first bytes, a function giving the first line as a JSON object or None): is it this
    # format? Watch asks it of single lines of the statement formats, so parse only when needed.
    sniff: Callable[[bytes, Callable[[], dict | None]], bool]
    read: str = LINES  # one of READS
    names: str | None = None  # regex of file names a folder search takes
    sniffed_names: str | None = None  # regex of names it takes when the file sniffs as this format
    names_text: str = ""  # how the "no log files found" line words its names
    # source_format values of its events and what they mean
    source_formats: dict[str, str] = field(default_factory=dict)
    tag: tuple[str, str] | None = None  # (SQL condition, SQL value): its arm of source_format
    # What a source_format of it does not carry (INPUTS): a check or rule needing it reads N/A.
    not_carried: dict[str, frozenset[str]] = field(default_factory=dict)
    # source_format -> why its token counts are an instrumentor's estimate
    estimated_tokens: dict[str, str] = field(default_factory=dict)
    line_name: str | None = None  # how one-line messages name its lines
    # (the first line, it parsed or None): written in this format though damaged?
    damaged: Callable[[bytes, dict | None], bool] | None = None
    # (a file's first bytes, stripped): what a file of it that yields nothing looks like, or None
    describe: Callable[[bytes], str | None] | None = None
    # read == STATEMENT: a SELECT of raw event columns (``gives``) from the file $file, with
    # ``{max_object_size}`` for the line limit; ``prepare`` runs first on the connection;
    # ``line_problem`` judges one parsed line on the slow path (a reason, or None: keep it).
    statement: Callable[[], str] | None = None
    gives: frozenset[str] = frozenset()
    prepare: tuple[str, ...] = ()
    line_problem: Callable[[dict], str | None] | None = None
    unreadable: str = ""  # "<this> DuckDB cannot read (...)"
    # read == STATEMENT, optional: (compression) -> a SELECT over the files $files ($file_ids;
    # in a copy, else NULL: $lines, each non-blank line's number, and $line_files, its file's id
    # where the copy joins several files) whose rows the statement
    # reads from the temporary table ``staged_as``; its columns file_id, line_no and problems
    # (reasons: a bad line of that file each, the rest of the line read)
    stage: Callable[[str], str] | None = None
    staged_as: str = ""
    # read == STATEMENT, optional: (path, first bytes, workdir, a name for a file of its own) ->
    # (the path DuckDB reads, its compression) or why the file cannot be read
    unpack: Callable | None = None
    # read == SNAPSHOT: ([(path, display)], since, until) -> (servers, [(display, line, reason)])
    snapshots: Callable | None = None

    def __post_init__(self) -> None:
        if self.read not in READS:
            raise ValueError(f"format {self.name}: read {self.read!r} is not one of {READS}")
        unknown = {n for names in self.not_carried.values() for n in names} - set(INPUTS)
        if unknown:
            raise ValueError(f"format {self.name}: not_carried names unknown inputs {sorted(unknown)}")
        if self.read == STATEMENT and (self.statement is None or self.line_problem is None):
            raise ValueError(f"format {self.name}: a statement format gives statement and line_problem")
        if self.read == SNAPSHOT and self.snapshots is None:
            raise ValueError(f"format {self.name}: a snapshot format gives snapshots")

    def takes(self, name: str, sniffed: bool = False) -> bool:
        """Whether a folder search keeps a file of this name (``sniffed``: its content sniffed as
        this format)."""
        if self.names and re.match(self.names, name):
            return True
        return sniffed and bool(self.sniffed_names and re.match(self.sniffed_names, name))


@functools.cache
def registry() -> tuple[Format, ...]:
    """Every format, from the modules of this package, in ``order``."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        fmt = getattr(importlib.import_module(f"{__name__}.{info.name}"), "FORMAT", None)
        if not isinstance(fmt, Format) or fmt.name != info.name:
            raise TypeError(f"{__name__}.{info.name} defines no FORMAT named {info.name!r}")
        found.append(fmt)
    return tuple(sorted(found, key=lambda f: (f.order, f.name)))


def by_name(name: str) -> Format:
    return next(f for f in registry() if f.name == name)


def _derived(name: str):
    formats = registry()
    if name == "FORMATS":
        return formats
    if name == "BY_NAME":
        return {f.name: f for f in formats}
    if name == "SOURCE_FORMATS":
        return {k: v for f in formats for k, v in f.source_formats.items()}
    if name == "NOT_CARRIED":
        return {k: v for f in formats for k, v in f.not_carried.items()}
    if name == "ESTIMATED_TOKENS":
        return {k: v for f in formats for k, v in f.estimated_tokens.items()}
    if name == "LINE_FORMATS":
        return {f.name: f.line_name for f in formats if f.line_name}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __getattr__(name: str):
    # The registry's tables, derived from the modules when first asked for.
    return _derived(name)


def not_carried(source_format: str) -> frozenset[str]:
    """The inputs (INPUTS) events of ``source_format`` do not carry."""
    return _derived("NOT_CARRIED").get(source_format, frozenset())


def unavailable(formats: dict | None, needs: str) -> bool:
    """True when the run read events and none of their formats carries ``needs``."""
    names = [name for name, n in (formats or {}).items() if n]
    return bool(names) and all(needs in not_carried(name) for name in names)


def source_format_sql() -> str:
    """The events view's ``source_format``: each format's tag, in order."""
    arms = " ".join(f"WHEN {cond} THEN {value}" for f in registry() if f.tag for cond, value in [f.tag])
    return f"CASE {arms} END"


# -- sniffing ------------------------------------------------------------------------------------


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _zstd_head(path: str | Path, limit: int) -> bytes:
    """The first lines of a zstd stream (DuckDB inflates it: no other dependency)."""
    import duckdb

    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT line FROM read_csv(?, columns={'line': 'VARCHAR'}, compression='zstd', delim=chr(1), "
            "quote='', escape='', header=false, auto_detect=false, max_line_size=16777216) LIMIT 4",
            [str(path)]).fetchall()  # fmt: skip
    except duckdb.Error:
        return b""
    finally:
        con.close()
    return b"".join((r[0] or "").encode("utf-8", "replace") + b"\n" for r in rows)[:limit]


def head_bytes(path: str | Path, limit: int = SNIFF_BYTES) -> bytes:
    """The first ``limit`` bytes of a file, inflated when it is gzip or zstd; b"" when
    unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit)
            if raw[:4] == ZSTD_MAGIC:
                return _zstd_head(path, limit)
            if raw[:2] != b"\x1f\x8b":
                return raw
            fh.seek(0)
            d = zlib.decompressobj(31)
            out = b""
            while len(out) < limit and (chunk := fh.read(1 << 16)):
                out += d.decompress(chunk, limit - len(out))
                if d.eof:
                    break
            return out
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile):
        return b""


def first_object(head: bytes) -> dict | None:
    """The first non-blank complete line of ``head`` as a JSON object; None when it is not one."""
    for line in head.split(b"\n")[:-1] if b"\n" in head else [head]:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # nested past the parser's depth: no known format
            return None
        return value if isinstance(value, dict) else None
    return None


def sniff(head: bytes) -> Format | None:
    first = functools.cache(lambda: first_object(head))
    return next((fmt for fmt in registry() if fmt.sniff(head, first)), None)


def sniff_file(path: str | Path) -> Format | None:
    """The format of a file by its first bytes; None when it is in no known format."""
    return sniff(head_bytes(path))


def split_lines(lines: list[bytes]) -> list[list[bytes]]:
    """Lines as watch gathers them from every file, in batches for the reader: the lines
    of each statement format apart (the reader reads a file of them by its own statement), the
    rest together first."""
    own: list[tuple[Format, list[bytes]]] = [(f, []) for f in registry() if f.read == STATEMENT]
    rest: list[bytes] = []
    for raw in lines:
        for fmt, apart in own:
            if fmt.sniff(raw, lambda raw=raw: first_object(raw)):
                apart.append(raw)
                break
        else:
            rest.append(raw)
    return [batch for batch in (rest, *(apart for _, apart in own)) if batch]


# -- file names ----------------------------------------------------------------------------------


def is_line_log_name(name: str) -> bool:
    """A name of a log of JSON lines (``*.jsonl`` and its rotations), taken without sniffing."""
    return any(f.takes(name) for f in registry() if f.read == LINES)


def takes_file(path: Path) -> bool:
    """Whether a folder search keeps ``path``: a name some format takes, or a name some format
    takes when the file sniffs as it (sniffed only then; never a FIFO)."""
    if any(f.takes(path.name) for f in registry()):
        return True
    wanted = [f for f in registry() if f.takes(path.name, sniffed=True)]
    if not wanted or not path.is_file():
        return False
    return sniff_file(path) in wanted


def snapshot_format(path: Path, display: str, size: int) -> Format | None:
    """The snapshot format (no events) of a file: by its name, else, for a file not named as
    JSON lines (one named on the command line), by its first bytes."""
    name = Path(display).name
    snapshots = [f for f in registry() if f.read == SNAPSHOT]
    by_name = next((f for f in snapshots if f.takes(name)), None)
    if by_name is not None or is_line_log_name(name) or size <= 0:
        return by_name
    fmt = sniff_file(path)
    return fmt if fmt in snapshots else None


def read_snapshots(files: list[tuple[Path, str]], lo=None, hi=None, how: str = "auto") -> tuple[list, list]:
    """(servers, bad lines) of snapshot files ``(path, display)``, each read by its format; ``how``:
    how they are told apart into servers (``core.selection.PROM_SERVERS``)."""
    snapshots = [f for f in registry() if f.read == SNAPSHOT]
    groups: dict[str, list[tuple[Path, str]]] = {}
    for path, display in files:
        fmt = snapshots[0] if len(snapshots) == 1 else snapshot_format(path, display, 1)
        if fmt is not None:
            groups.setdefault(fmt.name, []).append((path, display))
    servers: list = []
    bad: list = []
    for name, group in groups.items():
        s, b = by_name(name).snapshots(group, lo, hi, group=how)
        servers += s
        bad += b
    return servers, bad


def accepted_names() -> str:
    """The file names discovery accepts, for the "no log files found" line."""
    texts = [f.names_text for f in sorted(registry(), key=lambda f: (READS.index(f.read), f.order)) if f.names_text]
    return ", ".join(dict.fromkeys(texts)) + ", each optionally .gz"


# -- what a file holds when it yields nothing ----------------------------------------------------

# OTLP signals dslogs does not read (traces are the otlp_traces format's)
_OTLP_OTHER = re.compile(rb'^\s*\{\s*"resource(Metrics|Logs)"')


def damaged_format(head: bytes) -> Format | None:
    """The format a file's first line is written in, judged from its keys even when the line is
    damaged (cut short, a value of the wrong type); None when it does not look like a line
    dslogs reads (text, CSV, OTLP metrics, another JSON)."""
    line = next((ln for ln in head.split(b"\n") if ln.strip()), b"").lstrip(b"\xef\xbb\xbf").strip()
    if not line.startswith(b"{") or _OTLP_OTHER.match(line):
        return None
    obj = first_object(line)
    return next((f for f in registry() if f.damaged and f.damaged(line, obj)), None)


def describe(head: bytes) -> str:
    """What a file in no known format looks like, in a few words."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text:
        return "an empty or blank file"
    for fmt in registry():
        if fmt.describe and (said := fmt.describe(text)):
            return said
    if m := _OTLP_OTHER.match(text):
        kind = m.group(1).decode().lower()
        if kind == "metrics":  # otlp_traces.metric_servers reads the GenAI histograms
            return "OTLP/JSON metrics (dslogs reads OTLP traces, and of metrics the GenAI histograms only)"
        return f"OTLP/JSON {kind} (dslogs reads OTLP traces, not {kind})"
    if text[:1] == b"[":
        return "a JSON array (dslogs reads one JSON object per line)"
    if b"\x00" in text[:4096]:
        return "binary data"
    try:
        sample = text.decode("utf-8")
    except UnicodeDecodeError:
        sample = text.decode("utf-8", "ignore")
    first_line = sample.split("\n", 1)[0].strip()
    if first_line.startswith("{"):
        try:
            obj = json.loads(first_line)
        except (ValueError, RecursionError):
            obj = None
            whole = None
            try:
                whole = json.loads(sample)
            except (ValueError, RecursionError):
                pass
            if isinstance(whole, dict):
                obj = whole
                if "schema" in obj and str(obj.get("schema", "")).startswith("dslogs."):
                    return f"a dslogs report ({obj['schema']}), not a log: give it to `dslogs render` or `diff`"
                return "one multi-line JSON object (dslogs reads one JSON object per line)"
        if isinstance(obj, dict):
            if str(obj.get("schema", "")).startswith("dslogs."):
                return f"a dslogs report ({obj['schema']}), not a log: give it to `dslogs render` or `diff`"
            keys = ", ".join(list(obj)[:5])
            return f"JSON lines in no known format (keys: {keys}; no `stage`)"
        return "JSON text that is not one object per line"
    lines = [ln for ln in sample.split("\n")[:5] if ln.strip()]
    if len(lines) >= 2 and all(ln.count(",") == lines[0].count(",") > 0 for ln in lines):
        return "CSV"
    if first_line.startswith("#") or first_line.startswith("=="):
        return "text (Markdown or similar), not JSON lines"
    return "text, not JSON lines"


def describe_file(path: str | Path) -> str:
    head = head_bytes(path)
    if not head.strip():
        try:
            with open(path, "rb") as fh:
                magic = fh.read(2)
        except OSError:
            magic = b""
        if magic == b"\x1f\x8b":  # a gzip whose start does not inflate is damaged, not blank
            return "a damaged gzip file (its start does not inflate)"
    return describe(head)


def raw_select(sql: str, columns: dict[str, str], provided: set[str] | frozenset[str]) -> str:
    """A SELECT of every read column (``columns``: name -> DuckDB type) over ``sql``'s rows, NULL
    of its type for those a mapping does not give."""
    cols = ", ".join(
        f'o."{name}"' if name in provided else f'NULL::{kind} AS "{name}"'
        for name, kind in columns.items()
    )
    return f"SELECT {cols} FROM ({sql}) AS o"
