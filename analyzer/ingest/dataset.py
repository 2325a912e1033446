"""The compacted dataset's manifest, as every reader sees it (``dslogs compact`` writes it).

A folder holding ``_dslogs_manifest.json`` was written by ``dslogs.analyzer.ingest.compact``; the readers
(``dslogs.analyzer.ingest.logs`` on DuckDB, ``dslogs.analyzer.engines.spark``) list its Parquet files and take its
ingest counts from here. This module sits below ingest and compact, so neither imports the other
the wrong way (compact reads JSONL through ingest; ingest reads datasets through this).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest.names import name_sort_key

MANIFEST = "_dslogs_manifest.json"
FORMAT = "dslogs.compact/1"


def is_dataset(path: str | Path) -> bool:
    """True when ``path`` is a folder written by ``dslogs compact``."""
    return (Path(path) / MANIFEST).is_file()


def load_manifest(root: str | Path) -> dict:
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"format": FORMAT, "sources": {}}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a dslogs compact manifest ({exc})") from None
    return check_manifest(manifest, str(path))


def check_manifest(manifest: dict, where: str) -> dict:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{where}: not a dslogs compact manifest (format {FORMAT!r} expected)")
    manifest.setdefault("sources", {})
    return manifest


def _day(iso: str | None) -> str | None:
    return iso[:10] if iso else None


def dataset_files(manifest: dict, since: datetime | None = None, until: datetime | None = None) -> list[dict]:
    """Output files of a manifest (relative ``file``, ``date``, ``host``, ``rows``, ``source``),
    in source order, without the days wholly outside [since, until] (UTC partition days; files
    of rows without a ts are always kept)."""
    lo = since.astimezone(UTC).date().isoformat() if since else None
    hi = until.astimezone(UTC).date().isoformat() if until else None
    out = []
    for key in sorted(manifest.get("sources", {}), key=_source_order_key(manifest)):
        src = manifest["sources"][key]
        for item in src.get("outputs", []):
            day = item.get("date")
            if day is not None and ((lo and day < lo) or (hi and day > hi)):
                continue
            out.append({**item, "source": key})
    return out


def dataset_ingest(manifest: dict, files: list[dict]) -> dict:
    """The ingest block of the sources whose files are read (counts as when they were compacted)."""
    # Sources read: those with rows in the window, and those that gave no rows at all (an empty
    # file counts as read and skipped, as when the JSONL is read).
    used = {f["source"] for f in files} | {k for k, src in manifest.get("sources", {}).items() if not src.get("outputs")}
    ingest = {"files": 0, "events": 0, "bad_lines": 0, "skipped_files": 0, "bad_line_samples": [],
              "formats": {}, "bytes": 0}  # fmt: skip
    for key, src in manifest.get("sources", {}).items():
        if key not in used:
            continue
        ingest["files"] += 1
        ingest["bad_lines"] += int(src.get("bad_lines", 0))
        ingest["skipped_files"] += int(src.get("skipped_files", 0))
        ingest["bytes"] += int(src.get("bytes", 0))
        ingest["bad_line_samples"].extend(src.get("bad_line_samples", []))
        for fmt, n in (src.get("formats") or {}).items():
            ingest["formats"][fmt] = ingest["formats"].get(fmt, 0) + int(n)
    ingest["events"] = sum(int(f.get("rows", 0)) for f in files)
    return ingest


def _source_order_key(manifest: dict):
    def key(source_key: str):
        src = manifest["sources"][source_key]
        return name_sort_key(src.get("path", source_key))

    return key
