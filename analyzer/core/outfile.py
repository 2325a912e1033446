"""The one writer of every file a command is asked to write (``--out``).

It lives in core, below the model, the renderers and the CLI, because every one of them may
produce the text and each command names the target: analyze, render, diff, report weekly and
query all call ``write_out`` (or ``open_out`` for a streamed result); compact and simulate, which
write a folder of files, take their folder from ``out_folder``; what dslogs keeps in its cache
folder for itself (the chart bundle, the compiled templates) is checked by ``own_file`` (and its
folder by ``own_folder``) before it is read or written. Ad hoc SQL writes nothing (``COPY``
is refused): a query's result reaches a file through ``--out`` alone.

The text goes to a temporary file beside the target (same folder, so the rename stays on one
file system) and is renamed over it once complete: a reader of the target sees the old file or
the new one, never half of one. A target that cannot be written (missing folder, a directory,
no permission, a full disk) is a ``UsageError`` naming the path, and no temporary file is
left behind.

Only a regular file or a new path is ever replaced. A character device (``/dev/null`` in a CI
line run as root, ``/dev/stdout``) or a FIFO (a shell's ``>(jq .)``) is a stream: it is written
in place, opened without create or truncate and never renamed over, so it stays what it is; a
FIFO nobody reads is one line, not a hang. A block device, a socket or anything else that is
not a regular file is refused before any work, and again at the write. A target that is one of
the run's own input files (a log, the thresholds file, a saved report) is refused too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.textsafe import visible

_REASONS = {
    errno.ENOENT: "its folder does not exist",
    errno.ENOTDIR: "a part of its folder is not a folder",
    errno.EISDIR: "it is a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EFBIG: "file too large",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENAMETOOLONG: "file name too long",
}


def _error(target: Path, exc: OSError, option: str) -> UsageError:
    reason = _REASONS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
    return UsageError(f"{option} {visible(str(target))}: cannot write ({reason})")


def _mode_for(target: Path) -> int:
    """The existing target's permissions, else what a plain open() would give (0666 & ~umask)."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _is_stream(mode: int) -> bool:
    """A target written in place rather than replaced: a character device or a FIFO."""
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _stream_target(target: Path) -> bool:
    try:
        return _is_stream(os.stat(target).st_mode)
    except OSError:
        return False


def _special_kind(mode: int) -> str | None:
    """What a file that is neither regular nor a stream is, in words; None for those."""
    if stat.S_ISREG(mode) or _is_stream(mode):
        return None
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _kind(mode: int) -> str:
    """Any file, in words (a link is named as one where the caller did not follow it)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return _special_kind(mode)


def _file_target(path: Path | str, option: str) -> Path:
    """The file a write replaces (or, for a stream, writes into): a link is followed (the file it
    points at is written, not the link itself); a directory is refused, and so is anything that
    is neither a regular file nor a stream."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise _error(target, OSError(errno.EISDIR, "is a directory"), option)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return target  # a new path (or one the write will name its own error for)
    kind = _special_kind(mode)
    if kind is not None:
        shown = visible(str(path)) + ("" if str(target) == str(path) else f" -> {visible(str(target))}")
        raise UsageError(f"{option} {shown}: {kind}, not a regular file; give a file to write")
    return target


def check_not_input(path: Path | str, inputs, option: str = "--out") -> None:
    """UsageError when ``path`` is (the same file as, links and hard links included) one of
    ``inputs``, the files a run reads: its logs, a thresholds or saved report file."""
    try:
        st = os.stat(path)
    except OSError:
        return  # a new path cannot be an input
    for name in inputs:
        if name is None:
            continue
        try:
            other = os.stat(name)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            raise UsageError(f"{option} {visible(str(path))}: is an input of this run "
                             f"({visible(os.fspath(name))}); give another file")


def _temporary(target: Path, folder: Path, option: str) -> tuple[int, str]:
    """A new temporary file in ``folder`` (beside ``target``): (descriptor, path)."""
    try:
        return tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise _error(target, exc, option) from None


def _open_stream(target: Path, option: str, path: Path | str) -> int:
    """A descriptor on a character device or FIFO, opened without create or truncate. A FIFO is
    opened non-blocking first, so one without a reader is an error now, not a hang."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            shown = visible(str(path)) + ("" if str(target) == str(path) else f" -> {visible(str(target))}")
            raise UsageError(f"{option} {shown}: a FIFO nobody reads; start its reader first") from None
        raise _error(target, exc, option) from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


@contextlib.contextmanager
def _stream_out(target: Path, option: str, encoding: str, path: Path | str) -> Iterator[IO[str]]:
    fh = os.fdopen(_open_stream(target, option, path), "w", encoding=encoding, newline="")
    try:
        with fh:
            yield fh
    except OSError as exc:
        raise _error(target, exc, option) from None


@contextlib.contextmanager
def open_out(path: Path | str, option: str = "--out", encoding: str = "utf-8") -> Iterator[IO[str]]:
    """A text stream whose content replaces ``path`` only when the block ends without error (a
    character device or FIFO is written in place)."""
    target = _file_target(path, option)
    if _stream_target(target):
        with _stream_out(target, option, encoding, path) as fh:
            yield fh
        return
    fd, tmp = _temporary(target, target.parent, option)
    try:
        try:
            os.fchmod(fd, _mode_for(target))
            fh = os.fdopen(fd, "w", encoding=encoding, newline="")
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise _error(target, exc, option) from None
    except BaseException:
        _remove(tmp)
        raise


def check_out(path: Path | str, option: str = "--out", inputs=()) -> None:
    """Fail now, before minutes of work, when ``path`` clearly cannot be written: its folder is
    missing or not writable, it is a directory, a device, FIFO or socket, or one of ``inputs``
    (the files the run reads). The write itself still reports a full disk."""
    target = _file_target(path, option)
    if inputs:
        check_not_input(target, inputs, option)
    if _stream_target(target):
        return  # written in place: no folder to probe, and a FIFO's reader must not see an open now
    folder = target.parent
    if not folder.is_dir():
        code = errno.ENOTDIR if folder.exists() else errno.ENOENT
        raise _error(target, OSError(code, os.strerror(code)), option)
    # A real probe rather than os.access: root passes access() on read-only mounts and /sys.
    fd, probe = _temporary(target, folder, option)
    os.close(fd)
    _remove(probe)


def out_folder(path: Path | str, option: str = "--out", inputs=()) -> Path:
    """The folder a command writes many files into (``compact --out``, ``simulate OUTDIR``): made
    with its parents when missing, and probed with a real file; UsageError naming the path when it
    cannot be. A device, FIFO or socket cannot hold files: refused like a regular file. A folder
    that is or lies inside one of ``inputs`` (the log folders the run reads) is refused too: what
    is written there would be read back with those logs."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        mode = os.stat(folder).st_mode
        raise UsageError(f"{option} {visible(str(folder))}: {_kind(mode)}, not a folder; give a folder to write into")
    here = Path(os.path.realpath(folder))
    for name in inputs:
        other = Path(os.path.realpath(name))
        if other.is_dir() and (other == here or other in here.parents):
            raise UsageError(f"{option} {visible(str(folder))}: inside the logs this run reads "
                             f"({visible(os.fspath(name))}); give a folder outside them")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _error(folder, exc, option) from None
    fd, probe = _temporary(folder / "probe", folder, option)
    os.close(fd)
    _remove(probe)
    return folder


def own_file(path: Path | str, option: str) -> Path:
    """A file dslogs keeps for itself in its cache folder (the chart bundle, a compiled template): a regular file or a
    new path, never reached through a link. A link (it may point into the logs), a device, FIFO,
    socket or directory there is no file of ours: UsageError naming it, before it is read (a FIFO
    would block the read, a device never end it) or replaced."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return target  # a new path (or one the write will name its own error for)
    if stat.S_ISREG(mode):
        return target
    raise UsageError(f"{option} {visible(str(path))}: {_kind(mode)}, not a file dslogs wrote; remove it and run again")


def own_folder(path: Path | str, option: str) -> Path | None:
    """A folder dslogs keeps for itself in its cache folder (the compiled templates), made when
    missing; None when it cannot be (a read-only home: the caller keeps nothing there). A link (it
    may point into the logs), a file, FIFO or device there is no folder of ours: UsageError naming
    it, before anything is read from it or written into it."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass  # something that is not a folder (or a link to one): named below
    except OSError:
        return None
    try:
        mode = os.lstat(folder).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return folder
    raise UsageError(f"{option} {visible(str(path))}: {_kind(mode)}, not a folder dslogs made; remove it and run again")


def write_out(path: Path | str, text: str, option: str = "--out") -> Path:
    """Write ``text`` to ``path`` atomically; UsageError naming the path when it cannot."""
    with open_out(path, option) as fh:
        fh.write(text)
    return Path(path)


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


__all__ = ["check_not_input", "check_out", "open_out", "out_folder", "write_out"]
