"""`dslogs diff --engine`: each side's report model on the engine asked for, the percentiles the
same as that engine's ``analyze`` over each side; with Spark the values behind the significance
test are read with DuckDB over the same selection, and the notes say so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app

REPO = Path(__file__).resolve().parents[1]
MASTER = "local[2]"
BEFORE, AFTER = str(REPO / "sample_logs" / "healthy"), str(REPO / "sample_logs" / "slow_decode")


def _have_spark() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


def test_an_unknown_engine_is_exit_2():
    res = CliRunner().invoke(app, ["diff", BEFORE, AFTER, "--engine", "polars"])
    assert res.exit_code == 2 and "polars" in res.output


@pytest.mark.skipif(not _have_spark(), reason="pyspark or java missing")
@pytest.mark.spark
def test_spark_diff_shows_sparks_report_percentiles(local_spark):
    from dslogs.analyzer.usecases.analyze import analyze_logs

    runner = CliRunner()
    duck = json.loads(runner.invoke(app, ["diff", BEFORE, AFTER, "--no-cache", "--format", "json"]).stdout)
    res = runner.invoke(app, ["diff", BEFORE, AFTER, "--no-cache", "--format", "json", "--engine", "spark",
                              "--master", MASTER])  # fmt: skip
    assert res.exit_code == 0, res.output
    spark = json.loads(res.stdout)
    assert spark["significance"] and any("read with duckdb" in n for n in spark["notes"])
    models = {"before": analyze_logs([BEFORE], engine="spark", master=MASTER),
              "after": analyze_logs([AFTER], engine="spark", master=MASTER)}  # fmt: skip
    for side, model in models.items():
        for row in spark["request_metrics"]:
            for q in ("p50", "p95", "p99"):
                assert row[q][side] == model["requests"][row["metric"]][q]
    # the engines agree to the report's rounding; the tests read the same values
    for d_row, s_row in zip(duck["stages"] + duck["request_metrics"], spark["stages"] + spark["request_metrics"],
                            strict=True):  # fmt: skip
        assert d_row["metric"] == s_row["metric"] and d_row["rank_test"] == s_row["rank_test"]
        for q in ("p50", "p95", "p99"):
            for side in ("before", "after"):
                assert s_row[q][side] == pytest.approx(d_row[q][side], abs=1e-3)
