"""The HTML report read at 1280 px in headless Chromium: no report of any sample_logs folder or
reader-test run, nor the diff, weekly and capacity pages, scrolls the page sideways (wide tables
and charts scroll inside their own box), every table header is a readable label, every link opens
(an anchor on the page, nothing outside it), per-session memory charts read by turn, and a
week-long axis carries dates. One browser serves every page. Assertions are on the rendered DOM
and SVG; screenshots go to test-output/ for a human to look at."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from browser_helpers import open_offline
from typer.testing import CliRunner

from dslogs.analyzer.cli import app

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "test-output"
CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
if not CHROMIUM:
    pytest.skip("chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")

FOLDERS = sorted(p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir())
# the real Gradio/Streamlit runs the on-call readers were given
READER_RUNS = sorted(p for p in (REPO / "tests" / "fixtures").glob("reader_run*") if p.is_dir())
SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")  # a raw model key such as rss_slope_mb_per_min


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


def _report(logs: Path | str, out: Path) -> Path:
    res = CliRunner().invoke(app, ["analyze", str(logs), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return out


def _shot(page, name: str, selector: str | None = None) -> None:
    SHOTS.mkdir(exist_ok=True)
    target = page.locator(selector).first if selector else page
    target.screenshot(path=str(SHOTS / f"fit-{name}.png"), **({} if selector else {"full_page": False}))


def _fits(page, name: str) -> int:
    """The page fits 1280 px: nothing scrolls it sideways, the boxes that hold wide content end inside
    it (what is wider scrolls in them), headers read as words. The number of boxes that scroll."""
    width, inner = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert width <= inner, f"{name}: the page scrolls sideways ({width} px > {inner} px)"
    boxes = page.evaluate("""Array.from(document.querySelectorAll('.table-wrap, .chart')).map(e => {
        const r = e.getBoundingClientRect();
        const t = e.querySelector('table');
        return [r.right, e.scrollWidth > e.clientWidth + 1, getComputedStyle(e).overflowX,
                e.classList.contains('table-wrap'), !!(t && t.classList.contains('pinned')),
                Array.from(e.querySelectorAll('th')).slice(0, 3).map(h => h.textContent.trim()).join(' | ')]; })""")
    wide = 0
    for right, scrolls, overflow, is_table, pinned, heads in boxes:
        assert right <= inner + 0.5, name
        if scrolls:
            wide += 1
            assert overflow == "auto", name
            # a table read in a screenshot shows no scrollbar: one wider than its card must keep its
            # first column (what names the row) in view, or it reads as cut ("beam_s", "3,4")
            assert not is_table or pinned, f"{name}: the table [{heads}] is cut at the card's edge"
    clipped = page.evaluate("""Array.from(document.querySelectorAll('main *')).filter(e => {
        if (e.closest('.sid-rest, .chart, script, style, details:not([open]) > :not(summary)')) return false;
        const cs = getComputedStyle(e);
        const hides = ['hidden', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
        return hides && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1;
    }).map(e => e.tagName + ': ' + e.textContent.trim().slice(0, 40))""")
    assert clipped == [], f"{name}: content clipped by its box: {clipped[:5]}"
    # a session id is one line in its short form, not 36 characters wrapped onto six
    tall = page.evaluate("""Array.from(document.querySelectorAll('main .sid')).filter(e =>
        e.offsetParent !== null && e.getClientRects().length > 1).map(e => e.textContent.trim())""")
    assert tall == [], f"{name}: session ids wrapped: {tall[:3]}"
    # a link opens: an anchor that is on the page (a file opened alone has nothing beside it)
    dead = page.evaluate("""Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))
        .filter(h => !(h.startsWith('#') && h.length > 1 && document.getElementById(decodeURIComponent(h.slice(1))))
                     && !h.startsWith('data:'))""")
    assert dead == [], f"{name}: links that do not open: {sorted(set(dead))[:5]}"
    headers = page.evaluate("Array.from(document.querySelectorAll('th')).map(t => t.textContent.trim())")
    raw = [h for h in headers if SNAKE.fullmatch(h)]
    assert raw == [], f"{name}: raw keys as headers: {raw}"
    return wide


@pytest.mark.slow  # every sample folder and reader run analysed and loaded: about a minute on two cores
def test_no_report_scrolls_the_page_sideways_and_headers_read_as_words(browser, tmp_path):
    assert len(READER_RUNS) == 3, READER_RUNS
    seen_wide = 0
    for folder, logs in [*((f, REPO / "sample_logs" / f) for f in FOLDERS), *((r.name, r) for r in READER_RUNS)]:
        path = _report(logs, tmp_path / f"{folder}.html")
        loaded = open_offline(browser, path)
        page = loaded.page
        try:
            seen_wide += _fits(page, folder)
            assert loaded.errors == [], (folder, loaded.errors)
            if folder in ("rss_growth", "concurrency_cliff"):
                page.locator("#sec-memory, #sec-capacity").last.scroll_into_view_if_needed()
                _shot(page, folder)
        finally:
            page.context.close()
    assert seen_wide, "no wide table or chart in any report: the scrolling boxes were not exercised"


@pytest.fixture(scope="module")
def two_weeks(tmp_path_factory) -> Path:
    """Two full ISO weeks (2026-W46, W47) with a memory leak: enough requests on each side for the
    weekly page's verdicts, written in about a second."""
    logs = tmp_path_factory.mktemp("weeks") / "logs"
    res = CliRunner().invoke(app, ["simulate", str(logs), "--days", "14", "--events", "80000", "--seed", "1",
                                   "--start", "2026-11-09", "--scenario", "memory_leak", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return logs


PAGES = {
    # the other pages dslogs writes: (command line before --out, what the page must hold)
    "diff-folders": (["diff", "sample_logs/healthy", "sample_logs/memory_leak"], "#sec-stages"),
    "diff-windows": (["diff", "{weeks}", "--before", "2026-11-09..2026-11-16", "--after", "2026-11-16.."],
                     "#sec-stages"),
    "weekly": (["report", "weekly", "{weeks}", "--week", "2026-W47"], "#sec-traffic"),
    "capacity-cliff": (["capacity", "sample_logs/concurrency_cliff", "--format", "html"], "#sec-capacity"),
    "capacity-oom": (["capacity", "sample_logs/oom_at_concurrency", "--format", "html"], "#sec-capacity"),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_diff_weekly_and_capacity_pages_fit_1280(browser, tmp_path, two_weeks, name):
    args, holds = PAGES[name]
    out = tmp_path / f"{name}.html"
    args = [a.replace("{weeks}", str(two_weeks)) for a in args]
    res = CliRunner().invoke(app, [*args, "--format", "html", "--out", str(out), "--no-cache", "--quiet"]
                             if "--format" not in args else
                             [*args, "--out", str(out), "--no-cache", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    loaded = open_offline(browser, out)
    page = loaded.page
    try:
        assert page.locator(holds).count(), f"{name}: no {holds}"
        _fits(page, name)
        assert loaded.errors == [] and loaded.blocked == [], (name, loaded.errors, loaded.blocked)
        _shot(page, name)
    finally:
        page.context.close()


def test_host_rss_table_has_labels_with_units_and_definitions(browser, tmp_path):
    loaded = open_offline(browser, _report(REPO / "sample_logs" / "rss_growth", tmp_path / "rss.html"))
    try:
        heads = loaded.page.evaluate("""Array.from(document.querySelectorAll('#sec-memory th[data-key]'))
            .map(t => [t.dataset.key, t.textContent.trim(), t.title])""")
        by_key = {k: (text, title) for k, text, title in heads}
        assert by_key["rss_slope_mb_per_min"][0] == "RSS slope MiB/min"
        assert by_key["rss_first_mb"][0] == "RSS first MiB"
        assert by_key["pid"][0] == "PID"
        # a drill-down header carries the glossary's definition as its tooltip
        ttft = loaded.page.locator('th[data-key="ttft_ms"]').first
        assert ttft.text_content() == "TTFT ms"
        assert ttft.get_attribute("title").startswith("time to first token")
        _shot(loaded.page, "rss-table", '.table-wrap:has(th[data-key="rss_first_mb"])')
    finally:
        loaded.page.context.close()


def _axis(page, chart_id: str) -> dict:
    """The rendered x axis of a Vega chart: its title and its tick labels, read from the SVG."""
    return page.evaluate("""id => {
        const svg = document.querySelector('#' + id + ' svg');
        const axes = Array.from(svg.querySelectorAll('g.role-axis')).filter(a =>
            a.getAttribute('aria-label') && a.getAttribute('aria-label').startsWith('X-axis'));
        const ax = axes[0];
        return {title: Array.from(ax.querySelectorAll('.role-axis-title text')).map(t => t.textContent),
                labels: Array.from(ax.querySelectorAll('.role-axis-label text')).map(t => t.textContent)};
    }""", chart_id)


def test_memory_per_session_reads_by_turn_and_stays_in_its_chart(browser, tmp_path):
    loaded = open_offline(browser, _report(REPO / "sample_logs" / "concurrent_leak", tmp_path / "leak.html"))
    page = loaded.page
    try:
        axis = _axis(page, "chart-memory_timeline")
        assert axis["title"] == ["turn in the session (one point per turn with a reading)"]
        assert axis["labels"] and all(re.fullmatch(r"\d+", t) for t in axis["labels"]), axis
        # the turns the data has, from 1, not a scale rounded up to 10
        assert [int(t) for t in axis["labels"]] == list(range(1, len(axis["labels"]) + 1)), axis
        # every session's line lies inside the plot, none runs off as a near-vertical stroke
        inside = page.evaluate("""() => {
            const svg = document.querySelector('#chart-memory_timeline svg');
            const plot = svg.querySelector('g.mark-group.role-frame path.background').getBoundingClientRect();
            return Array.from(svg.querySelectorAll('g.mark-line path')).map(p => {
                const r = p.getBoundingClientRect();
                return [r.left >= plot.left - 2, r.right <= plot.right + 2, r.width]; });
        }""")
        assert inside and all(a and b for a, b, _ in inside), inside
        assert any(w > 20 for _, _, w in inside), "lines are vertical slivers"
        page.locator("#chart-memory_timeline").scroll_into_view_if_needed()
        _shot(page, "memory-per-session", "#chart-memory_timeline")
    finally:
        page.context.close()


def test_a_week_long_overview_axis_shows_dates(browser, tmp_path):
    logs = tmp_path / "week"
    res = CliRunner().invoke(app, ["simulate", str(logs), "--days", "7", "--events", "60000", "--seed", "1",
                                   "--start", "2026-11-02", "--quiet"])
    assert res.exit_code == 0, res.output
    loaded = open_offline(browser, _report(logs, tmp_path / "week.html"))
    try:
        labels = _axis(loaded.page, "chart-overview")["labels"]
        assert labels, "the overview has no x-axis labels"
        dated = [t for t in labels if re.search(r"\b(Oct|Nov|Dec) \d{2}\b", t)]
        # every label names its day: an hour alone ("18:00") would not say which of 7 days
        assert dated == labels, labels
        assert len({re.search(r"\b\w{3} \d{2}\b", t).group() for t in labels}) >= 3, labels
        _shot(loaded.page, "week-overview", "#chart-overview")
    finally:
        loaded.page.context.close()
