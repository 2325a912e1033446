"""The DuckDB engine's opener, registered as ``duckdb``: ``ingest.open_logs`` wrapped in a
``DuckDBSource``. Apart from ``duckdb.py`` so that what uses a DuckDBSource (compute, the model)
does not import ingest's orchestration; the registry imports this module when the engine is
picked."""

from __future__ import annotations

from pathlib import Path

from analyzer.engines.duckdb import DuckDBSource
from analyzer.engines.registry import engine
from analyzer.ingest import logs


@engine("duckdb")
def open_duckdb(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    cache: Path | None = None,
    use_cache: bool = True,
    materialize: bool = True,
    **_spark_options,
) -> DuckDBSource:
    """The logs under ``paths`` opened by ``ingest.open_logs``, as a MetricSource."""
    return DuckDBSource.of(logs.open_logs(list(paths), since=since, until=until, tz=tz, cache=cache,
                                     use_cache=use_cache, materialize=materialize))  # fmt: skip
