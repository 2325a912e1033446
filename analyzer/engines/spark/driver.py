"""The Spark engine's driver: host groups, ``SparkSource`` (the engine contract over the groups'
merged tables), ``open_spark`` and ``query --engine spark``."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

from dslogs.analyzer.core.errors import UsageError, one_line
from dslogs.analyzer.core.resources import env_int
from dslogs.analyzer.core.views import VIEWS
from dslogs.analyzer.engines.registry import engine
from dslogs.analyzer.engines.spark.executors import (
    GroupFile,
    _decode_fn,
    _from_ipc,
    _group_fn,
    _iso_micros,
    _Task,
)
from dslogs.analyzer.engines.spark.session import GROUP_SCHEMA, get_spark
from dslogs.analyzer.engines.spark.sources import (
    _collect,
    _escape_glob,
    _hadoop_uri,
    _is_spark_error,
    is_url,
    resolve_sources,
)

# -- on the driver -------------------------------------------------------------------------------


def _first_line_host(path: str):
    """The host of a local JSONL file's first line: ("host", name), ("host", None) for a line
    without one (legacy), or None when the line cannot be read."""
    import gzip

    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as fh:
            line = fh.readline(1 << 16)
        obj = json.loads(line)
    except (OSError, ValueError, EOFError):
        return None
    return ("host", obj.get("host") if isinstance(obj.get("host"), str) else None) if isinstance(obj, dict) else None


def _guess_key(f: GroupFile) -> tuple:
    """Which files probably hold the same host's events: a compacted file's host (the manifest's:
    exact); a local JSONL file's first line's host (a collector writes one process's lines per
    file, and legacy lines carry no host, so all legacy files share one key, as their request ids
    need); else the file's folder (collector, `dslogs compact` and log-agent layouts keep a host
    per folder). A wrong guess costs a second read of the groups it split, never a wrong answer
    (``SparkSource._regroup``)."""
    if f.kind == "parquet":
        return ("host", f.host)
    if f.local is not None:
        key = _first_line_host(f.local)
        if key is not None:
            return key
    return ("dir", (f.local or f.uri or f.display).rsplit("/", 1)[0])


def host_groups(files: list[GroupFile], partitions: int) -> list[list[GroupFile]]:
    """The files in at most ``partitions`` groups of whole guessed hosts, balanced by bytes
    (largest host first into the lightest group)."""
    by_key: dict[tuple, list[GroupFile]] = {}
    for f in files:
        by_key.setdefault(_guess_key(f), []).append(f)
    keys = sorted(by_key, key=lambda k: (-sum(f.size for f in by_key[k]), repr(k)))
    groups: list[list[GroupFile]] = [[] for _ in range(max(1, min(partitions, len(keys))))]
    loads = [0] * len(groups)
    for key in keys:
        i = loads.index(min(loads))
        groups[i].extend(by_key[key])
        loads[i] += sum(f.size for f in by_key[key]) or 1
    return [sorted(g, key=lambda f: f.index) for g in groups if g]


class SparkSource:
    """Logs opened on Spark (a ``metrics.MetricSource``): the files in host groups, one task per
    group reads them and runs the DuckDB analysis; ``run`` merges the groups' tables.

    The first use (``ingest``, ``time_bounds`` or ``run``) reads every group once and computes
    the whole report's tables for the default thresholds, each timeline for every bucket the
    fleet's span may pick (the span is known only when all groups are read): ``compute_metrics``
    then needs no second read. Other thresholds, and the drill-down (only the groups holding its
    sessions), read their groups again."""

    def __init__(self, spark, files: list[GroupFile], task: _Task, base_ingest: dict, window: dict,
                 partitions: int):  # fmt: skip
        self.spark = spark
        self.task = task
        self.zone = task.zone
        self.window = window
        self.partitions = partitions
        self.groups = host_groups(files, partitions)
        self.order = {f.display: f.index for f in files}
        self.cached: list = []
        self.session_hosts: dict = {}
        self._base_ingest = base_ingest
        self._ingest: dict | None = None
        self._bounds: tuple[str | None, str | None] = (None, None)
        self._metas: dict[int, dict] = {}
        self._speculative: tuple[list[str], dict, dict] | None = None

    # -- the engine contract

    @property
    def ingest(self) -> dict:
        self._prepare()
        return self._ingest

    def columns(self, view: str) -> set[str]:
        from dslogs.analyzer.engines.merge import empty_events_sql, load_partition

        con = _driver_connection(self.zone)
        try:
            load_partition(con, empty_events_sql())
            return {r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()}
        finally:
            con.close()

    def time_bounds(self) -> tuple[str | None, str | None]:
        self._prepare()
        return self._bounds

    def run(self, names, params: dict) -> dict[str, list[dict]]:
        from dslogs.analyzer.engines.merge import merge_tables, pick_bucket

        self._prepare()
        names = list(names)
        spec_names, spec_params, spec_tables = self._speculative
        tables = None
        if set(names) <= set(spec_names) and _but_bucket(params) == _but_bucket(spec_params):
            # The first read's tables, each timeline in this run's bucket.
            picked = {g: pick_bucket(t, params.get("bucket")) for g, t in spec_tables.items()}
            tables = None if any(t is None for t in picked.values()) else picked
        if tables is None:
            which = self._live()
            ids = params.get("session_ids")
            only = None
            if ids is not None and all(s in self.session_hosts for s in ids):
                # A drill-down reads only the files of its sessions' hosts (sessions never cross hosts).
                only = self._files_of_hosts({self.session_hosts[s] for s in ids})
                which = [g for g in which if only[g]]
            tables, _ = self._job(which, "analysis", names, params, speculative=False, only=only)
        parts: dict[str, list] = {}
        for g in self._live():
            for name, table in tables.get(g, {}).items():
                parts.setdefault(name, []).append(table)
        con = _driver_connection(self.zone)
        try:
            merged = merge_tables(con, parts, names, params)
        finally:
            con.close()
        if "session_summary" in merged:
            self.session_hosts = _session_hosts(merged["session_summary"])
        return merged

    def close(self) -> None:
        for df in self.cached:
            try:
                df.unpersist()
            except Exception:  # the session may be gone already
                pass
        self.cached.clear()

    # -- reading the groups

    def _live(self) -> list[int]:
        return [g for g, files in enumerate(self.groups) if files]

    def _prepare(self) -> None:
        """The first read: every group's tables for the default thresholds, its ingest and bounds."""
        if self._speculative is not None:
            return
        from dslogs.analyzer.core.thresholds import defaults
        from dslogs.analyzer.metrics.registry import METRIC_QUERIES, parameters

        names, params = list(METRIC_QUERIES), parameters(defaults(), "hour")
        tables, metas = self._job(self._live(), "analysis", names, params, speculative=True)
        self._speculative = (names, params, tables)
        self._metas = metas
        self._ingest, self._bounds = self._combine(metas)

    def _combine(self, metas: dict[int, dict]) -> tuple[dict, tuple[str | None, str | None]]:
        """The run's ingest block and time bounds from the groups' and the driver's counts."""
        from dslogs.analyzer.ingest import SAMPLES_TOTAL

        ingest = {**self._base_ingest, "bad_line_samples": []}
        formats: dict[str, int] = {}
        samples: list[dict] = []
        firsts, lasts = [], []
        for meta in metas.values():
            if meta["first_us"] is not None:
                firsts.append(meta["first_us"])
                lasts.append(meta["last_us"])
            for fmt, n in meta["formats"].items():
                formats[fmt] = formats.get(fmt, 0) + int(n)
            block = meta["ingest"] or {}
            for key in ("files", "bad_lines", "skipped_files", "bytes"):
                ingest[key] += int(block.get(key) or 0)
            samples.extend(block.get("bad_line_samples") or [])
        # JSONL samples in the files' read order (lines in order within a file), then the datasets'.
        samples.sort(key=lambda x: self.order.get(x.get("file"), len(self.order)))
        ingest["bad_line_samples"] = (samples + self._base_ingest["bad_line_samples"])[:SAMPLES_TOTAL]
        ingest["formats"] = {k: formats[k] for k in sorted(formats, key=lambda k: k != "v1") if formats[k]}
        ingest["events"] = sum(ingest["formats"].values())
        bounds = (_iso_micros(min(firsts), self.zone) if firsts else None,
                  _iso_micros(max(lasts), self.zone) if lasts else None)  # fmt: skip
        return ingest, bounds

    def _files_of_hosts(self, hosts: set) -> dict[int, list[GroupFile]]:
        """Per group, the files the first read saw events of ``hosts`` in (and files it saw no
        event in at all, which may hold lines outside the window that legacy numbering counts)."""
        out = {}
        for g in self._live():
            seen = self._metas.get(g, {}).get("file_hosts", {})
            out[g] = [f for f in self.groups[g]
                      if (f.host in hosts if f.kind == "parquet" else not seen.get(f.display) or hosts & set(seen[f.display]))]  # fmt: skip
        return out

    def _job(self, which: list[int], mode: str, names: list[str], params: dict, speculative: bool,
             only: dict[int, list[GroupFile]] | None = None):  # fmt: skip
        """Run the groups ``which``; when a host turned up in two groups (the guess split it),
        merge those groups and read them again: every host whole in one group, or no answer.
        Returns ({group: {name: Arrow table}}, {group: meta})."""
        tables: dict[int, dict] = {}
        metas: dict[int, dict] = {}
        todo = list(which)
        while todo:
            rows = self._collect_rows(self._frame(todo, mode, names, params, speculative, only))
            for g, name, data in rows:
                if name == "@meta":
                    metas[g] = json.loads(data)
                else:
                    tables.setdefault(g, {})[name] = _from_ipc(data)
            todo = self._regroup(metas)
            for g in list(metas):
                if not self.groups[g]:
                    metas.pop(g)
                    tables.pop(g, None)
        return tables, metas

    def _regroup(self, metas: dict[int, dict]) -> list[int]:
        """Groups that share a host merged into new groups (their indices), the old ones emptied."""
        parent = {g: g for g in metas}

        def root(g):
            while parent[g] != g:
                g = parent[g]
            return g

        owner: dict = {}
        for g in sorted(metas):
            for host in metas[g]["hosts"]:
                if host in owner and root(owner[host]) != root(g):
                    parent[root(g)] = root(owner[host])
                owner.setdefault(host, g)
        components: dict[int, list[int]] = {}
        for g in metas:
            components.setdefault(root(g), []).append(g)
        new = []
        for members in components.values():
            if len(members) < 2:
                continue
            files = sorted((f for g in members for f in self.groups[g]), key=lambda f: f.index)
            for g in members:
                self.groups[g] = []
            self.groups.append(files)
            new.append(len(self.groups) - 1)
        return new

    def _frame(self, which: list[int], mode: str, names: list[str], params: dict, speculative: bool,
               only: dict[int, list[GroupFile]] | None = None):  # fmt: skip
        """One row set per group (slot, path, content), one Spark partition each, mapped by
        ``_group_fn``: local files are read by the task itself (only the slot crosses the JVM);
        URLs' bytes come through Spark's binaryFile reader."""
        from functools import reduce

        from pyspark.sql import functions as F

        spark = self.spark
        spark.conf.set("spark.sql.unionOutputPartitioning", "false")  # see spark_conf
        files = {g: (only or {}).get(g, self.groups[g]) for g in which}
        which = sorted(which, key=lambda g: any(f.uri for f in files[g]))
        slots = [files[g] for g in which]
        local = sum(1 for files in slots if not any(f.uri for f in files))
        frames = []
        if local:
            frames.append(spark.range(0, local, 1, local).select(
                F.col("id").cast("int").alias("slot"), F.lit(None).cast("string").alias("path"),
                F.lit(None).cast("binary").alias("content")))  # fmt: skip
        for slot in range(local, len(slots)):
            paths = [f.spark_path for f in slots[slot] if f.uri]
            raw = spark.read.format("binaryFile").load(paths).coalesce(1)
            frames.append(raw.select(F.lit(slot).cast("int").alias("slot"), "path", "content"))
        if not frames:
            frames.append(spark.createDataFrame([], "slot int, path string, content binary"))
        inputs = reduce(lambda a, b: a.unionByName(b), frames)
        fn = _group_fn(self.task, slots, mode, names, params, speculative)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pyspark on pandas >= 3; no pandas here
            out = inputs.mapInArrow(fn, GROUP_SCHEMA)
        return out.select(F.element_at(F.array(*[F.lit(g) for g in which]) if which else F.array(F.lit(0)),
                                       F.col("slot") + 1).alias("group"), "name", "data")  # fmt: skip

    def _collect_rows(self, df) -> list[tuple[int, str, bytes]]:
        try:
            rows = df.toArrow()
        except Exception as exc:
            if _is_spark_error(exc):
                raise UsageError(f"Spark failed to analyse the logs: {one_line(exc)}") from None
            raise
        return list(zip(*(rows.column(c).to_pylist() for c in ("group", "name", "data")), strict=True))


def _but_bucket(params: dict) -> dict:
    """Parameters that decide whether the first read's tables serve a run: all but the bucket
    (each timeline was computed for every bucket the span may pick) and ``now`` (the clock that
    future_events compares with: the first read's, seconds before compute_metrics')."""
    return {k: v for k, v in params.items() if k not in ("bucket", "now")}


def _session_hosts(rows: list[dict]) -> dict:
    """session id -> host; a session on two hosts breaks the partitioning, and says so."""
    hosts: dict = {}
    for r in rows:
        sid = r.get("session_id")
        if sid in hosts and hosts[sid] != r.get("host"):
            raise UsageError(
                f"session {sid!r} has events on hosts {hosts[sid]!r} and {r.get('host')!r}: the Spark engine "
                "partitions by host and needs each session on one host; analyse with --engine duckdb"
            )
        hosts[sid] = r.get("host")
    return hosts


def _driver_connection(zone: str):
    import duckdb

    con = duckdb.connect()
    # inside Jupyter without ipywidgets DuckDB refuses the setting (its bar is off there anyway)
    with contextlib.suppress(duckdb.InvalidInputException):
        con.execute("SET enable_progress_bar = false")
    con.execute(f"SET TimeZone = '{zone}'")
    return con




@engine("spark")
def open_spark(selection, materialize: bool = True) -> SparkSource:
    """The logs ``selection`` names (a ``core.selection.Selection``) opened on Spark at
    ``selection.master``: the same files, ingest block and window as ``ingest.open``; they are
    read at the first use (see ``SparkSource``). The DuckDB engine's options (cache,
    ``materialize``) have no meaning here."""
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.core.time import iso, zone_name
    from dslogs.analyzer.ingest import dataset_ingest

    paths, since, until, tz = list(selection.paths), selection.since, selection.until, selection.tz
    master, session_attr = selection.master, selection.session_attr
    lo, hi = since, until
    progress.phase("reading and computing on Spark")
    zone = zone_name(tz)
    spark = get_spark(master)
    spark.conf.set("spark.sql.session.timeZone", zone)
    sources = resolve_sources(spark, list(paths), lo, hi)
    ingest = {"files": 0, "events": 0, "bad_lines": 0, "skipped_files": sources.skipped_files,
              "bad_line_samples": [], "formats": {}, "bytes": 0}  # fmt: skip
    # An empty file is read as nothing and counted as read and skipped, as open_logs counts it.
    empty = [f for f in sources.jsonl if f.size == 0]
    ingest["files"] += len(empty)
    ingest["skipped_files"] += len(empty)
    files: list[GroupFile] = []
    # Prometheus snapshots hold no events: read here, on the driver, as open_logs reads them
    from dslogs.analyzer.ingest import is_snapshot, read_snapshots

    snapshots = [f for f in sources.jsonl if not is_url(f.display) and is_snapshot(Path(f.display), f.display, f.size)]
    if snapshots:
        read_snapshots(ingest, [(Path(f.display), f.display) for f in snapshots], lo, hi, group=selection.prom_servers)
    for i, f in enumerate(sources.jsonl):
        if f.size == 0 or f in snapshots:
            continue
        local = None if is_url(f.display) else str(Path(f.display).resolve())
        files.append(GroupFile(i, f.display, "jsonl", local=local, uri=None if local else f.uri,
                               spark_path=None if local else f.spark_path, size=f.size))  # fmt: skip
    for ds in sources.datasets:
        block = dataset_ingest(ds.manifest, ds.files)
        for key in ("files", "bad_lines", "bytes", "skipped_files"):
            ingest[key] += int(block.get(key) or 0)
        ingest["bad_line_samples"].extend(block.get("bad_line_samples") or [])
        root = ds.root.rstrip("/")
        for item in ds.files:
            path = f"{root}/{item['file']}"
            remote = is_url(path)
            files.append(GroupFile(len(files) + len(sources.jsonl), path, "parquet",
                                   local=None if remote else str(Path(path).resolve()),
                                   uri=_hadoop_uri(spark, path) if remote else None,
                                   spark_path=_escape_glob(path) if remote else None,
                                   host=item.get("host"), size=int(item.get("bytes") or 0)))  # fmt: skip
    partitions = env_int("DSLOGS_SPARK_PARTITIONS") or spark.sparkContext.defaultParallelism
    task = _Task(zone, since, until, tz, iso(lo), iso(hi), session_attr)
    return SparkSource(spark, files, task, ingest, {"since": iso(lo), "until": iso(hi)}, max(1, partitions))


def spark_views(source: SparkSource) -> None:
    """Temp views events, requests, sessions on Spark, each group's computed by DuckDB in its
    task (the same views as ``ingest.open_logs``), for Spark SQL over them: the groups are read
    once, their view rows kept (MEMORY_AND_DISK) and decoded per view."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from dslogs.analyzer.engines.merge import empty_events_sql, load_partition

    con = _driver_connection(source.zone)
    try:
        load_partition(con, empty_events_sql())
        schemas = {v: con.sql(f"SELECT * FROM {v}").to_arrow_table().schema for v in VIEWS}
    finally:
        con.close()
    import pyarrow as pa

    while True:
        rows = source._frame(source._live(), "views", [], {}, False).persist(StorageLevel.MEMORY_AND_DISK)
        source.cached.append(rows)
        metas = {g: json.loads(d) for g, _, d in source._collect_rows(rows.filter(F.col("name") == "@meta"))}
        if not source._regroup(metas):
            break
        rows.unpersist()  # a host was split: read again with the merged groups
    for view, schema in schemas.items():
        utc = pa.schema([pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                         for f in schema])  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            df = rows.filter(F.col("name") == view).select("data").mapInArrow(_decode_fn(utc), from_arrow_schema(utc))
        df.createOrReplaceTempView(view)


def spark_query(selection, sql: str):
    """``dslogs query --engine spark``: Spark SQL over the views events, requests, sessions."""
    from dslogs.analyzer.core.results import QueryResult

    source = open_spark(selection)
    try:
        spark_views(source)
        try:
            columns, rows = _collect(source.spark.sql(sql), source.zone)
        except Exception as exc:
            if _is_spark_error(exc):
                raise UsageError(f"query failed: {one_line(exc)}") from None
            raise
    finally:
        source.close()
    return QueryResult(columns, rows)
