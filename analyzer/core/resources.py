"""Locate the SQL in queries/ and the jinja2 templates in templates/; DuckDB's memory budget.

In a checkout (or an editable install) they sit at the repository root beside analyzer/; in an
installed wheel they ship as analyzer/_data/{queries,templates} (pyproject force-include).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]  # the analyzer package


def _find(name: str) -> Path:
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"dslogs installation is missing its {name}/ folder (looked in {_PKG})")


@cache
def queries_dir() -> Path:
    return _find("queries")


@cache
def templates_dir() -> Path:
    return _find("templates")


def query_names() -> list[str]:
    return sorted(p.stem for p in queries_dir().glob("*.sql"))


@cache
def load_query(name: str) -> str:
    """SQL text of queries/<name>.sql, loaded by metric name."""
    path = queries_dir() / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query named {name!r} in {queries_dir()}")
    return path.read_text(encoding="utf-8")


def memory_limit() -> str:
    """DuckDB's memory_limit for every connection dslogs opens (``DSLOGS_MEMORY_LIMIT``, default
    1GB): beyond it DuckDB spills to its temp directory (weeks of logs on a small box)."""
    return os.environ.get("DSLOGS_MEMORY_LIMIT", "1GB")
