"""The SQL of the views over the store, one file each (``events``, ``requests``, ``sessions``,
``legacy_request_ids``); ``dslogs.analyzer.ingest.viewdefs`` defines them on a connection.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from dslogs.analyzer.ingest import formats

VIEWS_DIR = Path(__file__).resolve().parent


@cache
def _text(name: str) -> str:
    return (VIEWS_DIR / f"{name}.sql").read_text(encoding="utf-8")


def view_sql(name: str) -> str:
    sql = _text(name)
    # which format wrote each event: the formats' registry says
    return sql.replace("{source_format}", formats.source_format_sql()) if name == "events" else sql
