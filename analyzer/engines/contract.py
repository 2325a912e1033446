"""The engine contract: what every engine (DuckDB, Spark) gives the report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class MetricSource(Protocol):
    """The engine contract (docs/architecture.md): logs opened for a window, on some engine.

    ``ingest`` and ``window`` are the report's blocks; ``columns`` lists a view's columns;
    ``time_bounds`` gives the first and last event (ISO text, for the time-bucket width);
    ``run`` runs named metric queries (queries/<name>.sql) with parameters and returns each
    table as rows of JSON values. ``compute_metrics`` and ``report.build_report`` use nothing else.

    A table is any read-only ``Sequence`` of row dicts that can be iterated more than once: a
    list (Spark, small DuckDB results), a ``rows.Rows``, or a ``rows.LazyRows`` whose rows stay in
    the engine and are built a chunk at a time on each iteration (DuckDB's tables of a row per
    session or request past ``LAZY_ROWS`` rows). Readers iterate (and take ``len``); they never
    keep a whole table, and hold nothing of it once ``close`` (or ``release_tables``) is called.
    """

    ingest: dict
    window: dict

    def columns(self, view: str) -> set[str]: ...

    def time_bounds(self) -> tuple[str | None, str | None]: ...

    def run(self, names: Sequence[str], params: dict[str, object]) -> dict[str, list[dict]]: ...

    def close(self) -> None: ...


