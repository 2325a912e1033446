"""Read trace logs (v1 and the legacy seed format) into DuckDB and define the SQL views.

``open_logs`` discovers the files (``dslogs.analyzer.ingest.discovery``), reads each JSON line once with
DuckDB ``read_json`` and one explicit schema (``RAW_COLUMNS``: every v1 field plus the legacy
``timestamp``), normalises it (``analyzer/ingest/views/events.sql``) into a table of events, and defines
the views ``events``, ``requests`` and ``sessions`` (docs/internals.md, docs/sql.md) over it, so
queries never re-scan JSON. The table lives in the cache file (``dslogs.analyzer.ingest.cache``) or in memory.

Damaged input never aborts a run and costs exactly its own lines (``LINE_RULES``). A file is
first read strictly (fast: one statement for a batch of files); a file that fails is re-read in
chunks, and only a chunk DuckDB rejects is judged line by line (Python for what it is sure of,
DuckDB for each suspect line alone), so its good lines go to DuckDB; the bad ones are counted
per file with file, line and reason for the first few. A corrupt ``.gz`` keeps the lines before the damage and is counted in
``skipped_files``; an unreadable or empty file is skipped and counted. ``InputError`` only when
nothing is readable: a missing path, no log files.

The steps live in their own modules (docs/architecture.md): ``columns`` (the read schema and the
events columns), ``validate`` (``LINE_RULES``, judging a line), ``catalogue`` (what the store knows
of each file, the load plan), ``storage`` (the cache file or memory), ``reader`` (files into the
store), ``viewdefs`` (the views). This module runs them in order: ``open_logs``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from dslogs.analyzer.core import progress
from dslogs.analyzer.core.errors import InputError, UsageError, one_line
from dslogs.analyzer.core.resources import env_int, memory_limit
from dslogs.analyzer.core.results import QueryResult
from dslogs.analyzer.core.textsafe import visible
from dslogs.analyzer.core.time import iso, memory_connection, parse_window, zone_name
from dslogs.analyzer.ingest import cache as cache_mod
from dslogs.analyzer.ingest import catalogue, formats, storage, viewdefs
from dslogs.analyzer.ingest.columns import EVENT_COLUMNS, sql_literal
from dslogs.analyzer.ingest.discovery import Discovery, discover, printable
from dslogs.analyzer.ingest.formats import otlp_traces
from dslogs.analyzer.ingest.reader import Reader, load_datasets
from dslogs.analyzer.ingest.validate import LINE_RULES

SAMPLES_TOTAL = 50


# -- the database ------------------------------------------------------------------------------


@dataclass
class LogDB:
    """Logs opened in DuckDB: ``con`` has the views events, requests, sessions."""

    con: duckdb.DuckDBPyConnection
    ingest: dict
    window: dict
    tz: str
    files: list[str] = field(default_factory=list)
    cache_path: Path | None = None
    read_bytes: int = 0  # bytes read from the logs by this run (a grown file's tail only)
    tail_files: int = 0  # grown files of which only the new bytes were read
    file_rows: int = 0  # events the run's files hold, in any window
    # display -> (bad lines, their samples, why the rest was unreadable) of this run's files
    # with bad lines: what a file that yields no event held
    damaged: dict[str, tuple[int, list[dict], str | None]] = field(default_factory=dict)
    # (path, display) of this run's OTLP/JSON files that hold metrics and no span
    metric_files: list[tuple[Path, str]] = field(default_factory=list)
    # a view of the events of every file of the log set, the window aside: "events" without a
    # window; with one, where the store holds the files it left out unchanged (None: open the logs
    # without the window to see them)
    whole_events: str | None = None
    _tmp: tempfile.TemporaryDirectory | None = None
    _cache_lock: int | None = None  # cache.hold's shared lock while the cache file is in use

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.con.close()
        cache_mod.release(self._cache_lock)
        self._cache_lock = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LogDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


LogSet = LogDB  # the name the layers above use (dslogs.analyzer.ingest.open returns one)


# -- open_logs -----------------------------------------------------------------------------------


def open_logs(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    cache: Path | None = None,
    use_cache: bool = True,
    materialize: bool = True,
    session_attr: str | None = None,
    prom_servers: str = "auto",
) -> LogDB:
    """Open the logs under ``paths`` in DuckDB (docs/internals.md "Ingest API").

    ``materialize`` computes requests and sessions once into temporary tables (many queries, as
    in ``analyze``); False keeps them as views (one query, as in ``dslogs query``).
    ``session_attr``: the span attribute that names the session in OTLP traces (else
    ``gen_ai.conversation.id``); the cache is not used with it (it changes the events).
    ``prom_servers``: how Prometheus snapshots are told apart into servers
    (``core.selection.PROM_SERVERS``).

    InputError (exit 2) when no file yields a single event: one line per file saying what it
    looks like (``dslogs.analyzer.ingest.formats.describe``)."""
    started = time.perf_counter()
    zone = zone_name(tz)
    lo, hi = parse_window(since, until, tz)
    if isinstance(paths, (str, os.PathLike)):
        paths = [str(paths)]
    found: Discovery = discover([str(p) for p in paths], lo, hi)
    snapshots = _take_snapshots(found)
    con = memory_connection()
    # dslogs draws its own, on stderr only. Inside Jupyter without ipywidgets DuckDB refuses to
    # change the setting at all (its bar is then off anyway).
    with contextlib.suppress(duckdb.InvalidInputException):
        con.execute("SET enable_progress_bar = false")
    if threads := env_int("DSLOGS_THREADS"):  # a Spark task's share of the cores (dslogs.analyzer.engines.spark)
        con.execute(f"SET threads = {threads}")
    # Timestamps print, and date_trunc buckets, in the zone of the logs' reader (--tz or local).
    con.execute(f"SET TimeZone = {sql_literal(zone)}")
    workdir = tempfile.TemporaryDirectory(prefix="dslogs-")
    con.execute(f"SET temp_directory = {sql_literal(workdir.name)}")
    # Bounded memory (weeks of logs on a small box): beyond it DuckDB spills to disk.
    con.execute(f"SET memory_limit = {sql_literal(memory_limit())}")
    db = LogDB(
        con=con, ingest={}, window={"since": iso(lo), "until": iso(hi)}, tz=zone, _tmp=workdir
    )
    try:
        _load(db, found, zone, lo, hi, cache, use_cache and not session_attr, materialize,
              Path(workdir.name), session_attr)  # fmt: skip
        if snapshots:
            read_snapshots(db.ingest, [(f.path, f.display) for f in snapshots], lo, hi,
                           alone=not (found.datasets or db.file_rows or found.files), group=prom_servers)  # fmt: skip
        if not _read_metric_files(db, lo, hi) and not snapshots:
            _no_events(db, found)
    except BaseException:
        db.close()
        raise
    db.ingest["seconds"] = round(time.perf_counter() - started, 3)
    return db


def is_snapshot(path: Path, display: str, size: int) -> bool:
    """A snapshot (no events, ``dslogs.analyzer.ingest.formats``): by its name (*.prom), or a file not
    named as JSON lines whose first bytes are a server's metrics (a file named on the command line)."""
    return formats.snapshot_format(path, display, size) is not None


def _take_snapshots(found: Discovery) -> list:
    """Prometheus snapshots out of ``found.files``."""
    taken = [f for f in found.files if is_snapshot(f.path, f.display, f.size)]
    if taken:
        found.files = [f for f in found.files if f not in taken]
    return taken


def read_snapshots(ingest: dict, files: list[tuple[Path, str]], lo, hi, alone: bool = False,
                   group: str = "auto") -> None:  # fmt: skip
    """The server metrics of snapshots ``(path, display)``, each read by its format
    (``dslogs.analyzer.ingest.formats``), into ``ingest["server_metrics"]`` for the report, their files
    and bad lines counted; snapshots outside --since/--until are left out (a snapshot is one instant).
    ``alone``: the run has nothing else, so snapshots of which none could be read (line 0: the
    file left out whole) are InputError, one line per file. ``group``: how snapshots are told apart
    into servers (``core.selection.PROM_SERVERS``)."""
    servers, bad = formats.read_snapshots(files, lo, hi, group)
    whole = [(display, why) for display, no, why in bad if no == 0]
    if alone and not servers and whole:
        lines = [f"{printable(display)}: {visible(why)}" for display, why in whole]
        raise InputError(lines[0] if len(lines) == 1 else "no snapshot could be read\n" + "\n".join(lines))
    ingest["files"] = int(ingest.get("files") or 0) + len(files)
    ingest["server_metrics"] = servers
    if bad:
        ingest["bad_lines"] = int(ingest.get("bad_lines") or 0) + len(bad)
        samples = ingest.setdefault("bad_line_samples", [])
        samples.extend({"file": display, "line": no, "reason": reason} for display, no, reason in bad[:5])


def _read_metric_files(db: LogDB, lo, hi) -> bool:
    """The GenAI histograms of OTLP/JSON metrics files as server metrics (read every run: the
    cache holds events); a file that gave some is read, not skipped. Whether any did."""
    if not db.metric_files:
        return False
    servers, used = otlp_traces.metric_servers(db.metric_files, lo, hi)
    if not servers:
        return False
    ingest = db.ingest
    ingest["server_metrics"] = (ingest.get("server_metrics") or []) + servers
    taken = [s for s in ingest.get("skipped", []) if s["file"] in used]
    ingest["skipped"] = [s for s in ingest.get("skipped", []) if s["file"] not in used]
    for key in ("unreadable_files", "skipped_files"):
        ingest[key] = max(0, int(ingest.get(key) or 0) - len(taken))
    return True


def _no_events(db: LogDB, found: Discovery) -> None:
    """InputError naming each file when files were read and none holds an event (in any
    window): a README renamed .jsonl, OTLP metrics, a CSV. Empty files alone are not that."""
    if found.datasets or db.file_rows or not any(f.size > 0 for f in found.files):
        return
    lines = []
    for f in found.files:
        what = "looks like an empty file" if f.size == 0 else _what_it_holds(db, f)
        lines.append(f"{printable(f.display)}: no events: it {what}")
    # one file: its own line says it all
    raise InputError(lines[0] if len(lines) == 1 else "no file yields an event\n" + "\n".join(lines))


def _what_it_holds(db: LogDB, f) -> str:
    """A file that yields no event: the damaged dslogs lines it holds (the first one's line and
    reason, as the bad lines of a file with events are reported), else what it looks like."""
    bad, samples, unreadable = db.damaged.get(f.display, (0, [], None))
    fmt = formats.damaged_format(formats.head_bytes(f.path)) if bad else None
    if fmt is None:
        return "looks like " + formats.describe_file(f.path)
    first = min(samples, key=lambda s: s["line"]) if samples else None
    text = f"holds damaged {fmt.line_name} lines, {bad:,} skipped"
    if first is not None:
        text += f" (the first, line {first['line']}: {visible(first['reason'])})"
    return text + (f"; then {visible(unreadable)}" if unreadable else "")


def _load(
    db: LogDB, found: Discovery, zone: str, lo, hi, cache, use_cache, materialize, workdir: Path,
    session_attr: str | None = None,
) -> None:
    con = db.con
    store = "memory"
    cache_path = None
    mode = None
    if use_cache and found.files:
        cache_path = (
            Path(cache) if cache else cache_mod.default_cache_path([f.path for f in found.files])
        )
        # held until the LogSet closes: `dslogs cache --clear` (of the default folder, the only
        # one it clears) leaves a cache in use alone; no lock file beside a --cache PATH
        db._cache_lock = cache_mod.hold(cache_path) if cache is None else None
        mode = storage.attach_cache(con, cache_path, found, zone, explicit=cache is not None)
        if mode:
            store = "dslogs_cache"
        else:
            cache_path = None
            cache_mod.release(db._cache_lock)
            db._cache_lock = None
    readonly = mode == "ro"
    db.cache_path = cache_path
    if cache_path is not None:
        cache_mod.mark_used(cache_path)
    con.execute("SET preserve_insertion_order = true")
    if not readonly:
        storage.create_store(con, store)
    reader = Reader(con, store, zone, workdir, session_attr)

    # The cache's derived tables, when they hold every cached file now, are kept in step with
    # this run's changes (viewdefs.update_derived) rather than rebuilt.
    in_step = store == "dslogs_cache" and not readonly and viewdefs.derived_in_sync(con, store)
    plan = catalogue.plan(con, store, found, zone, readonly, workdir)
    run, to_read, skipped = plan.run, plan.to_read, plan.skipped
    if in_step:
        viewdefs.touch_derived(con, store, plan.dropped_ids)
    legacy_sessions = catalogue.drop(con, store, plan.dropped_ids)

    reading = to_read + plan.tails
    total = sum(f.size for f in reading)
    # dslogs draws its own progress, on stderr only, when a command shows it (core.progress)
    progress.reading(total, len(reading))
    reader.read(reading, watch=progress.statement if progress.active() else None)
    progress.phase("indexing")
    db.read_bytes, db.tail_files = total, len(plan.tails)
    if in_step:
        viewdefs.touch_derived(con, store, [f.file_id for f in reading])

    legacy_sessions += catalogue.record(con, store, to_read, zone, plan.next_id, readonly)
    if store == "dslogs_cache" and not readonly:
        catalogue.record_ends(con, store, to_read)
        legacy_sessions += catalogue.record_tails(con, store, plan.tails)
    storage.number_legacy_requests(con, store, legacy_sessions)
    if in_step and (reading or plan.dropped_ids or plan.renamed):
        viewdefs.update_derived(con, store)
    ids = [f.file_id for f in run]
    derived = None
    if store == "dslogs_cache" and not found.datasets:
        derived = viewdefs.refresh_derived(con, store, run, lo, hi,
                                           changed=bool(to_read or plan.tails or plan.dropped_ids or plan.renamed),
                                           materialize=materialize, readonly=readonly)  # fmt: skip
    if store == "dslogs_cache" and not readonly:
        storage.reattach_read_only(con, db.cache_path)

    # Per-file records of this run (cached files keep what was found when they were read).
    records = con.execute(
        f"SELECT file_id, rows, legacy_rows, bad_lines, samples, unreadable, size FROM {store}.files "
        "WHERE list_contains(?, file_id)", [ids]).fetchall() if ids else []  # fmt: skip
    dataset = load_datasets(con, found.datasets, lo, hi)
    viewdefs.define_views(
        con, store, run, lo, hi, materialize, derived, with_dataset=dataset is not None
    )
    if lo is None and hi is None:
        db.whole_events = "events"
    elif dataset is None:
        db.whole_events = _whole_events(con, store, found, run, zone)
    db.files = [f.display for f in run] + (dataset or {}).get("sources", [])
    db.file_rows = sum(int(r[1] or 0) for r in records)
    bad_lines = sum(r[3] for r in records) + (dataset or {}).get("bad_lines", 0)
    samples: list[dict] = list((dataset or {}).get("bad_line_samples", []))
    order = {fid: i for i, fid in enumerate(ids)}
    displays = {f.file_id: f.display for f in run}
    paths = {f.file_id: Path(f.path) for f in run}
    for r in sorted(records, key=lambda r: order[r[0]]):
        samples.extend(json.loads(r[4] or "[]"))
        if r[3]:
            db.damaged[displays[r[0]]] = (int(r[3]), json.loads(r[4] or "[]"), r[5])
        if r[5]:
            skipped.append({"file": displays[r[0]], "reason": r[5]})
            if r[5].startswith(otlp_traces.METRICS_ONLY):
                db.metric_files.append((paths[r[0]], displays[r[0]]))
    unreadable = sum(1 for r in records if r[5]) + len(found.unreadable)
    formats = {k: int(n) for k, n in db.con.execute(
        "SELECT source_format, count(*) FROM events GROUP BY ALL ORDER BY ALL").fetchall() if n}  # fmt: skip
    events = sum(formats.values())
    db.ingest = {
        "files": len(run) + (dataset or {}).get("files", 0),
        "events": int(events),
        "bad_lines": int(bad_lines),
        "skipped_files": len(found.pruned)
        + unreadable
        + plan.duplicates
        + (dataset or {}).get("skipped_files", 0),
        "bad_line_samples": samples[:SAMPLES_TOTAL],
        "formats": formats,
        "bytes": int(sum(r[6] for r in records)) + int((dataset or {}).get("bytes", 0)),
        "skipped": skipped[:SAMPLES_TOTAL],
        "pruned_files": len(found.pruned),
        "unreadable_files": unreadable,
        "duplicate_files": plan.duplicates,
        "read_files": len(to_read) + len(plan.tails),
        "cached_files": plan.reused + plan.renamed,
        "renamed_files": plan.renamed,
        "cache": str(db.cache_path) if db.cache_path else None,
    }


def _whole_events(con, store: str, found: Discovery, run: list, zone: str) -> str | None:
    """The view ``whole_events``: this run's files and those its window left out by their names,
    every row, when the store holds each of those unchanged (as ``catalogue.plan`` would reuse
    it); None when one is not there (a run without a cache, or one that never read it)."""
    ids = [f.file_id for f in run]
    if found.pruned:
        known = {r[0]: r[1:] for r in con.execute(
            f"SELECT path, file_id, size, mtime_ns, tz, legacy_rows FROM {store}.files").fetchall()}  # fmt: skip
        for lf in found.pruned:
            rec = known.get(str(lf.path.resolve()))
            if rec is None or (rec[1], rec[2]) != (lf.size, lf.mtime_ns) or (rec[4] and rec[3] != zone):
                return None
            ids.append(rec[0])
    cols = ", ".join(c for c in EVENT_COLUMNS if c != "source_file")
    listed = ", ".join(str(int(i)) for i in ids) or "NULL"
    con.execute(f"CREATE OR REPLACE TEMP VIEW whole_events AS SELECT {cols} FROM {store}.events WHERE file_id IN ({listed})")
    return "whole_events"


# -- queries -------------------------------------------------------------------------------------


def _sql_error(exc: Exception) -> str:
    return one_line(exc, every_line=True, limit=500)


sql_error = _sql_error


def execute(db: LogDB, sql: str, params: list | dict | None = None) -> duckdb.DuckDBPyConnection:
    """Run one SQL statement over the views and return its cursor (to fetch as rows, Arrow or a
    DataFrame); a DuckDB error becomes a one-line UsageError."""
    if not sql or not sql.strip():
        raise UsageError('empty SQL: try "SELECT stage, count(*) FROM events GROUP BY stage"')
    try:
        return db.con.execute(sql, params) if params is not None else db.con.execute(sql)
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {_sql_error(exc)}") from None


def run_query(db: LogDB, sql: str, params: list | dict | None = None) -> QueryResult:
    """Run one SQL statement over the views; a DuckDB error becomes a one-line UsageError."""
    return fetch_result(execute(db, sql, params))


def fetch_result(cur: duckdb.DuckDBPyConnection) -> QueryResult:
    """The rows of an executed statement (``execute``) as a QueryResult."""
    if cur.description is None:
        return QueryResult(columns=[], rows=[])
    columns = [d[0] for d in cur.description]
    types = [str(d[1]) for d in cur.description]
    try:
        rows = cur.fetchall()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {_sql_error(exc)}") from None
    return QueryResult(columns=columns, rows=rows, types=types)


def data_extent(
    paths: list[str], tz: str | None = None, cache: Path | None = None, use_cache: bool = True
) -> dict:
    """What the logs hold with no window: files, events and the first and last event's time
    (aware datetimes, or None); used to say why a window came out empty."""
    with open_logs(paths, tz=tz, cache=cache, use_cache=use_cache, materialize=False) as db:
        events, first, last = db.con.execute("SELECT count(*), min(ts), max(ts) FROM events").fetchall()[0]
        return {"files": db.ingest.get("files", 0), "events": int(events), "first": first, "last": last}


# The timeline of one session, one row per request (dslogs session --format table).
_TIMELINE_COLUMNS = (
    "turn_index", "request_id", "start_ts", "status", "input_len", "output_len", "tokenize_ms",
    "queue_ms", "prefill_ms", "decode_ms", "inference_ms", "format_ms", "ttft_ms", "tpot_ms",
    "e2e_ms", "gpu_wait_pct", "gpu_util_pct", "num_beams", "max_new_tokens", "inflight", "error_type",
)  # fmt: skip
def session_events(db: LogDB, session_id: str, timeline: bool = True) -> QueryResult:
    """One session: its request timeline (``timeline``) or all its events in ts order."""
    return run_query(db, session_sql(timeline), [session_id])


def resolve_session(db: LogDB, id_or_prefix: str) -> str:
    """The session id that ``id_or_prefix`` names: itself when a session has that id, else the
    one session whose id starts with it; UsageError naming the candidates when several do."""
    # the report shows ids cut to 8 characters and "…": the copied short form works too
    prefix = id_or_prefix.rstrip("…") or id_or_prefix
    found = [r[0] for r in run_query(
        db, "SELECT DISTINCT session_id FROM events WHERE starts_with(session_id, ?) "
        "ORDER BY session_id LIMIT 11", [prefix]).rows]  # fmt: skip
    if id_or_prefix in found or not found:
        return id_or_prefix
    if len(found) == 1:
        return found[0]
    shown = ", ".join(visible(s) for s in found[:10]) + (", ..." if len(found) > 10 else "")
    raise UsageError(f"session prefix {visible(repr(id_or_prefix))} is ambiguous: {shown}")


def session_sql(timeline: bool = True) -> str:
    """The query behind ``session_events``, with one parameter: the session id."""
    if timeline:
        # GPU memory after each request: the request event's own reading (collector), else the
        # request's last gpu_memory snapshot (article 003's log_gpu_memory after each reply)
        cols = ", ".join(f"r.{c}" for c in _TIMELINE_COLUMNS if c != "error_type")
        return (
            "WITH sid AS (SELECT CAST(? AS VARCHAR) AS s), "
            "mem AS (SELECT request_id, arg_max(reserved_mb, ts) AS reserved_mb, "
            "arg_max(allocated_mb, ts) AS allocated_mb FROM events "
            "WHERE session_id = (SELECT s FROM sid) AND stage = 'gpu_memory' AND request_id IS NOT NULL "
            "GROUP BY request_id) "
            f"SELECT {cols}, coalesce(r.reserved_mb_after, mem.reserved_mb) AS reserved_mb, "
            "coalesce(r.allocated_mb_after, mem.allocated_mb) AS allocated_mb, r.error_type "
            "FROM requests AS r LEFT JOIN mem USING (request_id) WHERE r.session_id = (SELECT s FROM sid) "
            "ORDER BY r.turn_index"
        )
    return "SELECT * FROM events WHERE session_id = ? ORDER BY ts, source_file, stage"


__all__ = ["LogDB", "open_logs", "data_extent", "execute", "fetch_result", "run_query", "session_events", "session_sql",
           "resolve_session", "EVENT_COLUMNS", "LINE_RULES"]
