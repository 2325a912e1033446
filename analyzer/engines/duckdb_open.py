"""The DuckDB engine's opener, registered as ``duckdb``: ``ingest.open`` wrapped in a
``DuckDBSource``. Apart from ``duckdb.py`` so that what uses a DuckDBSource (compute, the model)
does not import ingest's orchestration; the registry imports this module when the engine is
picked."""

from __future__ import annotations

from dslogs.analyzer import ingest
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.engines.duckdb import DuckDBSource
from dslogs.analyzer.engines.registry import engine


@engine("duckdb")
def open_duckdb(selection: Selection, materialize: bool = True) -> DuckDBSource:
    """The logs ``selection`` names, opened by ``ingest.open``, as a MetricSource."""
    return DuckDBSource.of(ingest.open(selection, materialize))
