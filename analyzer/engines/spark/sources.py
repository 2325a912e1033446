"""What the Spark engine reads: local paths through discovery, URLs through Hadoop, manifests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.engines.spark.session import _GLOB_CHARS

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
    from dslogs.analyzer.ingest import MANIFEST

    return MANIFEST


# -- discovery ---------------------------------------------------------------------------------


def resolve_sources(spark, paths: list[str], since=None, until=None) -> Sources:
    """The JSONL files and compacted datasets under ``paths``: local paths through
    dslogs.analyzer.ingest.discovery (the DuckDB path's files, order and pruning), Hadoop URLs (s3a://,
    hdfs://, ...) listed with Hadoop's FileSystem and pruned by the same name-date rule."""
    from dslogs.analyzer.ingest import dataset, discovery

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
        from dslogs.analyzer.ingest import fingerprint, is_snapshot

        found = discovery.discover(local, since, until)
        sources.skipped_files += found.skipped_files
        seen: set[str] = set()
        for lf in found.files:
            # Same content twice (a copy, a file and its .gz) is read once, as DuckDB does; two
            # snapshots of an idle server can be byte-identical and are still two points in time.
            fp = None if is_snapshot(lf.path, lf.display, lf.size) else fingerprint(lf.path)
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


