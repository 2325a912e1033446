"""Run the metric queries (queries/*.sql, one metric per file) on an open connection.

``compute_metrics(con, thresholds)`` returns ``{query name: [row dict, ...]}`` with plain
JSON-able values (ISO strings for timestamps, floats/ints, None for NaN or NULL). The rules and
the report model see only these tables, never the connection, so another engine (Spark) only
has to produce the same tables.

Every query reads the views ``events``, ``requests`` and ``sessions`` of the one connection
``open_logs`` built: the logs are read once. Parameters (thresholds, SLOs, bin widths) are bound
as DuckDB prepared parameters (``$name``); nothing is spliced into SQL text. Each query declares
the parameters it binds in its header (``-- params: <name>, ...``); a threshold is
``$<table>_<key>`` of dslogs.analyzer.core.thresholds.TABLES.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import cache

from dslogs.analyzer.core.resources import load_query, query_names
from dslogs.analyzer.core.thresholds import DEFAULTS
from dslogs.analyzer.core.time import parse_iso

# Queries that need session ids picked by the rules (run after them, see report.py).
DRILLDOWN_QUERIES: tuple[str, ...] = ("session_requests",)
# Metric tables compute_metrics builds: every queries/*.sql but the drill-downs, so a new metric is
# its .sql file alone (tests/test_registry.py checks that a rule, a chart's series or the report
# reads each). Run order: time_span first (it picks the bucket), then by name.
METRIC_QUERIES: tuple[str, ...] = (
    "time_span",
    *(n for n in query_names() if n != "time_span" and n not in DRILLDOWN_QUERIES),
)
# Queries that need a column the events view may lack; skipped (table = []) without it.
_NEEDS_COLUMN = {"log_volume_over_time": "line_bytes", "log_volume_peak_minute": "line_bytes"}

# Histogram / bin settings (display only, not thresholds).
BINS = {
    "input_bin_tokens": 256,
    "max_input_tokens": 8192,
    "max_turn": 30,
    "bins_per_decade": 10,  # latency histograms: log-spaced bins, ×1.26 per bin
    "hist_min_ms": 0.01,
    "max_bins": 100,  # 0.01 ms … 10^8 ms
}
# Every threshold as the parameter a query binds it as, ``$<table>_<key>``; and the parameters
# that are not thresholds: the timelines' date_trunc unit, the clock, the bins, and the
# drill-down's sessions (its caller binds them).
THRESHOLD_PARAMS = frozenset(f"{table}_{key}" for table, keys in DEFAULTS.items() for key in keys)
OTHER_PARAMS = frozenset({"bucket", "now", *BINS, "session_ids"})

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*")
_DECLARED = re.compile(r"^-- params: ([a-z0-9_, ]+)$", re.MULTILINE)


def sql_params(sql: str) -> set[str]:
    """Names of the ``$name`` parameters a SQL text uses (comments ignored)."""
    return set(_PARAM.findall(_COMMENT.sub("", sql)))


@cache
def query_params(name: str) -> tuple[str, ...]:
    """The parameters queries/<name>.sql declares in its header, ``-- params: <name>, ...`` (one
    line or several), which are the ones it is run with: () for a query that takes none. A query
    that uses a ``$name`` it does not declare, declares one it does not use, or declares one that
    is neither a threshold nor in OTHER_PARAMS is a ValueError naming the file."""
    sql = load_query(name)
    found = [p.strip() for line in _DECLARED.findall(sql) for p in line.split(",")]
    declared = tuple(dict.fromkeys(p for p in found if p))
    if unknown := [p for p in declared if p not in THRESHOLD_PARAMS and p not in OTHER_PARAMS]:
        raise ValueError(f"{name}.sql declares parameters that are neither a threshold "
                         f"($<table>_<key>) nor one of {sorted(OTHER_PARAMS)}: {unknown}")
    used = sql_params(sql)
    if undeclared := sorted(used - set(declared)):
        raise ValueError(f"{name}.sql uses parameters its header does not declare (-- params: ...): {undeclared}")
    if unused := [p for p in declared if p not in used]:
        raise ValueError(f"{name}.sql declares parameters it does not use: {unused}")
    return declared


def bind(name: str, params: dict[str, object], sql: str | None = None) -> dict[str, object]:
    """The values of queries/<name>.sql's declared parameters from ``params``. ``sql``: a form of
    that query an engine runs instead (over stored rows, or a merge of partitions' rows), which
    may use fewer of them and no other."""
    declared = query_params(name)
    if sql is None:
        return {k: params[k] for k in declared}
    used = sql_params(sql)
    if undeclared := used - set(declared):
        raise ValueError(f"a form of {name}.sql uses parameters its header does not declare: {sorted(undeclared)}")
    return {k: params[k] for k in declared if k in used}


_SERIES = re.compile(r"^-- series ([a-z_][a-z0-9_]*): ([a-z0-9_, ]+)$", re.MULTILINE)


def query_series(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The model series a query feeds, from its header line ``-- series <key>: <column>, ...``:
    the report keeps those columns of its rows as ``model["series"][key]``, which charts draw.
    None for a query that feeds no series."""
    found = _SERIES.findall(load_query(name))
    if len(found) > 1:
        raise ValueError(f"{name}.sql declares {len(found)} series; a query feeds one at most")
    if not found:
        return None
    key, columns = found[0]
    return key, tuple(c.strip() for c in columns.split(",") if c.strip())


def bucket_for_span(first: str | None, last: str | None) -> str:
    """date_trunc unit for the timelines, from the data's own span: second up to 10 min (a minute
    of data is 60 points, not one column), minute up to 3 h, hour up to 31 days, then day."""
    if not first or not last:
        return "hour"
    span = parse_iso(last) - parse_iso(first)
    if span <= timedelta(minutes=10):
        return "second"
    if span <= timedelta(hours=3):
        return "minute"
    if span <= timedelta(days=31):
        return "hour"
    return "day"


def parameters(thresholds: dict, bucket: str) -> dict[str, object]:
    """Every parameter a metric query may bind: each threshold as ``$<table>_<key>`` (in the
    number type of its default, so a hand-made table's 1000 binds as the DOUBLE 1000.0 the SQL
    compares as), the timeline bucket, the clock, the bins."""
    out: dict[str, object] = {}
    for table, keys in thresholds.items():
        for key, value in keys.items():
            default = DEFAULTS.get(table, {}).get(key)
            out[f"{table}_{key}"] = value if default is None else type(default)(value)
    return {**out, "bucket": bucket, "now": datetime.now(UTC).isoformat(), **BINS}
