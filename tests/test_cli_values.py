"""Every CLI value and threshold is validated: out-of-range durations and weeks,
non-finite or negative thresholds are exit 2 with one line; extreme event years do not crash."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.thresholds import load_thresholds
from tests.ingest_lines import v1, write_lines

DSLOGS = [sys.executable, "-m", "dslogs"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vals")
    write_lines(root / "ds15b_20261123.jsonl",
                [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "request", "s", f"r{s}", duration_ms=5.0, status="ok")
                 for s in range(5)])
    return root


def one_line(r, *words):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("dslogs: error:") and "Traceback" not in r.output, r.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize(
    ("opt", "value"),
    [("--since", "99999999d"), ("--since", "99999999999m"), ("--until", "9999999w"),
     ("--since", "999999999999999999999999h"), ("--until", "9999-12-31T23:59:59-05:00"),
     ("--since", "0001-01-01T00:00:00+05:00")],
)
@pytest.mark.parametrize("command", ["query", "analyze"])
def test_out_of_range_durations_are_one_line(logs, command, opt, value):
    args = [command, str(logs), "SELECT 1"] if command == "query" else [command, str(logs), "--format", "json"]
    r = CliRunner().invoke(app, [*args, opt, value, "--no-cache"])
    one_line(r, opt, value, "out of range")


@pytest.mark.parametrize("week", ["9999-W52", "0001-W01"])
def test_out_of_range_weeks_are_one_line(logs, week):
    r = CliRunner().invoke(app, ["report", "weekly", str(logs), "--week", week, "--format", "md", "--no-cache"])
    one_line(r, "--week", week)


@pytest.mark.parametrize(
    ("toml", "key", "why"),
    [
        ("[memory_leak]\nslope_mb_per_min = -inf\n", "memory_leak.slope_mb_per_min", "finite"),
        ("[memory_leak]\nslope_mb_per_min = inf\n", "memory_leak.slope_mb_per_min", "finite"),
        ("[slo]\nttft_ms = nan\n", "slo.ttft_ms", "finite"),
        ("[report]\nmax_sessions = -5\n", "report.max_sessions", "negative"),
        ("[slow_prefill]\np50_ms = -1.0\n", "slow_prefill.p50_ms", "negative"),
        ("[ghost_memory]\nghost_share = 1.5\n", "ghost_memory.ghost_share", "between 0 and 1"),
        ("[gpu_wait]\ngpu_wait_pct = 250\n", "gpu_wait.gpu_wait_pct", "between 0 and 100"),
        ("[rss_growth]\nmin_r2 = -0.1\n", "rss_growth.min_r2", "negative"),
    ],
)
def test_bad_thresholds_are_exit_2_naming_the_key(logs, tmp_path, toml, key, why):
    path = tmp_path / "t.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(UsageError, match=why):
        load_thresholds(path)
    r = CliRunner().invoke(app, ["analyze", str(logs), "--thresholds", str(path), "--format", "json", "--no-cache"])
    one_line(r, key, why)


def test_good_thresholds_still_load(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[memory_leak]\nslope_mb_per_min = 0\n[gpu_wait]\ngpu_wait_pct = 100\n", encoding="utf-8")
    assert load_thresholds(path)["memory_leak"]["slope_mb_per_min"] == 0.0


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_events_in_year_1_and_9999_do_not_crash_the_report(tmp_path, tz):
    lines = []
    for ts in ("0001-01-01T00:00:00.000+00:00", "0001-01-01T00:30:00.000+00:00", "2026-11-23T10:00:00.000+00:00",
               "9999-12-31T23:00:00.000+00:00", "9999-12-31T23:59:59.000+00:00"):
        lines.append(v1(ts, "request", "s", "r" + ts, duration_ms=5.0, status="ok"))
        lines.append(v1(ts, "error", "s", "r" + ts, error_type="E"))
        lines.append(v1(ts, "collector", None, None, written=1))
    write_lines(tmp_path / "logs" / "x.jsonl", lines)
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    for args in (["--out", str(html)], ["--format", "json", "--out", str(js)], ["--format", "md"]):
        r = subprocess.run([*DSLOGS, "analyze", str(tmp_path / "logs"), "--no-cache", "--tz", tz, *args],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert json.loads(js.read_text())["ingest"]["events"] == 15
    r = subprocess.run([*DSLOGS, "render", str(js), "--out", str(tmp_path / "again.html")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]


NUMERIC_OPTIONS = [
    # (command line before the option, option, a value it accepts)
    (["diff", "{report}", "{report}"], "--fail-on-regression", "25"),
    (["simulate", "{tmp}/sim"], "--days", "1"),
    (["simulate", "{tmp}/sim"], "--seed", "3"),
    (["simulate", "{tmp}/sim"], "--events", "200"),
    (["simulate", "{tmp}/sim"], "--hosts", "1"),
    (["cache", "--prune"], "--unused-days", "30"),
]
HOSTILE_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e400", "-1e400", "-5", "abc", "", "1e7x", "0x10",
                   "99999999999999999999999999999", "1.5e300"]


@pytest.fixture(scope="module")
def saved_report(logs, tmp_path_factory):
    path = tmp_path_factory.mktemp("rep") / "r.json"
    r = CliRunner().invoke(app, ["analyze", str(logs), "--format", "json", "--out", str(path), "--no-cache"])
    assert r.exit_code == 0, r.output
    return path


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
@pytest.mark.parametrize(("before", "opt", "good"), NUMERIC_OPTIONS)
def test_hostile_numeric_values_are_one_line(saved_report, tmp_path, before, opt, good, value):
    args = [a.format(report=saved_report, tmp=tmp_path) for a in before]
    r = CliRunner().invoke(app, [*args, opt, value])
    one_line(r, opt, repr(value))
    assert not (tmp_path / "sim").exists()


def test_fail_on_regression_nan_was_a_traceback_and_is_now_exit_2(saved_report):
    r = subprocess.run([*DSLOGS, "diff", str(saved_report), str(saved_report), "--fail-on-regression", "nan"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "dslogs: error: --fail-on-regression 'nan': expected a finite number"


def test_numeric_values_in_range_still_work(saved_report):
    r = CliRunner().invoke(app, ["diff", str(saved_report), str(saved_report), "--fail-on-regression", "25"])
    assert r.exit_code == 0, r.output


def test_parse_number_is_the_one_parser():
    from dslogs.analyzer.core.numbers import parse_number

    assert parse_number("2.5", "--x") == 2.5 and parse_number(" 7 ", "--n", integer=True) == 7
    for bad, why in [("nan", "finite"), ("1e400", "finite"), ("-1", "out of range"), ("1.0", "whole number")]:
        with pytest.raises(UsageError, match=why):
            parse_number(bad, "--n", integer=why == "whole number", minimum=0)


def _typer_params():
    import typer.main

    def walk(cmd):
        yield from getattr(cmd, "params", ())
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)

    return [p for p in walk(typer.main.get_command(app)) if hasattr(p, "type_descriptor")]


def _outcome(runtime_param, value, param, ctx, refusal):
    try:
        return "ok", runtime_param.coerce(value, param=param, ctx=ctx)
    except refusal as e:
        return "refused", e.format_message()
    except (Exception, SystemExit) as e:  # a parser's own exit or error
        return type(e).__name__, str(e)


def test_values_coerced_without_pydantic_are_the_ones_typer_gives(tmp_path):
    # every parameter of every command, with its default, the forms a command line gives and refused
    # ones: the same value and type as typer's own coercion, or the same refusal word for word
    import typer.main
    from typer._click import Context
    from typer._click.exceptions import BadParameter
    from typer._coercion import build_runtime_param

    (tmp_path / "f.txt").write_text("x")
    words = ["", "json", "JSON", "html", "duckdb", "spark", "warn", "7", "-3", "2.5", "1e3", "nan", "true", "no",
             "1d", "2026-11-23T10:00", str(tmp_path), str(tmp_path / "f.txt"), str(tmp_path / "none"), "-", " x "]
    params = _typer_params()
    assert len(params) > 100
    ctx = Context(typer.main.get_command(app))
    compared = 0
    for param in params:
        mine = param.get_runtime_param()
        theirs = build_runtime_param(param.type_descriptor)
        values = [param.default, None, *words, tuple(words[:3]), ["a", "b"], ("a", 1)]
        choices = getattr(param.type_descriptor.annotation, "__members__", {})
        values += [*choices, *(str(c.value) for c in choices.values() if hasattr(c, "value")), *choices.values()]
        for value in values:
            got, want = (_outcome(rp, value, param, ctx, BadParameter) for rp in (mine, theirs))
            assert got == want and type(got[1]) is type(want[1]), (param.name, value, got, want)
            compared += 1
    assert compared > 3000


def test_a_json_analyze_coerces_its_values_without_pydantic():
    code = """
import sys
from dslogs.analyzer.cli import app
import typer.main
cmd = typer.main.get_command(app).commands["analyze"]
ctx = cmd.make_context("analyze", ["./logs", "--format", "json", "--since", "1d", "--engine", "duckdb", "--out", "r.json"])
assert ctx.params["format"].value == "json" and ctx.params["out"].name == "r.json" and ctx.params["logs"] == ["./logs"]
assert "pydantic" not in sys.modules, "pydantic imported"
"""
    subprocess.run([sys.executable, "-c", code], check=True)
