"""dslogs as a Python library: the same analysis as the command line, as DataFrames, charts and a
report that renders inline in a notebook (docs/python.md).

    import dslogs
    logs = dslogs.open("./logs", since="1d")
    logs.requests                  # pandas DataFrame of the requests view
    logs.query("SELECT ... WHERE host = $host", host="gpu-01")
    report = logs.report()         # renders inline in Jupyter / VS Code
    report.findings[0].fix
    report.chart("latency_hist")       # an altair Chart to change
    logs.capacity()                # requests in flight the service holds, and the limit to set
    dslogs.diff("./before", "./after")

Importing this package is cheap: the analyzer, DuckDB, pandas and altair load when first used.
pandas and altair come with the ``notebook`` extra: ``pip install 'dslogs-llm[notebook]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dslogs.analyzer import __version__

if TYPE_CHECKING:
    from datetime import date, datetime, timedelta, tzinfo
    from os import PathLike

    from dslogs._capacity import Capacity, Level, ProcessCapacity, Recommendation
    from dslogs._diff import Diff, FindingChange, MetricChange, PercentileChange, RateChange
    from dslogs._logs import Logs
    from dslogs._report import (
        ChecklistItem,
        Finding,
        Judged,
        LatencyStats,
        Report,
        Requests,
        SessionRow,
        Stage,
    )

__all__ = [
    "__version__", "open", "diff", "load_report", "Logs", "Report", "Diff", "Finding",
    "ChecklistItem", "Stage", "Requests", "LatencyStats", "SessionRow", "Judged", "Capacity", "ProcessCapacity", "Level",
    "Recommendation", "MetricChange", "PercentileChange", "RateChange", "FindingChange", "DslogsError",
]

_LAZY = {
    "Logs": "dslogs._logs",
    "Report": "dslogs._report",
    "Finding": "dslogs._report",
    "ChecklistItem": "dslogs._report",
    "Stage": "dslogs._report",
    "Requests": "dslogs._report",
    "LatencyStats": "dslogs._report",
    "SessionRow": "dslogs._report",
    "Judged": "dslogs._report",
    "Diff": "dslogs._diff",
    "MetricChange": "dslogs._diff",
    "PercentileChange": "dslogs._diff",
    "RateChange": "dslogs._diff",
    "FindingChange": "dslogs._diff",
    "Capacity": "dslogs._capacity",
    "ProcessCapacity": "dslogs._capacity",
    "Level": "dslogs._capacity",
    "Recommendation": "dslogs._capacity",
    "DslogsError": "dslogs.analyzer.core.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dslogs' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def open(  # noqa: A001 - the library's verb, as in dslogs.open("./logs")
    paths: str | PathLike[str] | list[str | PathLike[str]],
    since: str | datetime | date | timedelta | None = None,
    until: str | datetime | date | timedelta | None = None,
    tz: str | tzinfo | None = None,
    thresholds: str | PathLike[str] | None = None,
    engine: str = "duckdb",
    cache: str | PathLike[str] | None = None,
    use_cache: bool = True,
    session_attr: str | None = None,
    prom_servers: str = "auto",
) -> Logs:
    """Open trace logs (folders, files or globs) for the window ``since``..``until``.

    Same arguments as ``dslogs analyze``: ``since``/``until`` as 30m, 12h, 1d, 7d or an ISO date,
    or a ``datetime`` (naive: wall-clock time in ``tz``), a ``date`` or a ``timedelta`` (ago);
    ``tz`` for naive (legacy) timestamps; ``thresholds`` a TOML file of rule thresholds;
    ``engine`` "duckdb" or "spark" (the report only; DataFrames always come from DuckDB);
    ``session_attr`` the span attribute that names the session in OTLP traces (docs/interop.md);
    ``prom_servers`` how Prometheus snapshots are told apart into servers (``--prom-servers``)."""
    from dslogs._logs import Logs

    return Logs(paths, since=since, until=until, tz=tz, thresholds=thresholds, engine=engine,
                cache=cache, use_cache=use_cache, session_attr=session_attr, prom_servers=prom_servers)


def diff(
    before: str | PathLike[str] | list[str | PathLike[str]],
    after: str | PathLike[str] | list[str | PathLike[str]],
    tz: str | None = None,
    thresholds: str | PathLike[str] | None = None,
    session_attr: str | None = None,
    engine: str = "duckdb",
) -> Diff:
    """Before against after (log sets or saved report JSON), as ``dslogs diff BEFORE AFTER``;
    ``engine`` "duckdb" or "spark" builds each side's report model (as ``dslogs.open``)."""
    from dslogs._diff import compare

    return compare(before, after, tz=tz, thresholds=thresholds, session_attr=session_attr, engine=engine)


def load_report(path: str | PathLike[str]) -> Report:
    """A report saved with ``Report.save("x.json")`` or ``dslogs analyze --format json``."""
    from dslogs._report import load

    return load(path)
