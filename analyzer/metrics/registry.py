"""Run the metric queries (queries/*.sql, one metric per file) on an open connection.

``compute_metrics(con, thresholds)`` returns ``{query name: [row dict, ...]}`` with plain
JSON-able values (ISO strings for timestamps, floats/ints, None for NaN or NULL). The rules and
the report model see only these tables, never the connection, so another engine (Spark) only
has to produce the same tables.

Every query reads the views ``events``, ``requests`` and ``sessions`` of the one connection
``open_logs`` built: the logs are read once. Parameters (thresholds, SLOs, bin widths) are bound
as DuckDB prepared parameters (``$name``); nothing is spliced into SQL text.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from analyzer.core.resources import load_query, query_names
from analyzer.core.time import parse_iso

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

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*")


def query_params(sql: str) -> set[str]:
    """Names of the ``$name`` parameters a query uses (comments ignored)."""
    return set(_PARAM.findall(_COMMENT.sub("", sql)))


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
    """Every parameter a metric query may use, from the thresholds."""
    t = thresholds
    rep = t["report"]
    return {
        # every threshold as $<table>_<key> (a new query reads its rule's numbers without an
        # entry here); the names below predate that and win where they coincide (slo_*)
        **{f"{table}_{key}": value for table, keys in t.items() for key, value in keys.items()},
        "bucket": bucket,
        "slo_ttft_ms": float(t["slo"]["ttft_ms"]),
        "slo_tpot_ms": float(t["slo"]["tpot_ms"]),
        "long_input_tokens": int(t["slow_prefill"]["long_input_tokens"]),
        "short_input_tokens": int(t["checklist"]["short_input_tokens"]),
        "starved_util_pct": float(t["gpu_starved"]["util_pct"]),
        "starved_mem_share": float(t["gpu_starved"]["mem_used_share"]),
        "max_sample_weight_s": float(t["gpu_starved"]["max_sample_weight_s"]),
        "thrash_util_pct": float(t["memory_thrash"]["util_pct"]),
        "thrash_swing_mb_per_s": float(t["memory_thrash"]["swing_mb_per_s"]),
        "max_gap_s": float(t["memory_thrash"]["max_gap_s"]),
        "leak_slope_mb_per_min": float(t["memory_leak"]["slope_mb_per_min"]),
        "leak_rise_mb": float(t["memory_leak"]["rise_mb"]),
        "ghost_mb": float(t["ghost_memory"]["ghost_mb"]),
        "max_sessions": int(rep["timeline_sessions"]),
        "max_points": int(rep["timeline_points"]),
        "limit": int(rep["slowest_sessions"]),
        "max_requests": int(rep["detail_requests"]),
        "max_heartbeat_gap_s": float(t["log_volume"]["max_heartbeat_gap_s"]),
        "future_margin_min": int(t["report"]["future_margin_min"]),
        "now": datetime.now(UTC).isoformat(),
        **BINS,
    }


