"""`dslogs diff`: statistics, each simulated change found (and a pure mix shift never called a
regression), saved-report sides, too few requests, CLI exit codes, md/json/html."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from fixtures.html_checks import parse_page
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.model.diff import (
    VALUE_COLUMNS,
    Side,
    Values,
    diff_sides,
    mann_whitney,
    parse_range,
    quantile,
    quantile_ci,
    weighted_quantile,
)
from dslogs.analyzer.render.diff_html import render_diff
from dslogs.analyzer.usecases.diff import build_diff

BEFORE, AFTER = "2026-11-23..2026-11-24", "2026-11-24.."


# -- statistics ---------------------------------------------------------------------------------


def test_mann_whitney_matches_a_hand_computed_u():
    # after = {4, 5, 6} exceeds every before value {1, 2, 3}: U_after = 9 = n1·n2
    r = mann_whitney([1.0, 2, 3], [4.0, 5, 6])
    assert r["prob_after_greater"] == 1.0
    same = mann_whitney([float(i) for i in range(50)], [float(i) for i in range(50)])
    assert same["p_value"] > 0.9 and same["prob_after_greater"] == 0.5
    rng = random.Random(1)
    shifted = mann_whitney([rng.gauss(0, 1) for _ in range(400)], [rng.gauss(0.6, 1) for _ in range(400)])
    assert shifted["p_value"] < 1e-6


def test_mann_whitney_ranks_ties_by_their_average():
    # before {1, 2, 2}, after {2, 3}: ranks 1, 3, 3 | 3, 5 (the three 2s share rank 3), so
    # R_after = 8, U_after = 8 - 3 = 5 of n1·n2 = 6; tie term 3³ - 3 = 24
    r = mann_whitney([2.0, 1, 2], [3.0, 2])
    assert r["prob_after_greater"] == round(5 / 6, 4)
    var = 3 * 2 / 12 * ((5 + 1) - 24 / (5 * 4))
    z = (5 - 3 - 0.5) / math.sqrt(var)
    assert r["p_value"] == round(math.erfc(z / math.sqrt(2)), 6)


def test_quantile_is_the_linear_interpolation_of_the_report():
    rng = random.Random(5)
    vals = sorted(rng.expovariate(0.1) for _ in range(1001))
    cuts = statistics.quantiles(vals, n=100, method="inclusive")  # linear, as quantile_cont
    for q in (0.5, 0.95, 0.99):
        assert quantile(vals, q) == pytest.approx(cuts[round(q * 100) - 1], rel=1e-12)


def test_quantile_interval_covers_the_true_quantile():
    rng = random.Random(3)
    covered = 0
    for _ in range(200):
        vals = sorted(rng.expovariate(1.0) for _ in range(300))
        _, lo, hi = quantile_ci(vals, 0.95)
        covered += lo <= -math.log(0.05) <= hi
    assert 0.9 <= covered / 200 <= 1.0  # a 95 % interval


def test_weighted_quantile_with_equal_weights_is_the_quantile():
    rng = random.Random(2)
    vals = sorted(rng.gauss(100, 10) for _ in range(2001))
    assert weighted_quantile(vals, [1.0] * len(vals), 0.5) == pytest.approx(quantile(vals, 0.5), rel=1e-3)
    # a weight of 3 on the upper half moves the median up to the upper quarter's edge
    w = [1.0] * 1000 + [3.0] * 1001
    assert weighted_quantile(vals, w, 0.5) == pytest.approx(quantile(vals, 2 / 3), rel=1e-2)


def test_parse_range():
    assert parse_range("2026-11-20..2026-11-27", "--before") == ("2026-11-20", "2026-11-27")
    assert parse_range("2026-11-27..", "--after") == ("2026-11-27", None)
    with pytest.raises(UsageError, match="START..END"):
        parse_range("2026-11-27", "--after")


def _values(n: int, ttft_scale: float, input_scale: float = 1.0, seed: int = 0) -> dict:
    rng = random.Random(seed)
    inp = [rng.lognormvariate(5.5, 0.5) * input_scale for _ in range(n)]
    vals: dict = {c: [None] * n for c in VALUE_COLUMNS}
    vals["input_len"] = inp
    vals["output_len"] = [rng.lognormvariate(5.8, 0.4) for _ in range(n)]
    vals["prefill_ms"] = [(90 + 0.32 * x) * rng.lognormvariate(0, 0.1) * ttft_scale for x in inp]
    vals["ttft_ms"] = [v + 20 for v in vals["prefill_ms"]]
    return vals


def _side(label: str, vals: dict) -> Side:
    """A side from per-request columns, its model holding their percentiles as the report does."""
    def pcts(name: str) -> dict:
        cuts = statistics.quantiles(sorted(vals[name]), n=100, method="inclusive")
        return {"count": len(vals[name]), "p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}

    n = len(vals["input_len"])
    p, t = pcts("prefill_ms"), pcts("ttft_ms")
    model = {"requests": {"count": n, "errors": 0, "goodput": 1.0, "ttft_ms": t}, "findings": [], "sessions": [],
             "stages": [{"stage": "prefill", "count": p["count"], "p50_ms": p["p50"], "p95_ms": p["p95"],
                         "p99_ms": p["p99"]}]}  # fmt: skip
    return Side(label, model, "logs", Values.from_requests(vals))


def test_ten_requests_never_make_a_regression():
    before = _side("before", _values(10, 1.0, seed=1))
    after = _side("after", _values(10, 3.0, seed=2))  # 3x slower, but ten requests
    d = diff_sides(before, after, 20)
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["change_pct"] > 100
    assert {prefill[q]["verdict"] for q in ("p50", "p95", "p99")} == {"too few"}
    assert d["regressions"] == []


def test_synthetic_slowdown_is_a_regression_and_longer_prompts_are_mix():
    slow = diff_sides(_side("b", _values(800, 1.0, seed=1)), _side("a", _values(800, 1.4, seed=2)), 20)
    assert "prefill p50" in slow["regressions"] and "prefill p95" in slow["regressions"]
    mix = diff_sides(_side("b", _values(800, 1.0, seed=1)), _side("a", _values(800, 1.0, input_scale=2.5, seed=2)), 20)
    prefill = next(r for r in mix["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["change_pct"] > 40 and prefill["p50"]["verdict"] == "mix"
    assert abs(prefill["p50"]["service_pct"]) < 10
    assert mix["regressions"] == []


# -- simulated changes --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def changes(tmp_path_factory):
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("changes")
    out = {}
    for name in ("prefill_slower", "max_new_tokens", "leak", "prompt_shift", None):
        folder = root / (name or "unchanged")
        simulate(folder, days=2, seed=3, start="2026-11-23", change=name)
        truth = json.loads((folder / "truth.json").read_text())
        d = build_diff(logs=[str(folder)], before_range=BEFORE, after_range=AFTER, tz="UTC", use_cache=False)
        out[name] = (folder, truth, d)
    return out


def _regressed_metrics(d: dict) -> set[str]:
    return {r["label"] for r in d["stages"] + d["request_metrics"] if r["verdict"] == "regression"}


@pytest.mark.parametrize("name", ["prefill_slower", "max_new_tokens", "leak", "prompt_shift"])
def test_diff_finds_each_simulated_change(changes, name):
    folder, truth, d = changes[name]
    expect = truth["change"]["expect"]
    assert truth["change"]["name"] == name and truth["change"]["at"] == "2026-11-24T00:00:00"
    assert d["significance"] and d["before"]["requests"] > 300 and d["after"]["requests"] > 300
    assert _regressed_metrics(d) == set(expect["regressions"]), d["summary"]
    new = {f["rule"] for f in d["findings"]["new"]}
    assert set(expect["new_findings"]) <= new
    shifted = {r["metric"] for r in d["mix"]["rows"] if r["shifted"]}
    assert set(expect["mix_shift"]) <= shifted
    changed = {k for k, v in d["mix"]["params"].items() if v["changed"]}
    assert changed == set(expect["params"])


def test_the_upgrade_is_a_service_regression_with_intervals(changes):
    _, _, d = changes["prefill_slower"]
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    # truth: +40 % per request; the same-mix (service) change says so whatever the day's prompts
    assert 30 <= prefill["p50"]["service_pct"] <= 50
    assert prefill["p50"]["ci_pct"][0] > 0 and prefill["rank_test"]["p_value"] < 1e-6
    tpot = next(r for r in d["request_metrics"] if r["metric"] == "tpot_ms")
    assert tpot["verdict"] == "steady"


def test_a_pure_prompt_shift_is_not_a_regression(changes):
    _, _, d = changes["prompt_shift"]
    assert d["regressions"] == []
    ttft = next(r for r in d["request_metrics"] if r["metric"] == "ttft_ms")
    assert ttft["p50"]["change_pct"] > 20 and ttft["p50"]["verdict"] == "mix"
    assert any(line.startswith("MIX TTFT") for line in d["summary"])


def test_the_leak_raises_memory_slopes(changes):
    _, _, d = changes["leak"]
    mem = {r["metric"]: r for r in d["memory"]}
    # The simulator serves its sessions concurrently from one process, so a leak that every new
    # session carries is a process's leak: the finding may name the process, not sessions.
    assert mem["memory_leak_findings"]["after"] > 0 == mem["memory_leak_findings"]["before"]
    assert mem["reserved_slope_max"]["after"] > 50


def test_no_change_no_regression(changes):
    _, truth, d = changes[None]
    assert "change" not in truth
    assert d["regressions"] == [] and not d["findings"]["new"]


# -- CLI, saved reports, formats ----------------------------------------------------------------


def test_cli_exit_codes_and_formats(changes, tmp_path):
    runner = CliRunner()
    folder = str(changes["prefill_slower"][0])
    args = ["diff", folder, "--before", BEFORE, "--after", AFTER, "--tz", "UTC", "--no-cache"]
    res = runner.invoke(app, [*args, "--fail-on-regression", "20"])
    assert res.exit_code == 1, res.output
    assert "# dslogs diff" in res.output and "▲ regression" in res.output
    assert runner.invoke(app, [*args, "--fail-on-regression", "60"]).exit_code == 0  # +40 % is under 60 %
    assert runner.invoke(app, args).exit_code == 0  # no threshold given: report only
    res = runner.invoke(app, [*args, "--format", "json"])
    assert json.loads(res.stdout)["schema"] == "dslogs.diff/1"
    mix = str(changes["prompt_shift"][0])
    assert runner.invoke(app, ["diff", mix, "--before", BEFORE, "--after", AFTER, "--tz", "UTC", "--no-cache",
                               "--fail-on-regression", "20"]).exit_code == 0  # fmt: skip
    assert runner.invoke(app, ["diff", folder]).exit_code == 2
    assert runner.invoke(app, ["diff", folder, "--before", "2026-11-23"]).exit_code == 2


def test_saved_reports_compare_percentiles_only(changes, tmp_path):
    runner = CliRunner()
    folder = str(changes["prefill_slower"][0])
    saved = []
    for name, (since, until) in (("b", ("2026-11-23", "2026-11-24")), ("a", ("2026-11-24", "2026-11-25"))):
        path = tmp_path / f"{name}.json"
        res = runner.invoke(app, ["analyze", folder, "--since", since, "--until", until, "--tz", "UTC", "--no-cache",
                                  "--format", "json", "--out", str(path)])  # fmt: skip
        assert res.exit_code == 0, res.output
        saved.append(str(path))
    res = runner.invoke(app, ["diff", *saved, "--format", "json"])
    d = json.loads(res.stdout)
    assert not d["significance"] and not d["mix"]["available"]
    assert "not tested for significance" in d["notes"][0]
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["significant"] is None and prefill["p95"]["change_pct"] > 20
    md = runner.invoke(app, ["diff", *saved]).output
    assert "saved report" in md and "Not available from a saved report" in md
    # a saved report on one side, logs on the other
    mixed = runner.invoke(app, ["diff", saved[0], folder, "--format", "json"])
    assert mixed.exit_code == 0 and not json.loads(mixed.stdout)["significance"]


def test_html_page_escapes_log_strings_and_overlays_charts(changes):
    _, _, d = changes["prefill_slower"]
    d = json.loads(json.dumps(d))
    evil = "</script><script>alert(1)</script>"
    d["errors"] = [{"error_type": evil, "before": 1, "after": 2, "sample_msg": evil + " & 'q'"}]
    d["before"]["label"] = evil
    html = render_diff(d, "html")
    page = parse_page(html)
    assert evil in page.texts
    assert "<script>alert(1)" not in html
    assert len(page.scripts) == 3  # the Vega bundle, the JSON specs, the page script
    specs = json.loads(html.split('id="dslogs-specs">', 1)[1].split("</script>", 1)[0])
    assert {"diff_p95", "diff_latency_hist", "diff_prefill_vs_input"} <= set(specs)
    sides = {v["side"] for v in specs["diff_prefill_vs_input"]["data"]["values"]}
    assert sides == {"before", "after"}
    assert html.count("<noscript><svg") >= 3 or html.count("<svg") >= 3
    assert 'data-verdict="regression"' in html
    with pytest.raises(UsageError):
        render_diff(d, "pdf")


def test_md_is_inert(changes):
    _, _, d = changes["prompt_shift"]
    d = json.loads(json.dumps(d))
    d["errors"] = [{"error_type": "<b>x|y</b>", "before": 0, "after": 1, "sample_msg": "<script>"}]
    md = render_diff(d, "md")
    assert "<script>" not in md and "<b>" not in md and "x\\|y" in md


def test_simulate_change_options_are_checked(tmp_path):
    runner = CliRunner()
    bad = runner.invoke(app, ["simulate", str(tmp_path / "a"), "--change", "faster"])
    assert bad.exit_code == 2 and "unknown change 'faster'" in bad.output
    outside = runner.invoke(app, ["simulate", str(tmp_path / "b"), "--change", "leak", "--change-at", "2027-01-01T00:00"])
    assert outside.exit_code == 2 and "outside the simulated run" in outside.output
    ok = runner.invoke(app, ["simulate", str(tmp_path / "c"), "--change", "leak", "--change-at", "2026-11-23T12:00"])
    assert ok.exit_code == 0, ok.output
    change = json.loads((tmp_path / "c" / "truth.json").read_text())["change"]
    assert change["at"] == "2026-11-23T12:00:00" and change["at_offset_ms"] == 12 * 3_600_000


# -- the report's percentiles, whatever the size; no numpy ------------------------------------


def test_percentiles_are_analyzes_over_each_window_even_when_sampled(changes, monkeypatch):
    """Above MAX_VALUES the test reads a sample, never the percentiles: with the limit set low,
    every p50/p95/p99 of both windows equals ``analyze``'s over that window, exactly."""
    import dslogs.analyzer.model.diff as diff_model
    from dslogs.analyzer.usecases.analyze import analyze_logs

    folder = str(changes["prefill_slower"][0])
    monkeypatch.setattr(diff_model, "MAX_VALUES", 50)
    d = build_diff(logs=[folder], before_range=BEFORE, after_range=AFTER, tz="UTC", use_cache=False)
    assert d["before"]["values_sampled"] and d["after"]["values_sampled"]
    assert any("repeatable sample of 50" in n for n in d["notes"]) and "50" in d["method"]["sample"]
    models = {"before": analyze_logs([folder], since="2026-11-23", until="2026-11-24", tz="UTC", use_cache=False),
              "after": analyze_logs([folder], since="2026-11-24", tz="UTC", use_cache=False)}  # fmt: skip
    compared = 0
    for side, model in models.items():
        assert model["requests"]["count"] > 300
        stages = {s["stage"]: s for s in model["stages"]}
        for row in d["stages"]:
            stage = stages[row["label"]]
            assert row[f"count_{side}"] == stage["count"]  # every value, not the sample's 50
            for q in ("p50", "p95", "p99"):
                assert row[q][side] == stage[f"{q}_ms"], (row["label"], q, side)
                compared += 1
        for row in d["request_metrics"]:
            metric = model["requests"][row["metric"]]
            assert row[f"count_{side}"] == metric["count"]
            for q in ("p50", "p95", "p99"):
                assert row[q][side] == metric[q], (row["label"], q, side)
                compared += 1
    assert compared >= 2 * 3 * 8
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    assert prefill["rank_test"]["n_before"] == prefill["rank_test"]["n_after"] == 50  # the test did sample
    again = build_diff(logs=[folder], before_range=BEFORE, after_range=AFTER, tz="UTC", use_cache=False)
    assert {k: v for k, v in again.items() if k != "generated_at"} == {k: v for k, v in d.items() if k != "generated_at"}


def test_the_values_are_the_ones_behind_the_reports_percentiles(changes):
    """Unsampled, each metric's values give the report's percentile (to its rounding): the test
    and the intervals are about the population the shown number describes."""
    import dslogs.analyzer.rules  # noqa: F401
    from dslogs.analyzer import ingest
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.model.diff import read_values

    folder = str(changes["prompt_shift"][0])
    _, _, d = changes["prompt_shift"]
    with ingest.open(Selection.build([folder], since="2026-11-24", tz="UTC", use_cache=False)) as db:
        values, sampled = read_values(db.con)
    assert not sampled
    for row in d["stages"] + d["request_metrics"]:
        vals = values.metrics[row["metric"]][0]
        assert len(vals) == row["count_after"] and list(vals) == sorted(vals)
        for q, qv in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            assert quantile(vals, qv) == pytest.approx(row[q]["after"], abs=6e-4), (row["label"], q)


def test_diff_imports_no_numpy(tmp_path):
    """The documented install has no numpy, pandas or pyarrow: ``dslogs diff`` of a log folder
    split by time runs with each of them made unimportable (and never tries to import one)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    blocked = tmp_path / "blocked"
    tried = tmp_path / "tried"
    for name in ("numpy", "pandas", "pyarrow"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"import pathlib\npathlib.Path({str(tried)!r}).open('a').write('{name}\\n')\n"
            f"raise ImportError('{name} is not installed here')\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(repo)]), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    args = [sys.executable, "-m", "dslogs", "diff", str(repo / "sample_logs" / "healthy"), "--tz", "UTC",
            "--before", "2026-11-23..2026-11-23T23:00", "--after", "2026-11-23T23:00..", "--format", "json"]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not tried.exists(), tried.read_text()
    d = json.loads(r.stdout)
    assert d["schema"] == "dslogs.diff/1" and d["significance"] and d["mix"]["available"]
    assert d["before"]["requests"] > 0 and d["after"]["requests"] > 0
    e2e = next(row for row in d["request_metrics"] if row["metric"] == "e2e_ms")
    assert e2e["p95"]["ci_pct"] is not None and e2e["rank_test"]["p_value"] is not None
