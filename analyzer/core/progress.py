"""Progress on a terminal: each phase with its own measure: bytes read (as DuckDB reads them,
from its progress on the running statement), then queries run, then charts drawn.

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
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.text import Text

        class Measure(ProgressColumn):
            """Bytes as 1.2/18.6 MB; a count as 12/45 queries; nothing for a step without one."""

            def __init__(self) -> None:
                super().__init__()
                self._bytes = DownloadColumn()

            def render(self, task):
                unit = task.fields.get("unit") or ""
                if unit == "bytes":
                    return self._bytes.render(task) if task.total else Text("")
                if task.total is None:
                    return Text("")
                return Text(f"{int(task.completed):,}/{int(task.total):,} {unit}")

        self._lock = threading.Lock()
        self._bar = Progress(
            TextColumn(f"dslogs {command}: [bold]{{task.description}}"), BarColumn(), Measure(),
            TextColumn("{task.fields[files]}"), TimeElapsedColumn(),
            # stdout is the command's output (a report, JSON): never redirected into the display
            console=Console(stderr=True), transient=True, redirect_stdout=False, redirect_stderr=False,
        )  # fmt: skip
        self._task = self._bar.add_task("starting", total=None, files="", unit="")
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

    def start(self, description: str, total: int | None, files: str, unit: str = "bytes") -> None:
        """A new step: its own line and its own measure (rich keeps a task's total)."""
        with self._lock:
            self._bar.remove_task(self._task)
            self._task = self._bar.add_task(description, total=total, files=files, unit=unit)

    def advance(self, n: float) -> None:
        with self._lock:
            self._bar.advance(self._task, n)

    def completed(self) -> float:
        with self._lock:
            return self._bar.tasks[-1].completed if self._bar.tasks else 0.0

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


def counting(what: str, total: int, unit: str) -> None:
    """A step measured in ``unit`` (queries, charts): ``advance(1)`` per one done."""
    if _current is not None:
        _current.start(what, total or None, "", unit)


def advance(n: float) -> None:
    if _current is not None:
        _current.advance(n)


@contextlib.contextmanager
def statement(con, size: float, interval_s: float = 0.1) -> Iterator[None]:
    """While the body runs statements on DuckDB connection ``con`` that stand for ``size`` of the
    current step (the bytes of a batch of files), advance the step by the share DuckDB reports
    done (``query_progress``, read from this thread while the statement runs on the caller's);
    what is left is advanced when the body ends. Without a reporter, nothing."""
    if _current is None or not size:
        yield
        return
    reporter = _current
    stop = threading.Event()
    shown = [0.0]

    def poll() -> None:
        while not stop.wait(interval_s):
            try:
                pct = con.query_progress()
            except Exception:  # noqa: BLE001 - progress must never fail a read
                return
            part = size * min(max(pct, 0.0), 99.0) / 100.0
            if part > shown[0]:
                reporter.advance(part - shown[0])
                shown[0] = part

    try:
        with contextlib.suppress(Exception):
            con.execute("SET enable_progress_bar = true")
            con.execute("SET enable_progress_bar_print = false")
        watcher = threading.Thread(target=poll, name="dslogs-progress", daemon=True)
        watcher.start()
        yield
    finally:
        stop.set()
        watcher.join()
        reporter.advance(size - shown[0])


def active() -> bool:
    return _current is not None
