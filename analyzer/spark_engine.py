"""The Spark engine (``--engine spark``): the DuckDB analysis, distributed by host.

A fleet's logs do not fit one machine (DESIGN.md §9), so the analysis also runs on Apache Spark
through pyspark: ``local[*]`` on one box, any master URL on a cluster, over JSONL or the Parquet
that ``dslogs compact`` writes, at any path Spark reads (``file://``, ``s3a://``, ``hdfs://``).
Spark does not restate the analysis; it moves bytes and runs DuckDB in its tasks:

1. sources: local paths go through ``analyzer.discovery`` (same files, same name-date pruning,
   same de-duplication); URLs are listed with Hadoop's FileSystem; a compacted folder is read
   from its manifest.
2. reading: Spark's ``binaryFile`` reader fetches every file's bytes (object storage included).
   A JSONL file is ingested in a task by ``ingest.open_logs`` itself (the same validation, bad
   lines, samples and legacy mapping) and leaves as Arrow, split by host; a Parquet file of a
   compacted dataset goes as it is, its host taken from the manifest.
3. analysis: ``groupBy("host").applyInArrow`` hands each host's events to one task, which builds
   the views and runs every metric query with DuckDB (``merge.partition_tables``).
4. merge: the driver combines the partitions' tables as ``merge.MERGES`` declares (unions,
   sums/min/max, exact re-runs for global percentiles), with DuckDB (``merge.merge_tables``).

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

LOG4J_FILE = Path(__file__).resolve().with_name("spark_log4j2.properties")

# Hadoop glob metacharacters: a discovered file name is a name, not a pattern.
_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")
# What a partition task returns, and what the JSONL ingest step returns per (file, host).
PARTITION_SCHEMA = "name string, data binary"
STAGED_SCHEMA = "file int, host string, first_us long, last_us long, data binary, ingest string"
INPUT_SCHEMA = "host string, kind string, data binary"


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


def _ingest_fn(files: dict[str, tuple[int, str]], since, until, tz):
    """mapInArrow function over binaryFile rows (path, content): the task's JSONL files written to
    a scratch folder (each keeps its name: discovery and the name-date rule see what the driver
    saw) and read by ONE ingest.open_logs; its events leave as Arrow per host (STAGED_SCHEMA),
    the ingest block on the first row."""

    def fn(batches):
        import tempfile

        import pyarrow as pa
        import pyarrow.compute as pc

        from analyzer.ingest import open_logs

        os.environ["DSLOGS_THREADS"] = str(_worker_threads())
        schema = pa.schema([("file", pa.int32()), ("host", pa.string()), ("first_us", pa.int64()),
                            ("last_us", pa.int64()), ("data", pa.binary()), ("ingest", pa.string())])  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="dslogs-spark-") as tmp:
            shown: dict[str, str] = {}
            indices = []
            for batch in batches:
                for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist(), strict=True):
                    index, display = files[path]
                    name = re.sub(r"[/\\]", "_", display.rstrip("/").rsplit("/", 1)[-1]) or "log.jsonl"
                    local = Path(tmp) / str(index) / name
                    local.parent.mkdir()
                    local.write_bytes(content)
                    shown[str(local)] = display
                    indices.append(index)
            if not indices:
                return
            db = open_logs(list(shown), since=since, until=until, tz=tz, use_cache=False, materialize=False)
            try:
                events = db.con.sql("SELECT * FROM events").to_arrow_table()
                ingest = dict(db.ingest)
            finally:
                db.close()
        for key in ("bad_line_samples", "skipped"):
            ingest[key] = [{**s, "file": shown.get(s.get("file"), s.get("file"))} for s in ingest.get(key, [])]
        ingest.pop("seconds", None)
        if events.num_rows:
            names = events.column("source_file").combine_chunks().dictionary_encode()
            renamed = pa.array([shown.get(v, v) for v in names.dictionary.to_pylist()], pa.string())
            column = pa.DictionaryArray.from_arrays(names.indices, renamed).cast(pa.string())
            events = events.set_column(events.schema.get_field_index("source_file"), "source_file", column)
        rows = []
        for host in events.column("host").unique().to_pylist() if events.num_rows else []:
            part = events.filter(pc.is_null(events["host"]) if host is None else pc.equal(events["host"], host))
            bounds = pc.min_max(part["ts"].cast(pa.int64())).as_py()
            rows.append({"file": min(indices), "host": host, "first_us": bounds["min"], "last_us": bounds["max"],
                         "data": _ipc(part), "ingest": None})  # fmt: skip
        if not rows:
            rows.append({"file": min(indices), "host": None, "first_us": None, "last_us": None, "data": None,
                         "ingest": None})  # fmt: skip
        rows[0]["ingest"] = json.dumps(ingest, ensure_ascii=False, default=str)
        yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return fn


def partition_events_sql(con, table, lo: str | None, hi: str | None, sessions: list | None = None) -> tuple[str, dict]:
    """Register one host set's input rows (host, kind, data) on ``con``; the SQL of its events
    (only those of ``sessions`` when given: a drill-down needs nothing else)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analyzer.columns import EVENT_COLUMNS, event_type

    selects = []
    for i, (host, kind, data) in enumerate(zip(*(table.column(c).to_pylist() for c in ("host", "kind", "data")), strict=True)):
        if data is None:
            continue
        part = _from_ipc(data) if kind == "arrow" else pq.read_table(pa.BufferReader(data))
        con.register(f"_dslogs_in{i}", part)
        have = set(part.column_names)
        cols = []
        for c in EVENT_COLUMNS:
            if c == "host" and kind == "parquet":
                # A compacted file's host is its partition folder's (the manifest's), as in ingest.
                cols.append(("NULL" if host is None else "'" + host.replace("'", "''") + "'") + "::VARCHAR AS host")
            elif c in have:
                cols.append(f'"{c}"')
            else:
                cols.append(f"NULL::{event_type(c)} AS {c}")
        selects.append(f"SELECT {', '.join(cols)} FROM _dslogs_in{i}")
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
    con.execute(f"SET memory_limit = '{os.environ.get('DSLOGS_MEMORY_LIMIT', '1GB')}'")
    return con


def _analysis_fn(zone: str, names: list[str], params: dict, lo: str | None, hi: str | None):
    """applyInArrow function: one host set's inputs -> (name, Arrow IPC) of
    merge.partition_tables."""
    # The drill-down's rows depend only on its sessions' own events (requests are per session):
    # the views are built from those alone.
    sessions = params.get("session_ids") if names == ["session_requests"] else None

    def fn(table):
        import pyarrow as pa

        from analyzer.merge import load_partition, partition_tables

        con = _partition_connection(zone)
        try:
            sql, bound = partition_events_sql(con, table, lo, hi, sessions)
            load_partition(con, sql, bound)
            out = partition_tables(con, names, params)
        finally:
            con.close()
        return pa.table({"name": [n for n, _ in out], "data": [_ipc(t) for _, t in out]},
                        schema=pa.schema([("name", pa.string()), ("data", pa.binary())]))  # fmt: skip

    return fn


def _view_fn(zone: str, view: str, lo: str | None, hi: str | None):
    """applyInArrow function: one host's inputs -> the rows of one view (for ``query``)."""

    def fn(table):
        from analyzer.merge import load_partition

        con = _partition_connection(zone)
        try:
            sql, bound = partition_events_sql(con, table, lo, hi)
            load_partition(con, sql, bound)
            table = con.sql(f"SELECT * FROM {view}").to_arrow_table()
        finally:
            con.close()
        # Spark takes instants as UTC-labelled timestamps (DuckDB labels them with the zone).
        import pyarrow as pa

        utc = pa.schema([pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                         for f in table.schema])  # fmt: skip
        return table.cast(utc)

    return fn


# -- on the driver -------------------------------------------------------------------------------


@dataclass
class SparkSource:
    """Logs opened on Spark (a ``metrics.MetricSource``): per-host inputs, the ingest block, the
    window and the time bounds; ``run`` distributes the queries and merges their tables."""

    spark: object
    inputs: object  # DataFrame of INPUT_SCHEMA, persisted
    ingest: dict
    window: dict
    zone: str
    bounds: tuple[str | None, str | None]
    lo: str | None = None
    hi: str | None = None
    cached: list = field(default_factory=list)
    session_hosts: dict = field(default_factory=dict)
    partitions: int = 2

    def columns(self, view: str) -> set[str]:
        from analyzer.merge import empty_events_sql, load_partition

        con = _driver_connection(self.zone)
        try:
            load_partition(con, empty_events_sql())
            return {r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()}
        finally:
            con.close()

    def time_bounds(self) -> tuple[str | None, str | None]:
        return self.bounds

    def run(self, names, params: dict) -> dict[str, list[dict]]:
        from pyspark.sql import functions as F

        from analyzer.merge import merge_tables

        names = list(names)
        inputs = self.inputs
        ids = params.get("session_ids")
        if ids is not None and all(s in self.session_hosts for s in ids):
            # A drill-down reads only the hosts of its sessions (sessions never cross hosts).
            hosts = {self.session_hosts[s] for s in ids}
            keep = F.col("host").isin([h for h in hosts if h is not None])
            inputs = inputs.filter(keep | F.col("host").isNull() if None in hosts else keep)
        fn = _analysis_fn(self.zone, names, params, self.lo, self.hi)
        out = _by_host_sets(inputs, self.partitions).applyInArrow(fn, PARTITION_SCHEMA)
        try:
            rows = out.toArrow()
        except Exception as exc:
            if _is_spark_error(exc):
                raise UsageError(f"Spark failed to analyse the partitions: {_one_line(exc)}") from None
            raise
        parts: dict[str, list] = {}
        for name, data in zip(rows.column("name").to_pylist(), rows.column("data").to_pylist(), strict=True):
            parts.setdefault(name, []).append(_from_ipc(data))
        con = _driver_connection(self.zone)
        try:
            tables = merge_tables(con, parts, names, params)
        finally:
            con.close()
        if "session_summary" in tables:
            self.session_hosts = _session_hosts(tables["session_summary"])
        return tables

    def close(self) -> None:
        for df in self.cached:
            try:
                df.unpersist()
            except Exception:  # the session may be gone already
                pass
        self.cached.clear()


def _by_host_sets(inputs, partitions: int):
    """The inputs grouped into ``partitions`` sets of whole hosts (a hash of the host name): one
    DuckDB run per set, not per host, so a fleet of many small hosts costs a few runs; exact all
    the same, since every session, request, host and process lies whole inside one set."""
    from pyspark.sql import functions as F

    return _QuietGroups(inputs.groupBy(F.expr(f"pmod(hash(host), {int(partitions)})").alias("host_set")))


class _QuietGroups:
    """GroupedData whose applyInArrow skips pyspark's warning about pandas >= 3 (dslogs passes
    Arrow tables, never pandas)."""

    def __init__(self, grouped):
        self.grouped = grouped

    def applyInArrow(self, fn, schema):  # noqa: N802 - pyspark's name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return self.grouped.applyInArrow(fn, schema)


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


def _read_bytes(spark, paths: list[str], total: int):
    """Spark's binaryFile reader over ``paths`` (object storage included)."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    df = spark.read.format("binaryFile").load(paths).select("path", "content")
    # A task reads many files at once (one open_logs, one DuckDB per task): two tasks per core,
    # more when that would give a task over 256 MiB of files.
    tasks = max(2 * cores, -(-total // (256 << 20)))
    return df.coalesce(tasks) if df.rdd.getNumPartitions() > tasks else df


def open_spark(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    master: str = "local[*]",
) -> SparkSource:
    """The logs under ``paths`` opened on Spark: the same files, ingest block and window as
    ``ingest.open_logs``; nothing is analysed until ``run``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from analyzer.dataset import dataset_ingest
    from analyzer.ingest import SAMPLES_TOTAL
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
    inputs = []
    cached = []
    firsts, lasts = [], []
    formats: dict[str, int] = {}
    # An empty file is read as nothing and counted as read and skipped, as open_logs counts it
    # (Spark's binaryFile reader lists no empty file).
    empty = [f for f in sources.jsonl if f.size == 0]
    ingest["files"] += len(empty)
    ingest["skipped_files"] += len(empty)
    readable = [f for f in sources.jsonl if f.size != 0]
    if readable:
        order = {f.display: i for i, f in enumerate(sources.jsonl)}
        files = {f.uri: (order[f.display], f.display) for f in readable}
        raw = _read_bytes(spark, [f.spark_path for f in readable], sum(f.size for f in readable))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pyspark on pandas >= 3; no pandas here
            staged = raw.mapInArrow(_ingest_fn(files, since, until, tz), STAGED_SCHEMA)
        staged = staged.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(staged)
        try:
            meta = staged.select("file", "first_us", "last_us", "ingest").collect()
        except Exception as exc:
            if _is_spark_error(exc):
                raise InputError(f"Spark could not read the logs: {_one_line(exc)}") from None
            raise
        samples = []
        for r in sorted(meta, key=lambda r: r["file"]):
            if r["first_us"] is not None:
                firsts.append(r["first_us"])
                lasts.append(r["last_us"])
            if r["ingest"] is None:
                continue
            block = json.loads(r["ingest"])
            for key in ("files", "bad_lines", "skipped_files", "bytes"):
                ingest[key] += int(block.get(key) or 0)
            for fmt, n in (block.get("formats") or {}).items():
                formats[fmt] = formats.get(fmt, 0) + int(n)
            samples.extend(block.get("bad_line_samples") or [])
        # Samples in the files' read order (each task read a few files), lines in order within.
        ingest["bad_line_samples"] = sorted(samples, key=lambda x: order.get(x.get("file"), len(order)))
        inputs.append(staged.filter(F.col("data").isNotNull()).select("host", F.lit("arrow").alias("kind"), "data"))
    for ds in sources.datasets:
        block = dataset_ingest(ds.manifest, ds.files)
        for key in ("files", "bad_lines", "bytes", "skipped_files"):
            ingest[key] += int(block.get(key) or 0)
        ingest["bad_line_samples"].extend(block.get("bad_line_samples") or [])
        if not ds.files:
            continue
        root = ds.root.rstrip("/")
        located = [(_escape_glob(f"{root}/{f['file']}"), f.get("host")) for f in ds.files]
        hosts = spark.createDataFrame(
            [(_hadoop_uri(spark, f"{root}/{f['file']}"), f.get("host")) for f in ds.files], "path string, host string"
        )
        raw = _read_bytes(spark, [p for p, _ in located], sum(int(f.get("bytes") or 0) for f in ds.files) or (64 << 20))
        inputs.append(raw.join(F.broadcast(hosts), "path").select("host", F.lit("parquet").alias("kind"),
                                                                   F.col("content").alias("data")))  # fmt: skip
        # Bounds and formats of the window's rows: one narrow Spark scan (ts, source_format).
        events = spark.read.parquet(*[p for p, _ in located])
        if lo is not None:
            events = events.filter(F.col("ts") >= F.lit(lo))
        if hi is not None:
            events = events.filter(F.col("ts") < F.lit(hi))
        for r in events.groupBy("source_format").agg(
            F.count(F.lit(1)).alias("n"), F.unix_micros(F.min("ts")).alias("lo"), F.unix_micros(F.max("ts")).alias("hi")
        ).collect():
            formats[r["source_format"]] = formats.get(r["source_format"], 0) + int(r["n"])
            if r["lo"] is not None:
                firsts.append(r["lo"])
                lasts.append(r["hi"])
    if not inputs:
        inputs.append(spark.createDataFrame([], INPUT_SCHEMA))
    union = inputs[0]
    for more in inputs[1:]:
        union = union.unionByName(more)
    ingest["formats"] = {k: formats[k] for k in sorted(formats, key=lambda k: k != "v1") if formats[k]}
    ingest["events"] = sum(ingest["formats"].values())
    ingest["bad_line_samples"] = ingest["bad_line_samples"][:SAMPLES_TOTAL]
    bounds = (_iso_micros(min(firsts), zone) if firsts else None, _iso_micros(max(lasts), zone) if lasts else None)
    partitions = int(os.environ.get("DSLOGS_SPARK_PARTITIONS") or spark.sparkContext.defaultParallelism)
    return SparkSource(spark, union, ingest, {"since": iso(lo), "until": iso(hi)}, zone, bounds,
                       lo=iso(lo), hi=iso(hi), cached=cached, partitions=max(1, partitions))  # fmt: skip


def spark_views(source: SparkSource) -> None:
    """Temp views events, requests, sessions on Spark, each computed per host by DuckDB (the
    same views as ``ingest.open_logs``), for Spark SQL over them."""
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import from_arrow_schema

    from analyzer.merge import empty_events_sql, load_partition

    con = _driver_connection(source.zone)
    try:
        load_partition(con, empty_events_sql())
        schemas = {v: con.sql(f"SELECT * FROM {v}").to_arrow_table().schema for v in ("events", "requests", "sessions")}
    finally:
        con.close()
    for view, schema in schemas.items():
        df = _by_host_sets(source.inputs, source.partitions).applyInArrow(
            _view_fn(source.zone, view, source.lo, source.hi), from_arrow_schema(schema)
        ).persist(StorageLevel.MEMORY_AND_DISK)
        source.cached.append(df)
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
