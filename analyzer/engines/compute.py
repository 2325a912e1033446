"""The metric tables from any engine: compute_metrics, the drill-down's session_requests."""

from __future__ import annotations

from dslogs.analyzer.core import progress
from dslogs.analyzer.core.resources import query_names
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.duckdb import as_source
from dslogs.analyzer.metrics.registry import (
    _NEEDS_COLUMN,
    METRIC_QUERIES,
    bucket_for_span,
    parameters,
)
from dslogs.analyzer.metrics.results import row_per_session


def compute_metrics(source, thresholds: dict | None = None) -> dict[str, list[dict]]:
    """Every metric table of METRIC_QUERIES from a MetricSource (or a LogDB / DuckDB connection
    holding the views events/requests/sessions): one function for every engine. Without
    ``thresholds``, the defaults."""
    thresholds = thresholds or defaults()
    src = as_source(source)
    event_columns = src.columns("events")
    first, last = src.time_bounds()
    params = parameters(thresholds, bucket_for_span(first, last))
    skipped = {n for n, col in _NEEDS_COLUMN.items() if col not in event_columns}
    # the tables of a row per session or request last: the aggregate queries before them (quantile
    # states over every event) then run while Python holds none of them (memory bounded)
    names = sorted((n for n in METRIC_QUERIES if n not in skipped), key=row_per_session)
    progress.counting("computing", len(names), "queries")
    tables = src.run(names, params)
    metrics: dict[str, list[dict]] = {"time_span": tables["time_span"]}
    metrics["_params"] = [{"bucket": params["bucket"], "line_bytes": "line_bytes" in event_columns}]
    for name in METRIC_QUERIES[1:]:
        metrics[name] = [] if name in skipped else tables[name]
    return metrics


def session_requests(source, session_ids: list[str], thresholds: dict | None = None) -> list[dict]:
    """Request rows of the given sessions (drill-down), at most report.detail_requests each."""
    if not session_ids:
        return []
    thresholds = thresholds or defaults()
    params = {
        "session_ids": list(session_ids),
        "report_detail_requests": int(thresholds["report"]["detail_requests"]),
    }
    return as_source(source).run(["session_requests"], params)["session_requests"]


def all_query_names() -> list[str]:
    return query_names()
