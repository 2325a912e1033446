"""Logs into DuckDB: discovery, the load plan, line judging, reading, the store, the views.

The one way in from above: ``ingest.open(selection)`` opens the logs a ``core.selection.Selection``
names and returns the ``LogSet`` (a DuckDB connection holding the views events, requests,
sessions). What else the layers above use is named in ``PUBLIC`` and read from here
(``from dslogs.analyzer.ingest import data_extent``); ``tests/test_layers.py`` refuses an import of an
ingest submodule from above, so the internals can move without the commands noticing. Names load
on first use (``dslogs --help`` imports none of them).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the submodule that defines it
PUBLIC: dict[str, str] = {
    # the opened logs
    "LogSet": "logs", "LogDB": "logs", "data_extent": "logs", "execute": "logs", "run_query": "logs",
    "fetch_result": "logs", "sql_error": "logs", "session_events": "logs", "resolve_session": "logs",
    "session_sql": "logs", "is_snapshot": "logs", "read_snapshots": "logs", "SAMPLES_TOTAL": "logs",
    # ad hoc SQL, read-only
    "check_statement": "sandbox", "lock_down": "sandbox", "run_user_query": "sandbox",
    "stop_on_signals": "sandbox", "user_cursor": "sandbox",
    # the cache files
    "cache_home": "cache", "list_caches": "cache", "clear_caches": "cache", "prune_caches": "cache", "remove_cache": "cache",
    "fingerprint": "cache", "SCHEMA_VERSION": "cache",
    # the event columns and SQL quoting
    "EVENT_COLUMNS": "columns", "event_type": "columns", "events_table_md": "columns",
    "sql_literal": "columns",
    # files: discovery, compacted datasets, Prometheus gauges, formats
    "discover": "discovery", "name_sort_key": "discovery", "printable": "discovery",
    "compact_logs": "compact", "dataset_ingest": "dataset", "MANIFEST": "dataset",
    "gauge_rows": "prometheus", "ESTIMATED_TOKENS": "formats", "NOT_AVAILABLE": "formats",
    "unavailable": "formats", "is_otlp_traces": "formats",
    # logs that grow while they are read (watch)
    "LogTail": "tail", "LogStream": "tail",
    # the views and the cached per-session tables (engines)
    "view_sql": "viewdefs", "define_views": "viewdefs", "writable_moment": "session_tables",
    "session_tables": None, "dataset": None, "discovery": None, "tail": None,
}  # fmt: skip


def open(selection, materialize: bool = True):  # noqa: A001 - the layer's verb
    """The logs ``selection`` (a ``core.selection.Selection``) names, read into DuckDB: a
    ``LogSet`` (``logs.open_logs``; no annotation, so that this entry imports nothing). ``materialize``
    computes requests and sessions once (many queries, as in ``analyze``); False keeps them as
    views (one query, as in ``dslogs query``)."""
    from dslogs.analyzer.ingest.logs import open_logs

    return open_logs(list(selection.paths), since=selection.since, until=selection.until, tz=selection.tz,
                     cache=selection.cache, use_cache=selection.use_cache, materialize=materialize,
                     session_attr=selection.session_attr,
                     prom_servers=getattr(selection, "prom_servers", "auto"))  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = PUBLIC[name]
    if module is None:  # a submodule used as a namespace
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
