"""Log files shared by several processes: ``<prefix>_YYYYMMDD[.N].jsonl``, one name pattern, so every reader finds them.

Every process appends whole-line batches with ``O_APPEND``. Which file is current and when it
rotates is decided under an exclusive ``flock`` on ``<log_dir>/.<prefix>.lock``, re-checked each
time the lock is taken, so a rotation by one process is seen by every other one before its
next write: nobody writes into a file once a newer index exists, which is also what makes it
safe to gzip a closed file. Files are never renamed (renaming under other writers is where
``logging.RotatingFileHandler`` loses lines with several processes).

Without ``fcntl`` (Windows) the lock is a no-op: one process per log directory there.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import time

try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
GZIP_LEVEL = 6


class LogFiles:
    """Appends batches of lines for a local date; rotates at ``max_bytes``. Not thread-safe:
    only the writer thread uses it. Methods raise ``OSError``; the writer counts and reports."""

    def __init__(self, log_dir: str, prefix: str, max_bytes: int, write=os.write):
        self.dir = os.fspath(log_dir)
        self.prefix = prefix
        self.max_bytes = max(1, int(max_bytes))
        self._write = write  # os.write; tests inject failures (disk full) here
        self._lock_path = os.path.join(self.dir, f".{prefix}.lock")
        self._lock_fd = -1
        self._fd = -1
        self._ino: tuple[int, int] | None = None
        self._date: str | None = None
        self._index = 0
        self._name_re = re.compile(re.escape(prefix) + r"_(\d{8})(?:\.(\d+))?\.jsonl(\.gz)?$")
        self.closed_files: list[str] = []  # rotated by this process; the writer gzips them
        self.done_lines = 0  # lines (and bytes) of the last append() that reached the file
        self.done_bytes = 0

    # -- names -----------------------------------------------------------------------------
    def path(self, date: str, index: int) -> str:
        suffix = f".{index}" if index else ""
        return os.path.join(self.dir, f"{self.prefix}_{date}{suffix}.jsonl")

    def current_path(self) -> str | None:
        return self.path(self._date, self._index) if self._date else None

    def _exists(self, date: str, index: int) -> bool:
        p = self.path(date, index)
        return os.path.exists(p) or os.path.exists(p + ".gz")

    def _scan_index(self, date: str) -> int:
        """Index to append to for ``date``: the highest existing one, or the next if that one
        exists only gzipped (closed)."""
        best, best_gz = -1, False
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return 0
        for name in names:
            m = self._name_re.match(name)
            if not m or m.group(1) != date:
                continue
            i = int(m.group(2) or 0)
            if i > best:
                best, best_gz = i, bool(m.group(3))
            elif i == best and not m.group(3):
                best_gz = False
        if best < 0:
            return 0
        return best + 1 if best_gz else best

    # -- lock ------------------------------------------------------------------------------
    def _makedirs(self) -> None:
        os.makedirs(self.dir, exist_ok=True)

    def _acquire(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        for _ in range(5):
            if self._lock_fd < 0:
                try:
                    self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
                except FileNotFoundError:  # the log dir was deleted: recreate it
                    self._makedirs()
                    continue
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            # The lock file may have been deleted (log dir removed) while we waited: a lock on
            # an unlinked inode excludes nobody, so take the one at the path now.
            try:
                st = os.stat(self._lock_path)
                mine = os.fstat(self._lock_fd)
                if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                    return
            except FileNotFoundError:
                pass
            self._drop_lock_fd()
        raise OSError(errno.EAGAIN, "cannot take the log directory lock", self._lock_path)

    def _release(self) -> None:
        if fcntl is not None and self._lock_fd >= 0:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            except OSError:
                self._drop_lock_fd()

    def _drop_lock_fd(self) -> None:
        if self._lock_fd >= 0:
            try:
                os.close(self._lock_fd)
            except OSError:
                pass
        self._lock_fd = -1

    # -- current file ----------------------------------------------------------------------
    def _close_fd(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = -1
        self._ino = None

    def _open(self) -> None:
        self._close_fd()
        p = self.path(self._date, self._index)
        try:
            fd = os.open(p, _OPEN_FLAGS, 0o644)
        except FileNotFoundError:
            self._makedirs()
            fd = os.open(p, _OPEN_FLAGS, 0o644)
        st = os.fstat(fd)
        self._fd = fd
        self._ino = (st.st_dev, st.st_ino)
        if st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n":
            # A writer died mid-line: end that line so ours start whole (it stays one bad line).
            self._write_all(b"\n", st.st_size)

    def _current(self, date: str) -> int:
        """Make the fd point at the file to append to now (under the lock); return its size."""
        if date != self._date or self._fd < 0:
            self._date = date
            self._index = self._scan_index(date)
            self._open()
        else:
            moved = False
            while self._exists(date, self._index + 1):  # another process rotated
                self._index += 1
                moved = True
            if not moved:
                try:
                    st = os.stat(self.path(date, self._index))
                    if (st.st_dev, st.st_ino) != self._ino:  # replaced under us
                        moved = True
                except FileNotFoundError:  # deleted (or gzipped by hand): start again
                    self._index = self._scan_index(date)
                    moved = True
            if moved:
                self._open()
        return os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        self.closed_files.append(self.path(self._date, self._index))
        self._index += 1
        while self._exists(self._date, self._index):
            self._index += 1
        self._open()

    def _write_all(self, data: bytes, size_before: int) -> None:
        view = memoryview(data)
        try:
            while view:
                n = self._write(self._fd, view)
                if n <= 0:
                    raise OSError(errno.EIO, "write returned 0")
                view = view[n:]
        except OSError:
            # Keep every line whole: cut a half-written batch (disk full) back off. Safe: we
            # hold the lock, so the file ended at size_before when this write began.
            try:
                os.ftruncate(self._fd, size_before)
            except OSError:
                pass
            raise

    def append(self, date: str, lines: list[str]) -> int:
        """Append ``lines`` (each ending in a newline) for local ``date``; return bytes written.
        On ``OSError`` the lines already on disk (a batch split by a rotation) are in
        ``done_lines``/``done_bytes``; the rest are not on disk at all (lines stay whole)."""
        self.done_lines = self.done_bytes = 0
        data = "".join(lines).encode("utf-8")
        self._acquire()
        try:
            size = self._current(date)
            if size + len(data) <= self.max_bytes or (size == 0 and len(lines) == 1):
                self._write_all(data, size)
                self.done_lines, self.done_bytes = len(lines), len(data)
                return len(data)
            return self._append_split(lines, size)
        finally:
            self._release()

    def _append_split(self, lines: list[str], size: int) -> int:
        """The batch does not fit: fill the current file line by line, rotate, go on."""
        chunk: list[bytes] = []
        chunk_bytes = 0
        for line in lines:
            b = line.encode("utf-8")
            if size + chunk_bytes + len(b) > self.max_bytes and (size + chunk_bytes) > 0:
                if chunk:
                    self._write_chunk(chunk, size)
                    chunk, chunk_bytes = [], 0
                self._rotate()
                size = 0
            chunk.append(b)
            chunk_bytes += len(b)
        if chunk:
            self._write_chunk(chunk, size)
        return self.done_bytes

    def _write_chunk(self, chunk: list[bytes], size: int) -> None:
        data = b"".join(chunk)
        self._write_all(data, size)
        self.done_lines += len(chunk)
        self.done_bytes += len(data)

    def close(self) -> None:
        self._close_fd()
        self._drop_lock_fd()
        self._date = None

    def after_fork(self) -> None:
        """In a forked child: the inherited lock fd shares the parent's flock (one open file
        description), so take a new one. Closing the copy doesn't unlock the parent's."""
        self._close_fd()
        self._drop_lock_fd()
        self._date = None


# The gzip .tmp files this process is writing now. A process that ends on a signal removes
# them first (its gzip thread dies with it, mid-file: nothing would ever finish them); a forked
# child starts with none (the parent's are the parent's).
_writing_tmp: set[str] = set()
_ending = False


def remove_tmp_in_progress() -> None:
    """The process ends now: remove the gzip .tmp files being written, and start no other (the
    plain log stays, and is gzipped by the next rotation's sweep or read as it is)."""
    global _ending
    _ending = True
    for tmp in list(_writing_tmp):
        _unlink_quiet(tmp)


def _forked() -> None:
    global _ending
    _writing_tmp.clear()
    _ending = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def gzip_file(path: str) -> bool:
    """Compress a closed log file to ``path.gz`` and remove it. The ``.gz`` appears (by rename)
    before the plain file goes, so a reader never finds neither; ``.tmp`` names match no log glob."""
    if _ending:
        return False
    tmp = f"{path}.gz.{os.getpid()}.tmp"
    _writing_tmp.add(tmp)
    try:
        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, path + ".gz")
        os.unlink(path)
        return True
    except FileNotFoundError:
        _unlink_quiet(tmp)
        return False
    except OSError:
        _unlink_quiet(tmp)
        raise
    finally:
        _writing_tmp.discard(tmp)


# A gzip in progress rewrites its .tmp continuously; one left alone this long whose process is
# gone (SIGTERM or a kill during a rotation) is stale. The age guard keeps a folder shared
# with another host, whose pids mean nothing here, from losing a gzip that is under way.
STALE_TMP_S = 30.0


def _pid_gone(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: another user's process
        return False
    return False


def remove_stale_tmp(log_dir: str, prefix: str) -> int:
    """Remove ``<prefix>_YYYYMMDD[.N].jsonl.gz.<pid>.tmp`` files of processes that no longer
    exist (untouched for ``STALE_TMP_S``). Returns how many; never raises."""
    pat = re.compile(re.escape(prefix) + r"_\d{8}(?:\.\d+)?\.jsonl\.gz\.(\d+)\.tmp$")
    try:
        names = os.listdir(log_dir)
    except OSError:
        return 0
    removed = 0
    me = os.getpid()
    for name in names:
        m = pat.match(name)
        if m is None:
            continue
        pid = int(m.group(1))
        if pid == me or not _pid_gone(pid):
            continue
        path = os.path.join(log_dir, name)
        try:
            if time.time() - os.stat(path).st_mtime < STALE_TMP_S:
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
