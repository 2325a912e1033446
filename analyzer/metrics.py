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

import math
import re
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import cache, partial
from itertools import starmap
from pathlib import Path
from typing import Protocol

import duckdb

from analyzer.columns import sql_literal
from analyzer.resources import load_query, memory_limit, query_names
from analyzer.rows import LazyRows, Rows, build_rows, row_maker
from analyzer.thresholds import defaults

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
    """date_trunc unit for the timelines: minute up to 3 h, hour up to 31 days, then day."""
    if not first or not last:
        return "hour"
    span = datetime.fromisoformat(last) - datetime.fromisoformat(first)
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


def jsonable(value):
    """A DuckDB value as a plain JSON value (ISO strings, floats, None for NaN/inf)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return jsonable(float(value))
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


# DuckDB result types whose Python values are already JSON values (None, bool, int, str).
_PLAIN_TYPES = {"VARCHAR", "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                "USMALLINT", "UINTEGER", "UBIGINT"}  # fmt: skip


def _finite_column(values: list) -> list:
    # x - x is 0.0 for every finite float and NaN for inf and NaN: no call per value.
    return [v if v is None or v - v == 0.0 else None for v in values]


def _timestamp_column(values: list) -> list:
    return [v.isoformat(timespec="milliseconds") if type(v) is datetime else jsonable(v) for v in values]


def _generic_column(values: list) -> list:
    return [jsonable(v) for v in values]


def _converter(duck_type: str):
    """``jsonable`` over one result column, specialised to its type (the per-session tables have
    tens of thousands of rows: generic checks per value cost more than their queries)."""
    if duck_type in _PLAIN_TYPES:
        return None
    if duck_type == "DOUBLE":
        return _finite_column
    if duck_type.startswith("TIMESTAMP"):
        return _timestamp_column
    return _generic_column


_TZ_TYPE = "TIMESTAMP WITH TIME ZONE"
_HOUR_US = 3_600_000_000
_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def _hour_offset(zone, hour: int) -> tuple | None:
    """(utcoffset, its ISO suffix) of ``zone`` for a whole UTC hour (epoch hours), or None when
    the offset changes inside it or the hour is out of datetime's range."""
    try:
        start = (_UTC_EPOCH + timedelta(microseconds=hour * _HOUR_US)).astimezone(zone)
        end = (_UTC_EPOCH + timedelta(microseconds=(hour + 1) * _HOUR_US - 1)).astimezone(zone)
    except (OverflowError, ValueError):
        return None
    if start.utcoffset() != end.utcoffset():
        return None
    text = start.isoformat(timespec="milliseconds")
    return start.utcoffset(), text[
        len(start.replace(tzinfo=None).isoformat(timespec="milliseconds")) :
    ]


def _tz_iso_column(zone):
    """The ISO text of epoch-microsecond values, as ``_timestamp_column`` writes the datetimes
    DuckDB would have built (aware, in ``zone``): DuckDB makes a zoneinfo datetime per value
    (~6 us each: 1.2 s for the two time columns of a 92 k-session table); here the zone's offset is
    looked up once per hour that has no transition in it, and every other value is done exactly
    as before."""

    def exact(us: int) -> str:
        return (
            (_UTC_EPOCH + timedelta(microseconds=us)).astimezone(zone).isoformat(timespec="milliseconds")
        )

    def convert(values: list) -> list:
        hours: dict[int, tuple | None] = {}
        out = []
        for us in values:
            if us is None:
                out.append(None)
                continue
            hour = us // _HOUR_US
            fixed = hours.get(hour, False)
            if fixed is False:
                fixed = hours[hour] = _hour_offset(zone, hour)
            if fixed is None:
                out.append(exact(us))
            else:
                local = _NAIVE_EPOCH + timedelta(microseconds=us) + fixed[0]
                out.append(local.isoformat(timespec="milliseconds") + fixed[1])
        return out

    convert.zone = zone
    return convert


# Epoch microseconds numpy's datetime_as_string writes as isoformat does: 1970 to 9998 (4-digit
# years, and before 1970 its rounding might not be isoformat's truncation).
_LAST_US = 253370764800 * 1_000_000  # 9999-01-01T00:00:00Z
# Microseconds in one unit of an Arrow timestamp (DuckDB writes TIMESTAMPTZ in "us").
_UNIT_US = {"s": 1_000_000, "ms": 1000, "us": 1}


def _fixed(col, np, dtype, width: int = 1):
    """The values buffer of a fixed-width Arrow array as a numpy array (no copy; ``width`` items a
    value). The slots of its NULLs hold anything: see ``_nulls``."""
    start = col.offset * width
    return np.frombuffer(col.buffers()[1], dtype=dtype, count=start + len(col) * width)[start:]


def _nulls(col, np):
    """A numpy bool array, True where ``col`` is NULL; None when it has no NULL."""
    if not col.null_count:
        return None
    bits = np.frombuffer(col.buffers()[0], dtype=np.uint8)
    valid = np.unpackbits(bits, count=col.offset + len(col), bitorder="little")[col.offset :]
    return valid == 0


def _none_at(values: list, where) -> list:
    """``values`` with None where the numpy bool array ``where`` (or None: nowhere) is True."""
    if where is not None:
        for i in where.nonzero()[0].tolist():
            values[i] = None
    return values


def _arrow_times(col, to_text) -> list:
    """An Arrow timestamp column as ``to_text`` (``_tz_iso_column``) writes its epoch
    microseconds: numpy writes the local time ("...T13:00:00.123", truncated to the millisecond
    as isoformat) of every value in an hour of one offset, then that offset's suffix is added;
    the values in an hour holding a transition, or out of 1970-9998, are written by ``to_text``.
    No pyarrow.compute (which makes pyarrow import pandas, 0.2 s, on its first call)."""
    import numpy as np

    us = _fixed(col, np, np.int64)
    if col.type.unit != "us":
        us = us // 1000 if col.type.unit == "ns" else us * _UNIT_US[col.type.unit]
    nulls = _nulls(col, np)
    if nulls is not None:
        if nulls.all():
            return [None] * len(col)
        us = np.where(nulls, us[~nulls][0], us)  # a value of the column in the NULLs' slots
    hours, inverse = np.unique(us // _HOUR_US, return_inverse=True)
    shifts = np.zeros(len(hours), np.int64)
    exact = np.zeros(len(hours), bool)  # hours to_text writes value by value
    kinds = np.zeros(len(hours), np.intp)  # the suffix of each hour, by its index in suffixes
    suffixes: dict[str, int] = {}
    for i, hour in enumerate(hours.tolist()):
        fixed = _hour_offset(to_text.zone, hour)
        shift = None if fixed is None else fixed[0] // timedelta(microseconds=1)
        if shift is None or hour * _HOUR_US + shift < 0 or (hour + 1) * _HOUR_US + shift > _LAST_US:
            exact[i] = True
            continue
        shifts[i] = shift
        kinds[i] = suffixes.setdefault(fixed[1], len(suffixes))
    if exact.all():
        return _none_at(to_text(us.tolist()), nulls)
    local_ms = (us + shifts[inverse]) // 1000
    text = np.datetime_as_string(local_ms.astype("datetime64[ms]"), unit="ms")
    if len(suffixes) == 1:
        text = np.char.add(text, next(iter(suffixes)))
    elif suffixes:
        text = np.char.add(text, np.array(list(suffixes))[kinds[inverse]])
    out = text.tolist()
    if exact.any():
        where = exact[inverse].nonzero()[0]
        for i, value in zip(where.tolist(), to_text(us[where].tolist()), strict=True):
            out[i] = value
    return _none_at(out, nulls)


def run_metric(con, name: str, params: dict[str, object], sql: str | None = None) -> Sequence[dict]:
    """Run queries/<name>.sql (or ``sql``, a form of it: session_tables.metric_sql) with the
    parameters it names; rows as dicts of JSON values."""
    sql = load_query(name) if sql is None else sql
    used = {k: params[k] for k in query_params(sql)}
    cursor = con.execute(sql, used) if used else con.execute(sql)
    return result_rows(cursor)


# Result types read through Arrow (_arrow_rows): their Arrow values convert to exactly the Python
# values DuckDB's own fetch gives (TIMESTAMPTZ as epoch microseconds, written as text here).
# HUGEINT (sum of integers) is a decimal128 in Arrow: made int again. Others (lists, intervals,
# decimals) keep the cursor path.
_ARROW_TYPES = {"VARCHAR", "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT",
                "USMALLINT", "UINTEGER", "UBIGINT", "DOUBLE", "HUGEINT", _TZ_TYPE}  # fmt: skip
# Results of more rows than this (the per-session tables) are read as Arrow columns past their
# first ARROW_ROWS rows: a value costs ~50 ns there against DuckDB's per-row tuples (~3x) and, for
# a time column, a zoneinfo datetime per value (~6 us). Importing pyarrow costs 0.3 s once, about
# what 15 k rows of the per-session tables save: small logs (fewer sessions) never import it.
ARROW_ROWS = 4096


@cache
def _have_arrow() -> bool:
    """pyarrow and numpy are installed (not dependencies of dslogs itself: without them, the
    cursor path); numpy reads Arrow's buffers (``_arrow_column``)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("pyarrow", "numpy"))


def _arrow_column(col, duck_type: str, to_text) -> list:
    """One Arrow column of a result as the cursor path's JSON values: plain values by Arrow's
    ``to_pylist``; doubles, HUGEINTs and times from their buffers by numpy (no pyarrow.compute)."""
    if not len(col):
        return []
    if duck_type == _TZ_TYPE:  # the instant in UTC microseconds, exact
        return _arrow_times(col, to_text)
    if duck_type == "DOUBLE":  # NaN and inf as None (_finite_column)
        import numpy as np

        values = _fixed(col, np, np.float64)
        bad = ~np.isfinite(values)
        nulls = _nulls(col, np)
        return _none_at(values.tolist(), bad if nulls is None else bad | nulls)
    if duck_type == "HUGEINT":
        import numpy as np
        import pyarrow as pa

        if pa.types.is_decimal128(col.type) and col.type.scale == 0 and sys.byteorder == "little":
            # 128-bit two's complement, low word first: an int64 where the high word is the low
            # word's sign (every value of a sum of integers that fits 64 bits)
            words = _fixed(col, np, np.int64, 2)
            low, high = words[0::2], words[1::2]
            nulls = _nulls(col, np)
            fits = high == (low >> 63)
            if (fits if nulls is None else fits | nulls).all():
                return _none_at(low.tolist(), nulls)
        # past 64 bits: value by value (Decimal -> int)
        return [None if v is None else int(v) for v in col.to_pylist()]
    return col.to_pylist()


def _arrow_batches(reader, types: list[str]):
    """Each record batch of an Arrow ``reader`` as the cursor path's JSON values, column by
    column (times in the zone DuckDB made them in: the connection's TimeZone)."""
    from zoneinfo import ZoneInfo

    to_text = None
    for batch in reader:
        if to_text is None and _TZ_TYPE in types:
            to_text = _tz_iso_column(ZoneInfo(batch.schema.field(types.index(_TZ_TYPE)).type.tz))
        yield [_arrow_column(batch.column(i), t, to_text) for i, t in enumerate(types)]


def _arrow_rows(cursor, first: list[tuple], columns, types, converters, limit) -> Sequence[dict]:
    """result_rows for a large result whose first rows are ``first``: the rest read as Arrow
    record batches, column by column; a Rows past ``limit`` rows (extended batch by batch)."""
    import warnings

    values = _convert(first, converters)
    table = None
    with warnings.catch_warnings():
        # "an extra copy of the rows": of the rest of the result, read batch by batch
        warnings.simplefilter("ignore")
        reader = cursor.to_arrow_reader(_FETCH_ROWS)
    for cols in _arrow_batches(reader, types):
        if table is not None:
            table.extend(cols)
            continue
        for i, col in enumerate(cols):
            values[i].extend(col)
        if len(values[0]) > limit:
            table = compact_table(columns, types)
            table.extend(values)
            values = None
    if table is not None:
        return table.seal()
    return build_rows(columns, values)


# A result of more rows than this (the per-session tables of 100 k+ sessions) is kept column by
# column (rows.Rows): as row dicts 400 k sessions would hold 2+ GB (issue 16 item 4). Smaller ones
# stay lists: a Rows builds its dicts each time it is read, ~35 µs a session more for the rules
# (3 s at 92 k sessions), and below this lists fit the budget (5 M events, 92 k sessions: 1.0 GB).
COMPACT_ROWS = 100_000
# After a result of more rows than this, DuckDB's cached blocks are dropped (release_memory).
RELEASE_ROWS = 5000


def _convert(rows: list[tuple], converters: list) -> list[list]:
    values = [list(col) for col in zip(*rows, strict=True)]
    for i, convert in enumerate(converters):
        if convert is not None:
            values[i] = convert(values[i])
    return values


def result_rows(cursor, compact_rows: int | None = None) -> Sequence[dict]:
    """An executed DuckDB cursor's rows as dicts of JSON values (one conversion for every engine):
    a list, or past ``compact_rows`` (default COMPACT_ROWS) rows a ``Rows`` read the same way."""
    columns = [d[0] for d in cursor.description]
    types = [str(d[1]) for d in cursor.description]
    converters = [_converter(t) for t in types]
    limit = COMPACT_ROWS if compact_rows is None else compact_rows
    rows = []
    if limit >= ARROW_ROWS and all(t in _ARROW_TYPES for t in types) and _have_arrow():
        rows = cursor.fetchmany(ARROW_ROWS)
        if len(rows) == ARROW_ROWS:  # a large result: the rest read as Arrow columns
            return _arrow_rows(cursor, rows, columns, types, converters, limit)
    # every row fetched before the next query: DuckDB 2.0 streams results (DESIGN.md §10); in
    # chunks, so a large table never exists as one list of tuples
    rows += cursor.fetchmany(limit + 1 - len(rows))
    if len(rows) <= limit:
        if rows and any(converters):
            return build_rows(columns, _convert(rows, converters))
        return list(starmap(row_maker(tuple(columns)), rows))
    table = compact_table(columns, types)
    while rows:
        table.extend(_convert(rows, converters))
        rows = cursor.fetchmany(_FETCH_ROWS)
    return table.seal()


_FETCH_ROWS = 8192
# The tables of a row per session or request (``_row_per_session``) of more rows than this stay in
# DuckDB and are read a chunk of CHUNK_ROWS rows at a time (rows.LazyRows): Python's memory for
# them is a chunk per read in progress, not a row per session (issue 16 item 4; ~300 MB as
# rows.Rows at 436 k sessions, and growing with them). Smaller ones are read whole into lists, as
# before: read several times by the rules, a list is converted once (5 M events, 92 k sessions).
LAZY_ROWS = COMPACT_ROWS
CHUNK_ROWS = _FETCH_ROWS
# The database, attached to the run's connection, that holds those tables (DuckDBSource._keep_path:
# a file in the run's temp folder, else in memory): within DuckDB's memory_limit like the logs. Not
# the connection's temp schema: a table is read on a cursor of its own (con.cursor(), a second
# connection to the same database), so two reads of tables can interleave.
KEEP_DB = "_dslogs_rows"
# In a file rather than in memory: at 20 M events (436 k sessions) the nine tables took 562 MB in
# memory, and a file's blocks are compressed and dropped without being written out; about the same
# CPU (metrics and model 62.0 s in a file, 57.4 in memory, 62.2 as rows.Rows on main).
KEEP_ON_DISK = True


def _table_chunks(con, table: str, columns: list[str], types: list[str], size: int, zone: str):
    """The rows of a kept table (``KEEP_DB``), in its order, as lists of ``size`` row dicts of the
    values ``result_rows`` gives on a connection in time zone ``zone`` (Arrow batches when pyarrow is there: streamed, not copied)."""
    cur = con.cursor()
    try:
        # a cursor is a connection of its own, with the default zone: timestamps are written in
        # the run's (--tz), as on ``con``
        cur.execute("SET TimeZone = $zone", {"zone": zone})
        if all(t in _ARROW_TYPES for t in types) and _have_arrow():
            reader = cur.sql(f"SELECT * FROM {table}").to_arrow_reader(size)
            for cols in _arrow_batches(reader, types):
                yield build_rows(columns, cols)
            return
        converters = [_converter(t) for t in types]
        cur.execute(f"SELECT * FROM {table}")
        while rows := cur.fetchmany(size):
            yield build_rows(columns, _convert(rows, converters))
    finally:
        cur.close()


def release_tables(tables: dict) -> None:
    """Free the tables kept in the engine (rows.LazyRows) among ``tables``' values."""
    for t in tables.values():
        if isinstance(t, LazyRows):
            t.release()


def compact_table(columns: list[str], types: list[str]) -> Rows:
    """An empty ``Rows`` for a result of these DuckDB types (fill it a chunk at a time with
    ``extend``, then ``seal``): floats, 64-bit integers and timestamps (written as ISO text)
    in their compact columns, strings interned."""
    return Rows(columns, [t == "DOUBLE" for t in types], [t == "VARCHAR" for t in types],
                ints=[t in _INT64_TYPES for t in types], texts=[t.startswith("TIMESTAMP") for t in types])  # fmt: skip


# Integer result types whose values fit a signed 64-bit array (rows.Rows keeps them so).
_INT64_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
RELEASE_TO = "256MB"  # DuckDB's limit for the instant of DuckDBSource.release_memory
_RELEASE_TO_BYTES = 256 * 10**6
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(I)?)?B?\s*$", re.IGNORECASE)
_UNIT = {None: 0, "K": 1, "M": 2, "G": 3, "T": 4}


def held_bytes(tables) -> int:
    """Bytes of the compact tables (rows.Rows) among ``tables``: what Python holds that grows
    with the sessions (the lists below metrics.COMPACT_ROWS rows are not counted, nor the tables
    kept in DuckDB, rows.LazyRows: DuckDB counts those within its memory_limit)."""
    return sum(t.nbytes() for t in tables if isinstance(t, Rows))


def limit_less(limit: str, held: int) -> str:
    """A DuckDB memory_limit (``"1GB"``, ``"900MiB"``) less ``held`` bytes, never under
    RELEASE_TO; the limit as it is when nothing is held or it is not a size ("80%")."""
    m = _SIZE.match(limit)
    if not held or not m:
        return limit
    unit = (m.group(2) or "").upper() or None
    base = 1024 if m.group(3) else 1000
    size = float(m.group(1)) * base ** _UNIT[unit]
    return f"{max(_RELEASE_TO_BYTES, int(size) - held) // 10**6}MB"


def view_columns(con, view: str) -> set[str]:
    return {row[0] for row in con.execute(f"DESCRIBE {view}").fetchall()}


class MetricSource(Protocol):
    """The engine contract (docs/architecture.md): logs opened for a window, on some engine.

    ``ingest`` and ``window`` are the report's blocks; ``columns`` lists a view's columns;
    ``time_bounds`` gives the first and last event (ISO text, for the time-bucket width);
    ``run`` runs named metric queries (queries/<name>.sql) with parameters and returns each
    table as rows of JSON values. ``compute_metrics`` and ``report.build_report`` use nothing else.

    A table is any read-only ``Sequence`` of row dicts that can be iterated more than once: a
    list (Spark, small DuckDB results), a ``rows.Rows``, or a ``rows.LazyRows`` whose rows stay in
    the engine and are built a chunk at a time on each iteration (DuckDB's tables of a row per
    session or request past ``LAZY_ROWS`` rows). Readers iterate (and take ``len``); they never
    keep a whole table, and hold nothing of it once ``close`` (or ``release_tables``) is called.
    """

    ingest: dict
    window: dict

    def columns(self, view: str) -> set[str]: ...

    def time_bounds(self) -> tuple[str | None, str | None]: ...

    def run(self, names: Sequence[str], params: dict[str, object]) -> dict[str, list[dict]]: ...

    def close(self) -> None: ...


class DuckDBSource:
    """The contract over one DuckDB connection holding the views (``ingest.open_logs``'s LogDB,
    or a bare connection as the tests build)."""

    def __init__(self, con, ingest: dict | None = None, window: dict | None = None, db=None,
                 lazy_rows: int | None = None):  # fmt: skip
        """``lazy_rows``: a table of a row per session or request of more rows than this stays
        in DuckDB (rows.LazyRows; default LAZY_ROWS)."""
        self.con = con
        self.ingest = ingest if ingest is not None else {}
        self.window = window if window is not None else {}
        self.db = db
        self.lazy_rows = LAZY_ROWS if lazy_rows is None else lazy_rows
        self._attached = False
        self._bounds: dict[str, float] = {}  # view -> its rows (_rows_bound)
        self._stored: dict[str, str] | None = None  # _stored_sql

    @classmethod
    def of(cls, db) -> DuckDBSource:
        return cls(db.con, db.ingest, db.window, db)

    def columns(self, view: str) -> set[str]:
        return view_columns(self.con, view)

    def time_bounds(self) -> tuple[str | None, str | None]:
        # time_span gives the bounds; kept for the run that follows (it takes no parameters).
        self._span = run_metric(self.con, "time_span", {})
        row = self._span[0] if self._span else {}
        return row.get("first_event"), row.get("last_event")

    def run(self, names: Sequence[str], params: dict[str, object]) -> dict[str, list[dict]]:
        span = getattr(self, "_span", None)
        out = {}
        for name in names:
            if name == "time_span" and span is not None:
                out[name] = span
            elif _row_per_session(name) and self._rows_bound(name) > self.lazy_rows:
                out[name] = self._kept(name, params)
            else:
                out[name] = run_metric(self.con, name, params, self._stored_sql(name))
            if _held(out[name]):
                # the table now held in Python: give DuckDB's cache back
                self.release_memory(held_bytes(out.values()))
        if any(_held(t) for t in out.values()):
            self.release_memory(held_bytes(out.values()))  # before the rules run in Python
        return out

    def _stored_sql(self, name: str) -> str | None:
        """The SQL of a per-session query that reads the cache's stored rows (session_tables),
        or None; asked once per source, by the first such query (it builds missing tables)."""
        from analyzer import session_tables

        if name not in session_tables.SESSION_QUERIES:
            return None
        if self._stored is None:
            self._stored = session_tables.metric_sql(self.con, self.db, session_tables.SESSION_QUERIES)
        return self._stored.get(name)

    def _rows_bound(self, name: str) -> int:
        """About the most rows a table of a row per session (per request: request_memory_deltas)
        can have: the window's sessions (requests). At most ``lazy_rows`` of them: the table is
        read whole as before, with no table made in DuckDB (0.1 s a run on small logs); a table
        that has more rows all the same is kept as rows.Rows past COMPACT_ROWS, as before."""
        view = "requests" if name == "request_memory_deltas" else "sessions"
        if view not in self._bounds:
            try:
                self._bounds[view] = self.con.execute(f"SELECT count(*) FROM {view}").fetchone()[0]
            except duckdb.Error:  # a connection without the view: keep the table in DuckDB
                self._bounds[view] = math.inf
        return self._bounds[view]

    def _kept(self, name: str, params: dict[str, object]) -> Sequence[dict]:
        """queries/<name>.sql's rows as a table of ``KEEP_DB`` read in chunks (rows.LazyRows),
        or read whole as a list when it has at most ``lazy_rows`` rows (the table dropped)."""
        sql = self._stored_sql(name) or load_query(name).strip().rstrip(";")
        used = {k: params[k] for k in query_params(sql)}
        if not self._attached:
            self.con.execute(f"ATTACH IF NOT EXISTS {sql_literal(self._keep_path())} AS {KEEP_DB}")
            self._attached = True
        table = f'{KEEP_DB}."{name}"'
        rel = self.con.sql(sql, params=used) if used else self.con.sql(sql)
        # kept as the values it is read as, converted once here rather than at every read: times
        # as ISO text in the run's zone (isoformat(timespec="milliseconds"): DuckDB's %z writes a
        # whole-hour offset as "+08", Python as "+08:00"), NaN and inf as NULL (_finite_column)
        select = []
        for column, duck_type in zip(rel.columns, map(str, rel.types), strict=True):
            quoted = '"' + column.replace('"', '""') + '"'
            if duck_type == _TZ_TYPE:
                select.append(f"regexp_replace(strftime({quoted}, '%Y-%m-%dT%H:%M:%S.%g%z'), "
                              f"'([+-][0-9][0-9])$', '\\1:00') AS {quoted}")  # fmt: skip
            elif duck_type == "DOUBLE":
                select.append(f"CASE WHEN isfinite({quoted}) THEN {quoted} END AS {quoted}")
            else:
                select.append(quoted)
        # a newline after the query: it may end with a comment line
        create = f"CREATE OR REPLACE TABLE {table} AS SELECT {', '.join(select)} FROM (\n{sql}\n)"
        self.con.execute(create, used) if used else self.con.execute(create)
        n = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if n <= self.lazy_rows:
            try:
                return result_rows(self.con.execute(f"SELECT * FROM {table}"))
            finally:
                self.con.execute(f"DROP TABLE {table}")
        desc = self.con.execute(f"SELECT * FROM {table} LIMIT 0").description
        columns, types = [d[0] for d in desc], [str(d[1]) for d in desc]
        (zone,) = self.con.execute("SELECT current_setting('TimeZone')").fetchone()
        chunks = partial(_table_chunks, self.con, table, columns, types, CHUNK_ROWS, zone)
        return LazyRows(columns, n, chunks, close=partial(self._drop, table))

    def _keep_path(self) -> str:
        """Where the kept tables live: a database file in the run's temp folder (removed with it)
        when there is one, stored compressed and its blocks dropped from memory without being
        written out (DuckDB reads them back when a rule reads the table); else in memory."""
        tmp = getattr(self.db, "_tmp", None)
        name = getattr(tmp, "name", None)
        if not KEEP_ON_DISK or name is None:
            return ":memory:"
        return str(Path(name) / "rows.duckdb")

    def _drop(self, table: str) -> None:
        try:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
        except duckdb.ConnectionException:
            pass  # the connection is closed: the in-memory table went with it

    def release_memory(self, held: int = 0) -> None:
        """Make DuckDB drop the cached blocks of the logs (issue 16 item 4: peak RSS bounded).

        Its buffer pool keeps blocks read up to memory_limit; once a large metric table is in
        Python, that and the cache together would exceed the budget. Lowering the limit for an
        instant evicts them (0.1 s; re-read from the OS page cache when a later query needs them).
        Then the limit is what ingest.open_logs set less ``held``, the bytes of the compact
        tables (rows.Rows) Python holds: DuckDB and those tables share the one budget.
        Only when the logs are in the cache file: an in-memory store would be spilled to disk."""
        if self.db is None or getattr(self.db, "cache_path", None) is None:
            return
        # what ingest.open_logs set (the setting itself reads back rounded, '953.6 MiB')
        limit = limit_less(memory_limit(), held)
        try:
            self.con.execute(f"SET memory_limit = '{RELEASE_TO}'")
        except duckdb.Error:
            pass  # nothing is lost: the limit is restored below
        finally:
            self.con.execute("SET memory_limit = $limit", {"limit": limit})

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def as_source(source) -> MetricSource:
    """A MetricSource as it is, a LogDB or a DuckDB connection wrapped."""
    if hasattr(source, "run") and hasattr(source, "time_bounds"):
        return source
    if hasattr(source, "con") and hasattr(source, "ingest"):
        return DuckDBSource.of(source)
    return DuckDBSource(source)


def _held(table) -> bool:
    """A table Python holds of more than RELEASE_ROWS rows (not one kept in DuckDB)."""
    return not isinstance(table, LazyRows) and len(table) > RELEASE_ROWS


def _row_per_session(name: str) -> bool:
    """A metric table of one row per session (or per request): 400 k+ rows at 20 M events."""
    return name.endswith("_per_session") or name in ("session_summary", "request_memory_deltas")


def compute_metrics(source, thresholds: dict | None = None) -> dict[str, list[dict]]:
    """Every metric table of METRIC_QUERIES from a MetricSource (or a LogDB / DuckDB connection
    holding the views events/requests/sessions): one function for every engine."""
    thresholds = thresholds or defaults()
    src = as_source(source)
    event_columns = src.columns("events")
    first, last = src.time_bounds()
    params = parameters(thresholds, bucket_for_span(first, last))
    skipped = {n for n, col in _NEEDS_COLUMN.items() if col not in event_columns}
    # the tables of a row per session or request last: the aggregate queries before them (quantile
    # states over every event) then run while Python holds none of them (issue 16 item 4)
    tables = src.run(sorted((n for n in METRIC_QUERIES if n not in skipped), key=_row_per_session), params)
    metrics: dict[str, list[dict]] = {"time_span": tables["time_span"]}
    metrics["_params"] = [{"bucket": params["bucket"], "line_bytes": "line_bytes" in event_columns}]
    for name in METRIC_QUERIES[1:]:
        metrics[name] = [] if name in skipped else tables[name]
    return metrics


def session_requests(source, session_ids: list[str], thresholds: dict | None = None) -> list[dict]:
    """Request rows of the given sessions (drill-down), at most report.detail_requests each."""
    if not session_ids:
        return []
    thresholds = thresholds or defaults()
    params = {
        "session_ids": list(session_ids),
        "max_requests": int(thresholds["report"]["detail_requests"]),
    }
    return as_source(source).run(["session_requests"], params)["session_requests"]


def all_query_names() -> list[str]:
    return query_names()
