"""Source formats: the registry of what dslogs reads.

A format is an entry of ``FORMATS``: a name, a sniff (from the first bytes of a file, up to its
first complete line) and a mapping to the events table. ``sniff_file`` names the format of a
file; the reader (``analyzer.ingest.reader``) routes each file by it. Prometheus snapshots are no
events: ``open_logs`` takes them aside (``analyzer.ingest.prometheus``) into the report's server
metrics. Formats of one *family*
share a read: ``v1`` and ``legacy`` lines may share a file and are told apart per line by
analyzer/ingest/views/events.sql (``source_format``); OTLP traces are read by their own statement
(``otlp_traces.sql``), whose profiles (vLLM, generic GenAI) are told apart per span.

``describe`` says what a file that is in no known format looks like (OTLP metrics or logs, a
JSON array, a dslogs report, CSV, Prometheus text, text), for the one line that names it.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SNIFF_BYTES = 64 << 10  # enough for the first line of any log; an OTLP line's first key


@dataclass(frozen=True)
class Format:
    name: str  # the ingest.formats key (source_format of its events)
    family: str  # the read that maps it: "jsonl" (events.sql) or "otlp_traces"
    writer: str  # what writes it (docs, `dslogs schema`)
    sniff: Callable[[bytes, dict | None], bool]  # (first bytes, first line as JSON object)


def is_otlp_traces(head: bytes) -> bool:
    """Whether a line (or a file's first bytes) is an OTLP/JSON ExportTraceServiceRequest."""
    return bool(_OTLP_KEY.match(head)) and b'"resourceSpans"' in head[:64]


def _otlp(head: bytes, first: dict | None) -> bool:
    return is_otlp_traces(head)


def _v1(head: bytes, first: dict | None) -> bool:
    return first is not None and "v" in first and "stage" in first


def _legacy(head: bytes, first: dict | None) -> bool:
    return first is not None and "v" not in first and "stage" in first and "timestamp" in first


_OTLP_KEY = re.compile(rb'^\s*\{\s*"resource(Spans|Metrics|Logs)"')


def _prometheus(head: bytes, first: dict | None) -> bool:
    from analyzer.ingest.prometheus import looks_like

    return first is None and looks_like(head)

# In sniff order. The per-span profiles of OTLP traces are names of their own in ingest.formats.
FORMATS: tuple[Format, ...] = (
    Format("otlp_traces", "otlp_traces",
           "an OTel Collector `file` exporter (vLLM --otlp-traces-endpoint, openlit, OpenLLMetry)", _otlp),
    Format("v1", "jsonl", "the dslogs collector (trace schema v1)", _v1),
    Format("legacy", "jsonl", "article 003's logger (no `v`, a naive `timestamp`)", _legacy),
    Format("prometheus", "prometheus",
           "`curl host:8000/metrics` snapshots of vLLM, SGLang, TGI or llama.cpp (*.prom)", _prometheus),
)  # fmt: skip
BY_NAME = {f.name: f for f in FORMATS}

# source_format values of events and what they mean (ingest.formats keys).
SOURCE_FORMATS = {
    "v1": "dslogs collector, schema v1",
    "legacy": "article 003's logger",
    "otlp:vllm": "OTLP traces, vLLM llm_request spans",
    "otlp:genai": "OTLP traces, OpenTelemetry GenAI spans",
    "otlp:openlit": "OTLP traces, openlit GenAI spans (token counts estimated from characters)",
}
OTLP_FORMATS = ("otlp:vllm", "otlp:genai", "otlp:openlit")
# Formats whose token counts an instrumentor estimated rather than took from the tokenizer.
ESTIMATED_TOKENS = {"otlp:openlit": "openlit counts tokens from the text's characters"}

# What a source format does not carry, by the name of the input (checklist items and rules name
# theirs). vLLM preallocates GPU memory (nothing per request or session) and tokenizes inside
# the engine; neither OTLP profile has post-processing, KV-cache size, GPU samples or reasoning
# tokens. A check whose input no format of the run carries reads NOT_AVAILABLE.
NOT_CARRIED: dict[str, frozenset[str]] = {
    "otlp:vllm": frozenset({"tokenize", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"}),
    "otlp:genai": frozenset({"tokenize", "queue", "prefill", "format", "gpu_memory", "gpu_util",
                             "kv_cache", "reasoning"}),
}  # fmt: skip
NOT_CARRIED["otlp:openlit"] = NOT_CARRIED["otlp:genai"]
NOT_AVAILABLE = "N/A (source)"


def unavailable(formats: dict | None, needs: str) -> bool:
    """True when the run read events and none of their formats carries ``needs``."""
    names = [name for name, n in (formats or {}).items() if n]
    return bool(names) and all(needs in NOT_CARRIED.get(name, ()) for name in names)


def head_bytes(path: str | Path, limit: int = SNIFF_BYTES) -> bytes:
    """The first ``limit`` bytes of a file, inflated when it is gzip; b"" when unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit)
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


def _first_object(head: bytes) -> dict | None:
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
    first = _first_object(head)
    for fmt in FORMATS:
        if fmt.sniff(head, first):
            return fmt
    return None


# How the one-line messages name the line formats of a file's lines.
LINE_FORMATS = {"v1": "dslogs v1", "legacy": "legacy (article 003 logger)", "otlp_traces": "OTLP/JSON trace"}
_V_KEY = re.compile(rb'"v"\s*:')
_DSLOGS_KEY = re.compile(rb'"(stage|timestamp|session_id|request_id)"\s*:')


def damaged_format(head: bytes) -> Format | None:
    """The format (v1, legacy, OTLP traces) a file's first line is written in, judged from its
    keys even when the line is damaged (cut short, a value of the wrong type); None when it does
    not look like a line dslogs reads (text, CSV, OTLP metrics, another JSON)."""
    line = next((ln for ln in head.split(b"\n") if ln.strip()), b"").lstrip(b"\xef\xbb\xbf").strip()
    if not line.startswith(b"{"):
        return None
    if m := _OTLP_KEY.match(line):
        return BY_NAME["otlp_traces"] if m.group(1) == b"Spans" else None
    obj = _first_object(line)
    if obj is not None:
        if "v" in obj:
            return BY_NAME["v1"]
        return BY_NAME["legacy"] if "stage" in obj or "timestamp" in obj else None
    if _V_KEY.search(line[:4096]):
        return BY_NAME["v1"]
    return BY_NAME["legacy"] if _DSLOGS_KEY.search(line[:4096]) else None


def sniff_file(path: str | Path) -> Format | None:
    """The format of a file by its first bytes; None when it is in no known format."""
    return sniff(head_bytes(path))


_PROM = re.compile(rb"^(# (HELP|TYPE) [a-zA-Z_:][\w:]* |[a-zA-Z_:][\w:]*(\{[^}]*\})? [-+0-9.eEnNaIif]+)", re.M)


def describe(head: bytes) -> str:
    """What a file in no known format looks like, in a few words."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text:
        return "an empty or blank file"
    if m := _OTLP_KEY.match(text):
        kind = m.group(1).decode()
        if kind == "Spans":  # read, and no span is an LLM call
            return "OTLP/JSON traces with no LLM span (no `gen_ai.*` or `llm.*` attribute, no vLLM `llm_request`)"
        return f"OTLP/JSON {kind.lower()} (dslogs reads OTLP traces, not {kind.lower()})"
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
    if _PROM.match(text):
        return "Prometheus text metrics (dslogs reads them from *.prom files)"
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


def accepted_names() -> str:
    """The file names discovery accepts, for the "no log files found" line."""
    return "*.jsonl, *.N.jsonl, *.jsonl.N, *.json (OTLP traces), *.prom (Prometheus snapshots), each optionally .gz"


def raw_select(sql: str, columns: dict[str, str], provided: set[str]) -> str:
    """A SELECT of every read column (``columns``: name -> DuckDB type) over ``sql``'s rows, NULL
    of its type for those a mapping does not give."""
    cols = ", ".join(
        f'o."{name}"' if name in provided else f'NULL::{kind} AS "{name}"'
        for name, kind in columns.items()
    )
    return f"SELECT {cols} FROM ({sql}) AS o"


# The value of attribute ``name`` in an OTLP key/value list (the last one when a key repeats);
# otlp_traces.sql reads attributes through it. Created on the connection before the read.
OTLP_MACROS = (
    "CREATE OR REPLACE TEMP MACRO otlp_attr(kvs, name) AS "
    'list_filter(kvs, lambda x: x."key" = name)[-1]."value"'
)


def otlp_sql() -> str:
    return (Path(__file__).with_name("otlp_traces.sql")).read_text(encoding="utf-8")
