"""What a command reads: the logs, the window, and how to read them, decided once.

A ``Selection`` is built once by the command line and once by the Python API from what the user
gave (``Selection.build``): paths, the window parsed into instants (so ``--since 1d`` means one
moment for every part of the run), the time zone, the span attribute that names sessions, the
thresholds (loaded, so a typo in the file fails before any log is read), the cache policy and the
engine. Every use case (analyze, diff, weekly, capacity, query, session, watch) takes one and
hands it to ``dslogs.analyzer.ingest.open`` or to an engine; nothing below re-parses an option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import parse_window

# How Prometheus snapshots are told apart into servers (dslogs.analyzer.ingest.prometheus): host in
# the file name and server labels, the file name alone, the labels alone, or one server.
PROM_SERVERS = ("auto", "file", "labels", "one")


def _type_error(name: str, value: Any, expected: str) -> UsageError:
    return UsageError(f"{name}={type(value).__name__} {str(value)[:60]!r}: expected {expected}")


def _when(value: Any, name: str) -> str | datetime | None:
    """A window end as the library takes it: text (30m, 1d, an ISO date), a datetime (naive is
    wall-clock time in ``tz``), a date (its midnight in ``tz``) or a timedelta (that long ago)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta) and value > timedelta(0):
        return f"{value.total_seconds():.6f}s"
    raise _type_error(name, value, "text such as 30m, 1d or 2026-11-23, a datetime, a date or a positive timedelta")


def _path_or_none(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        return os.fspath(value)
    raise _type_error(name, value, "a path (str or os.PathLike)")


def _paths(value: Any) -> list[str]:
    if isinstance(value, str | os.PathLike):
        return [os.fspath(value)]
    if isinstance(value, list | tuple) and value and all(isinstance(p, str | os.PathLike) for p in value):
        return [os.fspath(p) for p in value]
    raise _type_error("paths", value, "a log folder, file or glob, or a non-empty list of them")


def _zone_arg(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, tzinfo) and getattr(value, "key", None):  # a ZoneInfo
        return value.key
    raise _type_error("tz", value, "an IANA zone name such as Asia/Shanghai, or a ZoneInfo")


@dataclass(frozen=True)
class Selection:
    """One run's choice of logs and options (immutable; derive windows with ``window``)."""

    paths: tuple[str, ...]
    since: datetime | None = None  # instants, aware; None: open-ended
    until: datetime | None = None
    since_text: str | None = None  # as the user wrote them, for messages and notes
    until_text: str | None = None
    tz: str | None = None
    session_attr: str | None = None
    thresholds_file: str | None = None
    # table -> key -> value; treat as read-only (a plain dict so that Spark can pickle it)
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)
    cache: Path | None = None
    use_cache: bool = True
    engine: str = "duckdb"
    master: str = "local[*]"
    prom_servers: str = "auto"  # one of PROM_SERVERS

    @classmethod
    def build(
        cls,
        paths: str | os.PathLike[str] | list[str | os.PathLike[str]] | tuple,
        since: str | datetime | date | timedelta | None = None,
        until: str | datetime | date | timedelta | None = None,
        tz: str | tzinfo | None = None,
        session_attr: str | None = None,
        thresholds_file: str | os.PathLike[str] | None = None,
        cache: str | os.PathLike[str] | None = None,
        use_cache: bool = True,
        engine: str = "duckdb",
        master: str = "local[*]",
        now: datetime | None = None,
        prom_servers: str = "auto",
    ) -> Selection:
        """The selection of one run: the window parsed (``--since`` / ``--until`` named in any
        error) and the thresholds file read, both before any log is opened."""
        from dslogs.analyzer.core.thresholds import load_thresholds

        if prom_servers not in PROM_SERVERS:
            raise UsageError(f"--prom-servers: {prom_servers!r} is not one of {', '.join(PROM_SERVERS)}")
        # the library's boundary: a wrong type is one line here, not an AttributeError deep inside
        paths = _paths(paths)
        since, until = _when(since, "since"), _when(until, "until")
        tz = _zone_arg(tz)
        thresholds_file = _path_or_none(thresholds_file, "thresholds")
        cache = _path_or_none(cache, "cache")
        if session_attr is not None and not isinstance(session_attr, str):
            raise _type_error("session_attr", session_attr, "a span attribute name")
        from dslogs.analyzer.core.resources import memory_limit
        from dslogs.analyzer.core.time import zone_name

        # the zone (--tz, else $TZ) and DuckDB's memory budget are read now: a value neither
        # can use is one line before any log is read, not a DuckDB error halfway
        zone_name(tz)
        memory_limit()
        lo, hi = parse_window(since, until, tz, now)
        file = os.fspath(thresholds_file) if thresholds_file is not None else None
        return cls(
            paths=tuple(os.fspath(p) for p in paths),
            since=lo,
            until=hi,
            since_text=since if not isinstance(since, datetime) else since.isoformat(),
            until_text=until if not isinstance(until, datetime) else until.isoformat(),
            tz=tz,
            session_attr=session_attr,
            thresholds_file=file,
            thresholds=load_thresholds(file),
            cache=Path(cache) if cache is not None else None,
            use_cache=use_cache,
            engine=engine,
            master=master,
            prom_servers=prom_servers,
        )

    @property
    def windowed(self) -> bool:
        """A window was asked for (an empty one is then worth a note)."""
        return self.since is not None or self.until is not None

    def window(self, since: datetime | None, until: datetime | None, since_text: str | None = None,
               until_text: str | None = None) -> Selection:
        """The same selection over another window (diff's sides, weekly's weeks)."""
        return replace(self, since=since, until=until, since_text=since_text, until_text=until_text)

    def with_paths(self, paths: list[str] | tuple[str, ...]) -> Selection:
        """The same options over other logs (diff BEFORE AFTER)."""
        return replace(self, paths=tuple(os.fspath(p) for p in paths))

    def threshold_tables(self) -> dict[str, dict[str, Any]]:
        """A mutable copy of the thresholds, for code that takes the plain dicts."""
        return {table: dict(keys) for table, keys in (self.thresholds or {}).items()}
