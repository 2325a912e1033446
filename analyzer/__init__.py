"""dslogs analyzer: ingest trace logs into DuckDB, compute metrics, diagnose, render reports."""

__version__ = "0.1.0"
