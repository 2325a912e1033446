"""examples/diagnose.ipynb executed as a user would (nbclient, a real kernel) on sample_logs/:
its DataFrames equal `dslogs query`'s results, and its HTML export (nbconvert) opened in headless
Chromium shows the report and the diff with their charts drawn and no script errors."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert")
pd = pytest.importorskip("pandas")

from test_python_api import assert_frame_is_query, cli_query  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "diagnose.ipynb"
CHROMIUM = "/usr/bin/chromium"
# nbconvert's own page template loads require.js and MathJax from a CDN; the report inside
# loads nothing.
NBCONVERT_CDN = "https://cdnjs.cloudflare.com/"


def test_the_notebook_stores_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb")
    env = {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp / "xdg")}
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # after the user's cells: the views the notebook holds, for comparison with the CLI
    nb.cells.append(nbformat.v4.new_code_cell(
        "".join(f"logs.{v}.to_pickle({str(tmp / (v + '.pkl'))!r})\n" for v in ("events", "requests", "sessions"))))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb, tmp, {**os.environ, **env}


def test_its_dataframes_equal_dslogs_query(executed):
    nb, tmp, env = executed
    # as the notebook names them (source_file shows paths as given), from its folder
    for view in ("events", "requests", "sessions"):
        df = pd.read_pickle(tmp / f"{view}.pkl")
        assert len(df) > 0
        assert_frame_is_query(df, cli_query(["../sample_logs/oom"], f"SELECT * FROM {view}", env, cwd=NOTEBOOK.parent))


@pytest.mark.browser
def test_its_html_export_shows_the_report_and_the_diff_drawn(executed):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    nb, tmp, _ = executed
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    page_file = tmp / "diagnose.html"
    page_file.write_text(body, encoding="utf-8")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            errors, blocked = [], []

            def route(r):
                url = r.request.url
                if url.startswith(("file:", "about:", "data:")):
                    r.continue_()
                else:
                    blocked.append(url)
                    r.abort()

            ctx.route("**/*", route)
            page = ctx.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
            page.goto(page_file.as_uri())
            frames = page.locator("iframe[srcdoc]")
            assert frames.count() == 2  # the report, the diff
            drawn = {}
            for i in range(2):
                frames.nth(i).scroll_into_view_if_needed()
                frame = frames.nth(i).element_handle().content_frame()
                frame.wait_for_function("window.dslogs && window.dslogs.ready", timeout=60000)
                frame.evaluate("window.dslogs.ready")
                charts = frame.eval_on_selector_all(".chart[data-chart]", "els => els.map(e => e.dataset.chart)")
                failed = frame.eval_on_selector_all(".chart.failed", "els => els.length")
                marks = frame.evaluate("""() => Array.from(document.querySelectorAll('.chart[data-chart]')).map(el =>
                    el.querySelectorAll('.mark-line path, .mark-rect path, .mark-area path, .mark-symbol path, .mark-rule line').length)""")
                title = frame.evaluate("document.title")
                drawn[title] = charts
                assert charts and failed == 0 and all(n > 0 for n in marks), (title, charts, marks)
            assert any("report" in t.lower() for t in drawn), drawn
            # the chart the notebook drew with altair (SVG renderer), exported as an image
            widths = page.eval_on_selector_all(
                "img[src^='data:image/svg+xml']", "els => els.map(e => e.complete ? e.naturalWidth : 0)")
            assert widths and all(w > 100 for w in widths), widths
        finally:
            browser.close()
    assert all(u.startswith(NBCONVERT_CDN) for u in blocked), blocked
    script_errors = [e for e in errors if not e.startswith("Failed to load resource")]
    assert script_errors == [], script_errors
