"""Weekly report the fleet way (docs/scale.md): last week's saved model instead of a second
analysis (`--previous`), and both weeks computed by Spark (`--engine spark`), equal to DuckDB's."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from tests.engine_compare import ROUNDED, assert_same


@pytest.fixture(scope="module")
def two_weeks(tmp_path_factory):
    """W48 healthy, W49 with a memory leak, on one host (UTC timestamps)."""
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("weeks-fleet")
    simulate(root / "w48", scenarios=["healthy"], days=7, seed=1, fmt="v1", events=40000, hosts=1, start="2026-11-23")
    simulate(root / "w49", scenarios=["memory_leak"], days=7, seed=2, fmt="v1", events=40000, hosts=1,
             start="2026-11-30")  # fmt: skip
    return root


def _weekly(*args: str) -> dict:
    result = CliRunner().invoke(app, ["report", "weekly", *args, "--tz", "UTC", "--no-cache", "--format", "json"])
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)
    model.pop("generated_at")  # the only volatile key
    return model


def _save_week48(logs, out) -> None:
    result = CliRunner().invoke(app, ["analyze", str(logs), "--since", "2026-11-23T00:00:00+00:00",
                                      "--until", "2026-11-30T00:00:00+00:00", "--tz", "UTC", "--no-cache",
                                      "--format", "json", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output


def test_previous_model_gives_the_same_weekly_as_analysing_both_weeks(two_weeks, tmp_path):
    both = _weekly(str(two_weeks), "--week", "2026-W49")
    saved = tmp_path / "w48.json"
    _save_week48(two_weeks, saved)
    reused = _weekly(str(two_weeks), "--week", "2026-W49", "--previous", str(saved))
    assert both["previous"]["has_data"] and both["previous"]["requests"] > 0
    assert reused == both
    assert "memory_leak" in {f["rule"] for f in reused["findings"]["new"]}


def test_previous_model_of_another_week_or_not_a_model_is_refused(two_weeks, tmp_path):
    saved = tmp_path / "w48.json"
    _save_week48(two_weeks, saved)
    runner = CliRunner()
    # Week 50's previous week is W49; a W48 model would compare the wrong weeks.
    wrong = runner.invoke(app, ["report", "weekly", str(two_weeks), "--week", "2026-W50", "--tz", "UTC",
                                "--no-cache", "--format", "json", "--previous", str(saved)])  # fmt: skip
    assert wrong.exit_code == 2
    assert f"--previous {saved}" in wrong.output and "not inside the previous week 2026-11-30" in wrong.output
    assert len(wrong.output.strip().splitlines()) == 1

    weekly_json = tmp_path / "weekly.json"
    weekly_json.write_text(json.dumps(_weekly(str(two_weeks), "--week", "2026-W49")))
    for bad, reason in ((weekly_json, "not a valid dslogs.report/1 model: $.schema"), (tmp_path / "missing.json", "no such file")):
        res = runner.invoke(app, ["report", "weekly", str(two_weeks), "--week", "2026-W49", "--tz", "UTC",
                                  "--no-cache", "--previous", str(bad)])  # fmt: skip
        assert res.exit_code == 2 and reason in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1


@pytest.mark.spark
@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
def test_weekly_on_spark_equals_duckdb(two_weeks, request):
    pytest.importorskip("pyspark")
    request.getfixturevalue("local_spark")  # the run's session: no JVM start of its own
    duck = _weekly(str(two_weeks), "--week", "2026-W49")
    spark = _weekly(str(two_weeks), "--week", "2026-W49", "--engine", "spark", "--master", "local[2]")
    assert_same(duck, spark, "weekly models", ROUNDED)
    assert "memory_leak" in {f["rule"] for f in spark["findings"]["new"]}
