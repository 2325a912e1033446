"""The host-partitioned analysis (analyzer/engines/merge.py) without Spark: split the events by host sets
exactly as the Spark engine does, run the unchanged views and queries per set with DuckDB, merge,
and compare every metric table with one connection's. Fast (no JVM), so every query a branch adds
is checked on each run: a new global query that a plain union gets wrong fails here until it has
its line in merge.MERGES."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines import merge as M
from dslogs.analyzer.engines.compute import compute_metrics
from dslogs.analyzer.engines.duckdb import DuckDBSource
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics.registry import METRIC_QUERIES, bucket_for_span, parameters
from tests.engine_compare import assert_same

REPO = Path(__file__).resolve().parents[1]


def _partitioned(db, sets: int) -> dict[str, list[dict]]:
    """metrics through merge.py with the hosts hashed into ``sets`` partitions."""
    first, last = DuckDBSource.of(db).time_bounds()
    params = parameters(defaults(), bucket_for_span(first, last))
    events = db.con.sql("SELECT * FROM events").to_arrow_table()
    hosts = events.column("host").unique().to_pylist()
    parts: dict[str, list] = {}
    for k in range(sets):
        mine = [h for i, h in enumerate(sorted(hosts, key=str)) if i % sets == k]
        if not mine:
            continue
        mask = pc.fill_null(pc.is_in(events["host"], value_set=pa.array([h for h in mine if h is not None], pa.string())), False)
        if None in mine:
            mask = pc.or_(mask, pc.is_null(events["host"]))
        con = duckdb.connect()
        con.execute(f"SET TimeZone = '{db.tz}'")
        con.register("_in", events.filter(mask))
        M.load_partition(con, "SELECT * FROM _in")
        for name, table in M.partition_tables(con, list(METRIC_QUERIES), params):
            parts.setdefault(name, []).append(table)
        con.close()
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{db.tz}'")
    out = M.merge_tables(con, parts, METRIC_QUERIES, params)
    return {"time_span": out["time_span"], "_params": [{"bucket": params["bucket"], "line_bytes": True}],
            **{n: out[n] for n in METRIC_QUERIES[1:]}}  # fmt: skip


@pytest.fixture(scope="module")
def sample_db():
    db = open_logs([str(REPO / "sample_logs")], use_cache=False)
    yield db
    db.close()


@pytest.mark.parametrize("sets", [1, 3, 64])
def test_every_metric_table_equal_when_partitioned_by_host(sample_db, sets):
    want = compute_metrics(sample_db, defaults())
    assert_same(want, _partitioned(sample_db, sets), f"metric tables over {sets} host sets")


def test_sessions_never_cross_hosts_in_the_samples(sample_db):
    """The partitioning's premise, checked on the data (one collector per process writes a
    session: docs/architecture.md)."""
    crossing = sample_db.con.execute(
        "SELECT session_id FROM events WHERE session_id IS NOT NULL GROUP BY session_id HAVING count(DISTINCT host) > 1"
    ).fetchall()
    assert crossing == []


def test_a_session_on_two_hosts_is_refused_not_merged_wrong():
    from dslogs.analyzer.engines.spark.driver import _session_hosts

    assert _session_hosts([{"session_id": "a", "host": "h1"}, {"session_id": "b", "host": "h2"}]) == {"a": "h1", "b": "h2"}
    with pytest.raises(UsageError, match="'a' has events on hosts 'h1' and 'h2'"):
        _session_hosts([{"session_id": "a", "host": "h1"}, {"session_id": "a", "host": "h2"}])


def test_merge_spec_names_real_queries_and_columns():
    """Every declared merge is for a query that exists; an aggregate covers each output column
    once; a rerun reads at least one view; union tails parse."""
    names = set(METRIC_QUERIES) | {"session_requests"}
    assert set(M.MERGES) <= names
    for name in names:
        sql = load_query(name)
        merge = M.merge_of(name)
        if merge.how == "aggregate":
            listed = [*merge.keys, *merge.sum, *merge.min, *merge.max]
            assert len(listed) == len(set(listed)), name
        if merge.how == "rerun":
            assert M.views_read(sql), name
        assert M.order_and_limit(sql) == "" or M.order_and_limit(sql).upper().startswith("ORDER BY"), name


def test_order_and_limit_is_the_top_level_one():
    sql = "WITH x AS (SELECT a FROM t ORDER BY a LIMIT 3) SELECT r.a FROM x AS r ORDER BY r.a DESC, b LIMIT $limit -- c"
    assert M.order_and_limit(sql) == "ORDER BY a DESC, b LIMIT $limit"
    assert M.order_and_limit("SELECT count(*) FROM (SELECT 1 ORDER BY 1)") == ""


def test_timelines_for_several_buckets_pick_like_one_run(sample_db):
    """A Spark group computes each timeline for every bucket the fleet's span may pick (the span
    is known only after every group is read); picking one must give that bucket's own tables."""
    params = parameters(defaults(), "hour")
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{sample_db.tz}'")
    con.register("_in", sample_db.con.sql("SELECT * FROM events").to_arrow_table())
    M.load_partition(con, "SELECT * FROM _in")
    several = dict(M.partition_tables(con, list(METRIC_QUERIES), params, buckets=["hour", "day"]))
    assert M.bucket_key("gpu_timeline", "day") in several and "gpu_timeline" not in several
    for bucket in ("hour", "day"):
        one = dict(M.partition_tables(con, list(METRIC_QUERIES), {**params, "bucket": bucket}))
        picked = M.pick_bucket(several, bucket)
        assert picked.keys() == one.keys()
        timelines = {k.partition(M.BUCKETED)[0] for k in several if M.BUCKETED in k}
        assert timelines >= {"gpu_timeline", "errors_over_time"}
        for name in timelines:  # rows compared as sets: a query without ORDER BY has no row order
            rows = sorted(map(repr, picked[name].to_pylist()))
            assert rows == sorted(map(repr, one[name].to_pylist())), (bucket, name)
    assert M.pick_bucket(several, "minute") is None, "a bucket not computed is no answer"
    con.close()


def test_host_groups_keep_hosts_whole_and_balance_bytes(tmp_path):
    """The driver's guess: a compacted file's manifest host, a local JSONL file's first-line host
    (none for legacy lines), else the folder; whole guessed hosts per group, balanced by bytes."""
    from dslogs.analyzer.engines.spark.driver import host_groups
    from dslogs.analyzer.engines.spark.executors import GroupFile

    def jsonl(i, folder, host, size):
        path = tmp_path / folder / f"ds15b_2026112{i}.jsonl"
        path.parent.mkdir(exist_ok=True)
        line = {"v": 1, "ts": "2026-11-23T00:00:00+00:00", "stage": "input", "host": host} if host else {"timestamp": "2026-11-23T00:00:00", "stage": "input"}
        path.write_text(__import__("json").dumps(line) + "\n")
        return GroupFile(i, str(path), "jsonl", local=str(path), size=size)

    files = [jsonl(0, "x", "a", 100), jsonl(1, "y", "a", 100), jsonl(2, "z", "b", 150), jsonl(3, "l1", None, 10),
             jsonl(4, "l2", None, 10), GroupFile(5, "p/part-0.parquet", "parquet", local="p/part-0.parquet", host="b", size=5),
             GroupFile(6, "s3a://bkt/h/ds15b_20261123.jsonl", "jsonl", uri="s3a://bkt/h/ds15b_20261123.jsonl", size=1)]  # fmt: skip
    groups = host_groups(files, 2)
    where = {f.index: g for g, files_ in enumerate(groups) for f in files_}
    assert where[0] == where[1], "host a's files (two folders) in one group"
    assert where[2] == where[5], "host b's JSONL and its compacted file in one group"
    assert where[3] == where[4], "legacy files (no host) in one group"
    assert where[0] != where[2], "the two big hosts balanced over the two groups"
    assert all([f.index for f in g] == sorted(f.index for f in g) for g in groups), "read order kept"
    assert len(host_groups(files, 64)) == 4, "no more groups than guessed hosts"
