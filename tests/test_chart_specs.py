"""Chart specs without altair, the no-JavaScript SVGs drawn from them, the cached Vega bundle,
and what the charts print: 24-hour times, plain millisecond labels, sub-second histogram bins."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime

import pytest
from fixtures.report_models import fixture_model

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.render import html as rh
from dslogs.analyzer.render import page_cache
from dslogs.analyzer.render.charts import specs as charts
from dslogs.analyzer.render.charts import svg as svgchart
from dslogs.analyzer.render.charts import vl


@pytest.fixture(scope="module")
def model() -> dict:
    return fixture_model()


@pytest.fixture(scope="module")
def built(model):
    return charts.build_charts(model)


def test_every_spec_is_valid_vega_lite(built):
    """The plain-dict specs pass the Vega-Lite schema altair validates against (at test time,
    not at render time), and the check does catch a wrong key."""
    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema import core
    from jsonschema import ValidationError

    schema = core.load_schema()
    assert len(built) >= 8
    for c in built:
        validate_jsonschema(c.spec, schema)
    broken = copy.deepcopy(built[0].spec)
    broken["encodng"] = {}
    with pytest.raises(ValidationError):
        validate_jsonschema(broken, schema)


def test_vl_writes_what_altair_writes():
    """The same chart code through dslogs.analyzer.render.charts.vl and through altair gives the same spec."""
    import altair as alt

    def build(m):
        data = m.Data(values=[{"t": 1, "v": 2, "k": "a"}])
        base = m.Chart(data).encode(x=m.X("t:T", title="time", scale=m.Scale(type="utc")), color=m.Color("k:N", title=None))
        one = base.mark_line(point=m.OverlayMarkDef(size=12), clip=True).encode(
            y=m.Y("v:Q", axis=m.Axis(format=",~r")), tooltip=["t:T", m.Tooltip("v:Q", format=".1f")])
        two = base.mark_bar().encode(y="v:Q", x2="t:T").transform_filter("datum.k == 'a'")
        return m.vconcat(one, two).properties(title=m.TitleParams(text="T", subtitle="s"))

    ours = build(vl).to_dict()
    theirs = build(alt).to_dict()
    theirs.pop("config")  # altair's default view size; the report sets its own config
    for spec in (ours, theirs):
        spec.pop("$schema")
    assert ours == theirs


def test_variable_params_move_to_the_top_and_selections_stay(built):
    by_id = {c.id: c.spec for c in built}
    gpu = by_id["gpu_timeline"]
    assert {"name": charts.TIME_RANGE, "value": None} in gpu["params"]
    assert all("params" not in part for part in gpu["vconcat"])
    overview = by_id["overview"]
    assert overview["layer"][0]["params"][0]["name"] == charts.BRUSH


def test_no_altair_import_when_rendering(tmp_path):
    """altair costs a third of a second to import: the report path must not need it."""
    import subprocess
    import sys

    code = ("import sys, json; from fixtures.report_models import fixture_model; "
            "from dslogs.analyzer.render.html import render_html; render_html(fixture_model()); "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('altair', 'vl_convert'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(rh.templates_dir().parent), env={**__import__("os").environ, "PYTHONPATH":
                         f"{rh.templates_dir().parent}:{rh.templates_dir().parent / 'tests'}"})  # fmt: skip
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# -- what the charts print ------------------------------------------------------------------------


def test_time_axes_use_a_24_hour_clock(built):
    timeline = [c for c in built if c.timeline or c.id == "overview"]
    assert timeline
    for c in timeline:
        text = json.dumps(c.spec)
        assert '"hours": "%H:%M"' in text, c.id
        assert "%I" not in text and "%p" not in text, c.id


def test_millisecond_axes_print_plain_decimals(built):
    text = json.dumps([c.spec for c in built])
    assert '"~s"' not in text  # d3's SI prefixes: 0.2 ms read "200m"
    stage = next(c.spec for c in built if c.id == "stage_latency_by_hour")
    assert stage["encoding"]["y"]["axis"]["format"] == charts.MS_LABELS


def test_latency_histogram_is_log_binned_on_a_log_axis(built):
    hist = next(c.spec for c in built if c.id == "latency_hist")
    for panel in hist["hconcat"]:
        x = panel["encoding"]["x"]
        assert x["scale"]["type"] == "log" and "log scale" in x["title"]
        assert panel["encoding"]["y2"] == {"datum": 0}


def test_svg_number_and_time_labels():
    assert fmt.axis(0.2) == "0.2"
    assert fmt.axis(0.05) == "0.05"
    assert fmt.axis(2500) == "2,500"
    assert fmt.axis(12.5) == "12.5"
    ms = datetime(2026, 11, 23, 14, 52, tzinfo=UTC).timestamp() * 1000
    assert svgchart.fmt_time(ms, 3_600_000) == "14:52"
    assert svgchart.fmt_time(datetime(2026, 11, 24, tzinfo=UTC).timestamp() * 1000, 3_600_000) == "Nov 24"


# -- the no-JavaScript SVGs -----------------------------------------------------------------------


def test_every_chart_gets_a_static_svg_with_its_title_and_marks(built):
    for c in built:
        svg = rh.static_svg(c.spec)
        assert svg is not None, c.id
        assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" class="static-chart"'), c.id
        title = c.spec["title"]["text"] if isinstance(c.spec["title"], dict) else c.spec["title"]
        assert f">{title}<" in svg, c.id
        assert re.search(r"<(path|rect|circle) ", svg), c.id
        assert ' id="' not in svg and "href" not in svg and "<script" not in svg.lower()


def test_static_svg_time_axis_reads_24_hours(built):
    stage = next(c.spec for c in built if c.id == "stage_latency_by_hour")
    svg = svgchart.render_svg(stage)
    labels = re.findall(r">(\d\d):(\d\d)<", svg)
    assert labels, "the time axis has hour labels"
    assert all(0 <= int(h) <= 23 for h, _ in labels)


def test_static_svg_escapes_log_text(model):
    """Log-derived strings (session ids in legends) are text in the SVG, never markup."""
    memory = next(c.spec for c in charts.build_charts(model) if c.id == "memory_timeline")
    svg = svgchart.render_svg(memory)
    assert "<script" not in svg and "&lt;/script&gt;" in svg


def test_static_svg_is_none_for_what_it_cannot_draw():
    spec = vl.Chart(vl.Data(values=[{"a": "x", "b": 1}])).mark_bar().encode(x="a:N", y="b:Q").to_dict()
    assert svgchart.render_svg(spec) is None  # nominal x: not in the subset
    assert svgchart.render_svg({"mark": "arc"}) is None


def test_svg_log_histogram_bars_resolve_sub_second_bins():
    rows = [{"bin_start": 10 ** (k / 10), "bin_end": 10 ** ((k + 1) / 10), "count": 12 + k} for k in range(-7, 30)]
    spec = vl.Chart(vl.Data(values=rows)).mark_bar().encode(
        x=vl.X("bin_start:Q", scale=vl.Scale(type="log")), x2="bin_end:Q", y="count:Q").properties(width=300).to_dict()
    svg = svgchart.render_svg(spec)
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    assert len(bars) == len(rows)
    widths = {round(float(w)) for _, w in bars}
    assert len(widths) <= 2, "log bins are equally wide on a log axis"
    assert ">0.1<" in svg or ">0.2<" in svg, "sub-millisecond ticks read as decimals"


# -- the Vega bundle, built once ------------------------------------------------------------------


def test_shipped_bundle_matches_the_installed_vl_convert():
    shipped = rh.templates_dir() / page_cache.BUNDLE_DIR / page_cache.bundle_file_name()
    if not shipped.is_file():
        pytest.skip(f"no shipped bundle for this vl-convert ({shipped.name}): it is built into the user cache")
    assert shipped.read_text(encoding="utf-8") == rh.build_vega_bundle()


def test_bundle_is_built_once_into_the_user_cache(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(rh, "bundle_file_name", lambda: "vega-bundle-0.0.test.js")
    monkeypatch.setattr(rh, "build_vega_bundle", lambda: calls.append(1) or "/*b*/window.vegaEmbed=1;")
    first = rh.vega_bundle.__wrapped__()
    second = rh.vega_bundle.__wrapped__()
    assert first == second == "/*b*/window.vegaEmbed=1;"
    assert calls == [1], "built once, then read from the cache"
    assert (tmp_path / "dslogs" / "vega-bundle-0.0.test.js").is_file()
    (tmp_path / "dslogs" / "vega-bundle-0.0.test.js").write_text("", encoding="utf-8")  # cut short
    assert rh.vega_bundle.__wrapped__() == first and calls == [1, 1]


# -- the histogram query ------------------------------------------------------------------------


def test_latency_hist_bins_resolve_sub_second_and_sub_millisecond_values():
    """Log-spaced bins: 0.2 ms, 0.9 ms, 40 ms, 400 ms and 900 ms land in five different bins
    (fixed 1000 ms bins put all of them in one), each value inside its bin, counts complete."""
    import duckdb

    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.metrics.registry import parameters
    from dslogs.analyzer.metrics.results import run_metric

    values = [0.2, 0.9, 40.0, 400.0, 900.0, 45_000.0, 0.0, 1e12]
    con = duckdb.connect()
    con.execute("CREATE TABLE requests (ttft_ms DOUBLE, tpot_ms DOUBLE, e2e_ms DOUBLE)")
    con.executemany("INSERT INTO requests VALUES (?, NULL, NULL)", [[v] for v in values])
    p = parameters(defaults(), "hour")
    rows = run_metric(con, "latency_hist", p)
    assert sum(r["count"] for r in rows) == len(values)
    assert len(rows) <= p["max_bins"]
    for v in (0.2, 0.9, 40.0, 400.0, 900.0, 45_000.0):
        (hit,) = [r for r in rows if r["bin_start"] <= v < r["bin_end"]]
        assert hit["bin_end"] / hit["bin_start"] == pytest.approx(10 ** (1 / p["bins_per_decade"]), rel=1e-4)
    sub_second = [r for r in rows if r["bin_end"] <= 1000]
    assert len(sub_second) >= 5
    assert rows[0]["bin_start"] == pytest.approx(p["hist_min_ms"])  # 0 ms joins the first bin


@pytest.mark.parametrize("args", [
    ["analyze", "sample_logs/healthy"],
    ["diff", "sample_logs/healthy", "sample_logs/memory_leak"],
    ["report", "weekly", "{weeks}", "--week", "2026-W49", "--tz", "UTC"],
], ids=["analyze", "diff", "weekly"])
def test_cli_html_path_imports_no_altair(args, tmp_path):
    """Every command's HTML page (charts included) is drawn from plain Vega-Lite dicts."""
    import os
    import subprocess
    import sys

    from dslogs.analyzer.simulate import simulate

    repo = rh.templates_dir().parent
    if "{weeks}" in args:  # two weeks, so the weekly page has a chart to draw
        for week, start in (("w48", "2026-11-23"), ("w49", "2026-11-30")):
            simulate(tmp_path / "weeks" / week, scenarios=["healthy"], days=2, seed=1, fmt="v1", events=12000, hosts=1, start=start)
        args = [str(tmp_path / "weeks") if a == "{weeks}" else a for a in args]
    seen, out = tmp_path / "modules.json", tmp_path / "page.html"
    code = ("import atexit, json, runpy, sys; "
            f"atexit.register(lambda: open({str(seen)!r}, 'w').write(json.dumps(sorted(sys.modules)))); "
            f"sys.argv = ['dslogs', *{args!r}, '--format', 'html', '--no-cache', '--out', {str(out)!r}]; "
            "runpy.run_module('analyzer', run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(repo), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(repo), env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "<svg" in out.read_text(encoding="utf-8")  # the page did draw its charts
    assert [m for m in json.loads(seen.read_text()) if m.split(".")[0] in ("altair", "pandas")] == []


def test_diff_and_weekly_charts_are_registered_and_valid_vega_lite():
    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema import core

    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.model.diff import diff_sides
    from dslogs.analyzer.usecases.diff import load_side

    pages = {spec.page for spec in charts.CHARTS.values()}
    assert {"report", "diff", "weekly"} <= pages
    d = diff_sides(load_side(Selection.build(["sample_logs/healthy"]), "before"),
                   load_side(Selection.build(["sample_logs/memory_leak"]), "after"))
    week = {"week": "2026-W48", "previous_week": "2026-W47",
            "stages": [{"stage": "prefill", "p95_ms": 120.0, "p95_ms_prev": 100.0, "p95_verdict": "regression"},
                       {"stage": "decode\x07", "p95_ms": 900.0, "p95_ms_prev": 1000.0, "p95_verdict": "steady"}]}
    made = charts.page_charts("diff", d) + charts.page_charts("weekly", week)
    assert [c.id for c in made] == ["diff_p95", "diff_latency_hist", "diff_prefill_vs_input", "weekly_p95"]
    schema = core.load_schema()
    for c in made:
        validate_jsonschema(c.spec, schema)
    assert "\x07" not in json.dumps(made[-1].spec)  # log text made visible before vl-convert sees it
