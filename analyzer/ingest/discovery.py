"""Which files LOGS names: directories searched recursively, files, globs.

A folder search keeps the file names the source formats take (``dslogs.analyzer.ingest.formats``: each
format module names its own): ``*.jsonl``, ``*.N.jsonl`` (our rotation), ``*.jsonl.N``
(logrotate), ``*.prom``, each optionally gzipped (``.gz``), and ``*.json`` / ``*.json.gz`` files
that sniff as OTLP/JSON traces (other JSON, such as a saved report, is left alone). A name
carrying a date (``ds15b_20261123.jsonl``, ``…_20261123.2.jsonl.gz``) is the writer's local day;
with ``--since/--until`` a file whose day lies wholly outside the window, with one day of margin
either side for the unknown writer zone, is not opened. Names without a date are always read.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest import formats
from dslogs.analyzer.ingest.names import name_date, name_sort_key, rotation_index  # noqa: F401 (discovery's names)

_GLOB_CHARS = re.compile(r"[*?\[]")
# Folders never searched: VCS metadata and dslogs' own Parquet output.
_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__"}
# A folder holding this file was written by `dslogs compact` (dslogs.analyzer.ingest.compact.MANIFEST).
DATASET_MANIFEST = "_dslogs_manifest.json"


@dataclass(frozen=True)
class LogFile:
    """One discovered log file. ``display`` is the path as discovered (``source_file``)."""

    path: Path
    display: str
    size: int
    mtime_ns: int
    day: date | None

    @property
    def compressed(self) -> bool:
        return self.display.endswith(".gz")


@dataclass
class Discovery:
    files: list[LogFile] = field(default_factory=list)
    pruned: list[LogFile] = field(default_factory=list)  # name-date wholly outside the window
    datasets: list[Path] = field(default_factory=list)  # folders written by `dslogs compact`
    # What was named or found but cannot be read as a log: (display, reason). FIFOs, sockets
    # and devices (opening a FIFO blocks), dangling or looping symlinks, unreadable folders,
    # names that are not UTF-8. Skipped and counted; the run goes on with the rest.
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def skipped_files(self) -> int:
        """Files not opened because of the window (the Spark engine's name for it)."""
        return len(self.pruned)


def is_log_name(name: str) -> bool:
    """A log of JSON lines by its name (``*.jsonl`` and its rotations, optionally .gz)."""
    return formats.is_line_log_name(name)


def outside_window(day: date | None, since: datetime | None, until: datetime | None) -> bool:
    """True when a file of writer-local ``day`` cannot hold an event in [since, until): its events
    lie in [day - 1 day, day + 2 days) UTC for any writer zone (UTC-12 .. UTC+14), with margin."""
    if day is None:
        return False
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    if since is not None and start + timedelta(days=2) <= since:
        return True
    return until is not None and start - timedelta(days=1) >= until


def _is_dataset(path: Path) -> bool:
    return (path / DATASET_MANIFEST).is_file()


def _walk(folder: Path, unreadable: list[tuple[str, str]] | None = None) -> list[Path]:
    out = []

    def failed(exc: OSError) -> None:
        if unreadable is not None:
            unreadable.append((printable(exc.filename or folder), f"folder not readable ({exc.strerror or exc})"))

    for root, dirs, files in os.walk(folder, followlinks=False, onerror=failed):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        out.extend(p for p in (Path(root) / name for name in files) if formats.takes_file(p))
    return out


def printable(path) -> str:
    """A path as text that can be printed, stored and put in JSON: bytes of a name that are not
    UTF-8 shown as \\xNN escapes."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def _why_not_readable(path: Path, display: str) -> tuple[os.stat_result | None, str | None]:
    """(stat, None) for a regular readable file with a UTF-8 name; (None, reason) otherwise.
    Never opens the file: a FIFO would block."""
    try:
        display.encode("utf-8")
    except UnicodeEncodeError:
        return None, "file name is not valid UTF-8"
    try:
        st = path.stat()
    except OSError as exc:
        if path.is_symlink():
            kind = "symlink loop" if exc.errno == errno.ELOOP else "dangling symlink"
            return None, f"{kind} ({exc.strerror or exc})"
        return None, f"cannot read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
                else "device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special file")
        return None, f"not a regular file ({kind})"
    if not os.access(path, os.R_OK):
        return None, "cannot read (permission denied)"
    return st, None


def discover(paths: list[str], since: datetime | None = None, until: datetime | None = None) -> Discovery:
    """The log files under ``paths`` (sorted in write order, no duplicates), window-pruned.

    InputError for a path that does not exist or when no log file is found at all."""
    if not paths:
        raise InputError("no LOGS given: name a log directory, file or glob")
    found = Discovery()
    candidates: list[tuple[Path, str]] = []
    for raw in paths:
        text = str(raw)
        path = Path(text).expanduser()
        if path.is_dir():
            if _is_dataset(path):
                found.datasets.append(path)
                continue
            candidates.extend((p, str(p)) for p in _walk(path, found.unreadable))
        elif path.is_file() or path.is_symlink() or os.path.lexists(path):
            # A file named explicitly is read whatever its name (a FIFO, a dangling link or an
            # unreadable file is skipped and counted below).
            candidates.append((path, text))
        elif _GLOB_CHARS.search(text):
            matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
            if not matches:
                raise InputError(f"{printable(text)}: no file matches this pattern")
            for match in matches:
                m = Path(match)
                if m.is_dir():
                    if _is_dataset(m):
                        found.datasets.append(m)
                    else:
                        candidates.extend((p, str(p)) for p in _walk(m, found.unreadable))
                elif formats.takes_file(m):
                    candidates.append((m, match))
        else:
            raise InputError(f"{printable(text)}: no such file or directory")
    seen: set[str] = set()
    for path, display in candidates:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        st, why = _why_not_readable(path, display)
        if st is None:
            found.unreadable.append((printable(display), why))
            continue
        item = LogFile(path=path, display=display, size=st.st_size, mtime_ns=st.st_mtime_ns, day=name_date(path.name))
        (found.pruned if outside_window(item.day, since, until) else found.files).append(item)
    found.files.sort(key=lambda f: name_sort_key(f.display))
    if not found.files and not found.pruned and not found.datasets:
        where = ", ".join(printable(p) for p in paths)
        if found.unreadable:
            first, why = found.unreadable[0]
            more = f" and {len(found.unreadable) - 1} more" if len(found.unreadable) > 1 else ""
            raise InputError(f"no readable log files under {where}: {first}: {why}{more}")
        raise InputError(f"no log files found under {where} (dslogs reads {formats.accepted_names()})")
    return found


def discover_log_files(paths: list[str]) -> list[str]:
    """Paths (as discovered) of every log file under ``paths``, in write order, no window."""
    return [f.display for f in discover(paths).files]
