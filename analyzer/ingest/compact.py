"""``dslogs compact LOGS --out DIR``: normalised events as hive-partitioned Parquet.

The output is the ``events`` view (docs/internals.md) of every source file, written once per
source file as ``DIR/date=YYYY-MM-DD/host=H/part-<source>-<content>-<i>.parquet`` (``date`` is the
UTC day of ``ts``; hive escaping, ``__HIVE_DEFAULT_PARTITION__`` for a NULL host or ts), plus
``DIR/_dslogs_manifest.json``, the one record of what the folder holds.

Idempotent: the manifest keeps, per source, its path, size, mtime, a SHA-256 of its decompressed
content, the files written from it and its ingest counts. A re-run

- skips a source whose size and mtime did not change (no read at all);
- re-hashes one whose size or mtime changed: same content (``touch``, ``gzip`` of a closed
  ``.jsonl``, a move) only updates the record; changed content (today's file grew) replaces that
  source's Parquet files;
- skips a source whose content another source already holds (a copy), so rows never double.

A source that disappears from LOGS keeps its rows (compaction is the archive; hosts delete
their local logs after shipping). Files are staged inside DIR and moved into place before the
manifest is replaced atomically, so a crash leaves at worst unreferenced files, which the next
run removes; readers list files from the manifest only.

Legacy request ids (``<session_id>#<n>``) count a session's ``input`` events
across all its files: the manifest keeps each legacy source's per-session input counts, and a
later source's numbers are shifted by the counts of the sources before it (name order), so a
session spanning a day boundary or a rotation gets the ids a single read of all files gives.

Readers: ``dslogs.analyzer.ingest.logs`` (DuckDB) and ``dslogs.analyzer.engines.spark`` recognise a folder holding
``_dslogs_manifest.json`` through :func:`is_dataset` / :func:`dataset_files`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

from dslogs.analyzer.core.errors import InputError, UsageError
from dslogs.analyzer.core.outfile import out_folder
from dslogs.analyzer.ingest.dataset import (
    FORMAT,
    MANIFEST,
    load_manifest,
)

LOCK = "_dslogs_compact.lock"
PARTITION_ZONE = "UTC"
_HASH_CHUNK = 1 << 20


# -- source identity ---------------------------------------------------------------------------


def source_key(path: Path) -> str:
    """A source's identity across runs: its absolute path without ``.gz`` (gzipping a closed
    file does not make it a new source)."""
    text = str(path.resolve())
    return text[:-3] if text.endswith(".gz") else text


def content_sha256(path: Path) -> str:
    """SHA-256 of the decompressed bytes: the same log, plain or gzipped, hashes the same."""
    digest = hashlib.sha256()
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            while chunk := fh.read(_HASH_CHUNK):
                digest.update(chunk)
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None
    return digest.hexdigest()


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


# -- writing -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(out: Path):
    """One compaction per folder at a time (a cron job overlapping a manual run)."""
    import fcntl

    with open(out / LOCK, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{out}: another dslogs compact is running on this folder") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_manifest(out: Path, manifest: dict) -> None:
    manifest["updated_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=out)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out / MANIFEST)


def _sql_literal(text: str) -> str:
    # COPY ... TO takes no parameter for its target: quote our own staging path as a literal.
    return "'" + text.replace("'", "''") + "'"


def _partition_values(rel: str) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for part in Path(rel).parts[:-1]:
        if "=" in part:
            k, v = part.split("=", 1)
            values[k] = None if v == "__HIVE_DEFAULT_PARTITION__" else unquote(v)
    return values


def _legacy_offsets(manifest: dict, before_key: str, path: Path) -> dict[str, int]:
    """Per-session input counts of the legacy sources that precede ``path`` in write order."""
    from dslogs.analyzer.ingest.discovery import name_sort_key

    mine = name_sort_key(str(path))
    offsets: dict[str, int] = {}
    for key, src in manifest["sources"].items():
        if key == before_key or not src.get("legacy_inputs"):
            continue
        if name_sort_key(src.get("path", key)) >= mine:
            continue
        for sid, n in src["legacy_inputs"].items():
            offsets[sid] = offsets.get(sid, 0) + int(n)
    return offsets


def _write_source(path: Path, key: str, sha: str, manifest: dict, out: Path, tz: str | None) -> dict:
    """Normalise one source through the DuckDB ingest and write its partitions; its record."""
    from dslogs.analyzer.ingest.logs import open_logs

    db = open_logs([str(path)], tz=tz, use_cache=False, materialize=False)
    con = db.con
    columns = [row[0] for row in con.execute("DESCRIBE events").fetchall()]
    legacy_inputs = dict(
        con.execute(
            "SELECT session_id, count(*) FROM events WHERE source_format = 'legacy' "
            "AND stage = 'input' AND session_id IS NOT NULL GROUP BY session_id"
        ).fetchall()
    )
    offsets = _legacy_offsets(manifest, key, path)
    con.execute("CREATE OR REPLACE TEMP TABLE _dslogs_offsets (session_id VARCHAR, n BIGINT)")
    if offsets:
        con.executemany("INSERT INTO _dslogs_offsets VALUES (?, ?)", list(offsets.items()))
    select = ", ".join(
        f"e.{_ident(c)}" if c != "request_id" else _SHIFTED_REQUEST_ID + " AS request_id" for c in columns
    )
    query = (
        f"SELECT {select}, strftime(timezone('{PARTITION_ZONE}', e.ts), '%Y-%m-%d') AS date "
        "FROM events AS e LEFT JOIN _dslogs_offsets AS o ON e.session_id = o.session_id"
    )
    counts = {
        (d, h): n
        for d, h, n in con.execute(f"SELECT date, host, count(*) FROM ({query}) GROUP BY ALL").fetchall()
    }
    file_id = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]
    staging = Path(tempfile.mkdtemp(prefix="_staging-", dir=out))
    outputs = []
    try:
        if counts:
            _, written = con.execute(
                f"COPY ({query}) TO {_sql_literal(str(staging))} (FORMAT parquet, COMPRESSION zstd, "
                f"PARTITION_BY (date, host), FILENAME_PATTERN 'part-{file_id}-{sha[:12]}-{{i}}', "
                "RETURN_FILES true)"
            ).fetchone()
            for staged in written:
                rel = Path(staged).relative_to(staging)
                target = out / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
                values = _partition_values(str(rel))
                outputs.append(
                    {"file": rel.as_posix(), "date": values.get("date"), "host": values.get("host"),
                     "rows": int(counts.get((values.get("date"), values.get("host")), 0))}
                )  # fmt: skip
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    span = con.execute("SELECT min(ts), max(ts) FROM events").fetchall()[0]
    ingest = db.ingest
    size, mtime_ns = _stat(path)
    return {
        "path": str(path),
        "size": size,
        "mtime_ns": mtime_ns,
        "sha256": sha,
        "events": sum(o["rows"] for o in outputs),
        "bad_lines": int(ingest.get("bad_lines", 0)),
        "skipped_files": int(ingest.get("skipped_files", 0)),
        "bad_line_samples": list(ingest.get("bad_line_samples", [])),
        "formats": dict(ingest.get("formats", {})),
        "bytes": int(ingest.get("bytes", size)),
        "first_ts": span[0].isoformat() if span[0] else None,
        "last_ts": span[1].isoformat() if span[1] else None,
        "legacy_inputs": {str(k): int(v) for k, v in legacy_inputs.items()},
        "outputs": outputs,
        "compacted_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# A legacy request id continues the numbering of the session's earlier files (see module doc):
# '<sid>#<n>' becomes '<sid>#<n + offset>'; a line before the file's first input belongs to the
# previous file's last request, '<sid>#<offset>'.
_SHIFTED_REQUEST_ID = """CASE
    WHEN e.source_format <> 'legacy' OR o.n IS NULL OR o.n = 0 THEN e.request_id
    WHEN e.request_id IS NULL THEN e.session_id || '#' || CAST(o.n AS VARCHAR)
    ELSE e.session_id || '#' || CAST(CAST(string_split(e.request_id, '#')[-1] AS BIGINT) + o.n AS VARCHAR)
END"""


def compact_logs(logs: list[str], out: Path | str, tz: str | None = None) -> dict:
    """Compact the log files under ``logs`` into ``out`` (see the module doc); a summary dict."""
    from dslogs.analyzer.ingest.discovery import discover_log_files

    out = out_folder(out, inputs=[p for p in logs if os.path.isdir(p)])
    started = time.monotonic()
    sources = [Path(p) for p in discover_log_files(list(logs)) if not _inside(Path(p), out)]
    summary = {"new_files": 0, "replaced_files": 0, "unchanged_files": 0, "renamed_files": 0,
               "duplicate_files": 0, "events": 0, "bad_lines": 0, "parquet_files": 0, "out": str(out)}  # fmt: skip
    with _locked(out):
        manifest = load_manifest(out)
        manifest.setdefault("format", FORMAT)
        manifest.setdefault("partitioning", ["date", "host"])
        manifest.setdefault("partition_zone", PARTITION_ZONE)
        known = manifest["sources"]
        if known and manifest.get("tz") != tz and any(s.get("legacy_inputs") or (s.get("formats") or {}).get("legacy") for s in known.values()):
            raise UsageError(
                f"{out} holds legacy logs compacted with --tz {manifest.get('tz') or '(local)'}; "
                f"run compact with the same --tz"
            )
        manifest["tz"] = tz if tz is not None else manifest.get("tz")
        by_sha = {s["sha256"]: k for k, s in known.items()}
        superseded: list[str] = []
        plan: list[tuple[Path, str, str]] = []
        for path in sources:
            key = source_key(path)
            size, mtime_ns = _stat(path)
            rec = known.get(key)
            if rec and rec.get("size") == size and rec.get("mtime_ns") == mtime_ns:
                summary["unchanged_files"] += 1
                continue
            sha = content_sha256(path)
            if rec and rec.get("sha256") == sha:
                summary["renamed_files" if rec.get("path") != str(path) else "unchanged_files"] += 1
                rec.update(path=str(path), size=size, mtime_ns=mtime_ns)
                continue
            other = by_sha.get(sha) if size else None  # empty files are not copies of each other
            if other is not None and other != key:
                summary["duplicate_files"] += 1
                continue
            plan.append((path, key, sha))
        for path, key, sha in sorted(plan, key=lambda p: _name_key(p[0])):
            old = known.get(key)
            record = _write_source(path, key, sha, manifest, out, tz)
            if old:
                summary["replaced_files"] += 1
                new_files = {o["file"] for o in record["outputs"]}
                superseded.extend(o["file"] for o in old.get("outputs", []) if o["file"] not in new_files)
            else:
                summary["new_files"] += 1
            known[key] = record
            by_sha[sha] = key
            summary["events"] += record["events"]
            summary["bad_lines"] += record["bad_lines"]
            # Manifest after every source: an interrupted run keeps what it finished.
            _write_manifest(out, manifest)
        _write_manifest(out, manifest)
        _remove_unreferenced(out, manifest, superseded)
    summary["parquet_files"] = sum(len(s.get("outputs", [])) for s in known.values())
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _name_key(path: Path):
    from dslogs.analyzer.ingest.discovery import name_sort_key

    return name_sort_key(str(path))


def _remove_unreferenced(out: Path, manifest: dict, superseded: list[str]) -> None:
    """Delete superseded files, leftovers of interrupted runs, and empty partition folders."""
    referenced = {o["file"] for s in manifest["sources"].values() for o in s.get("outputs", [])}
    for rel in superseded:
        if rel not in referenced:
            with contextlib.suppress(FileNotFoundError):
                (out / rel).unlink()
    for path in out.glob("date=*/host=*/part-*.parquet"):
        if path.relative_to(out).as_posix() not in referenced:
            path.unlink()
    for staging in out.glob("_staging-*"):
        shutil.rmtree(staging, ignore_errors=True)
    for day in out.glob("date=*"):
        for host in day.glob("host=*"):
            with contextlib.suppress(OSError):
                host.rmdir()
        with contextlib.suppress(OSError):
            day.rmdir()
