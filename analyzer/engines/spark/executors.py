"""What runs in the Spark executors: one task per host group runs the DuckDB analysis."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dslogs.analyzer.core.resources import memory_limit
from dslogs.analyzer.core.views import VIEWS

# -- in the executors ----------------------------------------------------------------------------
#
# The functions below run in Spark's Python workers: they import only what a worker has (dslogs,
# duckdb, pyarrow) and get their arguments through the closure (pickled with the task).


def _worker_threads() -> int:
    """DuckDB threads per task: the cores Spark gave the task (spark.task.cpus), so N tasks on N
    cores do not start N x N threads."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        cpus = int(ctx.cpus()) if ctx is not None else 1
    except Exception:  # outside a task (tests) or an older pyspark
        cpus = 1
    return max(1, cpus)


def _ipc(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes):
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


@dataclass(frozen=True)
class GroupFile:
    """One file of a host group, as the task that reads it needs it."""

    index: int  # read order among all files (file_id order, as DuckDB reads them)
    display: str  # source_file, and the file named in bad-line samples
    kind: str  # "jsonl" | "parquet"
    local: str | None = None  # a path the executor opens itself
    uri: str | None = None  # else its bytes come through Spark's binaryFile reader, under this URI
    spark_path: str | None = None  # what that reader loads (glob characters escaped)
    host: str | None = None  # parquet: the host of the manifest's partition folder
    size: int = 0


@dataclass
class _Task:
    """What one host group's task needs besides its files (pickled with the function)."""

    zone: str
    since: str | None
    until: str | None
    tz: str | None
    lo: str | None
    hi: str | None
    session_attr: str | None = None  # OTLP traces: the span attribute naming the session


def _open_group(task: _Task, files: list[GroupFile], contents: dict, tmp: str, materialize: bool,
                sessions: list | None = None):  # fmt: skip
    """One DuckDB connection holding a host group's views events, requests and sessions: its
    JSONL files read by ONE ``ingest.open_logs`` (the same validation, bad lines and legacy
    request ids, numbered across the group's files in the fleet's read order), its compacted
    Parquet files added as they are. Returns (connection, closer, ingest block or None, names)
    where names maps a scratch path back to the file's display name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dslogs.analyzer.engines.merge import load_partition

    os.environ["DSLOGS_THREADS"] = str(_worker_threads())
    shown: dict[str, str] = {}
    for f in sorted((f for f in files if f.kind == "jsonl"), key=lambda f: f.index):
        # tmp/<read order>/<name>: the folder keeps discovery's sort (folder, day, rotation) in the
        # fleet's order; the name keeps .gz and the name-date rule what the driver saw.
        name = re.sub(r"[/\\]", "_", f.display.rstrip("/").rsplit("/", 1)[-1]) or "log.jsonl"
        local = Path(tmp) / f"{f.index:09d}" / name
        local.parent.mkdir()
        if f.local is not None:
            local.symlink_to(f.local)  # read in place: no bytes through the JVM
        else:
            with open(local, "wb") as fh:
                fh.write(contents[f.uri])
        shown[str(local)] = f.display
    parts = [f for f in sorted(files, key=lambda f: f.index) if f.kind == "parquet"]
    ingest = None
    if shown:
        from dslogs.analyzer import ingest
        from dslogs.analyzer.core.selection import Selection

        selection = Selection(paths=tuple(shown), since=task.since, until=task.until, tz=task.tz, use_cache=False,
                              session_attr=task.session_attr)  # fmt: skip
        db = ingest.open(selection, materialize=materialize and not parts)
        con, closer = db.con, db.close
        ingest = dict(db.ingest)
        if not parts:
            return con, closer, ingest, shown
        # JSONL and Parquet of the same group (rare: a host both compacted and raw): one table.
        con.execute("CREATE TEMP TABLE _dslogs_jsonl AS SELECT * FROM events")
        for view in ("sessions", "requests", "events"):  # views here (materialize is off)
            con.execute(f"DROP VIEW IF EXISTS {view}")
    else:
        con = _partition_connection(task.zone)
        closer = con.close
    inputs = []
    for i, f in enumerate(parts):
        source = f.local if f.local is not None else pa.BufferReader(contents[f.uri])
        con.register(f"_dslogs_in{i}", pq.read_table(source))
        inputs.append((f"_dslogs_in{i}", f.host))
    sql, bound = parquet_events_sql(con, inputs, task.lo, task.hi, sessions, with_jsonl=bool(shown))
    load_partition(con, sql, bound)
    return con, closer, ingest, shown


def _group_meta(con, ingest: dict | None, shown: dict) -> dict:
    """A group's hosts, time bounds, events per format and ingest block (for the driver)."""
    rows = con.execute(
        "SELECT host, source_format, count(*), epoch_us(min(ts)), epoch_us(max(ts)) FROM events GROUP BY ALL"
    ).fetchall()
    hosts = sorted({r[0] for r in rows}, key=lambda h: (h is None, h))
    formats: dict[str, int] = {}
    for r in rows:
        formats[r[1]] = formats.get(r[1], 0) + int(r[2])
    firsts = [r[3] for r in rows if r[3] is not None]
    lasts = [r[4] for r in rows if r[4] is not None]
    first, last = (min(firsts), max(lasts)) if firsts else (None, None)
    # Which hosts each JSONL file holds: a drill-down reads only its sessions' hosts' files.
    file_hosts: dict[str, list] = {}
    if shown:
        for path, host in con.execute("SELECT DISTINCT source_file, host FROM events").fetchall():
            file_hosts.setdefault(shown.get(path, path), []).append(host)
    if ingest is not None:
        for key in ("bad_line_samples", "skipped"):
            ingest[key] = [{**s, "file": shown.get(s.get("file"), s.get("file"))} for s in ingest.get(key, [])]
        ingest.pop("seconds", None)
    return {"hosts": hosts, "first_us": first, "last_us": last, "formats": formats, "ingest": ingest,
            "file_hosts": file_hosts}


def _candidate_buckets(zone: str, first_us: int | None, last_us: int | None) -> list[str]:
    """Timeline buckets the fleet's span may pick: the fleet spans at least this group's span, so
    only this group's bucket and coarser ones (metrics.bucket_for_span)."""
    from dslogs.analyzer.metrics.registry import bucket_for_span

    order = ["second", "minute", "hour", "day"]
    if first_us is None:
        return order
    own = bucket_for_span(_iso_micros(first_us, zone), _iso_micros(last_us, zone))
    return order[order.index(own):]


def _group_fn(task: _Task, slots: list[list[GroupFile]], mode: str, names: list[str], params: dict,
              speculative: bool):  # fmt: skip
    """mapInArrow function over one host group's rows (slot, path, content): read the group's
    files, then ``mode`` "analysis": every metric table of merge.partition_tables (timelines for
    each bucket the fleet's span may pick when ``speculative``), or "views": the rows of the
    views events, requests and sessions (for ``query``). Yields (slot, name, data) rows: Arrow IPC
    tables and one "@meta" row (JSON: hosts, bounds, formats, ingest block)."""
    # The drill-down's rows depend only on its sessions' own events (requests are per session).
    sessions = params.get("session_ids") if names == ["session_requests"] else None

    def fn(batches):
        import pyarrow as pa

        # Rows come in slot order; one slot per task unless Spark merged partitions.
        slots_seen: list[int] = []
        contents: dict = {}
        for batch in batches:
            paths = batch.column("path")
            data = batch.column("content")
            for i, slot in enumerate(batch.column("slot").to_pylist()):
                if not slots_seen or slots_seen[-1] != slot:
                    slots_seen.append(slot)
                if paths[i].is_valid:
                    contents[paths[i].as_py()] = data[i].as_buffer()
        schema = pa.schema([("slot", pa.int32()), ("name", pa.string()), ("data", pa.binary())])
        for slot in slots_seen:
            out = _run_group(task, slots[slot], contents, mode, names, params, speculative, sessions)
            yield pa.RecordBatch.from_pydict({"slot": [slot] * len(out), "name": [n for n, _ in out],
                                              "data": [d for _, d in out]}, schema=schema)  # fmt: skip

    return fn


def _run_group(task: _Task, files: list[GroupFile], contents: dict, mode: str, names: list[str], params: dict,
               speculative: bool, sessions: list | None) -> list[tuple[str, bytes]]:  # fmt: skip
    """One group's (name, IPC table) rows and its "@meta" row (see ``_group_fn``)."""
    import tempfile

    from dslogs.analyzer.engines.merge import partition_tables

    out: list[tuple[str, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="dslogs-spark-") as tmp:
        materialize = mode == "analysis" and sessions is None
        con, closer, ingest, shown = _open_group(task, files, contents, tmp, materialize, sessions)
        try:
            meta = _group_meta(con, ingest, shown)
            if mode == "views":
                out.extend((view, _ipc(_view_table(con, view, shown))) for view in VIEWS)
            elif sum(meta["formats"].values()):
                buckets = _candidate_buckets(task.zone, meta["first_us"], meta["last_us"]) if speculative else None
                out.extend((name, _ipc(t)) for name, t in partition_tables(con, names, params, buckets))
        finally:
            closer()
    out.append(("@meta", json.dumps(meta, ensure_ascii=False, default=str).encode()))
    return out


def _view_table(con, view: str, shown: dict):
    """One view's rows for Spark: source_file as displayed, instants as UTC-labelled timestamps
    (Spark's reading; DuckDB labels them with the zone)."""
    import pyarrow as pa

    table = con.sql(f"SELECT * FROM {view}").to_arrow_table()
    if "source_file" in table.column_names and table.num_rows:
        names = table.column("source_file").combine_chunks().dictionary_encode()
        renamed = pa.array([shown.get(v, v) for v in names.dictionary.to_pylist()], pa.string())
        column = pa.DictionaryArray.from_arrays(names.indices, renamed).cast(pa.string())
        table = table.set_column(table.schema.get_field_index("source_file"), "source_file", column)
    utc = pa.schema([pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                     for f in table.schema])  # fmt: skip
    return table.cast(utc)


def _decode_fn(schema):
    """mapInArrow function: the IPC tables of one view (rows of ``_group_fn``) as its rows."""

    def fn(batches):
        for batch in batches:
            for data in batch.column("data").to_pylist():
                yield from _from_ipc(data).cast(schema).to_batches()

    return fn


def parquet_events_sql(con, inputs: list[tuple[str, str | None]], lo: str | None, hi: str | None,
                       sessions: list | None = None, with_jsonl: bool = False) -> tuple[str, dict]:  # fmt: skip
    """The SQL of a group's events from its registered Parquet tables (name, manifest host), and
    ``_dslogs_jsonl`` when ``with_jsonl``; only those of ``sessions`` when given (a drill-down
    needs nothing else)."""
    from dslogs.analyzer.ingest import EVENT_COLUMNS, event_type

    selects = [f"SELECT {', '.join(EVENT_COLUMNS)} FROM _dslogs_jsonl"] if with_jsonl else []
    for name, host in inputs:
        have = {r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()}
        cols = []
        for c in EVENT_COLUMNS:
            if c == "host":
                # A compacted file's host is its partition folder's (the manifest's), as in ingest.
                cols.append(("NULL" if host is None else "'" + host.replace("'", "''") + "'") + "::VARCHAR AS host")
            elif c in have:
                cols.append(f'"{c}"')
            else:
                cols.append(f"NULL::{event_type(c)} AS {c}")
        selects.append(f"SELECT {', '.join(cols)} FROM {name}")
    if not selects:
        from dslogs.analyzer.engines.merge import empty_events_sql

        return empty_events_sql(), {}
    where, params = [], {}
    if lo is not None:
        where.append("ts >= $lo::TIMESTAMPTZ")
        params["lo"] = lo
    if hi is not None:
        where.append("ts < $hi::TIMESTAMPTZ")
        params["hi"] = hi
    if sessions is not None:
        where.append("list_contains($sessions, session_id)")
        params["sessions"] = list(sessions)
    sql = "SELECT * FROM (" + " UNION ALL ".join(selects) + ")"
    return sql + (" WHERE " + " AND ".join(where) if where else ""), params


def _partition_connection(zone: str):
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"SET TimeZone = '{zone}'")
    con.execute(f"SET threads = {_worker_threads()}")
    con.execute("SET memory_limit = $limit", {"limit": memory_limit()})
    return con


def _iso_micros(value: int | None, zone: str) -> str | None:
    if value is None:
        return None
    from zoneinfo import ZoneInfo

    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))
    return stamp.astimezone(ZoneInfo(zone)).isoformat(timespec="milliseconds")
