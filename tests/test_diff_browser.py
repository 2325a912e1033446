"""The diff page in real headless Chromium: no console errors, nothing fetched, the before/after
charts drawn by Vega, log strings inert; without JavaScript the static SVGs show."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_helpers import open_offline

from dslogs.analyzer.render.diff_html import render_diff
from dslogs.analyzer.usecases.diff import build_diff

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parents[1] / "test-output"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip

if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
    pytest.skip("chromium is not installed", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


def test_diff_page_loads_cleanly_with_and_without_js(tmp_path):
    from dslogs.analyzer.simulate import simulate

    logs = tmp_path / "logs"
    simulate(logs, days=2, seed=3, start="2026-11-23", change="prefill_slower")
    d = build_diff(logs=[str(logs)], before_range="2026-11-23..2026-11-24", after_range="2026-11-24..",
                   tz="UTC", use_cache=False)  # fmt: skip
    d["errors"] = [{"error_type": "<img src=x onerror=alert(1)>", "before": 0, "after": 1,
                    "sample_msg": "</script><script>alert(2)</script>"}]  # fmt: skip
    page_path = tmp_path / "diff.html"
    page_path.write_text(render_diff(d, "html"), encoding="utf-8")
    OUT.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                    args=ARGS)  # fmt: skip
        try:
            for js in (True, False):
                loaded = open_offline(browser, page_path, js=js, width=1300)
                page, errors, blocked, dialogs = loaded.page, loaded.errors, loaded.blocked, loaded.dialogs
                if js:
                    # every chart drawn by Vega (an svg inside each chart div, outside <noscript>)
                    drawn = page.evaluate("""() => [...document.querySelectorAll('[data-chart]')]
                        .map(el => el.querySelector(':scope > svg, :scope > div svg, .vega-embed svg') !== null)""")
                    assert drawn and all(drawn), drawn
                else:
                    assert page.locator("[data-chart] svg").count() >= 3
                assert errors == [] and blocked == [] and dialogs == []
                assert page.locator("tr.regression").count() >= 2  # prefill and TTFT
                assert page.locator("#sec-errors td.mono").first.inner_text() == "<img src=x onerror=alert(1)>"
                page.screenshot(path=str(OUT / f"diff{'' if js else '-nojs'}.png"), full_page=True)
                page.context.close()
        finally:
            browser.close()
