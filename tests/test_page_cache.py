"""A warm HTML report is the page kept beside the model (analyzer/render/page_cache.py), filled with this
run's generated_at: byte for byte the page rendering the hit's model gives, written without
importing jinja2 or the chart code; a changed file, threshold or zone renders a fresh page; the
slot stays text whatever it holds; the kept pages stay few and small."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.model import result_cache
from dslogs.analyzer.render import page_cache
from dslogs.analyzer.render.html import render_html
from dslogs.analyzer.usecases.analyze import analyze_logs

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = [
    '</span><script>alert("x")</script>',
    "a & b < c > d \" e ' f",
    "</footer></body></html><!--",
    "{{ generated_at }} {% raw %}",
    "dslogs-slot-000000000000000000000000-bundle",  # looks like a slot: filled once, never again
    "\u2028\u2029 \U0001f600 \x7f",
]
GENERATED = re.compile(r'(<span class="generated-at">)[^<]*(</span>)')


def without_generated_at(page: str) -> str:
    return GENERATED.sub(r"\1\2", page)


@pytest.fixture
def mixed(tmp_path):
    folder = tmp_path / "logs"
    shutil.copytree(ROOT / "sample_logs" / "mixed", folder)
    return folder


def analyze(logs, cache, **kw) -> dict:
    return analyze_logs([str(logs)], cache=cache, **kw)


def kept_pages(cache: Path) -> list[tuple[str, str, int]]:
    con = duckdb.connect(str(cache), read_only=True)
    try:
        return con.execute(
            "SELECT key, variant, octet_length(payload) FROM result_pages ORDER BY key"
        ).fetchall()
    except duckdb.CatalogException:  # no page kept in this cache
        return []
    finally:
        con.close()


def stored_keys(cache: Path) -> set[str]:
    con = duckdb.connect(str(cache), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT key FROM results").fetchall()}
    finally:
        con.close()


# -- in process: the kept page against a fresh render ---------------------------------------------


def test_a_kept_page_is_the_fresh_render_of_the_hit_byte_for_byte(mixed, tmp_path):
    cache = tmp_path / "c.duckdb"
    cold = analyze(mixed, cache)
    assert page_cache.cached_html(cold) is None  # nothing kept yet
    cold_page = render_html(cold, keep=True)
    assert cold_page == render_html(cold), "rendering with slots and filling them changes nothing"
    [(key, variant, size)] = kept_pages(cache)
    assert variant == page_cache.variant() and key in stored_keys(cache)
    # compressed and without the 0.9 MB bundle: a fraction of the page
    assert size < len(cold_page.encode()) / 4

    warm = analyze(mixed, cache)
    assert warm is not cold and warm["generated_at"] >= cold["generated_at"]
    page = page_cache.cached_html(warm)
    assert page is not None
    assert page == render_html(warm)
    assert without_generated_at(page) == without_generated_at(cold_page)
    assert f'<span class="generated-at">{warm["generated_at"]}</span>' in page
    # only the model just found: another model (even an equal copy) renders
    assert page_cache.cached_html(dict(warm)) is None


def test_a_windowed_legacy_run_keeps_its_own_page(tmp_path):
    logs = tmp_path / "legacy"
    logs.mkdir()
    shutil.copy(ROOT / "sample_logs" / "seed_format" / "ds15b_20261123.jsonl", logs)
    cache = tmp_path / "c.duckdb"
    win = {"since": "2026-11-23T09:30", "until": "2026-11-23T11:00", "tz": "Asia/Shanghai"}
    cold_page = render_html(analyze(logs, cache, **win), keep=True)
    whole = analyze(logs, cache, tz="Asia/Shanghai")  # another key: no page for it yet
    assert page_cache.cached_html(whole) is None
    render_html(whole, keep=True)
    warm = analyze(logs, cache, **win)
    page = page_cache.cached_html(warm)
    assert page == render_html(warm)
    assert without_generated_at(page) == without_generated_at(cold_page)
    assert len(kept_pages(cache)) == 2


def test_the_slot_is_escaped_as_the_template_escapes_it(mixed, tmp_path):
    cache = tmp_path / "c.duckdb"
    render_html(analyze(mixed, cache), keep=True)
    warm = analyze(mixed, cache)
    for text in HOSTILE:
        warm["generated_at"] = text
        page = page_cache.cached_html(warm)
        assert page == render_html(warm), text
        assert "<script>alert" not in page and "</footer></body>" not in page
    warm["generated_at"] = None  # render_html shows "" for a missing one, so does the fill
    assert page_cache.cached_html(warm) == render_html(warm)


def test_the_run_counters_never_change_the_page(mixed, tmp_path):
    """The page is kept per result key, which leaves out the ingest block's run counters: the page
    must not show them (render_html.view_model drops them)."""
    model = analyze(mixed, tmp_path / "c.duckdb")
    page = render_html(model)
    other = dict(model, ingest=dict(model["ingest"]))
    for k in result_cache.RUN_KEYS:
        other["ingest"][k] = "<b>9,876,543</b>" if k != "cache" else "/elsewhere"
    assert render_html(other) == page


def test_a_damaged_or_foreign_page_is_rendered_and_kept_again(mixed, tmp_path, monkeypatch):
    cache = tmp_path / "c.duckdb"
    render_html(analyze(mixed, cache), keep=True)
    con = duckdb.connect(str(cache))
    con.execute("UPDATE result_pages SET payload = ?", [b"not zlib"])
    con.close()
    warm = analyze(mixed, cache)
    assert page_cache.cached_html(warm) is None
    assert render_html(warm, keep=True) == render_html(warm)
    again = analyze(mixed, cache)
    assert page_cache.cached_html(again) == render_html(again)

    # a bundle other than the one the page was rendered with (same file name): rendered
    monkeypatch.setattr(page_cache, "read_bundle", lambda name: "/*other*/window.vegaEmbed=1;")
    assert page_cache.cached_html(analyze(mixed, cache)) is None


def test_another_template_is_another_variant(mixed, tmp_path, monkeypatch):
    cache = tmp_path / "c.duckdb"
    render_html(analyze(mixed, cache), keep=True)
    templates = tmp_path / "templates"
    shutil.copytree(page_cache.templates_dir(), templates, ignore=shutil.ignore_patterns("vendor"))
    (templates / "_style.css").write_text(
        (templates / "_style.css").read_text() + "\n/* edited */\n"
    )
    before = page_cache.variant()
    monkeypatch.setattr(page_cache, "templates_dir", lambda: templates)
    page_cache.variant.cache_clear()
    try:
        assert page_cache.variant() != before
        assert page_cache.cached_html(analyze(mixed, cache)) is None
    finally:
        page_cache.variant.cache_clear()


def test_split_page_refuses_slots_a_fill_would_not_reproduce():
    tokens = page_cache.new_tokens()
    g, b = tokens["generated_at"], tokens["bundle"]
    ok = f"<p>{g}</p><script>{b}</script><p>{g}</p>"
    assert page_cache.split_page(ok, tokens, "B") == [
        "<p>", "generated_at", "</p><script>", "bundle", "</script><p>", "generated_at", "</p>"
    ]  # fmt: skip
    assert page_cache.fill(page_cache.split_page(ok, tokens, "B"), "<i>", "B") == (
        "<p>&lt;i&gt;</p><script>B</script><p>&lt;i&gt;</p>"
    )
    refused = [
        f"<script>var t = '{g}';</script><script>{b}</script>",  # inside a script: JSON-escaped
        f"<style>.x{{content:'{g}'}}</style><script>{b}</script>",  # inside a style
        f"<p>{g.upper()}</p><script>{b}</script>",  # altered by a filter
        f"<p>{g}</p>",  # the bundle's slot missing
        f"<p>{g}</p><script>{b}{b}</script>",  # the bundle twice
        f"<p>{g} dslogs-slot-from-the-logs</p><script>{b}</script>",  # slot-like log text
    ]
    for page in refused:
        assert page_cache.split_page(page, tokens, "B") is None, page
    assert page_cache.split_page(f"<p>{g}</p>", tokens, "") == ["<p>", "generated_at", "</p>"]


def test_a_report_with_slot_like_log_text_is_rendered_not_kept(mixed, tmp_path):
    log = mixed / "mixed-gpu-01" / "ds15b_20261124.jsonl"
    first = json.loads(log.read_text().splitlines()[0])
    first["session_id"] = "dslogs-slot-0123-generated-at"
    with open(log, "a") as fh:
        fh.write("\n" + json.dumps(first) + "\n")
    cache = tmp_path / "c.duckdb"
    model = analyze(mixed, cache)
    page = render_html(model, keep=True)
    assert page == render_html(model)
    assert "dslogs-slot-0123" in page and not kept_pages(cache)


def test_a_cache_held_by_another_process_still_gives_the_page(mixed, tmp_path):
    cache = tmp_path / "c.duckdb"
    model = analyze(mixed, cache)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(60)", str(cache)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert render_html(model, keep=True) == render_html(model)
    finally:
        holder.kill()
        holder.wait()
    assert not kept_pages(cache), "nothing kept while the cache was held"


def test_kept_pages_stay_bounded(mixed, tmp_path):
    cache = tmp_path / "c.duckdb"
    strict = tmp_path / "t.toml"
    for i in range(result_cache.KEEP + 3):
        strict.write_text(f"[slow_tokenize]\np50_ms = {i + 1}\n")
        render_html(analyze(mixed, cache, thresholds_file=strict), keep=True)
    pages = kept_pages(cache)
    assert len(pages) <= result_cache.KEEP
    assert {k for k, _, _ in pages} <= stored_keys(cache)


# -- the command line: a real cache in a temporary XDG_CACHE_HOME ---------------------------------


def run_cli(args: list[str], xdg: Path) -> tuple[str, set[str]]:
    """Run `dslogs analyze`; the analyzer and template modules it imported (-X importtime)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dslogs", "analyze", *args],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {
        line.split("|")[-1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:")
    }
    return r.stdout, imported


RENDERING = {"jinja2", "dslogs.analyzer.render.html", "dslogs.analyzer.render.charts.specs", "dslogs.analyzer.render.charts.svg"}
HEAVY = RENDERING | {"altair", "pandas", "vl_convert"}


@pytest.fixture
def cli_pages(mixed, tmp_path):
    """Cold, warm and re-analysed pages of the same logs through the command line."""
    xdg = tmp_path / "xdg"
    out = {}
    _, out["cold_imports"] = run_cli([str(mixed), "--out", str(tmp_path / "cold.html")], xdg)
    _, out["warm_imports"] = run_cli([str(mixed), "--out", str(tmp_path / "warm.html")], xdg)
    run_cli([str(mixed), "--format", "json", "--out", str(tmp_path / "warm.json")], xdg)
    out.update({n: (tmp_path / f"{n}.html").read_text(encoding="utf-8") for n in ("cold", "warm")})
    out["model"] = json.loads((tmp_path / "warm.json").read_text(encoding="utf-8"))
    out["xdg"], out["logs"], out["dir"] = xdg, mixed, tmp_path
    return out


def test_a_warm_html_run_writes_the_kept_page_without_rendering(cli_pages):
    assert RENDERING <= cli_pages["cold_imports"]
    assert not HEAVY & cli_pages["warm_imports"], HEAVY & cli_pages["warm_imports"]
    cold, warm = cli_pages["cold"], cli_pages["warm"]
    assert without_generated_at(warm) == without_generated_at(cold)
    # the warm page carries its own run's time (to the second: two quick runs may share one)
    assert GENERATED.search(warm).group(0) >= GENERATED.search(cold).group(0)
    # the page rendering the hit's model gives (the JSON run's model: its own generated_at)
    model = cli_pages["model"]
    fresh = render_html(model)
    stamp = GENERATED.search(warm).group(0)
    assert GENERATED.sub(lambda m: stamp, fresh) == warm
    [cache] = (cli_pages["xdg"] / "dslogs").glob("*.duckdb")
    assert len(kept_pages(cache)) == 1


def test_a_changed_file_threshold_or_zone_renders_a_fresh_page(cli_pages):
    logs, xdg, d = cli_pages["logs"], cli_pages["xdg"], cli_pages["dir"]
    strict = d / "strict.toml"
    strict.write_text("[slow_tokenize]\np50_ms = 0.001\n")
    cases = {
        "threshold": [str(logs), "--thresholds", str(strict)],
        "zone": [str(logs), "--tz", "Asia/Shanghai"],
    }
    pages = {}
    for name, args in cases.items():
        _, imported = run_cli([*args, "--out", str(d / f"{name}.html")], xdg)
        assert "dslogs.analyzer.render.html" in imported, name
        pages[name] = (d / f"{name}.html").read_text(encoding="utf-8")
        _, imported = run_cli([*args, "--out", str(d / f"{name}-again.html")], xdg)
        assert "dslogs.analyzer.render.html" not in imported, name
        again = (d / f"{name}-again.html").read_text(encoding="utf-8")
        assert without_generated_at(again) == without_generated_at(pages[name])
    passed = 'pass">slow_tokenize<'  # the rule's badge among the passed rules
    assert passed in cli_pages["cold"] and passed not in pages["threshold"]

    log = logs / "mixed-gpu-01" / "ds15b_20261124.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[: len(lines) // 2]))  # a changed file
    _, imported = run_cli([str(logs), "--out", str(d / "changed.html")], xdg)
    assert "dslogs.analyzer.render.html" in imported
    changed = (d / "changed.html").read_text(encoding="utf-8")
    assert without_generated_at(changed) != without_generated_at(cli_pages["cold"])
    # and the default run's page is the default page again: no other run's page leaks in
    for name in cases:
        assert without_generated_at(pages[name]) != without_generated_at(cli_pages["cold"])


# -- the browser: the warm page offline, and a hostile slot ----------------------------------------


@pytest.mark.browser
def test_the_warm_page_opens_offline_and_a_hostile_slot_stays_text(cli_pages, mixed, tmp_path):
    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists() and not shutil.which("chromium"):
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    from browser_helpers import open_offline

    cache = tmp_path / "hostile.duckdb"
    render_html(analyze(mixed, cache), keep=True)
    warm = analyze(mixed, cache)
    warm["generated_at"] = HOSTILE[0] + HOSTILE[2]
    hostile = tmp_path / "hostile.html"
    hostile.write_text(page_cache.cached_html(warm), encoding="utf-8")
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium if Path(chromium).exists() else shutil.which("chromium"),
            args=args,
        )
        try:
            loaded = open_offline(browser, cli_pages["dir"] / "warm.html")
            assert not loaded.errors and not loaded.blocked
            ids = loaded.page.eval_on_selector_all(
                ".chart[data-chart]", "els => els.map(e => e.dataset.chart)"
            )
            assert ids and sorted(
                loaded.page.evaluate("Object.keys(window.dslogs.views)")
            ) == sorted(ids)
            loaded.page.context.close()

            loaded = open_offline(browser, hostile)
            assert not loaded.errors and not loaded.blocked and not loaded.dialogs
            text = loaded.page.locator("footer .generated-at").text_content()
            assert text == warm["generated_at"]
            assert loaded.page.locator("footer script").count() == 0
            loaded.page.context.close()
        finally:
            browser.close()
