"""Progress on a terminal: files and bytes read, then the phase (reading, computing, rendering).

One reporter per command (``run``), drawn with rich on stderr only and only when stderr is a
terminal and the command was not given ``--quiet``; it appears once the run has lasted
``DELAY_S`` (a run under a second stays silent) and is cleared when the run ends, so stdout
(reports, JSON) never holds a byte of it. Library code calls ``phase``, ``reading`` and
``advance`` whoever runs it: without a reporter they do nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator


def _delay() -> float:
    """DSLOGS_PROGRESS_DELAY in seconds; a value that is not a number >= 0 is the default (the
    bar is cosmetic: a typo there must not stop a run)."""
    try:
        value = float(os.environ.get("DSLOGS_PROGRESS_DELAY", "1.0"))
    except ValueError:
        return 1.0
    return value if 0 <= value < 1e6 else 1.0


DELAY_S = _delay()


class _Reporter:
    def __init__(self, command: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self._lock = threading.Lock()
        self._bar = Progress(
            TextColumn(f"dslogs {command}: [bold]{{task.description}}"), BarColumn(), DownloadColumn(),
            TextColumn("{task.fields[files]}"), TimeElapsedColumn(),
            # stdout is the command's output (a report, JSON): never redirected into the display
            console=Console(stderr=True), transient=True, redirect_stdout=False, redirect_stderr=False,
        )  # fmt: skip
        self._task = self._bar.add_task("starting", total=None, files="")
        self._shown = False
        self._done = False
        self._timer = threading.Timer(DELAY_S, self._show)
        self._timer.daemon = True
        self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if not self._done and not self._shown:
                self._bar.start()
                self._shown = True

    def start(self, description: str, total: int | None, files: str) -> None:
        """A new step: its own line (a phase has no byte count; rich keeps a task's total)."""
        with self._lock:
            self._bar.remove_task(self._task)
            self._task = self._bar.add_task(description, total=total, files=files)

    def advance(self, n: int) -> None:
        with self._lock:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            if self._shown:
                self._bar.stop()


_current: _Reporter | None = None


def enabled(quiet: bool = False) -> bool:
    return not quiet and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


@contextlib.contextmanager
def run(command: str, quiet: bool = False) -> Iterator[None]:
    """Show progress for the body of ``command`` (see the module doc)."""
    global _current
    if not enabled(quiet) or _current is not None:
        yield
        return
    _current = _Reporter(command)
    try:
        yield
    finally:
        reporter, _current = _current, None
        reporter.close()


def phase(name: str) -> None:
    """The run moved on to ``name`` (computing, rendering, ...): no bar, no byte count."""
    if _current is not None:
        _current.start(name, None, "")


def reading(total_bytes: int, files: int, what: str = "reading") -> None:
    """``files`` files of ``total_bytes`` are read next; ``advance`` counts the bytes done."""
    if _current is not None:
        _current.start(what, total_bytes or None, f"{files:,} file{'s' if files != 1 else ''}")


def advance(n: int) -> None:
    if _current is not None:
        _current.advance(n)


def active() -> bool:
    return _current is not None
