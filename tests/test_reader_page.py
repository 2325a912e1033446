"""What an on-call reader of the HTML report tripped on, checked in headless Chromium at 1280 px:
only a slim nav stays on screen while scrolling, session ids read in one short form with the
whole id still in the text, and wide drill-downs keep the row's name in view."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_helpers import open_offline
from typer.testing import CliRunner

from dslogs.analyzer.cli import app

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
if not CHROMIUM:
    pytest.skip("chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def page(tmp_path_factory, chromium):
    out = tmp_path_factory.mktemp("reader") / "beam.html"
    res = CliRunner().invoke(app, ["analyze", str(REPO / "sample_logs" / "beam_search"), "--out", str(out),
                                   "--quiet", "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    loaded = open_offline(chromium, out)
    yield loaded.page
    loaded.page.context.close()


STUCK = """() => Array.from(document.querySelectorAll('body *')).filter(e => {
    const pos = getComputedStyle(e).position;
    if (!['sticky', 'fixed'].includes(pos) || e.closest('table')) return false;
    const r = e.getBoundingClientRect();
    return r.height > 0 && r.top <= 1 && r.bottom > 0;
}).map(e => [e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : ''),
             e.getBoundingClientRect().height])"""


@pytest.mark.parametrize("target", ["#sec-latency", "#sec-memory", "#sec-sessions"])
def test_only_a_slim_nav_stays_on_screen(page, target):
    page.locator(target).scroll_into_view_if_needed()
    page.evaluate(f"document.querySelector('{target}').scrollIntoView()")
    stuck = page.evaluate(STUCK)
    assert [name for name, _ in stuck] == ["nav.toc"], stuck
    assert stuck[0][1] <= 34, f"the nav takes {stuck[0][1]} px: more than one slim line"
    # the section a link lands on starts below the nav, not under it
    top = page.evaluate(f"document.querySelector('{target}').getBoundingClientRect().top")
    assert top >= stuck[0][1] - 1


def test_session_ids_read_short_and_copy_whole(page):
    ids = page.evaluate("""Array.from(document.querySelectorAll('main .sid')).filter(e => e.offsetParent)
        .map(e => [e.getBoundingClientRect().width, e.textContent.trim(), e.title, e.getClientRects().length])""")
    assert ids
    for width, text, title, lines in ids:
        assert lines == 1, text
        if len(title) > 12:
            assert text == title, (text, title)  # a copy of the link takes the whole id
            assert width < 90, f"{text} takes {width} px: not the 8-character form"
    # the slow-requests table names sessions the way the finding cards do
    slow = page.evaluate("Array.from(document.querySelectorAll('#sec-slow .sid')).map(e => e.innerText)")
    cards = page.evaluate("Array.from(document.querySelectorAll('#sec-findings .sid')).map(e => e.innerText)")
    assert slow and cards and set(slow) & set(cards)


def test_wide_drilldown_keeps_the_request_id_in_view(page):
    page.evaluate("document.querySelectorAll('details.session').forEach(d => d.open = true)")
    wrap = page.locator("details.session .table-wrap").first
    assert wrap.evaluate("e => e.scrollWidth > e.clientWidth"), "the drill-down no longer needs scrolling"
    left = wrap.evaluate("e => e.querySelector('tbody td').getBoundingClientRect().left")
    wrap.evaluate("e => e.scrollLeft = 400")
    assert wrap.evaluate("e => e.querySelector('tbody td').getBoundingClientRect().left") == pytest.approx(left, abs=1)


def test_notes_under_the_summary_clear_the_nav_when_scrolled_to(chromium, tmp_path):
    """run3's notes (short window, simulated OOM) sat half under the sticky nav when scrolled to,
    by an anchor or by a screen: each lands below it; the capacity section fills what it says."""
    out = tmp_path / "run3.html"
    res = CliRunner().invoke(app, ["analyze", str(REPO / "tests" / "fixtures" / "reader_run3"), "--out", str(out),
                                   "--quiet", "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    loaded = open_offline(chromium, out)
    page = loaded.page
    try:
        ids = page.evaluate("Array.from(document.querySelectorAll('p.note[id^=note-]')).map(e => e.id)")
        assert "note-short_window" in ids and "note-simulated_error" in ids
        nav = page.evaluate("document.querySelector('nav.toc').getBoundingClientRect().height")
        for i in ids:
            page.evaluate(f"document.getElementById('{i}').scrollIntoView()")
            assert page.evaluate(f"document.getElementById('{i}').getBoundingClientRect().top") >= nav - 1, i
        assert page.evaluate("parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop)") >= nav
        cap = page.evaluate("document.querySelector('#sec-capacity').innerText")
        assert "OOM likely from: not estimated: the logs carry no GPU total" in cap
        assert "GPU total — MiB" not in cap and "dashed: the GPU" not in page.content()
    finally:
        page.context.close()
