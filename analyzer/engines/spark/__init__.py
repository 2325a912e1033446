"""The Spark engine (``--engine spark``): the DuckDB analysis, distributed by host.

A fleet's logs do not fit one machine, so the analysis also runs on Apache Spark
through pyspark: ``local[*]`` on one box, any master URL on a cluster, over JSONL or the Parquet
that ``dslogs compact`` writes, at any path Spark reads (``file://``, ``s3a://``, ``hdfs://``).
Spark does not restate the analysis; it moves bytes and runs DuckDB in its tasks:

1. sources: local paths go through ``dslogs.analyzer.ingest.discovery`` (same files, same name-date pruning,
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

``open_spark`` (driver.py) returns an ``engines.contract.MetricSource``: ``report.build_report`` treats it exactly as
DuckDB's. Executors need Python with dslogs, duckdb and pyarrow (docs/scale.md: a packed
environment through ``spark.archives``, or an image); locally they use this interpreter.
"""
