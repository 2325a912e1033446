"""The DuckDB engine's opener, registered as ``duckdb``: ``ingest.open_logs`` wrapped in a
``DuckDBSource``. Apart from ``duckdb.py`` so that what uses a DuckDBSource (compute, the model)
does not import ingest's orchestration; the registry imports this module when the engine is
picked."""

from __future__ import annotations

from analyzer.engines.duckdb import DuckDBSource
from analyzer.engines.registry import engine
from analyzer.ingest import logs


@engine("duckdb")
def open_duckdb(paths: list[str], master: str | None = None, **options) -> DuckDBSource:
    """The logs under ``paths`` opened by ``ingest.open_logs`` (``since``, ``until``, ``tz``,
    ``cache``, ``use_cache``, ``materialize``), as a MetricSource; ``master`` is Spark's."""
    return DuckDBSource.of(logs.open_logs(list(paths), **options))
