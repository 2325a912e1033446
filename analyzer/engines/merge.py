"""The DuckDB analysis by host partition, and the one merge that makes the fleet's tables from it.

A distributed engine (``dslogs.analyzer.engines.spark``) does not restate the metric SQL: it splits the
events by host, runs the unchanged views (``analyzer/ingest/views``) and metric queries (``queries/``) on
each host's events with DuckDB (``partition_tables``, inside an executor), and merges what the
partitions return on the driver (``merge_tables``). Splitting by host is exact because a session
never crosses hosts (one collector per process writes it; docs/architecture.md): every
per-session, per-request, per-host and per-process row is whole inside one partition.

How a query's partition tables become the fleet's table is declared once, in ``MERGES``:

- ``union`` (the default: a new per-session/per-host/per-process query needs nothing here): the
  partitions' rows, then the query's own top-level ``ORDER BY`` and ``LIMIT`` again, so a top-N
  of sessions (slowest_sessions) is the top-N of the partitions' top-Ns.
- ``aggregate``: a group-by over the partitions' rows with ``sum`` (counts), ``min`` and ``max``
  per column (time_span, histogram bins, error counts per bucket).
- ``rerun``: the query itself again on the driver, over the rows of the views it reads that the
  partitions ship (only the columns the query names, only the rows ``where`` keeps). Exact for
  global percentiles and ratios; costs the narrow projection's size on the driver.
  ``own_sessions`` ships only the rows of the sessions in the partition's own result: exact for
  a "pick N sessions, then their points" query whose pick is monotone (a session chosen in the
  fleet is chosen in its host), as memory_timeline and kv_growth_timeline are.

Every table travels as Arrow; the driver reads them with DuckDB and converts rows exactly as
``metrics.run_metric`` does, so the rules and the report cannot tell the engines apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.core.views import VIEWS
from dslogs.analyzer.ingest import EVENT_COLUMNS, event_type, view_sql
from dslogs.analyzer.metrics.registry import bind, query_params
from dslogs.analyzer.metrics.results import result_rows


@dataclass(frozen=True)
class Merge:
    how: str = "union"  # union | aggregate | rerun
    keys: tuple[str, ...] = ()  # aggregate: group-by columns
    sum: tuple[str, ...] = ()
    min: tuple[str, ...] = ()
    max: tuple[str, ...] = ()
    where: str | None = None  # rerun: the rows a partition ships (DuckDB SQL over the view)
    own_sessions: bool = False  # rerun: only the sessions of the partition's own result


def aggregate(keys=(), sum=(), min=(), max=()) -> Merge:  # noqa: A002 - the SQL names read best
    return Merge("aggregate", tuple(keys), tuple(sum), tuple(min), tuple(max))


def rerun(where: str | None = None, own_sessions: bool = False) -> Merge:
    return Merge("rerun", where=where, own_sessions=own_sessions)


UNION = Merge()
_DURATIONS = "duration_ms IS NOT NULL"

# Only global tables are listed; every other query is a union (see the module docstring).
MERGES: dict[str, Merge] = {
    "time_span": aggregate(min=("first_event",), max=("last_event",),
                           sum=("events", "v1_events", "legacy_events", "sessions")),  # fmt: skip
    "latency_hist": aggregate(keys=("metric", "bin_start", "bin_end"), sum=("count",)),
    "future_events": aggregate(sum=("naive_events", "future_events"), max=("naive_last_ts",)),
    "session_id_coverage": aggregate(sum=("requests", "without_session")),
    "gpu_wait_hist": aggregate(keys=("bin_start", "bin_end"), sum=("count",)),
    "errors_over_time": aggregate(keys=("bucket", "error_type"), sum=("count",)),
    "stage_percentiles": rerun(where=_DURATIONS),
    "stage_percentiles_over_time": rerun(where=_DURATIONS),
    "request_latency_percentiles": rerun(),
    "goodput": rerun(),
    "prefill_decode_ratio": rerun(),
    "prefill_by_input_len": rerun(),
    "prefill_by_turn": rerun(),
    "prefill_by_input_class": rerun(),
    "short_prompt_e2e": rerun(),
    "reasoning_share": rerun(),
    "errors_by_type": rerun(where="stage = 'error'"),
    "memory_timeline": rerun(own_sessions=True),
    "kv_growth_timeline": rerun(own_sessions=True),
}


def merge_of(name: str) -> Merge:
    return MERGES.get(name, UNION)


# -- reading a query's text ----------------------------------------------------------------------

_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_READS = re.compile(r"\b(?:FROM|JOIN)\s+(events|requests|sessions)\b", re.IGNORECASE)


def _bare(sql: str) -> str:
    return _STRING.sub("''", _COMMENT.sub("", sql))


def views_read(sql: str) -> list[str]:
    """The views a query reads (FROM/JOIN events|requests|sessions)."""
    found = {m.lower() for m in _READS.findall(_bare(sql))}
    return [v for v in VIEWS if v in found]


def names_in(sql: str) -> set[str]:
    """Every identifier in a query (an over-estimate of the columns it reads: enough to ship)."""
    return set(_WORD.findall(_bare(sql)))


def order_and_limit(sql: str) -> str:
    """The query's final top-level ``ORDER BY ... [LIMIT ...]``, table qualifiers dropped (the
    merged rows are one table), or '' when it has none."""
    text = _bare(sql).rstrip().rstrip(";")
    depth = 0
    last = -1
    for m in re.finditer(r"\(|\)|\bORDER\s+BY\b", text, re.IGNORECASE):
        token = m.group(0)
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            last = m.start()
    if last < 0:
        return ""
    tail = text[last:]
    return re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\.(?=[A-Za-z_])", "", tail)


# -- in a partition (an executor) ----------------------------------------------------------------


def load_partition(con, events_sql: str, params: dict | None = None) -> None:
    """events (a table from ``events_sql``), then requests and sessions from the shipped views."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE events AS {events_sql}", params or {})
    con.execute(f"CREATE OR REPLACE TEMP TABLE requests AS {view_sql('requests')}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE sessions AS {view_sql('sessions')}")


def _arrow(con, name: str, params: dict):
    sql = load_query(name)
    used = bind(name, params)
    return con.sql(sql, params=used or None).to_arrow_table() if used else con.sql(sql).to_arrow_table()


def input_key(view: str, merge: Merge, owner: str) -> str:
    """The name a rerun input travels under (queries with the same view and filter share one)."""
    return f"@{view}|{merge.where or ''}|{owner if merge.own_sessions else ''}"


def rerun_inputs(names: Sequence[str], columns: dict[str, list[str]]) -> dict[str, tuple[str, str | None, str | None, list[str]]]:
    """key -> (view, where, own-sessions query, columns) of every rerun query's inputs."""
    out: dict[str, tuple[str, str | None, str | None, list[str]]] = {}
    for name in names:
        merge = merge_of(name)
        if merge.how != "rerun":
            continue
        sql = load_query(name)
        named = names_in(sql)
        for view in views_read(sql):
            key = input_key(view, merge, name)
            prev = out.get(key)
            cols = [c for c in columns[view] if c in named or (prev and c in prev[3])]
            out[key] = (view, merge.where, name if merge.own_sessions else None, cols)
    return out


# A timeline's table for one bucket, when a partition computes it for several (bucket_key).
BUCKETED = "|bucket="


def bucket_key(name: str, bucket: str) -> str:
    return f"{name}{BUCKETED}{bucket}"


def pick_bucket(tables: dict, bucket: str | None) -> dict | None:
    """One partition's tables with each timeline's ``bucket`` table under the query's own name;
    None when a timeline lacks that bucket (the partition was computed for coarser ones)."""
    out = {k: t for k, t in tables.items() if BUCKETED not in k}
    for key in tables:
        name, _, _ = key.partition(BUCKETED)
        if BUCKETED in key and name not in out:
            if bucket_key(name, bucket) not in tables:
                return None
            out[name] = tables[bucket_key(name, bucket)]
    return out


def partition_tables(con, names: Sequence[str], params: dict, buckets: Sequence[str] | None = None) -> list[tuple[str, object]]:
    """(name, Arrow table) of one partition: each non-rerun query's table, each rerun input.
    ``buckets``: each timeline (a non-rerun query using $bucket) once per bucket, named by
    ``bucket_key`` (a partition computed before the fleet's time span, hence its bucket, is
    known; reruns take the bucket on the driver)."""
    columns = {v: [r[0] for r in con.execute(f"DESCRIBE {v}").fetchall()] for v in VIEWS}
    out = []
    own: dict[str, object] = {}
    for name in names:
        if buckets and merge_of(name).how != "rerun" and "bucket" in query_params(name):
            out.extend((bucket_key(name, b), _arrow(con, name, {**params, "bucket": b})) for b in buckets)
            continue
        table = _arrow(con, name, params)
        if merge_of(name).how == "rerun":
            if merge_of(name).own_sessions:
                own[name] = table
            continue
        out.append((name, table))
    for key, (view, where, owner, cols) in rerun_inputs(names, columns).items():
        conditions = [f"({where})"] if where else []
        bound = {}
        if owner is not None:
            ids = [s for s in own[owner].column("session_id").to_pylist() if s is not None]
            conditions.append("list_contains($ids, session_id)")
            bound["ids"] = sorted(set(ids))
        select = ", ".join(_ident(c) for c in cols) or "1 AS _"
        sql = f"SELECT {select} FROM {view}" + (" WHERE " + " AND ".join(conditions) if conditions else "")
        out.append((key, con.sql(sql, params=bound or None).to_arrow_table()))
    return out


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- on the driver -------------------------------------------------------------------------------


def _concat(tables: list):
    import pyarrow as pa

    return pa.concat_tables(tables, promote_options="permissive")


def _register(con, name: str, table) -> None:
    """A shipped Arrow table as a temp table; DuckDB's HUGEINT came back as DECIMAL(38,0) and
    goes back to HUGEINT, so sums and quantiles type as they do on one connection."""
    con.register("_dslogs_arrow", table)
    cols = con.execute("DESCRIBE _dslogs_arrow").fetchall()
    select = ", ".join(
        f"CAST({_ident(c)} AS HUGEINT) AS {_ident(c)}" if t == "DECIMAL(38,0)" else _ident(c) for c, t, *_ in cols
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_ident(name)} AS SELECT {select} FROM _dslogs_arrow")
    con.unregister("_dslogs_arrow")


def empty_events_sql() -> str:
    """An events table with no rows and the view's columns (for a fleet with no events)."""
    return "SELECT " + ", ".join(f"NULL::{event_type(c)} AS {c}" for c in EVENT_COLUMNS) + " WHERE false"


def merge_tables(con, parts: dict[str, list], names: Iterable[str], params: dict) -> dict[str, list[dict]]:
    """The fleet's metric tables from the partitions' (``parts``: name -> Arrow tables, one per
    partition that had events). ``con`` is a DuckDB connection in the report's time zone."""
    names = list(names)
    if not any(parts.values()):
        # No events anywhere: the queries on empty views give exactly one connection's answer.
        load_partition(con, empty_events_sql())
        return {name: _rows(con, name, params) for name in names}
    out: dict[str, list[dict]] = {}
    loaded: dict[str, str] = {}
    for name in names:
        merge = merge_of(name)
        sql = load_query(name)
        if merge.how == "rerun":
            for view in views_read(sql):
                key = input_key(view, merge, name)
                if loaded.get(view) != key:
                    _register(con, view, _concat(parts[key]))
                    loaded[view] = key
            out[name] = _rows(con, name, params)
            continue
        _register(con, "_dslogs_part", _concat(parts[name]))
        tail = order_and_limit(sql)
        if merge.how == "union":
            out[name] = _rows(con, name, params, f"SELECT * FROM _dslogs_part {tail}")
            continue
        cols = [r[0] for r in con.execute("DESCRIBE _dslogs_part").fetchall()]
        how = {**{c: "sum" for c in merge.sum}, **{c: "min" for c in merge.min}, **{c: "max" for c in merge.max}}
        select = ", ".join(
            _ident(c) if c in merge.keys else f"{how[c]}({_ident(c)}) AS {_ident(c)}" for c in cols
        )
        group = f" GROUP BY {', '.join(_ident(k) for k in merge.keys)}" if merge.keys else ""
        out[name] = _rows(con, name, params, f"SELECT {select} FROM _dslogs_part{group} {tail}")
    return out


def _rows(con, name: str, params: dict, sql: str | None = None) -> list[dict]:
    """queries/<name>.sql's rows, or those of ``sql``, a merge of its partitions' rows."""
    used = bind(name, params, sql)
    sql = load_query(name) if sql is None else sql
    cursor = con.execute(sql, used) if used else con.execute(sql)
    return result_rows(cursor)
