"""The Spark engine gives DuckDB's answers (docs/scale.md): Spark runs the DuckDB analysis per
set of hosts and merges (analyzer/engines/merge.py); same views, same metric tables, same report model, on
sample_logs/ and on a simulated multi-host set read back from compacted Parquet.

What must be equal between the engines (and is asserted here):
- the requests and sessions views row for row, and every metric table: same rows in the same
  order, same columns, strings and ints equal, floats within 1e-6 relative (global percentiles
  are re-run exactly on the driver, never sketched);
- the report model without ``generated_at``: same checklist, stages, requests, sessions, findings
  (rule, severity, sessions, hosts, values, evidence), rules, series, drill-downs; its numbers are
  rounded to 3 decimals, so they may differ by that last step (0.001) where the unrounded values
  straddle a rounding boundary;
- ingest: files, events, bad_lines, skipped_files, formats, bytes, and the (file, line) of each
  bad-line sample. Not compared: the sample's reason wording, and the DuckDB path's own
  bookkeeping keys (cache, seconds, read_files, ...).

One SparkSession (local[2]) for the run (tests/conftest.py); the Spark tests skip only without pyspark or java.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dslogs.analyzer.core.selection import Selection
from tests.engine_compare import INGEST_KEYS, ROUNDED, assert_exact, assert_same, comparable_model

REPO = Path(__file__).resolve().parents[1]
MASTER = "local[2]"


def _have_spark() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


needs_spark = pytest.mark.skipif(not _have_spark(), reason="pyspark or java missing")


@pytest.fixture(scope="module")
def spark(request):
    if not _have_spark():
        pytest.skip("pyspark or java missing")
    return request.getfixturevalue("local_spark")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three hosts (one writing +08:00 timestamps), faults in sessions and on a host, rotated and
    gzipped files, compacted to Parquet."""
    from dslogs.analyzer.ingest.compact import compact_logs
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("fleet")
    logs = root / "logs"
    simulate(logs, scenarios=["memory_leak", "oom", "low_gpu_util"], seed=11, hosts=3, hours=3.0,
             events=30000, max_bytes=1 << 20)  # fmt: skip
    summary = compact_logs([str(logs)], root / "parquet")
    assert summary["new_files"] > 3
    return logs, root / "parquet"


@needs_spark
@pytest.mark.spark
def test_report_model_equal_on_sample_logs(spark):
    from dslogs.analyzer.usecases.analyze import analyze_logs

    duck = analyze_logs([str(REPO / "sample_logs")], use_cache=False)
    spk = analyze_logs([str(REPO / "sample_logs")], engine="spark", master=MASTER)
    assert duck["ingest"]["bad_lines"] > 0 and duck["findings"], "sample_logs should exercise damage and rules"
    assert_same(comparable_model(duck), comparable_model(spk), "report models (sample_logs)", ROUNDED)


@needs_spark
@pytest.mark.spark
def test_views_metrics_and_model_equal_on_compacted_fleet(spark, fleet):
    """JSONL on DuckDB against the compacted Parquet on Spark, through the one engine contract:
    views row for row, every metric table, the drill-down rows, the model."""
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.engines.compute import compute_metrics, session_requests
    from dslogs.analyzer.engines.spark.driver import open_spark, spark_views
    from dslogs.analyzer.engines.spark.sources import _collect
    from dslogs.analyzer.ingest.logs import open_logs, run_query
    from dslogs.analyzer.metrics.results import jsonable
    from dslogs.analyzer.model.report import build_report_from_metrics, detail_session_ids

    logs, parquet = fleet
    db = open_logs([str(logs)], use_cache=False)
    sp = open_spark(Selection.build([str(parquet)], master=MASTER))
    try:
        assert {k: db.ingest[k] for k in INGEST_KEYS} == {k: sp.ingest[k] for k in INGEST_KEYS}
        assert len({r["host"] for r in run_query(db, "SELECT DISTINCT host FROM events").dicts()}) == 3
        spark_views(sp)
        for view, key in (("requests", "session_id, request_id"), ("sessions", "session_id")):
            sql = f"SELECT * FROM {view} ORDER BY {key}"
            duck_rows = [{c: jsonable(v) for c, v in r.items()} for r in run_query(db, sql).dicts()]
            cols, rows = _collect(sp.spark.sql(f"SELECT {', '.join(duck_rows[0])} FROM {view} ORDER BY {key}"), sp.zone)
            spark_rows = [{c: jsonable(v) for c, v in zip(cols, r, strict=True)} for r in rows]
            assert_same(duck_rows, spark_rows, f"{view} view")
            assert_exact({view: duck_rows}, {view: spark_rows}, f"{view} view")
        t = defaults()
        dm, sm = compute_metrics(db, t), compute_metrics(sp, t)
        assert_same(dm, sm, "metric tables")
        assert_exact(dm, sm, "metric tables")
        duck_model = build_report_from_metrics(dm, db.ingest, db.window, t)
        spark_model = build_report_from_metrics(sm, sp.ingest, sp.window, t)
        ids = detail_session_ids(duck_model, t)
        assert ids == detail_session_ids(spark_model, t)
        assert {f["rule"] for f in duck_model["findings"]} >= {"memory_leak", "oom"}
        dr, sr = session_requests(db, ids, t), session_requests(sp, ids, t)
        assert dr
        assert_same(dr, sr, "drill-down rows")
        assert_same(comparable_model(duck_model), comparable_model(spark_model), "report models (fleet)", ROUNDED)
    finally:
        sp.close()
        db.close()


@needs_spark
@pytest.mark.spark
def test_spark_query_and_window_on_jsonl_and_parquet(spark, fleet):
    from dslogs.analyzer.engines.spark.driver import spark_query
    from dslogs.analyzer.ingest.logs import open_logs, run_query

    logs, parquet = fleet
    sql = "SELECT stage, count(*) AS n, max(duration_ms) AS longest FROM events GROUP BY stage ORDER BY stage"
    since, until = "2026-11-23T01:00:00+00:00", "2026-11-23T02:00:00+00:00"
    duck = run_query(open_logs([str(logs)], since=since, until=until, use_cache=False), sql)
    for source in (logs, parquet):
        got = spark_query(Selection.build([str(source)], since=since, until=until, master=MASTER), sql)
        assert got.columns == duck.columns
        assert [tuple(r) for r in got.rows] == [tuple(r) for r in duck.rows]
    assert sum(r[1] for r in duck.rows) > 0


@needs_spark
@pytest.mark.spark
def test_spark_errors_are_one_line(spark, fleet, tmp_path):
    from dslogs.analyzer.core.errors import InputError, UsageError
    from dslogs.analyzer.engines.spark.driver import spark_query

    logs, _ = fleet
    with pytest.raises(UsageError) as bad_sql:
        spark_query(Selection.build([str(logs)], master=MASTER), "SELECT no_such_column FROM events")
    message = str(bad_sql.value)
    assert "no_such_column" in message and "\n" not in message
    with pytest.raises(InputError, match="no such file or directory"):
        spark_query(Selection.build([str(tmp_path / "missing")], master=MASTER), "SELECT 1")


@needs_spark
@pytest.mark.spark
def test_cli_engine_spark(spark, fleet):
    """`analyze --engine spark` and `query --engine spark` through the CLI (legacy logs, --tz)."""
    import json

    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    legacy = str(REPO / "sample_logs" / "seed_format")
    runner = CliRunner()
    common = ["--tz", "Asia/Shanghai", "--format", "json"]
    duck = runner.invoke(app, ["analyze", legacy, *common, "--no-cache"])
    spk = runner.invoke(app, ["analyze", legacy, *common, "--engine", "spark", "--master", MASTER])
    assert duck.exit_code == 0 and spk.exit_code == 0, spk.output
    assert_same(comparable_model(json.loads(duck.stdout)), comparable_model(json.loads(spk.stdout)),
                "report models (seed_format)", ROUNDED)  # fmt: skip
    _, parquet = fleet
    sql = "SELECT host, count(*) AS n FROM requests GROUP BY host ORDER BY host"
    q = runner.invoke(app, ["query", str(parquet), sql, "--format", "csv", "--engine", "spark", "--master", MASTER])
    d = runner.invoke(app, ["query", str(parquet), sql, "--format", "csv", "--no-cache"])
    assert q.exit_code == 0, q.output
    assert q.stdout == d.stdout and len(q.stdout.splitlines()) == 4
    bad = runner.invoke(app, ["query", str(parquet), "SELECT nope FROM events", "--engine", "spark", "--master", MASTER])
    assert bad.exit_code == 2 and "nope" in bad.output


@needs_spark
@pytest.mark.spark
def test_hadoop_urls_find_logs_and_datasets(spark, fleet, tmp_path, monkeypatch):
    """The URL path (s3a://, hdfs://: Hadoop's FileSystem), exercised on file: URLs: JSONL found
    recursively and a compacted dataset below the same folder, read like the local paths."""
    from dslogs.analyzer.engines.spark import driver as se
    from dslogs.analyzer.engines.spark import sources as spark_sources
    from dslogs.analyzer.ingest.logs import open_logs

    logs, parquet = fleet
    root = tmp_path / "bucket"
    shutil.copytree(logs, root / "raw")
    shutil.copytree(parquet, root / "compacted" / "fleet-a")
    for module in (se, spark_sources):
        monkeypatch.setattr(module, "is_url", lambda p: p.startswith("file:"))
    sources = se.resolve_sources(spark, [f"file:{root}"])
    assert len(sources.jsonl) == len([p for p in logs.rglob("*.jsonl*")])
    assert [d.root.rstrip("/").rsplit("/", 2)[-2:] for d in sources.datasets] == [["compacted", "fleet-a"]]
    sql = "SELECT count(*) AS n, count(DISTINCT request_id) AS r FROM events"
    want = open_logs([str(logs)], use_cache=False).con.execute(sql).fetchall()[0]
    for url in (f"file:{root}/raw", f"file:{root}/compacted/*"):
        got = se.spark_query(Selection.build([url], master=MASTER), sql)
        assert tuple(got.rows[0]) == tuple(want), url


@needs_spark
@pytest.mark.spark
def test_legacy_sessions_split_across_files_and_groups(spark, tmp_path, monkeypatch):
    """Legacy (seed format) lines carry no host and no request id: request ids are numbered per
    session across every file read. A session whose lines lie in two folders must still be
    numbered as DuckDB numbers it: local files share their first line's host (none) and go to one
    group; read as URLs the guess is the folder, the two groups both hold host NULL and are merged
    and read again before any table is used."""
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.engines.compute import compute_metrics
    from dslogs.analyzer.engines.spark import driver as se
    from dslogs.analyzer.engines.spark import sources as spark_sources
    from dslogs.analyzer.ingest.logs import open_logs, run_query

    lines = (REPO / "sample_logs" / "seed_format" / "ds15b_20261123.jsonl").read_text().splitlines(keepends=True)
    half = len(lines) // 2
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "ds15b_20261123.jsonl").write_text("".join(lines[:half]))
    (tmp_path / "b" / "ds15b_20261123.1.jsonl").write_text("".join(lines[half:]))
    db = open_logs([str(tmp_path)], use_cache=False)
    crossing = run_query(db, "SELECT count(*) FROM (SELECT session_id FROM events GROUP BY session_id "
                             "HAVING count(DISTINCT source_file) = 2 AND count(*) FILTER (stage = 'input') > 1)").rows[0][0]  # fmt: skip
    assert crossing > 0, "the split should cut sessions in two"
    t = defaults()
    want = compute_metrics(db, t)
    monkeypatch.setenv("DSLOGS_SPARK_PARTITIONS", "2")
    local = se.open_spark(Selection.build([str(tmp_path)], master=MASTER))
    assert len(local.groups) == 1, "both files start with a host-less line: one group"
    assert_same(want, compute_metrics(local, t), "metric tables (legacy, local files)")
    for module in (se, spark_sources):
        monkeypatch.setattr(module, "is_url", lambda p: p.startswith("file:"))
    urls = se.open_spark(Selection.build([f"file:{tmp_path}"], master=MASTER))
    assert len(urls.groups) == 2, "read as URLs, the folders are two guessed hosts"
    assert_same(want, compute_metrics(urls, t), "metric tables (legacy, URLs, regrouped)")
    assert [len(g) for g in urls.groups if g] == [2], "the groups sharing host NULL were merged"
    assert {k: db.ingest[k] for k in INGEST_KEYS} == {k: urls.ingest[k] for k in INGEST_KEYS}
    db.close()


@needs_spark
@pytest.mark.spark
def test_report_model_equal_on_otlp_fleet(spark, tmp_path):
    """OTLP/JSON traces (two vLLM hosts, one app's GenAI spans with its own session attribute)
    read inside the per-host tasks as open_logs reads them."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from otlp_helpers import Recorder, genai_call, vllm_workload, write_vllm

    from dslogs.analyzer.usecases.analyze import analyze_logs

    for i, host in enumerate(("gpu-a", "gpu-b")):
        (tmp_path / host).mkdir()
        reqs = vllm_workload(150, seed=i, overload_from=100, abort_every=25)
        write_vllm(tmp_path / host / "traces.json", reqs, {"service.name": "vllm", "host.name": host,
                                                           "process.pid": 100 + i}, per_line=40)  # fmt: skip
    rec = Recorder({"service.name": "chat", "host.name": "cpu-1", "process.pid": 7})
    for k in range(30):
        genai_call(rec, 1_796_000_000.0 + 7 * k, 0.5 + k % 4, attrs={
            "gen_ai.system": "huggingface", "app.chat_id": f"c{k % 5}", "gen_ai.usage.input_tokens": 10 + k,
            "gen_ai.usage.output_tokens": 40 + k}, error=ValueError("bad") if k % 9 == 8 else None)  # fmt: skip
    (tmp_path / "app").mkdir()
    rec.write(tmp_path / "app" / "traces.json.gz", per_line=7)
    from prom_helpers import VllmServer  # Prometheus snapshots of gpu-a, read on the driver

    server = VllmServer()
    for k in range(3):
        for _ in range(20):
            server.finish(0.2 + k / 10, 2.0 + k, 0.05, 100, 200)
        server.scrape(tmp_path / "gpu-a", 1_796_000_000 + 60 * k)
    duck = analyze_logs([str(tmp_path)], use_cache=False, session_attr="app.chat_id")
    spk = analyze_logs([str(tmp_path)], engine="spark", master=MASTER, session_attr="app.chat_id")
    assert duck["ingest"]["formats"] == {"otlp:genai": duck["ingest"]["formats"]["otlp:genai"],
                                         "otlp:vllm": duck["ingest"]["formats"]["otlp:vllm"]}  # fmt: skip
    assert duck["requests"]["count"] == 330 and len(duck["sessions"]) == 5
    assert duck["ingest"]["snapshots"] == 3 and spk["server_metrics"] == duck["server_metrics"]
    assert "queue_wait" in {f["rule"] for f in duck["findings"]}
    assert_same(comparable_model(duck), comparable_model(spk), "report models (OTLP fleet)", ROUNDED)


def test_report_model_equal_on_openinference_and_genai_agents(spark, tmp_path):
    """sample_logs/openinference and genai_agents (only their LLM and chat spans are requests)
    beside vLLM spans with an `error` finish reason and a span ending before its start (a bad line)."""
    import shutil
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from otlp_helpers import vllm_workload, write_vllm

    from dslogs.analyzer.usecases.analyze import analyze_logs

    for name in ("openinference", "genai_agents"):
        shutil.copytree(REPO / "sample_logs" / name, tmp_path / name)
        (tmp_path / name / "truth.json").unlink()
    reqs = vllm_workload(60, seed=4)
    reqs[3].finish_reason = "error"
    reqs[7].decode = -reqs[7].prefill - reqs[7].queued - 1.0  # ends a second before it starts
    (tmp_path / "vllm").mkdir()
    write_vllm(tmp_path / "vllm" / "traces.json", reqs, per_line=16)
    duck = analyze_logs([str(tmp_path)], use_cache=False)
    spk = analyze_logs([str(tmp_path)], engine="spark", master=MASTER)
    assert set(duck["ingest"]["formats"]) == {"otlp:openinference", "otlp:genai", "otlp:vllm"}
    assert duck["requests"]["count"] == 80 + 88 + 59 and duck["requests"]["errors"] == 2 + 1 + 1
    assert duck["ingest"]["bad_lines"] == 1 == spk["ingest"]["bad_lines"]
    assert_same(comparable_model(duck), comparable_model(spk), "report models (OpenInference, GenAI agents)", ROUNDED)


@needs_spark
@pytest.mark.spark
def test_report_deploys_on_spark(spark, tmp_path):
    """Recorded deploys at 0 h and 1 h (a new torch, prefill 40 % slower): the Spark report marks
    the same deploys with the same verdicts as DuckDB's (the records read with DuckDB, each
    deploy's window analysed on Spark)."""
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys
    from tests.deploy_helpers import simulated

    old, new = {"pkg.torch": "2.4.1"}, {"pkg.torch": "2.5.0"}
    simulated(tmp_path / "logs", 0, "prefill_slower", [(0, old), (1, new)], hours=2.0, change_hour=1.0, events=12_000)
    options = {"tz": "UTC", "use_cache": False}
    duck = analyze(Selection.build([str(tmp_path / "logs")], **options), report_deploys)
    spk = analyze(Selection.build([str(tmp_path / "logs")], engine="spark", master=MASTER, **options), report_deploys)
    assert [(d["id"], d["verdict"]) for d in duck["deploys"]] == [("d1", "first"), ("d2", "regression")]
    assert spk["deploys"] == duck["deploys"]
    # `dslogs deploys --engine spark` prints what DuckDB's does (the run's clock aside)
    import json

    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    def printed(*engine):
        r = CliRunner().invoke(app, ["deploys", str(tmp_path / "logs"), "--format", "json", "--no-cache", "--tz", "UTC",
                                     "--prom-servers", "one", *engine])
        assert r.exit_code == 0, r.output
        return {k: v for k, v in json.loads(r.stdout).items() if k != "generated_at"}

    cli_duck = printed()
    assert [(d["id"], d["verdict"]) for d in cli_duck["deploys"]] == [("d1", "first"), ("d2", "regression")]
    assert printed("--engine", "spark", "--master", MASTER) == cli_duck
