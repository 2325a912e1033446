"""dslogs analyzer: ingest trace logs into DuckDB, compute metrics, diagnose, render reports."""

from dslogs_collector._version import __version__

__all__ = ["__version__"]
