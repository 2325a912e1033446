"""Locate the SQL in queries/ and the jinja2 templates in templates/; DuckDB's memory budget.

In a checkout (or an editable install) they sit at the repository root beside analyzer/; in an
installed wheel they ship as analyzer/_data/{queries,templates} (pyproject force-include).
"""

from __future__ import annotations

import os
import re
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


# DuckDB's size units (KB = 1000 bytes, KiB = 1024), and the least it runs a small log set in:
# at 32 MB even a six-request analyze ran out of memory.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)\s*$", re.IGNORECASE)
_UNIT_BYTES = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
MIN_MEMORY_BYTES = 64 * 10**6


def _env_error(name: str, value: str, expected: str):
    from dslogs.analyzer.core.errors import UsageError

    return UsageError(f"{name}={value!r}: expected {expected}")  # repr: no control code shown raw


def memory_limit() -> str:
    """DuckDB's memory_limit for every connection dslogs opens (``DSLOGS_MEMORY_LIMIT``, default
    1GB): beyond it DuckDB spills to its temp directory (weeks of logs on a small box). A size
    (``2GB``, ``900MiB``) of at least 64 MB, or a share of the machine's memory (``50%``);
    UsageError naming the variable otherwise."""
    value = os.environ.get("DSLOGS_MEMORY_LIMIT", "1GB")
    expected = "a size of at least 64MB such as 2GB or 900MiB, or a share of memory such as 50%"
    if m := _SIZE.match(value):
        if float(m.group(1)) * _UNIT_BYTES[m.group(2).upper()] < MIN_MEMORY_BYTES:
            raise _env_error("DSLOGS_MEMORY_LIMIT", value, expected)
        return value.strip()
    if (m := _PERCENT.match(value)) and 0 < float(m.group(1)) <= 100:
        return value.strip()
    raise _env_error("DSLOGS_MEMORY_LIMIT", value, expected)


def env_int(name: str, minimum: int = 1) -> int | None:
    """A whole-number environment setting (None when unset or empty); UsageError naming it when
    it is not a whole number of at least ``minimum``."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise _env_error(name, value, f"a whole number of at least {minimum}")
    return number
