"""Logs into DuckDB: discovery, the load plan, line judging, reading, the store, the views."""
