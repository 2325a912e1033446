"""Article 003's logger (``log_event``): JSON lines with ``stage`` and a naive local
``timestamp``, no ``v``. Read by the shared JSON-lines statement; the events view reads its
timestamp in --tz, its -1 durations as unmeasured and its gpu_memory fields, and its request ids
are numbered afterwards (views/legacy_request_ids.sql)."""

from __future__ import annotations

import re

from dslogs.analyzer.ingest.formats import JSONL_NAMES, JSONL_NAMES_TEXT, LINES, Format

_DSLOGS_KEY = re.compile(rb'"(stage|timestamp|session_id|request_id)"\s*:')


def _sniff(head: bytes, first) -> bool:
    obj = first()
    return obj is not None and "v" not in obj and "stage" in obj and "timestamp" in obj


def _damaged(line: bytes, obj: dict | None) -> bool:
    if obj is not None:
        return "v" not in obj and ("stage" in obj or "timestamp" in obj)
    # a damaged line with a `v` key is v1's, asked first (its lower order)
    return bool(_DSLOGS_KEY.search(line[:4096]))


FORMAT = Format(
    name="legacy",
    order=30,
    writer="article 003's logger (no `v`, a naive `timestamp`)",
    sniff=_sniff,
    read=LINES,
    names=JSONL_NAMES,
    names_text=JSONL_NAMES_TEXT,
    source_formats={"legacy": "article 003's logger"},
    tag=("v IS NULL", "'legacy'"),
    line_name="legacy (article 003 logger)",
    damaged=_damaged,
)
