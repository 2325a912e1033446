"""The dslogs collector's lines (trace schema v1, collector/trace_schema_v1.json): one JSON object
per line with ``v`` and ``stage``, read by the shared JSON-lines statement as they are."""

from __future__ import annotations

import re

from dslogs.analyzer.ingest.formats import JSONL_NAMES, JSONL_NAMES_TEXT, LINES, Format

_V_KEY = re.compile(rb'"v"\s*:')


def _sniff(head: bytes, first) -> bool:
    obj = first()
    return obj is not None and "v" in obj and "stage" in obj


def _damaged(line: bytes, obj: dict | None) -> bool:
    return "v" in obj if obj is not None else bool(_V_KEY.search(line[:4096]))


FORMAT = Format(
    name="v1",
    order=20,
    writer="the dslogs collector (trace schema v1)",
    sniff=_sniff,
    read=LINES,
    names=JSONL_NAMES,
    names_text=JSONL_NAMES_TEXT,
    source_formats={"v1": "dslogs collector, schema v1"},
    # after the formats whose lines carry a `v` of their own (OTLP profiles)
    tag=("v IS NOT NULL", "'v1'"),
    line_name="dslogs v1",
    damaged=_damaged,
)
