"""The report in real headless Chromium (system /usr/bin/chromium, driven by playwright).

Every request except file: is blocked and recorded; the page must load with zero console
errors, draw every chart, carry a working time brush, sort its sessions table, and — with
JavaScript disabled — still show findings and the static SVG charts. Screenshots go to
test-output/ for a human to look at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from browser_helpers import open_offline
from fixtures.report_models import XSS_MESSAGE, XSS_SESSION, fixture_model, real_model

from dslogs.analyzer.render.html import anchor, render_html

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "test-output"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
    pytest.skip("chromium is not installed", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                              args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The real sample_logs report (or the fixture until the analyzer exists) and the
    adversarial fixture report, written to files."""
    d = tmp_path_factory.mktemp("html")
    real, fx = d / "report.html", d / "fixture.html"
    real.write_text(render_html(real_model()), encoding="utf-8")
    fx.write_text(render_html(fixture_model()), encoding="utf-8")
    return {"real": real, "fixture": fx}


@pytest.fixture(scope="module")
def real(browser, pages):
    loaded = open_offline(browser, pages["real"])
    yield loaded
    loaded.page.context.close()


def test_loads_without_console_errors_or_network(real):
    OUT.mkdir(exist_ok=True)
    real.page.screenshot(path=str(OUT / "report.png"), full_page=True)
    assert real.errors == []
    assert real.blocked == []


def test_every_chart_container_holds_a_rendered_chart(real):
    ids = real.page.eval_on_selector_all(".chart[data-chart]", "els => els.map(e => e.dataset.chart)")
    assert len(ids) >= 8
    for cid in ids:
        marks = real.page.evaluate(
            """id => { const el = document.getElementById('chart-' + id);
                       const g = el.querySelector('svg.marks, canvas');
                       return g ? el.querySelectorAll('.mark-line path, .mark-rect path, .mark-area path, .mark-symbol path, .mark-rule line').length : -1; }""",
            cid)
        assert marks > 0, f"chart {cid} has no drawn marks ({marks})"
        assert real.page.evaluate("id => document.getElementById('chart-' + id).classList.contains('vega-embed')", cid)
    views = real.page.evaluate("Object.keys(window.dslogs.views)")
    assert sorted(views) == sorted(ids)


def _axis_labels(page, chart_id: str) -> list[str]:
    return page.evaluate(
        """id => Array.from(document.querySelectorAll('#chart-' + id + ' .role-axis-label text'))
                   .map(t => t.textContent)""", chart_id)


def test_time_axes_read_24_hours_and_ms_axes_plain_decimals(real):
    """14:52 UTC reads 14:xx on the axis (not a 12-hour 02:xx), 0.2 ms reads 0.2 (not 200m)."""
    page = real.page
    for cid in ("overview", "stage_latency_by_hour", "gpu_timeline", "errors_timeline"):
        if not page.locator(f"#chart-{cid}").count():
            continue
        labels = _axis_labels(page, cid)
        clock = [t for t in labels if re.fullmatch(r"\d\d:\d\d", t)]
        assert clock, f"{cid}: no HH:MM labels in {labels}"
        assert not [t for t in labels if re.search(r"AM|PM|am|pm", t)], cid
    # sample_logs span the afternoon: a 24-hour clock must print an hour past 12
    hours = [int(t[:2]) for t in _axis_labels(page, "stage_latency_by_hour") if re.fullmatch(r"\d\d:\d\d", t)]
    assert max(hours) >= 13, hours
    for cid in ("stage_latency_by_hour", "latency_hist"):
        # a log axis blanks the labels of its minor ticks
        numeric = [t for t in _axis_labels(page, cid) if t and not re.fullmatch(r"\d\d:\d\d|[A-Z][a-z]{2} \d\d?", t)]
        assert numeric and all(re.fullmatch(r"[\d,]+(\.\d+)?", t) for t in numeric), numeric


def test_latency_histogram_resolves_sub_second_latencies(real):
    page = real.page
    bars = page.evaluate("document.querySelectorAll('#chart-latency_hist .mark-rect path').length")
    assert bars >= 20, bars
    # the TTFT panel (sample_logs: p50 about 300 ms) has several bars left of its 1,000 tick
    lefts = page.evaluate("""() => {
        const svg = document.querySelector('#chart-latency_hist svg');
        const tick = Array.from(svg.querySelectorAll('.role-axis-label text')).find(t => t.textContent === '1,000');
        if (!tick) return -1;
        const x = tick.getBoundingClientRect().x;
        const first = svg.querySelector('.mark-rect').getBoundingClientRect();
        return Array.from(svg.querySelectorAll('.mark-rect path')).filter(p => {
            const r = p.getBoundingClientRect(); return r.right <= x + 1 && r.left >= first.left - 1 && r.height > 0; }).length; }""")
    assert lefts >= 4, lefts


def test_brush_filters_every_timeline_chart(real):
    page = real.page
    assert page.evaluate("window.dslogs.views.overview.getState({signals: n => n === 'brush'}).signals") == {"brush": {}}
    svg = page.locator("#chart-overview svg.marks")
    svg.scroll_into_view_if_needed()
    box = page.evaluate("""() => { const r = document.querySelector('#chart-overview .mark-area path').getBoundingClientRect();
                                    return {x: r.x, y: r.y, w: r.width, h: r.height}; }""")
    y = box["y"] + box["h"] * 0.6
    page.mouse.move(box["x"] + box["w"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["w"] * 0.6, y, steps=6)
    page.mouse.up()
    page.wait_for_function("window.dslogs.range !== null")
    rng = page.evaluate("window.dslogs.range")
    assert rng[0] < rng[1]
    brush_width = page.evaluate(
        "() => document.querySelector('#chart-overview .brush_brush path').getBoundingClientRect().width")
    assert brush_width > 50
    timeline_ids = page.eval_on_selector_all(".chart[data-timeline='1']", "els => els.map(e => e.dataset.chart)")
    assert len(timeline_ids) >= 4
    for cid in timeline_ids:
        assert page.evaluate(f"window.dslogs.views[{cid!r}].signal('time_range')") == rng, cid
    page.wait_for_timeout(200)
    domain = page.evaluate("window.dslogs.views.stage_latency_by_hour.scale('x').domain().map(Number)")
    assert domain == rng, "the stage chart's x axis now shows the brushed range"
    assert "→" in page.inner_text("#range-label")
    page.screenshot(path=str(OUT / "report-brushed.png"))
    page.mouse.dblclick(box["x"] + box["w"] * 0.45, y)
    page.wait_for_function("window.dslogs.range === null")
    assert page.evaluate("window.dslogs.views.stage_latency_by_hour.signal('time_range')") is None


def test_sessions_table_sorts_on_click(real):
    page = real.page
    col = page.evaluate("""() => Array.from(document.querySelectorAll('#sessions-table thead th'))
                                   .findIndex(th => th.textContent.trim() === 'requests')""")
    assert col >= 0

    def values():
        return page.evaluate(f"""() => Array.from(document.querySelectorAll('#sessions-table tbody tr'))
                                      .map(r => parseFloat(r.cells[{col}].dataset.v))""")

    header = page.locator("#sessions-table thead th").nth(col)
    header.click()
    asc = values()
    assert asc == sorted(asc) and len(set(asc)) > 1
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert values() == sorted(asc, reverse=True)


def test_finding_link_opens_the_session_drilldown(real):
    page = real.page
    link = page.locator(".card .affected a").first
    target = link.get_attribute("href")[1:]
    assert page.evaluate(f"document.getElementById({target!r}).open") is False
    link.click()
    page.wait_for_function(f"document.getElementById({target!r}).open === true")


def test_adversarial_strings_stay_text_in_the_browser(browser, pages):
    loaded = open_offline(browser, pages["fixture"])
    page = loaded.page
    try:
        assert loaded.dialogs == [], "a log string ran as script"
        assert loaded.errors == [] and loaded.blocked == []
        assert page.evaluate("document.scripts.length") == 3
        sid = page.evaluate(f"document.querySelector('a[href=\"#{anchor(XSS_SESSION)}\"]').textContent")
        assert sid == XSS_SESSION
        assert page.evaluate("Array.from(document.querySelectorAll('.card .what')).map(e => e.textContent)").count(
            XSS_MESSAGE) == 1
        assert page.evaluate("document.querySelectorAll('main b').length") == page.evaluate(
            "document.querySelectorAll('main .evidence b, main .range-label b').length"), "no <b> came from log text"
        # the chart legend shows the id as text as well
        legend = page.evaluate("Array.from(document.querySelectorAll('#chart-memory_timeline text')).map(t => t.textContent)")
        assert any(t.startswith("</script><script>") for t in legend)
    finally:
        page.context.close()


def test_without_javascript_findings_and_static_charts_show(browser, pages):
    loaded = open_offline(browser, pages["real"], js=False)
    page = loaded.page
    try:
        cards = page.locator(".card")
        assert cards.count() > 0 and cards.first.is_visible()
        charts = page.eval_on_selector_all(".chart[data-chart]", "els => els.length")
        visible_svgs = page.evaluate("""() => Array.from(document.querySelectorAll('.chart[data-chart] noscript > svg'))
                                           .filter(s => s.getBoundingClientRect().width > 100).length""")
        assert visible_svgs == charts
        # the static pictures print a 24-hour clock too
        static = page.evaluate("""() => Array.from(document.querySelectorAll('#chart-stage_latency_by_hour noscript > svg text'))
                                   .map(t => t.textContent)""")
        hours = [int(t[:2]) for t in static if re.fullmatch(r"\d\d:\d\d", t)]
        assert hours and max(hours) >= 13, static
        assert not page.locator("#range-label").is_visible()  # the brush hint needs JS
        assert loaded.blocked == []
        page.screenshot(path=str(OUT / "report-nojs.png"), full_page=True)
    finally:
        page.context.close()


def test_print_media_hides_navigation(real):
    page = real.page
    page.emulate_media(media="print")
    try:
        assert not page.locator("nav.toc").is_visible()
        assert page.locator(".card").first.is_visible()
    finally:
        page.emulate_media(media="screen")


def test_weekly_page_loads_cleanly(browser, tmp_path):
    from zoneinfo import ZoneInfo

    from fixtures.report_models import build_model

    from dslogs.analyzer.model.weekly import compare_models
    from dslogs.analyzer.render.weekly import render_weekly

    this, prev = build_model(), build_model(seed=3)
    prev["stages"][2]["p95_ms"] /= 2
    # each model stands for its whole week: a day-long side gets no verdicts (weekly.too_partial)
    this["window"].update(first_event="2026-11-30T00:03:00+00:00", last_event="2026-12-06T23:59:00+00:00")
    prev["window"].update(first_event="2026-11-23T00:03:00+00:00", last_event="2026-11-29T23:59:00+00:00")
    path = tmp_path / "weekly.html"
    path.write_text(render_weekly(compare_models(this, prev, (2026, 49), ZoneInfo("UTC")), "html"),
                    encoding="utf-8")
    loaded = open_offline(browser, path)
    try:
        assert loaded.errors == [] and loaded.blocked == []
        assert loaded.page.locator("tr.regression").count() >= 1
        assert loaded.page.locator("#sec-stages svg").count() == 1
        loaded.page.screenshot(path=str(OUT / "weekly.png"), full_page=True)
    finally:
        loaded.page.context.close()


def test_vllm_sample_draws_its_server_metrics_without_horizontal_scroll(browser, tmp_path):
    """sample_logs/vllm (OTLP spans + Prometheus snapshots): the server metrics section and its
    gauges chart are drawn, the queue_wait finding shows, and the page fits 1280 px."""
    from dslogs.analyzer.usecases.analyze import analyze_logs

    page_path = tmp_path / "vllm.html"
    page_path.write_text(render_html(analyze_logs([str(REPO / "sample_logs" / "vllm")], use_cache=False)),
                         encoding="utf-8")  # fmt: skip
    loaded = open_offline(browser, page_path)
    try:
        page = loaded.page
        assert loaded.errors == [] and loaded.blocked == []
        section = page.locator("#sec-server")
        assert "vllm:num_requests_waiting" in section.inner_text()
        marks = page.evaluate("""() => document.querySelectorAll(
            '#sec-server #chart-server_gauges .mark-line path, #sec-server #chart-server_gauges .mark-symbol path').length""")
        assert marks > 0
        assert "queue_wait" in page.locator("body").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        OUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUT / "vllm.png"), full_page=True)
        section.scroll_into_view_if_needed()
        section.screenshot(path=str(OUT / "vllm-server.png"))
    finally:
        loaded.page.context.close()


def test_every_chart_fits_the_column_at_1280_px(real):
    """No chart (the two-panel capacity chart included) is wider than the report's column, so the
    page never scrolls sideways at a 1280 px viewport."""
    page = real.page
    assert page.locator("#chart-capacity_throughput svg").count() == 1
    column = page.evaluate("document.querySelector('main').clientWidth")
    widths = page.evaluate(
        "Array.from(document.querySelectorAll('.chart')).map(e => [e.id, e.scrollWidth])")
    assert widths and all(w <= column for _, w in widths), (column, widths)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
