"""Fuzz: hostile strings in every string field.

Each case puts hostile strings (script and markup injection, template syntax, terminal escapes,
bidi overrides, NUL, spreadsheet formulas, option-looking ids, very long text) into every
string field of a valid log, seeded per case. It asserts: analyze (json, md, html), render and
query complete without a traceback; nothing raw reaches the terminal or Markdown; and the HTML
opens in headless Chromium (/usr/bin/chromium) with no injected element, no script run and no
console error. DSLOGS_FUZZ_CASES scales the number of cases.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.render.html import render_html
from tests.browser_helpers import open_offline
from tests.fuzz.mutate import HOSTILE, STRING_FIELDS, base_events, encode
from tests.ingest_lines import write_lines

CHROMIUM = "/usr/bin/chromium"
CASES = max(int(os.environ.get("DSLOGS_FUZZ_CASES", "0") or 0) // 20, 6)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
RAW_CONTROLS = [chr(c) for c in range(0x20) if c not in (0x0A,)] + ["\x7f", "\u202e", "\u2066", "\x9b"]


def hostile_events(rng: random.Random) -> list[dict]:
    events = base_events()
    for e in events:
        for name in STRING_FIELDS:
            if name in e and rng.random() < 0.7:
                e[name] = rng.choice(HOSTILE) + rng.choice(["", str(rng.randrange(3))])
        if rng.random() < 0.3:
            e["session_id"] = rng.choice(HOSTILE)
    return events


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    out = []
    for k in range(CASES):
        rng = random.Random(f"hostile-{k}")
        folder = root / f"case{k}"
        write_lines(folder / "ds15b_20261123.jsonl", [encode([e]) for e in hostile_events(rng)])
        out.append(folder)
    return out


def run(*args):
    r = CliRunner().invoke(app, [*map(str, args)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return r


@pytest.fixture(scope="module")
def analyzed(cases, tmp_path_factory):
    """Each case analyzed once by the CLI: (logs, its saved JSON model, the cache that holds it);
    the Markdown report and the Chromium pages are made from that one analysis."""
    root = tmp_path_factory.mktemp("hostile_models")
    out = []
    for k, logs in enumerate(cases):
        model_path, cache = root / f"m{k}.json", root / f"c{k}.duckdb"
        r = run("analyze", logs, "--format", "json", "--out", model_path, "--cache", cache, "--tz", "UTC")
        assert r.exit_code == 0, r.output
        out.append((logs, model_path, cache))
    return out


def test_every_output_completes_and_stays_in_its_medium(analyzed, tmp_path):
    for k, (logs, model_path, cache) in enumerate(analyzed):
        model = json.loads(model_path.read_text(encoding="utf-8"))
        assert model["ingest"]["bad_lines"] == 0 and model["ingest"]["events"] == len(base_events())
        md = run("analyze", logs, "--format", "md", "--cache", cache, "--tz", "UTC").output
        assert not [c for c in RAW_CONTROLS if c in md], f"case {k}: raw control in markdown"
        assert "<script" not in md and "<img" not in md and "<think>" not in md
        if k == 0:  # the HTML of every case is opened in Chromium below; the CLI path once here
            html = tmp_path / f"r{k}.html"
            assert run("analyze", logs, "--out", html, "--no-cache", "--tz", "UTC").exit_code == 0
            assert run("render", model_path, "--out", tmp_path / f"again{k}.html").exit_code == 0
        table = run("query", logs, "SELECT * FROM events", "--no-cache").output
        assert not [c for c in RAW_CONTROLS if c in table and c != "\t"], f"case {k}: raw control in table"
        sess = run("query", logs, "SELECT session_id, host, error_type FROM events", "--format", "csv", "--no-cache").output
        for cell in (c for line in sess.splitlines()[1:] for c in line.split(",")):
            assert not cell.startswith(("=", "+", "@")), cell


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not shutil.which("chromium"), reason="chromium is not installed")
def test_html_opens_in_chromium_with_nothing_injected(analyzed, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")

    pages = []
    for k, (_, model_path, _) in enumerate(analyzed):
        page = tmp_path / f"r{k}.html"
        # `dslogs render`'s path: the saved model, then HTML (static SVG charts included)
        model = json.loads(model_path.read_text(encoding="utf-8"))
        page.write_text(render_html(model), encoding="utf-8")
        pages.append(page)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                    args=ARGS)
        try:
            for k, path in enumerate(pages):
                loaded = open_offline(browser, path)
                page, errors, dialogs, blocked = loaded.page, loaded.errors, loaded.dialogs, loaded.blocked
                assert errors == [], f"case {k}: console errors {errors}"
                assert dialogs == [] and blocked == [], f"case {k}: {dialogs} {blocked}"
                assert page.evaluate("window.__pwned === undefined"), f"case {k}: a log string ran as script"
                assert page.evaluate("document.querySelectorAll('#pwned, [id^=pwned]').length") == 0, f"case {k}: injected element"
                assert page.evaluate("document.scripts.length") == 3, f"case {k}: a script element was injected"
                page.context.close()
        finally:
            browser.close()
