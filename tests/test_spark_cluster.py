"""`--engine spark --master spark://…` on a real standalone cluster (docs/scale.md).

The other Spark tests use ``local[2]``: one JVM that reads the files and runs every task itself.
Here a standalone master and a worker are started from pyspark's own ``spark-class`` (what
``sbin/start-master.sh`` runs), so the driver, the master and the executor are separate JVMs:
files are read by the executor, each set of hosts is analysed by DuckDB in the executor's Python
workers, and the partitions' tables cross the network to the driver's merge. What a cluster
user types is run as a subprocess, and its report model must equal DuckDB's on the same
compacted Parquet.

Executors need a Python with dslogs, duckdb and pyarrow. On a real cluster that is a packed
environment (``spark.archives``) or an image (docs/scale.md); here the worker runs on this
machine, so the executors use this very interpreter: PYSPARK_PYTHON names it (the driver sends
it with every task) and the worker inherits PYTHONPATH. That is the honest extent of this test:
it proves the executor side runs dslogs' code in separate processes, not that an archive ships.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.engine_compare import ROUNDED, assert_same, comparable_model

pyspark = pytest.importorskip("pyspark")
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("java") is None, reason="no java"),
]

SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and one worker (2 cores, 2 GiB) on loopback; yields the master URL."""
    root = tmp_path_factory.mktemp("spark-cluster")
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(root / "logs"), SPARK_WORKER_DIR=str(root / "work"))  # fmt: skip
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []
    try:
        with open(root / "master.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui_port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        with open(root / "worker.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "2g", "--webui-port", str(_free_port()), url],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        deadline = time.monotonic() + 180
        while _alive_workers(ui_port) < 1:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join((root / n).read_text(errors="replace")[-2000:] for n in ("master.log", "worker.log"))
                pytest.fail(f"standalone Spark did not come up ({'exited' if dead else 'timeout'}):\n{logs}")
            time.sleep(1)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    from dslogs.analyzer.ingest.compact import compact_logs
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("cluster-fleet")
    simulate(root / "logs", scenarios=["memory_leak", "oom"], seed=5, hosts=2, hours=2.0,
             events=12000, max_bytes=1 << 20)  # fmt: skip
    compact_logs([str(root / "logs")], root / "parquet")
    return root / "parquet"


def test_analyze_on_a_standalone_cluster_equals_duckdb(cluster, parquet, tmp_path):
    from dslogs.analyzer.usecases.analyze import analyze_logs

    out = tmp_path / "spark.json"
    # Two shuffle partitions: the cluster has two cores (spark-defaults.conf's job on a real one).
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", DSLOGS_SPARK_SHUFFLE_PARTITIONS="2",
               PYSPARK_PYTHON=sys.executable)  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "dslogs", "analyze", str(parquet), "--engine", "spark", "--master", cluster,
         "--format", "json", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    # dslogs' log4j settings reach the driver: no Spark banner or per-stage logging on stderr.
    assert "Setting default log level" not in run.stderr
    assert " INFO " not in run.stderr and " WARN " not in run.stderr, run.stderr[-2000:]

    spark_model = json.loads(out.read_text())
    duck_model = analyze_logs([str(parquet)], use_cache=False)
    assert {f["rule"] for f in duck_model["findings"]} >= {"memory_leak", "oom"}
    assert_same(comparable_model(duck_model), comparable_model(spark_model), "report models (cluster)", ROUNDED)
