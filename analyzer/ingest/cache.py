"""The persistent DuckDB cache of normalised events (``--cache PATH``, ``--no-cache``).

Default location: ``$XDG_CACHE_HOME/dslogs/`` (``~/.cache/dslogs/``), one file per log folder,
named after the folder and a hash of its absolute path. Not next to the logs: dslogs never
writes into a log folder (it may be read-only, shipped by a log forwarder or rotated by a
``*`` pattern, and several users may read it); a cache is per user and disposable.

A cached file is reused while its path, size and mtime are unchanged. A file whose path is new
but whose content fingerprint (decompressed length, CRC-32 of the whole content and a hash of
its first 64 KiB) matches a cached file is the same log renamed by rotation or gzipped: its rows
are kept, not re-read. Without a cache (``--no-cache``) no file is ever skipped as a copy.

``--cache PATH`` replaces only a file it can prove is a dslogs cache (a DuckDB file holding the
``meta`` table with a ``schema_version``): anything else there is a one-line error (exit 2),
never deleted. The default location (ours alone) is rebuilt when it cannot be opened. A
file that grew (today's file, appended to) has only its new lines read (``catalogue.grown``); one
that changed otherwise is read again and replaces its old rows. Files that no
longer exist are dropped. The cache carries ``SCHEMA_VERSION``; any other version is rebuilt.
Another process holding the file (DuckDB locks a database against other processes) makes the
run go on without a cache, with one line on stderr.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import struct
import zlib
from pathlib import Path

# Bump when the stored tables or the normalisation change: older caches are rebuilt.
SCHEMA_VERSION = 7  # 5: per-request device, inflight, memory before/after; 6: done_before, done_seq; 7: fallback
FINGERPRINT_BYTES = 64 << 10


def cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dslogs"


def default_cache_path(files: list[Path]) -> Path:
    """One cache per log folder: the deepest folder holding every discovered file."""
    folders = [str(Path(f).resolve().parent) for f in files] or [os.getcwd()]
    root = os.path.commonpath(folders)
    digest = hashlib.sha1(root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(root).name or "root")[:40]
    return cache_home() / f"{label}-{digest}.duckdb"


def fingerprint(path: Path, lines: dict | None = None) -> str | None:
    """Identity of a log's content, plain or gzipped: decompressed length, CRC-32 of the whole
    decompressed content and the SHA-1 of its first 64 KiB. A plain file is read whole for its
    CRC (it is about to be read anyway, and the page cache keeps it); a ``.gz`` carries the
    CRC-32 and length of its content in its trailer (RFC 1952), so only its head is inflated.
    Two different logs never share one by accident (same size and head is not enough: the whole
    content counts). None when the file cannot be read (it is then read, and fails, normally).
    ``lines`` (a plain file): filled in the same pass with ``lines`` (LF count) and ``read_end``
    (the offset after the last LF), what a later tail read of the grown file starts from."""
    try:
        if path.name.endswith(".gz"):
            with open(path, "rb") as fh:
                fh.seek(-8, os.SEEK_END)
                # gzip's trailer: CRC-32 and ISIZE (length mod 2**32) of the decompressed data.
                crc, length = struct.unpack("<II", fh.read(8))
            with gzip.open(path, "rb") as fh:
                head = fh.read(FINGERPRINT_BYTES)
        else:
            crc, length, head, lfs, end = 0, 0, b"", 0, 0
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    if not head:
                        head = chunk[:FINGERPRINT_BYTES]
                    crc = zlib.crc32(chunk, crc)
                    if lines is not None and (n := chunk.count(b"\n")):
                        lfs += n
                        end = length + chunk.rfind(b"\n") + 1
                    length += len(chunk)
            if lines is not None:
                lines.update(lines=lfs, read_end=end, size=length)
            length %= 1 << 32
    except (OSError, EOFError, gzip.BadGzipFile, struct.error, zlib.error):
        # zlib.error: a .gz damaged within its first 64 KiB.
        return None
    if not head:
        return None
    return fingerprint_text(length, crc, head)


def fingerprint_text(length: int, crc: int, head: bytes) -> str:
    """The fingerprint of content of ``length`` bytes (mod 2**32), CRC-32 ``crc`` and first
    FINGERPRINT_BYTES ``head`` (``fingerprint``; a grown file's, carried over its new bytes)."""
    return f"2:{length % (1 << 32)}:{crc:08x}:{hashlib.sha1(head).hexdigest()}"


class CacheBusy(Exception):
    """Another process holds the cache file."""


def is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text or "conflicting" in text or "being used by another" in text


def is_dslogs_cache(con, alias: str) -> bool:
    """True when the attached database ``alias`` holds dslogs' meta table with its version."""
    try:
        rows = con.execute(f'SELECT value FROM "{alias}".meta WHERE key = \'schema_version\'').fetchall()
    except Exception:  # no such table, other columns: not ours
        return False
    return bool(rows)
