"""`dslogs diff`: statistics, each simulated change found (and a pure mix shift never called a
regression), saved-report sides, too few requests, CLI exit codes, md/json/html."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from fixtures.html_checks import parse_page
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.core.errors import UsageError
from analyzer.model.diff import (
    VALUE_COLUMNS,
    Side,
    diff_sides,
    mann_whitney,
    parse_range,
    quantile_ci,
    weighted_quantile,
)
from analyzer.render.diff_html import render_diff
from analyzer.usecases.diff import build_diff

BEFORE, AFTER = "2026-11-23..2026-11-24", "2026-11-24.."


# -- statistics ---------------------------------------------------------------------------------


def test_mann_whitney_matches_a_hand_computed_u():
    # after = {4, 5, 6} exceeds every before value {1, 2, 3}: U_after = 9 = n1·n2
    r = mann_whitney(np.array([1.0, 2, 3]), np.array([4.0, 5, 6]))
    assert r["prob_after_greater"] == 1.0
    same = mann_whitney(np.arange(50.0), np.arange(50.0))
    assert same["p_value"] > 0.9 and same["prob_after_greater"] == 0.5
    rng = np.random.default_rng(1)
    shifted = mann_whitney(rng.normal(0, 1, 400), rng.normal(0.5, 1, 400))
    assert shifted["p_value"] < 1e-6


def test_quantile_interval_covers_the_true_quantile():
    rng = random.Random(3)
    covered = 0
    for _ in range(200):
        vals = np.sort(np.array([rng.expovariate(1.0) for _ in range(300)]))
        _, lo, hi = quantile_ci(vals, 0.95)
        covered += lo <= -math.log(0.05) <= hi
    assert 0.9 <= covered / 200 <= 1.0  # a 95 % interval


def test_weighted_quantile_with_equal_weights_is_the_quantile():
    vals = np.sort(np.random.default_rng(2).normal(100, 10, 2001))
    assert weighted_quantile(vals, np.ones_like(vals), 0.5) == pytest.approx(np.quantile(vals, 0.5), rel=1e-3)


def test_parse_range():
    assert parse_range("2026-11-20..2026-11-27", "--before") == ("2026-11-20", "2026-11-27")
    assert parse_range("2026-11-27..", "--after") == ("2026-11-27", None)
    with pytest.raises(UsageError, match="START..END"):
        parse_range("2026-11-27", "--after")


def _values(n: int, ttft_scale: float, input_scale: float = 1.0, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    inp = rng.lognormal(5.5, 0.5, n) * input_scale
    vals = {c: np.full(n, np.nan) for c in VALUE_COLUMNS}
    vals["input_len"] = inp
    vals["output_len"] = rng.lognormal(5.8, 0.4, n)
    vals["prefill_ms"] = (90 + 0.32 * inp) * rng.lognormal(0, 0.1, n) * ttft_scale
    vals["ttft_ms"] = vals["prefill_ms"] + 20
    return vals


def _model(n: int) -> dict:
    return {"requests": {"count": n, "errors": 0, "goodput": 1.0}, "findings": [], "stages": [], "sessions": []}


def test_ten_requests_never_make_a_regression():
    before = Side("before", _model(10), "logs", _values(10, 1.0, seed=1))
    after = Side("after", _model(10), "logs", _values(10, 3.0, seed=2))  # 3x slower, but ten requests
    d = diff_sides(before, after, 20)
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["change_pct"] > 100
    assert {prefill[q]["verdict"] for q in ("p50", "p95", "p99")} == {"too few"}
    assert d["regressions"] == []


def test_synthetic_slowdown_is_a_regression_and_longer_prompts_are_mix():
    slow = diff_sides(Side("b", _model(800), "logs", _values(800, 1.0, seed=1)),
                      Side("a", _model(800), "logs", _values(800, 1.4, seed=2)), 20)  # fmt: skip
    assert "prefill p50" in slow["regressions"] and "prefill p95" in slow["regressions"]
    mix = diff_sides(Side("b", _model(800), "logs", _values(800, 1.0, seed=1)),
                     Side("a", _model(800), "logs", _values(800, 1.0, input_scale=2.5, seed=2)), 20)  # fmt: skip
    prefill = next(r for r in mix["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["change_pct"] > 40 and prefill["p50"]["verdict"] == "mix"
    assert abs(prefill["p50"]["service_pct"]) < 10
    assert mix["regressions"] == []


# -- simulated changes --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def changes(tmp_path_factory):
    from analyzer.simulate import simulate

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
    assert json.loads(res.output)["schema"] == "dslogs.diff/1"
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
    d = json.loads(res.output)
    assert not d["significance"] and not d["mix"]["available"]
    assert "not tested for significance" in d["notes"][0]
    prefill = next(r for r in d["stages"] if r["metric"] == "prefill_ms")
    assert prefill["p50"]["significant"] is None and prefill["p95"]["change_pct"] > 20
    md = runner.invoke(app, ["diff", *saved]).output
    assert "saved report" in md and "Not available from a saved report" in md
    # a saved report on one side, logs on the other
    mixed = runner.invoke(app, ["diff", saved[0], folder, "--format", "json"])
    assert mixed.exit_code == 0 and not json.loads(mixed.output)["significance"]


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
