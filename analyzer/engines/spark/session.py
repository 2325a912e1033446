"""The Spark session of the engine: its configuration for a master URL, importing pyspark, and
Spark's errors as one line."""

from __future__ import annotations

import os
import re
import shutil
import sys
import warnings
from pathlib import Path

from dslogs.analyzer.core.errors import UsageError, one_line

LOG4J_FILE = Path(__file__).resolve().with_name("log4j2.properties")

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
        raise UsageError(f"--engine spark needs pyspark ({exc}); install dslogs-llm[spark]") from None
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
        raise UsageError(f"could not start Spark with master {master!r}: {one_line(exc)}") from None
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


