"""Query results as rows of JSON values: Arrow buffers through numpy where it is there, a
cursor otherwise; large per-session tables left in DuckDB (rows.LazyRows)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import starmap

from dslogs.analyzer.core.jsonable import jsonable
from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.metrics.registry import bind
from dslogs.analyzer.metrics.rows import LazyRows, Rows, build_rows, row_maker

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
    parameters its header declares; rows as dicts of JSON values."""
    used = bind(name, params, sql)
    sql = load_query(name) if sql is None else sql
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
# a time column, a zoneinfo datetime per value (~6 us). Importing pyarrow (with numpy) costs
# 0.12-0.3 CPU-s once, what ~100 k values of such rows cost the cursor (~1-1.5 us a value at 5 M
# events): until it is imported, the cursor reads up to ARROW_IMPORT_VALUES values (rows times
# columns) past the first ARROW_ROWS rows of large results, in all (at most ~0.045 s more where
# the run's results outgrow them), then the rest go by Arrow. Small logs and a sliding --since 1d
# at 1.5 M events (the what-if sample's 900 rows past them, 19 k values) never import it.
ARROW_ROWS = 4096
ARROW_IMPORT_VALUES = 30_000
_cursor_values = 0  # values the cursor read past ARROW_ROWS rows while pyarrow was not imported


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
# column (rows.Rows): as row dicts, hundreds of thousands of sessions would hold gigabytes. Smaller
# ones stay lists: a Rows builds its dicts each time it is read, which costs the rules time per
# session, and below this size lists fit the memory budget.
COMPACT_ROWS = 100_000
# After a result of more rows than this, DuckDB's cached blocks are dropped (release_memory).
RELEASE_ROWS = 5000


def _convert(rows: list[tuple], converters: list) -> list[list]:
    values = [list(col) for col in zip(*rows, strict=True)]
    for i, convert in enumerate(converters):
        if convert is not None:
            values[i] = convert(values[i])
    return values


def _more_by_cursor(cursor, rows: list, limit: int, width: int) -> bool:
    """While pyarrow is not imported: as many more rows of a large result (``width`` columns)
    as what is left of ARROW_IMPORT_VALUES holds, appended to ``rows`` by the cursor. True when
    the rest is to be read by Arrow (rows may remain), False when the cursor read it all."""
    global _cursor_values
    if "pyarrow" in sys.modules:
        return True
    room = min((ARROW_IMPORT_VALUES - _cursor_values) // max(width, 1), limit - len(rows))
    if room <= 0:
        return True
    more = cursor.fetchmany(room)
    rows += more
    _cursor_values += len(more) * width
    return len(more) == room


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
        if len(rows) == ARROW_ROWS and _more_by_cursor(cursor, rows, limit, len(columns)):
            # a large result: the rest read as Arrow columns
            return _arrow_rows(cursor, rows, columns, types, converters, limit)
    # every row fetched before the next query: DuckDB streams results and a pending
    # stream is invalidated by the next query on the connection; in
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
# The tables of a row per session or request (``row_per_session``) of more rows than this stay in
# DuckDB and are read a chunk of CHUNK_ROWS rows at a time (rows.LazyRows): Python's memory for
# them is a chunk per read in progress, not a row per session (as rows.Rows they would grow with
# the sessions). Smaller ones are read whole into lists: read several times by the rules, a list is
# converted once.
LAZY_ROWS = COMPACT_ROWS
CHUNK_ROWS = _FETCH_ROWS
# The database, attached to the run's connection, that holds those tables (DuckDBSource._keep_path:
# a file in the run's temp folder, else in memory): within DuckDB's memory_limit like the logs. Not
# the connection's temp schema: a table is read on a cursor of its own (con.cursor(), a second
# connection to the same database), so two reads of tables can interleave.
KEEP_DB = "_dslogs_rows"
# In a file rather than in memory: at tens of millions of events the kept tables hold hundreds of
# MB, and a file's blocks are compressed and dropped without being written out, for about the same
# CPU (bench/ measures it).
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


def held(table) -> bool:
    """A table Python holds of more than RELEASE_ROWS rows (not one kept in DuckDB)."""
    return not isinstance(table, LazyRows) and len(table) > RELEASE_ROWS


def row_per_session(name: str) -> bool:
    """A metric table of one row per session (or per request): 400 k+ rows at 20 M events."""
    return name.endswith("_per_session") or name in ("session_summary", "request_memory_deltas")
