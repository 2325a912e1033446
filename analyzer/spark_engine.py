"""The Spark engine (``--engine spark``): the DuckDB analysis, distributed by host.

A fleet's logs do not fit one machine (DESIGN.md §9), so the analysis also runs on Apache Spark
through pyspark: ``local[*]`` on one box, any master URL on a cluster, over JSONL or the Parquet
that ``dslogs compact`` writes, at any path Spark reads (``file://``, ``s3a://``, ``hdfs://``).
Spark does not restate the analysis; it moves bytes and runs DuckDB in its tasks:

1. sources: local paths go through ``analyzer.discovery`` (same files, same name-date pruning,
   same de-duplication); URLs are listed with Hadoop's FileSystem; a compacted folder is read
   from its manifest.
2. host groups, on the driver (``host_groups``): each file's host is guessed (a compacted file's
   from the manifest, a local JSONL file's from its first line, else its folder) and the files go
   in P groups of whole hosts, balanced by bytes.
3. one task per group reads its files and analyses them: local files in place, URLs' bytes
   through Spark's ``binaryFile`` reader (object storage included); JSONL by ONE
   ``ingest.open_logs`` (the same validation, bad lines, samples, legacy request ids numbered
   across the group's files), compacted Parquet as it is; then every metric query with DuckDB
   (``merge.partition_tables``). Only the result tables cross the JVM, never the events. A task
   reports the hosts it saw: when a host turned up in two groups (a wrong guess), those groups are
   merged and read again, so every host is whole in one group before any table is used.
4. merge: the driver combines the groups' tables as ``merge.MERGES`` declares (unions,
   sums/min/max, exact re-runs for global percentiles), with DuckDB (``merge.merge_tables``).
   The timelines' bucket depends on the fleet's time span, known only after every group is read:
   the first read computes each timeline for every bucket the span may still pick.

``open_spark`` returns a ``metrics.MetricSource``: ``report.build_report`` treats it exactly as
DuckDB's. Executors need Python with dslogs, duckdb and pyarrow (docs/scale.md: a packed
environment through ``spark.archives``, or an image); locally they use this interpreter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from analyzer.errors import InputError, UsageError
from analyzer.resources import memory_limit

LOG4J_FILE = Path(__file__).resolve().with_name("spark_log4j2.properties")

# Hadoop glob metacharacters: a discovered file name is a name, not a pattern.
_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")
# What a host group's task returns: Arrow IPC tables and its "@meta" row, by slot in the job.
GROUP_SCHEMA = "slot int, name string, data binary"


# -- session -----------------------------------------------------------------------------------


def _local_cores(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    if m.group(1) in (None, ""):
        return 1
    return os.cpu_count() or 1 if m.group(1) == "*" else int(m.group(1))


def spark_conf(master: str) -> dict[str, str]:
    """Settings dslogs needs from any Spark session (the rest comes from spark-defaults.conf)."""
    conf = {
        "spark.app.name": "dslogs",
        "spark.ui.showConsoleProgress": "false",
        # Timestamps are instants; the session zone only decides how date_trunc buckets them
        # and how naive strings parse. read_logs sets it to the zone DuckDB buckets in.
        "spark.sql.session.timeZone": "UTC",
        # NULL on a bad cast or a division by zero, as the metric SQL expects (DuckDB's inf/NaN
        # become NULL in metrics.jsonable anyway); ANSI mode would fail the whole report.
        "spark.sql.ansi.enabled": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_FILE.as_uri()}",
        # A binaryFile row is a whole file: few per Arrow batch keeps a task's memory bounded.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "16",
        # A union of one-partition inputs (one per host group) stays one partition per group, one
        # task each; Spark 4's partitioning-aware union would run them all in a single task.
        "spark.sql.unionOutputPartitioning": "false",
    }
    cores = _local_cores(master)
    partitions = os.environ.get("DSLOGS_SPARK_SHUFFLE_PARTITIONS")
    if cores is not None:
        # One box: no UI port, and few shuffle partitions (the default 200 costs seconds of
        # task overhead on small data; adaptive execution coalesces further).
        conf["spark.ui.enabled"] = "false"
        partitions = partitions or str(max(2, cores))
        conf["spark.driver.memory"] = os.environ.get("DSLOGS_SPARK_DRIVER_MEMORY", "2g")
        # Local Python workers run this interpreter: it has dslogs, duckdb and pyarrow. On a
        # cluster the executors' Python comes from spark-defaults.conf (docs/scale.md).
        conf["spark.pyspark.python"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if partitions:
        # On a cluster only when asked: there spark-defaults.conf knows the executor count.
        conf["spark.sql.shuffle.partitions"] = partitions
    return conf


def _import_pyspark():
    try:
        with warnings.catch_warnings():
            # pyspark 4.x warns at import about pandas >= 3; dslogs does not use pandas with Spark.
            warnings.simplefilter("ignore", FutureWarning)
            import pyspark  # noqa: F401
            from pyspark.sql import SparkSession
    except ImportError as exc:
        raise UsageError(f"--engine spark needs pyspark ({exc}); install dslogs[spark]") from None
    return SparkSession


def get_spark(master: str = "local[*]"):
    """The SparkSession for ``master``: reused when one runs for that master, else started."""
    SparkSession = _import_pyspark()
    active = SparkSession.getActiveSession()
    if active is not None:
        if active.sparkContext.master == master:
            return active
        active.stop()
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise UsageError("--engine spark needs Java 17+: no java on PATH and JAVA_HOME is not set")
    if _local_cores(master) is not None:
        # Skips the loopback-hostname warning and binds nothing outside this box.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers start from this variable (spark.pyspark.python alone is not read by a
        # session built in-process): this interpreter has dslogs, duckdb and pyarrow.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master)
    for key, value in spark_conf(master).items():
        builder = builder.config(key, value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            spark = builder.getOrCreate()
    except Exception as exc:  # py4j / JVM start-up failures: one line for the user
        raise UsageError(f"could not start Spark with master {master!r}: {_one_line(exc)}") from None
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_python_loggers()
    return spark


def _quiet_python_loggers() -> None:
    """pyspark logs every SQL error as JSON on stderr before raising it; dslogs reports the error
    itself on one line."""
    import logging

    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark < 4
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "getMessage", lambda: None)() or exc)
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line
    return type(exc).__name__


# -- sources -----------------------------------------------------------------------------------


def is_url(path: str) -> bool:
    """A path for Hadoop's FileSystem (s3a://, hdfs://, gs://, ...) rather than the local disk."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path)) and not path.startswith("file://")


@dataclass
class SourceFile:
    """One JSONL file: the path as discovered (``source_file``) and how Spark names it."""

    display: str
    spark_path: str  # glob characters escaped: a discovered name is a name, not a pattern
    uri: str  # what Spark reports in _metadata.file_path (URL-encoded Hadoop URI)
    size: int = 0


@dataclass
class Dataset:
    """A folder written by ``dslogs compact``: its root, manifest and the files in the window."""

    root: str
    manifest: dict
    files: list[dict]


@dataclass
class Sources:
    jsonl: list[SourceFile] = field(default_factory=list)
    datasets: list[Dataset] = field(default_factory=list)
    skipped_files: int = 0  # outside the window, or the same content as another file
    empty_files: int = 0  # read as nothing and counted as skipped, as DuckDB's path does


def _escape_glob(path: str) -> str:
    return _GLOB_CHARS.sub(r"\\\1", path)


def _hadoop_uri(spark, path: str) -> str:
    jvm = spark._jvm
    if is_url(path):
        return jvm.org.apache.hadoop.fs.Path(path).toUri().toString()
    local = str(Path(path).resolve())
    return jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI("file", None, local, None)).toUri().toString()


def _fs(spark, url: str):
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def _read_text_url(spark, url: str) -> str:
    path, fs = _fs(spark, url)
    stream = fs.open(path)
    try:
        reader = spark._jvm.java.io.BufferedReader(
            spark._jvm.java.io.InputStreamReader(stream, "UTF-8")
        )
        lines = []
        while (line := reader.readLine()) is not None:
            lines.append(line)
        return "\n".join(lines)
    finally:
        stream.close()


def _list_url(spark, url: str) -> tuple[list[tuple[str, int]], list[str]]:
    """(files, dataset roots) under a Hadoop URL: a file, a folder searched recursively, or a
    glob (e.g. s3a://bucket/dslogs/*/ for one compacted dataset per host)."""
    path, fs = _fs(spark, url)
    jvm = spark._jvm
    statuses = fs.globStatus(path) or []
    if not statuses:
        raise InputError(f"{url}: no such file or directory")
    files: list[tuple[str, int]] = []
    datasets: list[str] = []
    for status in statuses:
        p = status.getPath()
        if not status.isDirectory():
            files.append((p.toString(), int(status.getLen())))
        elif fs.exists(jvm.org.apache.hadoop.fs.Path(p, _manifest_name())):
            datasets.append(p.toString())
        else:
            it = fs.listFiles(p, True)
            found = []
            while it.hasNext():
                f = it.next()
                found.append((f.getPath().toString(), int(f.getLen())))
            # Compacted datasets below the folder (one per host, say): their roots, not files.
            manifest = "/" + _manifest_name()
            roots = [u[: -len(manifest)] for u, _ in found if u.endswith(manifest)]
            datasets.extend(roots)
            files.extend((u, n) for u, n in found if not any(u.startswith(r + "/") for r in roots))
    return files, datasets


def _manifest_name() -> str:
    from analyzer.dataset import MANIFEST

    return MANIFEST


# -- discovery ---------------------------------------------------------------------------------


def resolve_sources(spark, paths: list[str], since=None, until=None) -> Sources:
    """The JSONL files and compacted datasets under ``paths``: local paths through
    analyzer.discovery (the DuckDB path's files, order and pruning), Hadoop URLs (s3a://,
    hdfs://, ...) listed with Hadoop's FileSystem and pruned by the same name-date rule."""
    from analyzer import dataset, discovery

    sources = Sources()
    local: list[str] = []
    for raw in paths:
        if not is_url(raw):
            local.append(raw[len("file://"):] if raw.startswith("file://") else raw)
            continue
        found, roots = _list_url(spark, raw)
        for root in roots:
            text = _read_text_url(spark, f"{root}/{dataset.MANIFEST}")
            manifest = dataset.check_manifest(_json_loads(text, root), root)
            sources.datasets.append(Dataset(root, manifest, dataset.dataset_files(manifest, since, until)))
        urls = []
        for url, size in found:
            name = url.rsplit("/", 1)[-1]
            if not discovery.is_log_name(name):
                continue
            if discovery.outside_window(discovery.name_date(name), since, until):
                sources.skipped_files += 1
                continue
            urls.append((url, size))
        for url, size in sorted(urls, key=lambda u: discovery.name_sort_key(u[0])):
            sources.jsonl.append(SourceFile(url, _escape_glob(url), _hadoop_uri(spark, url), size))
    if local:
        from analyzer.cache import fingerprint

        found = discovery.discover(local, since, until)
        sources.skipped_files += found.skipped_files
        seen: set[str] = set()
        for lf in found.files:
            # Same content twice (a copy, a file and its .gz) is read once, as DuckDB does.
            fp = fingerprint(lf.path)
            if fp and fp in seen:
                sources.skipped_files += 1
                continue
            if fp:
                seen.add(fp)
            if lf.size == 0:
                sources.empty_files += 1
            sources.jsonl.append(
                SourceFile(lf.display, _escape_glob(str(lf.path.resolve())), _hadoop_uri(spark, str(lf.path)), lf.size)
            )
        for root in found.datasets:
            manifest = dataset.load_manifest(root)
            sources.datasets.append(
                Dataset(str(Path(root).resolve()), manifest, dataset.dataset_files(manifest, since, until))
            )
    return sources


def _json_loads(text: str, where: str):
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not a dslogs compact manifest ({exc})") from None


def _collect(df, zone: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows as DuckDB hands them to Python: timestamps as aware datetimes in
    ``zone`` (read as epoch microseconds: pyspark's own conversion uses the process's local
    zone), decimals as floats."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, TimestampType

    columns = list(df.columns)
    kinds = [f.dataType for f in df.schema.fields]
    # Positional names first: a query may return two columns of the same name.
    df = df.toDF(*[f"c{i}" for i in range(len(columns))])
    df = df.select(
        *[
            F.unix_micros(f"c{i}").alias(f"c{i}") if isinstance(kind, TimestampType) else F.col(f"c{i}")
            for i, kind in enumerate(kinds)
        ]
    )
    out_zone = ZoneInfo(zone)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rows = []
    for row in df.collect():
        values = []
        for value, kind in zip(row, kinds, strict=True):
            if value is not None:
                if isinstance(kind, TimestampType):
                    value = (epoch + timedelta(microseconds=value)).astimezone(out_zone)
                elif isinstance(kind, DecimalType) or isinstance(value, Decimal):
                    value = float(value)
                else:
                    value = _plain(value)
            values.append(value)
        rows.append(tuple(values))
    return columns, rows


def _plain(value):
    """Spark Rows (structs) as dicts, recursively; other values as they are."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark", "py4j"))


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


def _open_group(task: _Task, files: list[GroupFile], contents: dict, tmp: str, materialize: bool,
                sessions: list | None = None):  # fmt: skip
    """One DuckDB connection holding a host group's views events, requests and sessions: its
    JSONL files read by ONE ``ingest.open_logs`` (the same validation, bad lines and legacy
    request ids, numbered across the group's files in the fleet's read order), its compacted
    Parquet files added as they are. Returns (connection, closer, ingest block or None, names)
    where names maps a scratch path back to the file's display name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analyzer.merge import load_partition

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
        from analyzer.ingest import open_logs

        db = open_logs(list(shown), since=task.since, until=task.until, tz=task.tz, use_cache=False,
                       materialize=materialize and not parts)  # fmt: skip
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
    from analyzer.metrics import bucket_for_span

    order = ["minute", "hour", "day"]
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

    from analyzer.merge import partition_tables

    out: list[tuple[str, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="dslogs-spark-") as tmp:
        materialize = mode == "analysis" and sessions is None
        con, closer, ingest, shown = _open_group(task, files, contents, tmp, materialize, sessions)
        try:
            meta = _group_meta(con, ingest, shown)
            if mode == "views":
                out.extend((view, _ipc(_view_table(con, view, shown))) for view in ("events", "requests", "sessions"))
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
    from analyzer.columns import EVENT_COLUMNS, event_type

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
        from analyzer.merge import empty_events_sql

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
        from analyzer.merge import empty_events_sql, load_partition

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
        from analyzer.merge import merge_tables, pick_bucket

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
        from analyzer.metrics import METRIC_QUERIES, parameters
        from analyzer.thresholds import defaults

        names, params = list(METRIC_QUERIES), parameters(defaults(), "hour")
        tables, metas = self._job(self._live(), "analysis", names, params, speculative=True)
        self._speculative = (names, params, tables)
        self._metas = metas
        self._ingest, self._bounds = self._combine(metas)

    def _combine(self, metas: dict[int, dict]) -> tuple[dict, tuple[str | None, str | None]]:
        """The run's ingest block and time bounds from the groups' and the driver's counts."""
        from analyzer.ingest import SAMPLES_TOTAL

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
                raise UsageError(f"Spark failed to analyse the logs: {_one_line(exc)}") from None
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
    con.execute("SET enable_progress_bar = false")
    con.execute(f"SET TimeZone = '{zone}'")
    return con


def _iso_micros(value: int | None, zone: str) -> str | None:
    if value is None:
        return None
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))
    return stamp.astimezone(ZoneInfo(zone)).isoformat(timespec="milliseconds")


def open_spark(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    master: str = "local[*]",
) -> SparkSource:
    """The logs under ``paths`` opened on Spark: the same files, ingest block and window as
    ``ingest.open_logs``; they are read at the first use (see ``SparkSource``)."""
    from analyzer.dataset import dataset_ingest
    from analyzer.timewindow import iso, parse_window, zone_name

    zone = zone_name(tz)
    lo, hi = parse_window(since, until, tz)
    if isinstance(paths, str):
        paths = [paths]
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
    for i, f in enumerate(sources.jsonl):
        if f.size == 0:
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
    partitions = int(os.environ.get("DSLOGS_SPARK_PARTITIONS") or spark.sparkContext.defaultParallelism)
    task = _Task(zone, since, until, tz, iso(lo), iso(hi))
    return SparkSource(spark, files, task, ingest, {"since": iso(lo), "until": iso(hi)}, max(1, partitions))


def spark_views(source: SparkSource) -> None:
    """Temp views events, requests, sessions on Spark, each group's computed by DuckDB in its
    task (the same views as ``ingest.open_logs``), for Spark SQL over them: the groups are read
    once, their view rows kept (MEMORY_AND_DISK) and decoded per view."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from analyzer.merge import empty_events_sql, load_partition

    con = _driver_connection(source.zone)
    try:
        load_partition(con, empty_events_sql())
        schemas = {v: con.sql(f"SELECT * FROM {v}").to_arrow_table().schema for v in ("events", "requests", "sessions")}
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


def spark_query(
    logs: list[str],
    sql: str,
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    master: str = "local[*]",
):
    """``dslogs query --engine spark``: Spark SQL over the views events, requests, sessions."""
    from analyzer.output import QueryResult

    source = open_spark(logs, since, until, tz, master)
    try:
        spark_views(source)
        try:
            columns, rows = _collect(source.spark.sql(sql), source.zone)
        except Exception as exc:
            if _is_spark_error(exc):
                raise UsageError(f"query failed: {_one_line(exc)}") from None
            raise
    finally:
        source.close()
    return QueryResult(columns, rows)
