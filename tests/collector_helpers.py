"""Shared helpers for the collector tests: read every line a tracer wrote, validate it."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import jsonschema

from dslogs_collector.schema import json_schema

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}[+-]\d{2}:\d{2}$")
FILE_RE = re.compile(r"^(?P<prefix>.+)_(?P<date>\d{8})(?:\.(?P<index>\d+))?\.jsonl(?P<gz>\.gz)?$")
_VALIDATOR = jsonschema.Draft202012Validator(json_schema())


def log_files(folder) -> list[Path]:
    """Log files in writing order: by date, then rotation index."""
    files = [p for p in Path(folder).iterdir() if FILE_RE.match(p.name)]

    def key(p: Path):
        m = FILE_RE.match(p.name)
        return (m["date"], int(m["index"] or 0))

    return sorted(files, key=key)


def read_raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def read_lines(folder) -> list[dict]:
    """Every line of every log file, parsed; fails on a line that is not whole JSON."""
    out = []
    for p in log_files(folder):
        data = read_raw(p)
        assert data == b"" or data.endswith(b"\n"), f"{p.name}: last line not terminated"
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise AssertionError(f"{p.name}:{n}: not JSON ({e}): {line[:120]!r}") from None
    return out


def validate(event: dict) -> None:
    """Schema v1 plus what the schema's 'format' can't check here: the ts shape."""
    _VALIDATOR.validate(event)
    assert TS_RE.match(event["ts"]), event["ts"]
    assert event["v"] == 1 and isinstance(event["pid"], int) and event["host"]


def data_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["stage"] not in ("collector", "deploy")]
