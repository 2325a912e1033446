"""The views every opened log set has, by name: what ``dslogs query``, the Python API and the
engines read (ingest defines them; their columns are in docs/sql.md)."""

VIEWS = ("events", "requests", "sessions")
