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

A run holds a shared ``flock`` on ``<cache>.lock`` for as long as it uses the cache (it detaches
and attaches the file again between its phases); ``dslogs cache --clear`` and ``--prune`` take
it exclusively without waiting and keep a cache held so ("in use"), so a clear never pulls the
file from under a running analysis or an open notebook session.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import re
import struct
import zlib
from pathlib import Path

# Bump when the stored tables or the normalisation change: older caches are rebuilt.
SCHEMA_VERSION = 9  # 5: per-request device, inflight, memory before/after; 6: done_before, done_seq; 7: fallback; 8: legacy requests start at tokenize without input; 9: deploy records, OTLP staged per value, non-finite numbers bad
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


def _lock_path(path: Path) -> Path:
    return Path(f"{path}.lock")


def hold(path: Path) -> int | None:
    """A shared lock on the cache at ``path`` (a descriptor to ``release``), taken for as long as
    a run uses it. None where no lock can be had (no flock, a folder not ours to write): the run
    goes on, unprotected from a concurrent clear, as before locks."""
    try:
        import fcntl
    except ImportError:
        return None
    lock = _lock_path(path)
    with contextlib.suppress(OSError):
        lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(5):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a clear removes this very cache (ms)
            # a clear that won the race removed the lock file with the cache: take the new one
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return fd
        except OSError:
            pass
        os.close(fd)
    return None


def release(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def remove_unless_used(path: Path) -> int | None:
    """Remove the cache at ``path`` unless a run holds it (``hold``): the bytes freed, or None
    when it is in use. OSError (a folder not ours) is the caller's to say."""
    try:
        import fcntl
    except ImportError:
        return remove_cache(path)
    lock = _lock_path(path)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        freed = remove_cache(path)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        return freed
    finally:
        os.close(fd)


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


# -- dslogs cache: list, clear, prune ------------------------------------------------------------


def mark_used(path: Path) -> None:
    """Record that a run used the cache at ``path`` (its mtime: a warm run writes nothing), so
    ``prune`` can tell a cache unused for days from one read every hour."""
    try:
        os.utime(path)
    except OSError:
        pass


def cache_info(path: Path) -> dict:
    """What ``dslogs cache`` says of one cache file: size (with its .wal), last use, the log
    folder it caches (the deepest folder holding its files) and whether that folder still exists."""
    import duckdb

    size = sum(p.stat().st_size for p in (path, Path(f"{path}.wal")) if p.exists())
    info = {"path": str(path), "bytes": size, "last_used": path.stat().st_mtime, "folder": None,
            "files": None, "folder_exists": None, "state": "ok"}  # fmt: skip
    if not os.access(path, os.R_OK):
        info["state"] = "unreadable"
        return info
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        info["state"] = "in use" if is_lock_error(exc) else "unreadable"
        return info
    try:
        if not is_dslogs_cache(con, con.execute("SELECT current_database()").fetchone()[0]):
            info["state"] = "not a dslogs cache"
            return info
        paths = [r[0] for r in con.execute("SELECT path FROM files").fetchall()]
    except duckdb.Error:
        info["state"] = "unreadable"
        return info
    finally:
        con.close()
    info["files"] = len(paths)
    if paths:
        folder = os.path.commonpath([str(Path(p).parent) for p in paths])
        info["folder"], info["folder_exists"] = folder, Path(folder).is_dir()
    return info


def cache_folder_error(home: Path, exc: OSError):
    """The one line for a cache folder (or file in it) dslogs may not read or change."""
    from dslogs.analyzer.core.errors import UsageError
    from dslogs.analyzer.core.textsafe import visible

    where = visible(str(exc.filename or home))
    return UsageError(f"cache {where}: {exc.strerror or exc} (owned by another user, or its mode forbids it; "
                      f"set XDG_CACHE_HOME to a folder of yours)")


def list_caches(home: Path | None = None) -> list[dict]:
    """Every cache file in the default location (``cache_home``), newest use first. UsageError
    when the folder or a file in it cannot be read."""
    home = home or cache_home()
    try:
        if not home.is_dir():
            return []
        names = sorted(n for n in os.listdir(home) if n.endswith(".duckdb"))
        found = [cache_info(home / n) for n in names if (home / n).is_file()]
    except OSError as exc:
        raise cache_folder_error(home, exc) from None
    return sorted(found, key=lambda c: -c["last_used"])


def clear_caches(home: Path | None = None) -> tuple[list[dict], list[dict]]:
    """Remove every cache in the default location no run is using: (removed, in use). UsageError
    when one cannot be removed (a folder not ours)."""
    home = home or cache_home()
    removed, busy = [], []
    for c in list_caches(home):
        if c["state"] not in ("ok", "unreadable"):
            continue
        try:
            freed = remove_unless_used(Path(c["path"]))
        except OSError as exc:
            raise cache_folder_error(home, exc) from None
        if freed is None:
            busy.append(c)
        else:
            c["freed"] = freed
            removed.append(c)
    return removed, busy


def remove_cache(path: Path) -> int:
    """Delete a cache file and its .wal; the bytes freed."""
    freed = 0
    for p in (Path(path), Path(f"{path}.wal")):
        try:
            freed += p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            pass
    return freed


def prune_caches(unused_days: float | None, now: float, home: Path | None = None) -> list[dict]:
    """Remove the caches whose log folder no longer exists, or (``unused_days``) that no run has
    used for that many days; the caches removed. A cache in use or not ours is never touched."""
    removed = []
    for c in list_caches(home):
        if c["state"] != "ok":
            continue
        gone = c["folder"] is not None and not c["folder_exists"]
        stale = unused_days is not None and now - c["last_used"] > unused_days * 86400
        if gone or stale:
            try:
                freed = remove_unless_used(Path(c["path"]))
            except OSError as exc:
                raise cache_folder_error(home or cache_home(), exc) from None
            if freed is None:
                continue  # a run is using it: not unused after all
            c["freed"] = freed
            c["why"] = "its log folder no longer exists" if gone else f"unused for over {unused_days:g} days"
            removed.append(c)
    return removed
