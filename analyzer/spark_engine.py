"""The Spark engine (``--engine spark``): the same views and metric tables as DuckDB, on Apache Spark.

A fleet's logs do not fit one machine (DESIGN.md §9), so the analyses also run on Spark through
pyspark: ``local[*]`` on one box, any master URL on a cluster, over JSONL or the Parquet that
``dslogs compact`` writes, at any path Spark reads (``file://``, ``s3a://``, ``hdfs://``).

The pieces mirror the DuckDB path one to one:

- sources: local paths go through ``analyzer.discovery`` (same files, same name-date pruning);
  URLs are listed with Hadoop's FileSystem; a compacted folder is read from its manifest.
- views ``events``, ``requests``, ``sessions``: ``analyzer/spark_sql/views/*.sql``, Spark twins
  of ``analyzer/views/*.sql`` (same legacy mapping, same NULL-for--1 rule, same synthesised
  ``<session_id>#<n>`` request ids).
- metrics: every name of ``metrics.METRIC_QUERIES``; ``analyzer/spark_sql/<name>.sql`` where the
  dialects differ (quantile_cont -> percentile, epoch -> unix_micros, NULL ordering, ...),
  ``queries/<name>.sql`` unchanged otherwise. Parameters are bound as Spark named parameters
  (``:name``), never spliced into SQL text.
- values are converted to what DuckDB hands ``metrics.jsonable`` (tz-aware datetimes, floats for
  decimals), so the rules and the report model cannot tell the engines apart.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from pathlib import Path

from analyzer.errors import InputError, UsageError

SPARK_SQL_DIR = Path(__file__).resolve().with_name("spark_sql")
LOG4J_FILE = SPARK_SQL_DIR / "log4j2.properties"

# Named parameters (:name) outside comments and string literals; '::' casts are not parameters.
_SPARK_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
# Hadoop glob metacharacters: a discovered file name is a name, not a pattern.
_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")


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
    }
    cores = _local_cores(master)
    if cores is not None:
        # One box: no UI port, and few shuffle partitions (the default 200 costs seconds of
        # task overhead on small data; adaptive execution coalesces further).
        conf["spark.ui.enabled"] = "false"
        conf["spark.sql.shuffle.partitions"] = os.environ.get(
            "DSLOGS_SPARK_SHUFFLE_PARTITIONS", str(max(2, 2 * cores))
        )
        conf["spark.driver.memory"] = os.environ.get("DSLOGS_SPARK_DRIVER_MEMORY", "2g")
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


def raw_fields() -> list[str]:
    """The fields read from each JSON line: every v1 field plus the legacy ``timestamp``."""
    from collector.schema import COMMON_FIELDS, STAGES

    names = list(COMMON_FIELDS)
    for fields in STAGES.values():
        names.extend(k for k in fields if k not in names)
    return [*names, "timestamp"]


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
    skipped_files: int = 0


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


def _list_url(spark, url: str) -> tuple[list[tuple[str, int]], bool]:
    """Files under a Hadoop URL (a file, a folder searched recursively, or a glob) and whether
    the URL is a compacted dataset root."""
    path, fs = _fs(spark, url)
    jvm = spark._jvm
    statuses = fs.globStatus(path) or []
    if not statuses:
        raise InputError(f"{url}: no such file or directory")
    out: list[tuple[str, int]] = []
    for status in statuses:
        p = status.getPath()
        if status.isDirectory():
            if fs.exists(jvm.org.apache.hadoop.fs.Path(p, _manifest_name())):
                return [(p.toString(), 0)], True
            it = fs.listFiles(p, True)
            while it.hasNext():
                f = it.next()
                out.append((f.getPath().toString(), int(f.getLen())))
        else:
            out.append((p.toString(), int(status.getLen())))
    return out, False


def _manifest_name() -> str:
    from analyzer.compact import MANIFEST

    return MANIFEST


# -- reading -----------------------------------------------------------------------------------

BAD_LINE_SAMPLES = 20


def _raw_schema():
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [StructField(name, StringType()) for name in raw_fields()]
    return StructType([*fields, StructField("_corrupt_record", StringType())])


def _read_jsonl(spark, files: list[SourceFile]):
    """(lines DataFrame, per-line ordering table): every line of ``files`` with its JSON fields
    (strings), whether it is malformed, its bytes, file and 1-based line number."""
    from pyspark.sql import functions as F

    lines = (
        spark.read.option("lineSep", "\n")
        .text([f.spark_path for f in files])
        .select(
            F.col("value"),
            F.col("_metadata.file_path").alias("file_uri"),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.monotonically_increasing_id().alias("row_id"),
        )
    )
    parsed = F.from_json(
        F.col("value"), _raw_schema(), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    )
    return lines.select(
        "*",
        parsed.alias("j"),
        (F.trim(F.col("value")) == "").alias("is_blank"),
        (F.octet_length(F.col("value")) + 1).alias("line_bytes"),
    )


def _scan(spark, lines, files: list[SourceFile]):
    """One pass over the lines: counts per (file, split) give the ingest counts and each split's
    first line number (within a split, monotonically_increasing_id counts rows in file order).
    Returns (order table DataFrame, counts dict)."""
    from pyspark.sql import functions as F

    bad = (~F.col("is_blank")) & F.col("j._corrupt_record").isNotNull()
    good = (~F.col("is_blank")) & F.col("j._corrupt_record").isNull()
    blocks = (
        lines.groupBy("file_uri", "block_start")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("row_id").alias("first_row_id"),
            F.sum(F.when(bad, 1).otherwise(0)).alias("bad"),
            F.sum(F.when(good & F.col("j.v").isNotNull(), 1).otherwise(0)).alias("v1"),
            F.sum(F.when(good & F.col("j.v").isNull(), 1).otherwise(0)).alias("legacy"),
        )
        .collect()
    )
    display = {f.uri: f.display for f in files}
    offsets: dict[str, int] = {}
    table = []
    counts = {"bad_lines": 0, "v1": 0, "legacy": 0}
    for b in sorted(blocks, key=lambda r: (r["file_uri"], r["block_start"])):
        start = offsets.get(b["file_uri"], 0)
        name = display.get(b["file_uri"], b["file_uri"])
        table.append((b["file_uri"], b["block_start"], b["first_row_id"], start, name))
        offsets[b["file_uri"]] = start + b["n"]
        counts["bad_lines"] += b["bad"]
        counts["v1"] += b["v1"]
        counts["legacy"] += b["legacy"]
    schema = "file_uri string, block_start long, first_row_id long, lines_before long, source_file string"
    return spark.createDataFrame(table, schema), counts


def _with_line_no(lines, order):
    from pyspark.sql import functions as F

    return lines.join(F.broadcast(order), ["file_uri", "block_start"]).withColumn(
        "line_no", F.col("lines_before") + F.col("row_id") - F.col("first_row_id") + 1
    )


def _bad_line_samples(lines, order, limit: int = BAD_LINE_SAMPLES) -> list[dict]:
    from pyspark.sql import functions as F

    bad = lines.filter((~F.col("is_blank")) & F.col("j._corrupt_record").isNotNull())
    rows = (
        _with_line_no(bad, order)
        .select("source_file", "line_no", "value")
        .orderBy("source_file", "line_no")
        .limit(limit)
        .collect()
    )
    return [{"file": r["source_file"], "line": int(r["line_no"]), "reason": _bad_reason(r["value"])} for r in rows]


def _bad_reason(text: str) -> str:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"invalid JSON: {exc.msg}"
    return f"not a JSON object ({type(value).__name__})"


def _raw_view(lines, order):
    """dslogs_raw: the well-formed lines with their JSON fields, source_file, line_no, line_bytes."""
    from pyspark.sql import functions as F

    good = lines.filter((~F.col("is_blank")) & F.col("j._corrupt_record").isNull())
    return _with_line_no(good, order).select(
        *[F.col(f"j.`{name}`").alias(name) for name in raw_fields()],
        "source_file",
        "line_no",
        "line_bytes",
    )


# -- discovery and window ------------------------------------------------------------------------

_LOG_NAME = re.compile(r".*\.jsonl(\.\d+)?(\.gz)?$")
_NAME_DATE = re.compile(r"_(\d{8})(?:\.\d+)?\.jsonl")


def _is_log_name(name: str) -> bool:
    return bool(_LOG_NAME.match(name))


def _name_day(name: str):
    from datetime import date

    m = _NAME_DATE.search(name)
    if not m:
        return None
    try:
        return date(int(m.group(1)[:4]), int(m.group(1)[4:6]), int(m.group(1)[6:]))
    except ValueError:
        return None


def _outside_window(name: str, since: datetime | None, until: datetime | None) -> bool:
    """A file whose name-date lies wholly outside the window (a day of margin either side: the
    name is the writer's local day, in a zone we do not know)."""
    from datetime import timedelta

    day = _name_day(name)
    if day is None:
        return False
    if since is not None and day + timedelta(days=2) <= since.astimezone(UTC).date():
        return True
    return until is not None and day - timedelta(days=1) > until.astimezone(UTC).date()


def parse_window(since: str | None, until: str | None, tz: str | None):
    """(since, until) as aware datetimes; the same parser as the DuckDB path."""
    from analyzer.timewindow import parse_when

    now = datetime.now(UTC)
    lo = parse_when(since, now, tz) if since else None
    hi = parse_when(until, now, tz) if until else None
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"--since {since} is after --until {until}")
    return lo, hi


def resolve_sources(spark, paths: list[str], since=None, until=None) -> Sources:
    """The JSONL files and compacted datasets under ``paths`` (local paths, file:// or any
    Hadoop URL), without files whose name-date is outside the window."""
    from analyzer import compact

    sources = Sources()
    local: list[str] = []
    for raw in paths:
        if is_url(raw):
            found, is_dataset = _list_url(spark, raw)
            if is_dataset:
                root = found[0][0]
                manifest = compact.check_manifest(
                    __import__("json").loads(_read_text_url(spark, f"{root}/{compact.MANIFEST}")), root
                )
                sources.datasets.append(Dataset(root, manifest, compact.dataset_files(manifest, since, until)))
                continue
            for url, size in found:
                name = url.rsplit("/", 1)[-1]
                if not _is_log_name(name):
                    continue
                if _outside_window(name, since, until):
                    sources.skipped_files += 1
                    continue
                sources.jsonl.append(SourceFile(url, _escape_glob(url), _hadoop_uri(spark, url), size))
        else:
            path = raw[len("file://"):] if raw.startswith("file://") else raw
            if compact.is_dataset(path):
                manifest = compact.load_manifest(path)
                root = str(Path(path).resolve())
                sources.datasets.append(Dataset(root, manifest, compact.dataset_files(manifest, since, until)))
            else:
                local.append(path)
    if local:
        files, skipped = _discover_local(local, since, until)
        sources.skipped_files += skipped
        for display, size in files:
            sources.jsonl.append(
                SourceFile(display, _escape_glob(str(Path(display).resolve())), _hadoop_uri(spark, display), size)
            )
    return sources


def _discover_local(paths: list[str], since, until) -> tuple[list[tuple[str, int]], int]:
    """Local files through the DuckDB path's discovery: the same files, the same pruning."""
    from analyzer.discovery import discover

    found = discover(paths, since=since, until=until)
    return [(str(f.path), f.size) for f in found.files], found.skipped_files


# -- the views -----------------------------------------------------------------------------------

VIEW_NAMES = ("events", "requests", "sessions")


@cache
def load_spark_sql(relpath: str) -> str:
    return (SPARK_SQL_DIR / relpath).read_text(encoding="utf-8")


def spark_params(sql: str) -> set[str]:
    """Names of the ``:name`` parameters a Spark query uses (comments and strings ignored)."""
    return set(_SPARK_PARAM.findall(_STRING.sub("''", _COMMENT.sub("", sql))))


def local_zone() -> str:
    """The machine's IANA zone, as DuckDB's TimeZone default (ICU) sees it."""
    env = os.environ.get("TZ")
    if env:
        return env.lstrip(":")
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "/zoneinfo/"
        if marker in target:
            return target.split(marker, 1)[1]
    except OSError:
        pass
    return "UTC"


@dataclass
class SparkLogs:
    """Logs opened on Spark: temp views events / requests / sessions on ``spark``."""

    spark: object
    ingest: dict
    window: dict
    zone: str
    cached: list = field(default_factory=list)

    def sql(self, text: str, params: dict | None = None):
        used = {k: v for k, v in (params or {}).items() if k in spark_params(text)}
        return self.spark.sql(text, args=used or None)

    def close(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


# The events view's columns and Spark types (docs/internals.md; views/events.sql yields these).
EVENT_TYPES: dict[str, str] = {
    "ts": "timestamp", "stage": "string", "session_id": "string", "request_id": "string",
    "host": "string", "pid": "bigint", "duration_ms": "double", "input_len": "bigint",
    "output_len": "bigint", "reasoning_len": "bigint", "kv_seq_len": "bigint",
    "cpu_time_ms": "double", "gpu_wait_pct": "double", "gpu_util_pct": "double",
    "num_beams": "bigint", "max_new_tokens": "bigint", "temperature": "double", "top_p": "double",
    "do_sample": "boolean", "ttft_ms": "double", "ttfa_ms": "double", "status": "string",
    "finish_reason": "string", "error_type": "string", "error_msg": "string",
    "failed_stage": "string", "allocated_mb": "double", "reserved_mb": "double",
    "max_allocated_mb": "double", "num_ooms": "bigint", "num_alloc_retries": "bigint",
    "gpu_index": "bigint", "kv_cache_size_mb": "double", "gpu_mem_util_pct": "double",
    "gpu_mem_used_mb": "double", "gpu_mem_total_mb": "double", "power_w": "double",
    "temp_c": "double", "sm_clock_mhz": "double", "rss_mb": "double", "cpu_pct": "double",
    "threads": "bigint", "queued": "bigint", "written": "bigint", "dropped": "bigint",
    "bytes_written": "bigint", "source_format": "string", "source_file": "string",
    "line_bytes": "bigint",
}  # fmt: skip


def _events_ddl() -> str:
    return ", ".join(f"{name} {kind}" for name, kind in EVENT_TYPES.items())


def open_logs_spark(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    master: str = "local[*]",
) -> SparkLogs:
    """Read the logs on Spark and register the views; the DuckDB ``open_logs`` on Spark."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = get_spark(master)
    zone = tz or local_zone()
    lo, hi = parse_window(since, until, tz)
    try:
        spark.conf.set("spark.sql.session.timeZone", zone)
    except Exception as exc:
        raise UsageError(f"--tz {tz}: unknown time zone ({_one_line(exc)})") from None
    # Partition values (host names) stay strings: a host called "0042" is not a number.
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    sources = resolve_sources(spark, list(paths), lo, hi)
    if not sources.jsonl and not any(d.files for d in sources.datasets) and not sources.datasets:
        raise InputError(f"no log files found under {', '.join(paths)}")
    ingest = {"files": 0, "events": 0, "bad_lines": 0, "skipped_files": sources.skipped_files,
              "bad_line_samples": [], "formats": {}, "bytes": 0}  # fmt: skip
    parts = []
    if sources.jsonl:
        lines = _read_jsonl(spark, sources.jsonl)
        order, counts = _scan(spark, lines, sources.jsonl)
        ingest["files"] += len(sources.jsonl)
        ingest["bytes"] += sum(f.size for f in sources.jsonl)
        ingest["bad_lines"] += counts["bad_lines"]
        for fmt in ("v1", "legacy"):
            if counts[fmt]:
                ingest["formats"][fmt] = counts[fmt]
        if counts["bad_lines"]:
            ingest["bad_line_samples"] = _bad_line_samples(lines, order)
        _raw_view(lines, order).createOrReplaceTempView("dslogs_raw")
        parts.append(spark.sql(load_spark_sql("views/events.sql")).select(*EVENT_TYPES))
    for ds in sources.datasets:
        parts.append(_dataset_events(spark, ds))
        block = _dataset_ingest(ds)
        for key in ("files", "bad_lines", "bytes"):
            ingest[key] += block[key]
        ingest["bad_line_samples"].extend(block["bad_line_samples"])
        for fmt, n in block["formats"].items():
            ingest["formats"][fmt] = ingest["formats"].get(fmt, 0) + n
    events = parts[0]
    for part in parts[1:]:
        events = events.unionByName(part)
    if lo is not None:
        events = events.filter(F.col("ts") >= F.lit(lo))
    if hi is not None:
        events = events.filter(F.col("ts") <= F.lit(hi))
    events = _materialise(spark, events)
    events.createOrReplaceTempView("events")
    ingest["events"] = events.count()
    ingest["bad_line_samples"] = ingest["bad_line_samples"][:BAD_LINE_SAMPLES]
    logs = SparkLogs(spark, ingest, {"since": _iso(lo), "until": _iso(hi)}, zone, [events])
    for name in ("requests", "sessions"):
        df = spark.sql(load_spark_sql(f"views/{name}.sql")).persist(StorageLevel.MEMORY_AND_DISK)
        df.createOrReplaceTempView(name)
        logs.cached.append(df)
    return logs


def _materialise(spark, events):
    """Normalise once and cut the lineage: every metric reads events many times, and Spark 4.x
    mis-plans self-joins over the from_json projection (INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND on
    source_format) unless the plan starts from stored rows. DSLOGS_SPARK_CHECKPOINT_DIR (a
    shared hdfs:// or s3a:// folder) makes it a reliable checkpoint on a cluster; otherwise it is
    a local checkpoint in the executors' block managers (memory, spilling to disk)."""
    folder = os.environ.get("DSLOGS_SPARK_CHECKPOINT_DIR")
    if folder:
        spark.sparkContext.setCheckpointDir(folder)
        return events.checkpoint(eager=True)
    return events.localCheckpoint(eager=True)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dataset_events(spark, ds: Dataset):
    """A compacted dataset's events: its manifest's files (never a stray file), host from the
    partition path, columns in the view's order and types."""
    from pyspark.sql import functions as F

    if not ds.files:
        return spark.createDataFrame([], _events_ddl())
    root = ds.root.rstrip("/")
    files = [_escape_glob(f"{root}/{f['file']}") for f in ds.files]
    df = spark.read.option("basePath", _escape_glob(root)).parquet(*files)
    have = set(df.columns)
    return df.select(
        *[(F.col(c) if c in have else F.lit(None)).cast(kind).alias(c) for c, kind in EVENT_TYPES.items()]
    )


def _dataset_ingest(ds: Dataset) -> dict:
    from analyzer.compact import dataset_ingest

    return dataset_ingest(ds.manifest, ds.files)


# -- results -------------------------------------------------------------------------------------


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
            values.append(value)
        rows.append(tuple(values))
    return columns, rows


def spark_metric_sql(name: str) -> str:
    """analyzer/spark_sql/<name>.sql where the dialects differ, else queries/<name>.sql."""
    from analyzer.resources import load_query

    twin = SPARK_SQL_DIR / f"{name}.sql"
    if twin.is_file():
        return load_spark_sql(f"{name}.sql")
    return _duckdb_params_to_spark(load_query(name))


def _duckdb_params_to_spark(sql: str) -> str:
    """queries/*.sql that run unchanged on Spark still name parameters DuckDB's way ($name)."""
    return re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", r":\1", sql)


def run_spark_metric(logs: SparkLogs, name: str, params: dict) -> list[dict]:
    from analyzer.metrics import jsonable

    sql = spark_metric_sql(name)
    try:
        columns, rows = _collect(logs.sql(sql, params), logs.zone)
    except Exception as exc:
        if _is_spark_error(exc):
            raise UsageError(f"Spark failed on metric {name}: {_one_line(exc)}") from None
        raise
    return [{c: jsonable(v) for c, v in zip(columns, row, strict=True)} for row in rows]


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def compute_metrics_on(logs: SparkLogs, thresholds: dict | None = None) -> dict[str, list[dict]]:
    """metrics.compute_metrics on Spark: same tables, same order, same parameters."""
    from analyzer import metrics as M
    from analyzer.thresholds import defaults

    thresholds = thresholds or defaults()
    event_columns = set(logs.spark.table("events").columns)
    out: dict[str, list[dict]] = {}
    span = run_spark_metric(logs, "time_span", {})
    out["time_span"] = span
    first = span[0]["first_event"] if span else None
    last = span[0]["last_event"] if span else None
    params = M.parameters(thresholds, M.bucket_for_span(first, last))
    out["_params"] = [{"bucket": params["bucket"], "line_bytes": "line_bytes" in event_columns}]
    for name in M.METRIC_QUERIES[1:]:
        needed = M._NEEDS_COLUMN.get(name)
        if needed and needed not in event_columns:
            out[name] = []
            continue
        out[name] = run_spark_metric(logs, name, params)
    return out


def compute_metrics_spark(
    paths: list[str],
    since: str | None = None,
    until: str | None = None,
    tz: str | None = None,
    master: str = "local[*]",
    thresholds: dict | None = None,
) -> tuple[dict, dict, dict]:
    """(metrics, ingest, window) for report.build_report_from_metrics, computed on Spark; the
    drill-down rows (``session_requests``) for the sessions the report will show are included."""
    from analyzer.report import build_report_from_metrics, detail_session_ids
    from analyzer.thresholds import defaults

    thresholds = thresholds or defaults()
    logs = open_logs_spark(paths, since, until, tz, master)
    try:
        metrics = compute_metrics_on(logs, thresholds)
        model = build_report_from_metrics(metrics, logs.ingest, logs.window, thresholds)
        ids = detail_session_ids(model, thresholds)
        metrics["session_requests"] = (
            run_spark_metric(
                logs,
                "session_requests",
                {"session_ids": list(ids), "max_requests": int(thresholds["report"]["detail_requests"])},
            )
            if ids
            else []
        )
    finally:
        logs.close()
    return metrics, logs.ingest, logs.window


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

    opened = open_logs_spark(logs, since, until, tz, master)
    try:
        try:
            columns, rows = _collect(opened.spark.sql(sql), opened.zone)
        except Exception as exc:
            if _is_spark_error(exc):
                raise UsageError(f"query failed: {_one_line(exc)}") from None
            raise
    finally:
        opened.close()
    return QueryResult(columns, rows)
