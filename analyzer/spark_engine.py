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

import contextlib
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
    partitions = os.environ.get("DSLOGS_SPARK_SHUFFLE_PARTITIONS")
    if cores is not None:
        # One box: no UI port, and few shuffle partitions (the default 200 costs seconds of
        # task overhead on small data; adaptive execution coalesces further).
        conf["spark.ui.enabled"] = "false"
        partitions = partitions or str(max(2, cores))
        conf["spark.driver.memory"] = os.environ.get("DSLOGS_SPARK_DRIVER_MEMORY", "2g")
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
    from analyzer.compact import MANIFEST

    return MANIFEST


# -- reading -----------------------------------------------------------------------------------
#
# Mirrors analyzer/ingest.py: the same read schema (ingest.RAW_COLUMNS), the same notion of a bad
# line (malformed JSON, not an object, invalid UTF-8, a line over 16 MiB, a known field of the
# wrong type, no stage, no readable time), blank lines skipped, samples per file and in total.
# Lines are read as text and parsed with every field as a string, so each check is one SQL
# expression and a bad field condemns its line (as DuckDB's strict read does), not the file.


def _ingest_limits() -> tuple[int, int, int]:
    from analyzer.ingest import MAX_LINE_BYTES, SAMPLES_PER_FILE, SAMPLES_TOTAL

    return MAX_LINE_BYTES, SAMPLES_PER_FILE, SAMPLES_TOTAL


def raw_fields() -> list[str]:
    """The fields read from each line (ingest.RAW_COLUMNS: every v1 field, legacy ``timestamp``)."""
    from analyzer.ingest import RAW_COLUMNS

    return list(RAW_COLUMNS)


def _raw_schema(typed: bool = False):
    """The read schema: every field a string (``typed=False``: the lenient second look at a line
    the typed parse rejected), or typed as DuckDB reads them (``typed=True``, the fast path:
    Spark's JSON parser converts numbers itself; ts and timestamp stay text)."""
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from analyzer.ingest import _PARAM_TYPES, RAW_COLUMNS

    kinds = {"BIGINT": LongType(), "DOUBLE": DoubleType(), "BOOLEAN": BooleanType()}

    def spark_type(kind: str):
        return kinds.get(kind, StringType()) if typed else StringType()

    fields = []
    for name, kind in RAW_COLUMNS.items():
        if name == "params":
            fields.append(StructField(name, StructType([StructField(k, spark_type(t)) for k, t in _PARAM_TYPES.items()])))
        else:
            fields.append(StructField(name, spark_type(kind)))
    return StructType([*fields, StructField("_corrupt_record", StringType())])


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _as_type(expr: str, kind: str) -> str:
    """SQL: the JSON value text ``expr`` as DuckDB's reader types it (numeric strings and
    booleans become numbers; a fractional value cast to an integer rounds, as in DuckDB)."""
    if kind == "BIGINT":
        return (
            f"CASE WHEN {expr} IN ('true', 'false') THEN CAST({expr} = 'true' AS BIGINT) "
            f"WHEN instr({expr}, '.') > 0 OR instr(lower({expr}), 'e') > 0 "
            f"THEN CAST(round(CAST({expr} AS DOUBLE)) AS BIGINT) ELSE CAST({expr} AS BIGINT) END"
        )
    if kind == "DOUBLE":
        return f"CASE WHEN {expr} IN ('true', 'false') THEN CAST({expr} = 'true' AS DOUBLE) ELSE CAST({expr} AS DOUBLE) END"
    if kind == "BOOLEAN":
        return f"CASE WHEN {expr} IN ('true', '1') THEN true WHEN {expr} IN ('false', '0') THEN false END"
    if kind == "TIMESTAMPTZ":
        return f"to_timestamp({expr})"
    return expr


def _text(name: str) -> str:
    """SQL: a field's JSON text, from the lenient parse when the line needed one."""
    return f"CASE WHEN j2 IS NULL THEN j1.{_q(name)} ELSE j2.{_q(name)} END"


def _bad_sql() -> str:
    """SQL: the line is bad, by the rules of ingest._line_problem (the reason itself is worked
    out on the driver for the few sampled lines). A line the typed parse took is well typed; for
    one it rejected (j2 is its lenient parse), one lambda checks every numeric field, which keeps
    the generated code small."""
    from analyzer.ingest import _PARAM_TYPES, RAW_COLUMNS

    max_bytes, _, _ = _ingest_limits()
    numbers = [f"j2.{_q(n)}" for n, k in RAW_COLUMNS.items() if k in ("BIGINT", "DOUBLE")]
    numbers += [f"j2.params.{k}" for k, t in _PARAM_TYPES.items() if t in ("BIGINT", "DOUBLE")]
    booleans = [f"j2.params.{k}" for k, t in _PARAM_TYPES.items() if t == "BOOLEAN"]
    lenient = [
        "j2._corrupt_record IS NOT NULL",
        f"exists(array({', '.join(numbers)}), x -> x IS NOT NULL AND x NOT IN ('true', 'false') "
        "AND (CAST(x AS DOUBLE) IS NULL OR isnan(CAST(x AS DOUBLE)) OR abs(CAST(x AS DOUBLE)) = double('inf')))",
        *[f"({b} IS NOT NULL AND {b} NOT IN ('true', 'false', '0', '1'))" for b in booleans],
    ]
    v, ts, stamp, stage = _text("v"), _text("ts"), _text("timestamp"), _text("stage")
    conditions = [
        f"octet_length(value) > {max_bytes + 1}",
        "NOT is_valid_utf8(value)",
        f"(j2 IS NOT NULL AND ({' OR '.join(lenient)}))",
        f"({ts} IS NOT NULL AND to_timestamp({ts}) IS NULL)",
        f"({stage}) IS NULL",
        f"(({v}) IS NULL AND ({ts}) IS NULL AND to_timestamp({stamp}) IS NULL)",
        f"(({v}) IS NOT NULL AND ({ts}) IS NULL)",
    ]
    return "(" + " OR ".join(conditions) + ")"


def _reason(raw: bytes, unterminated: bool) -> str:
    """The DuckDB path's reason for a bad line: ingest._line_problem on its bytes."""
    from analyzer.ingest import _line_problem

    return _line_problem(raw if unterminated else raw + b"\n") or "rejected by the reader"


def _ends_with_newline(f: SourceFile) -> bool:
    """Whether a file's last byte is a newline (asked only for a bad last line; a URL is
    assumed to end with one)."""
    if is_url(f.display):
        return True
    import gzip

    path = Path(f.display)
    try:
        if path.name.endswith(".gz"):
            tail = b""
            with gzip.open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    tail = chunk
            return tail.endswith(b"\n")
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
    except (OSError, EOFError):
        return True


def _read_jsonl(spark, files: list[SourceFile]):
    """Every line of ``files``, parsed once: file_id (read order), split and position, whether it
    is blank or bad, its bytes as DuckDB counts them, its fields typed as DuckDB reads them, and
    its text when it is bad (for the samples). Persisted: the counts, the samples and the events
    all come from it."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from analyzer.ingest import _PARAM_TYPES, RAW_COLUMNS

    names = spark.createDataFrame(
        [(f.uri, i, f.display) for i, f in enumerate(files)], "file_uri string, file_id int, source_file string"
    )
    lines = (
        spark.read.option("lineSep", "\n")
        .text([f.spark_path for f in files])
        .select(
            F.col("value"),
            F.col("_metadata.file_path").alias("file_uri"),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.monotonically_increasing_id().alias("row_id"),
        )
        .join(F.broadcast(names), "file_uri")
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record",
               "allowNonNumericNumbers": "false"}  # fmt: skip
    # Typed parse first (fast); only a line it rejects is parsed again with every field a string,
    # to be typed the lenient way DuckDB's reader does (numeric strings, 42.0 for an integer).
    j1 = F.from_json(F.col("value"), _raw_schema(typed=True), options)
    parsed = lines.select("file_id", "source_file", "block_start", "row_id", "value", j1.alias("j1"))
    j2 = F.when(F.col("j1._corrupt_record").isNotNull(), F.from_json(F.col("value"), _raw_schema(), options))
    parsed = parsed.select(
        "*",
        j2.alias("j2"),
        F.expr("trim(BOTH ' \\t\\r' FROM value) = ''").alias("is_blank"),
        # DuckDB: strlen of the line without its line break, plus the newline.
        F.expr("octet_length(value) + 1 - CAST(endswith(value, '\\r') AS INT)").alias("line_bytes"),
    ).withColumn("bad", ~F.col("is_blank") & F.expr(_bad_sql()))
    typed = []
    for name, kind in RAW_COLUMNS.items():
        if name == "params":
            fields = ", ".join(f"'{k}', {_as_type(f'j2.params.{k}', t)}" for k, t in _PARAM_TYPES.items())
            lenient = f"CASE WHEN j2.params IS NOT NULL THEN named_struct({fields}) END"
            typed.append(F.expr(f"CASE WHEN j2 IS NULL THEN j1.params ELSE {lenient} END").alias(name))
        else:
            fast = f"to_timestamp(j1.{_q(name)})" if kind == "TIMESTAMPTZ" else f"j1.{_q(name)}"
            slow = _as_type(f"j2.{_q(name)}", kind)
            typed.append(F.expr(f"CASE WHEN j2 IS NULL THEN {fast} ELSE {slow} END").alias(name))
    out = parsed.select(
        "file_id", "source_file", "block_start", "row_id", "is_blank", "bad", "line_bytes",
        # The raw bytes of a bad line (invalid UTF-8 included), for the reason of a sample.
        F.when(F.col("bad"), F.col("value").cast("binary")).alias("bad_bytes"),
        *typed,
    )  # fmt: skip
    return out.persist(StorageLevel.MEMORY_AND_DISK)


@dataclass
class Scan:
    """What one aggregate over the lines gives: bad lines, and where each split's lines start."""

    bad_lines: int
    splits: dict[tuple[int, int], tuple[int, int]]  # (file_id, block_start) -> (first row_id, lines before)
    lines: dict[int, int]  # file_id -> lines in the file


def _scan(lines) -> Scan:
    from pyspark.sql import functions as F

    blocks = (
        lines.groupBy("file_id", "block_start")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("row_id").alias("first_row_id"),
            F.sum(F.col("bad").cast("long")).alias("bad"),
        )
        .collect()
    )
    splits: dict[tuple[int, int], tuple[int, int]] = {}
    before: dict[int, int] = {}
    for b in sorted(blocks, key=lambda r: (r["file_id"], r["block_start"])):
        start = before.get(b["file_id"], 0)
        splits[(b["file_id"], b["block_start"])] = (b["first_row_id"], start)
        before[b["file_id"]] = start + b["n"]
    return Scan(sum(int(b["bad"] or 0) for b in blocks), splits, before)


def _bad_line_samples(lines, scan: Scan, files: list[SourceFile]) -> list[dict]:
    """The first bad lines of each file (ingest.SAMPLES_PER_FILE), files in read order, with
    1-based line numbers (blank lines count, as in the DuckDB path)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    _, per_file, total = _ingest_limits()
    ranked = lines.filter(F.col("bad")).withColumn(
        "k", F.row_number().over(Window.partitionBy("file_id").orderBy("block_start", "row_id"))
    )
    rows = (
        ranked.filter(F.col("k") <= per_file)
        .select("file_id", "source_file", "block_start", "row_id", "bad_bytes")
        .orderBy("file_id", "block_start", "row_id")
        .limit(total)
        .collect()
    )
    out = []
    for r in rows:
        first, before = scan.splits[(r["file_id"], r["block_start"])]
        line = before + r["row_id"] - first + 1
        last = line == scan.lines.get(r["file_id"])
        reason = _reason(bytes(r["bad_bytes"] or b""), last and not _ends_with_newline(files[r["file_id"]]))
        out.append({"file": r["source_file"], "line": int(line), "reason": reason})
    return out


def _raw_view(lines):
    """dslogs_raw, the input of views/events.sql: the good lines' typed fields (ingest.RAW_COLUMNS)
    plus file_id, block_start, row_id (file position), line_bytes, source_file."""
    from pyspark.sql import functions as F

    return lines.filter(~F.col("bad") & ~F.col("is_blank")).select(
        *raw_fields(), "file_id", "block_start", "row_id", "line_bytes", "source_file"
    )


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- discovery ---------------------------------------------------------------------------------


def resolve_sources(spark, paths: list[str], since=None, until=None) -> Sources:
    """The JSONL files and compacted datasets under ``paths``: local paths through
    analyzer.discovery (the DuckDB path's files, order and pruning), Hadoop URLs (s3a://,
    hdfs://, ...) listed with Hadoop's FileSystem and pruned by the same name-date rule."""
    from analyzer import compact, discovery

    sources = Sources()
    local: list[str] = []
    for raw in paths:
        if not is_url(raw):
            local.append(raw[len("file://"):] if raw.startswith("file://") else raw)
            continue
        found, roots = _list_url(spark, raw)
        for root in roots:
            text = _read_text_url(spark, f"{root}/{compact.MANIFEST}")
            manifest = compact.check_manifest(_json_loads(text, root), root)
            sources.datasets.append(Dataset(root, manifest, compact.dataset_files(manifest, since, until)))
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
            manifest = compact.load_manifest(root)
            sources.datasets.append(
                Dataset(str(Path(root).resolve()), manifest, compact.dataset_files(manifest, since, until))
            )
    return sources


def _json_loads(text: str, where: str):
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not a dslogs compact manifest ({exc})") from None


# -- the views -----------------------------------------------------------------------------------


@cache
def load_spark_sql(relpath: str) -> str:
    return (SPARK_SQL_DIR / relpath).read_text(encoding="utf-8")


def spark_params(sql: str) -> set[str]:
    """Names of the ``:name`` parameters a Spark query uses (comments and strings ignored)."""
    return set(_SPARK_PARAM.findall(_STRING.sub("''", _COMMENT.sub("", sql))))


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
            with contextlib.suppress(Exception):
                df.unpersist()
        self.cached.clear()


# The events view's columns and Spark types, in order (ingest.EVENT_COLUMNS, docs/internals.md).
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
    """``ingest.open_logs`` on Spark: the same files, views and ingest counts."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from analyzer.timewindow import iso, parse_window, zone_name

    zone = zone_name(tz)
    lo, hi = parse_window(since, until, tz)
    if isinstance(paths, str):
        paths = [paths]
    spark = get_spark(master)
    # Naive timestamps parse, and date_trunc buckets, in the zone DuckDB is told (--tz or local).
    spark.conf.set("spark.sql.session.timeZone", zone)
    # Partition values (host names) stay strings: a host called "0042" is not a number.
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    # A corrupt .gz keeps the lines before the damage, as on the DuckDB path.
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    sources = resolve_sources(spark, list(paths), lo, hi)
    ingest = {"files": len(sources.jsonl), "events": 0, "bad_lines": 0,
              "skipped_files": sources.skipped_files + sources.empty_files,
              "bad_line_samples": [], "formats": {}, "bytes": sum(f.size for f in sources.jsonl)}  # fmt: skip
    parts = []
    readable = [f for f in sources.jsonl if f.size != 0]
    lines = None
    if readable:
        lines = _read_jsonl(spark, readable)
        scan = _scan(lines)
        ingest["bad_lines"] = scan.bad_lines
        if scan.bad_lines:
            ingest["bad_line_samples"] = _bad_line_samples(lines, scan, readable)
        _raw_view(lines).createOrReplaceTempView("dslogs_raw")
        parts.append(spark.sql(load_spark_sql("views/events.sql")).select(*EVENT_TYPES))
    for ds in sources.datasets:
        parts.append(_dataset_events(spark, ds))
        block = _dataset_ingest(ds)
        for key in ("files", "bad_lines", "bytes", "skipped_files"):
            ingest[key] += block[key]
        ingest["bad_line_samples"].extend(block["bad_line_samples"])
    if not parts:
        parts.append(spark.createDataFrame([], _events_ddl()))
    events = parts[0]
    for part in parts[1:]:
        events = events.unionByName(part)
    # The window is half-open, since <= ts < until (analyzer.timewindow).
    if lo is not None:
        events = events.filter(F.col("ts") >= F.lit(lo))
    if hi is not None:
        events = events.filter(F.col("ts") < F.lit(hi))
    events = _materialise(spark, events)
    if lines is not None:
        lines.unpersist()
    events.createOrReplaceTempView("events")
    counts = events.groupBy("source_format").count().collect()
    ingest["formats"] = {r["source_format"]: int(r["count"]) for r in sorted(counts, key=lambda r: r[0] != "v1") if r["count"]}
    ingest["events"] = sum(ingest["formats"].values())
    ingest["bad_line_samples"] = ingest["bad_line_samples"][: _ingest_limits()[2]]
    logs = SparkLogs(spark, ingest, {"since": iso(lo), "until": iso(hi)}, zone, [events])
    for name in ("requests", "sessions"):
        df = spark.sql(load_spark_sql(f"views/{name}.sql")).persist(StorageLevel.MEMORY_AND_DISK)
        # Filled now: the metric queries run concurrently and would each compute it otherwise.
        df.count()
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
    names = []
    for name in M.METRIC_QUERIES[1:]:
        needed = M._NEEDS_COLUMN.get(name)
        if needed and needed not in event_columns:
            out[name] = []
        else:
            names.append(name)
    # Spark runs jobs from several threads at once: the driver plans the next query while the
    # executors run the last one, which matters more than the data for ~40 small queries.
    from concurrent.futures import ThreadPoolExecutor

    workers = int(os.environ.get("DSLOGS_SPARK_CONCURRENT_QUERIES", "4"))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = dict(zip(names, pool.map(lambda n: run_spark_metric(logs, n, params), names), strict=True))
    for name in M.METRIC_QUERIES[1:]:
        if name in results:
            out[name] = results[name]
    return {k: out[k] for k in ["time_span", "_params", *M.METRIC_QUERIES[1:]] if k in out}


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
