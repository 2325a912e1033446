"""The HTML report: self-contained, escaped, in diagnosis order, small, and reproducible."""

from __future__ import annotations

import copy
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures.html_checks import parse_page, scrub
from fixtures.report_models import (
    QUOTE_SESSION,
    XSS_MESSAGE,
    XSS_SESSION,
    fixture_model,
    large_model,
)

from dslogs.analyzer.render.charts import specs as charts
from dslogs.analyzer.render.html import (
    MAX_SESSION_ROWS,
    SECTIONS,
    anchor,
    csp_hash,
    json_for_script,
    page_script,
    render_html,
    vega_bundle,
)

REPO = Path(__file__).resolve().parents[1]
GOLD_DIR = REPO / "tests" / "gold"
MAX_BYTES = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def model() -> dict:
    return fixture_model()


@pytest.fixture(scope="module")
def page(model) -> str:
    return render_html(model)


@pytest.fixture(scope="module")
def parsed(page):
    return parse_page(page)


def _specs(parsed) -> dict:
    (block,) = [s for s in parsed.scripts if s["attrs"].get("type") == "application/json"]
    return json.loads(block["text"])


# -- self-contained -------------------------------------------------------------------------


def test_vega_is_inlined_exactly_once_and_nothing_is_fetched(page, parsed):
    assert page.count("window.vegaEmbed=") == 1
    executable = [s for s in parsed.scripts if s["attrs"].get("type") != "application/json"]
    assert len(executable) == 2, "the Vega bundle and the page script, nothing else"
    assert executable[0]["text"] == vega_bundle()
    assert executable[1]["text"] == page_script()
    assert all("src" not in s["attrs"] for s in parsed.scripts)
    assert "link" not in parsed.tags and "iframe" not in parsed.tags and "img" not in parsed.tags
    for tag, name, value in parsed.attrs:
        if name in ("href", "src", "action", "xlink:href"):
            assert value.startswith("#"), f"<{tag} {name}={value!r}> points outside the page"


def test_csp_allows_only_the_page_scripts_and_no_network(parsed):
    (csp,) = [v for t, n, v in parsed.attrs if t == "meta" and n == "content" and "default-src" in v]
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp
    assert csp_hash(vega_bundle()) in csp and csp_hash(page_script()) in csp
    assert "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]


def test_specs_json_is_valid_and_cannot_close_its_script(parsed, model):
    specs = _specs(parsed)
    assert set(specs) == {c.id for c in charts.build_charts(model)}
    text = json.dumps(specs)
    assert XSS_SESSION in text  # the adversarial id reached the chart data as data
    assert json_for_script({"a": "</script><!--&"}) == '{"a":"\\u003c/script\\u003e\\u003c!--\\u0026"}'


# -- escaping -------------------------------------------------------------------------------


def test_adversarial_log_strings_render_as_typed_text(page, parsed):
    texts = parsed.texts
    assert XSS_SESSION in texts, "the session id is one text node, exactly as typed"
    assert XSS_MESSAGE in texts
    assert QUOTE_SESSION in texts
    # No element came out of a log string: only the page's own three scripts exist, and the
    # raw markup never holds the unescaped payload.
    assert len(parsed.scripts) == 3
    assert "<script>alert(" not in page
    assert "<b>bold</b>" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Attributes holding log text are quoted and escaped too.
    assert ("td", "data-v", XSS_SESSION) in parsed.attrs
    assert ("td", "data-v", QUOTE_SESSION) in parsed.attrs


def test_session_anchors_are_safe_fragment_ids():
    for sid in (XSS_SESSION, QUOTE_SESSION, "plain-id", "会话-1"):
        a = anchor(sid)
        assert re.fullmatch(r"session-[A-Za-z0-9_-]+-[0-9a-f]{8}", a), a
    assert anchor("a b") != anchor("a_b")


# -- content --------------------------------------------------------------------------------


def test_sections_follow_the_diagnosis_order(page):
    positions = [page.find(f'<section id="sec-{sid}"') for sid, _ in SECTIONS]
    assert -1 not in positions, [sid for (sid, _), pos in zip(SECTIONS, positions, strict=True) if pos == -1]
    assert positions == sorted(positions)


def test_findings_are_severity_sorted_with_linked_sessions_and_fix(page, parsed, model):
    cards = re.findall(r'<article class="card (\w+)" id="finding-\d+" data-rule="([^"]+)"', page)
    severities = [s for s, _ in cards]
    rank = {"critical": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=rank.get)
    assert {r for _, r in cards} == {f["rule"] for f in model["findings"]}
    # every affected-session link points at a drill-down that exists
    links = [v[1:] for t, n, v in parsed.attrs if t == "a" and n == "href" and v.startswith("#session-")]
    assert links and set(links) <= set(parsed.ids)
    assert anchor(XSS_SESSION) in links
    for f in model["findings"]:
        assert f["fix"] in parsed.texts


def test_checklist_header_and_no_data_rules_are_shown(parsed, model):
    texts = " ".join(parsed.texts)
    for item in model["checklist"]:
        assert item["label"] in parsed.texts
    assert "NO DATA" in parsed.texts
    for rule in (r for r in model["rules"] if r["status"] == "no_data"):
        assert rule["rule"] in parsed.texts and rule["reason"] in parsed.texts
    assert "41,234" in texts  # events
    assert "unterminated string <&>" in texts  # a bad-line sample, escaped as text


def test_every_chart_has_a_container_and_a_noscript_svg(page, model):
    made = charts.build_charts(model)
    assert {c.id for c in made} >= {"overview", "stage_latency_by_hour", "latency_hist", "gpu_timeline",
                                     "memory_timeline", "kv_growth", "errors_timeline", "log_volume"}
    for c in made:
        block = re.search(rf'<div class="chart" id="chart-{c.id}".*?</div>', page, re.S).group(0)
        assert "<noscript><svg" in block, c.id


def test_timeline_charts_share_the_brush_range(model):
    made = {c.id: c for c in charts.build_charts(model)}
    overview = json.dumps(made["overview"].spec)
    assert '"name": "brush"' in overview and '"interval"' in overview
    timelines = [c for c in made.values() if c.timeline]
    assert {c.id for c in timelines} >= {"stage_latency_by_hour", "gpu_timeline", "errors_timeline", "log_volume"}
    for c in timelines:
        text = json.dumps(c.spec)
        assert '"name": "time_range"' in text and '"domainRaw": {"expr": "time_range"}' in text, c.id


def test_sessions_table_is_sortable_and_capped():
    m = fixture_model()
    base = m["sessions"][5]
    m["sessions"] += [dict(base, session_id=f"extra-{i}", findings=[]) for i in range(MAX_SESSION_ROWS + 50)]
    page = render_html(m, fallback_svg=False)
    body = re.search(r'<table class="sortable pinned" id="sessions-table">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    assert body.count("<tr") == MAX_SESSION_ROWS
    assert f"{len(m['sessions']):,} sessions" in page
    # flagged sessions come first
    first = re.findall(r'<td class="id" data-v="([^"]*)"', body)[:3]
    assert "sess-0000" in first[0]


def test_empty_series_give_honest_no_data_sections_and_no_bundle():
    m = fixture_model()
    m["series"] = {}
    m["findings"] = []
    m["gpus"] = []
    page = render_html(m)
    assert "window.vegaEmbed=" not in page  # no charts: nothing to embed
    for text in ("No gpu_sample events", "No kv_cache events", "No collector events", "No findings"):
        assert text in page


# -- size -----------------------------------------------------------------------------------


def test_one_day_report_is_small(page):
    assert len(page.encode("utf-8")) <= MAX_BYTES


@pytest.mark.slow
def test_a_year_of_hourly_series_stays_under_3_mb():
    m = large_model(days=365)
    assert len(m["series"]["stage_latency_by_hour"]) == 365 * 24 * 6
    page = render_html(m)
    size = len(page.encode("utf-8"))
    assert size <= MAX_BYTES, size
    specs = _specs(parse_page(page))
    for spec in specs.values():
        for rows in _inline_rows(spec):
            assert len(rows) <= charts.MAX_BUCKETS * charts.MAX_LINES * 2
    assert "re-bucketed to 1 day" in page


def _inline_rows(spec):
    if isinstance(spec, dict):
        if "values" in spec and isinstance(spec["values"], list):
            yield spec["values"]
        for v in spec.values():
            yield from _inline_rows(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _inline_rows(v)


def test_coarsen_keeps_totals_and_bounds_buckets():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [{"bucket": (start + timedelta(hours=h)).isoformat(), "host": f"h{h % 2}", "count": 2, "p50_ms": float(h % 24)}
            for h in range(24 * 365)]
    out, step = charts.coarsen(rows, "bucket", ("host",), {"count": "sum", "p50_ms": "wmean"})
    assert step == "1 day"
    assert len({r["bucket"] for r in out}) <= charts.MAX_BUCKETS
    assert sum(r["count"] for r in out) == sum(r["count"] for r in rows)
    assert {r["p50_ms"] for r in out if r["host"] == "h0"} == {11.0}  # daily mean of hours 0, 2, …, 22
    daily, _ = charts.coarsen(rows, "bucket", (), {"p50_ms": "wmean"})
    assert all(r["p50_ms"] == 11.5 for r in daily)
    same, none = charts.coarsen(rows[:48], "bucket", ("host",), {"count": "sum"})
    assert none is None and same == rows[:48]


def test_thin_keeps_ends():
    rows = list(range(1000))
    out = charts.thin(rows, 10)
    assert len(out) == 10 and out[0] == 0 and out[-1] == 999


# -- gold file ------------------------------------------------------------------------------


def _gold_model() -> dict:
    path = GOLD_DIR / "report_model.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_gold_html(request):
    """Model → HTML, volatile parts scrubbed, equals tests/gold/report.html.

    Regenerate after an intended change: DSLOGS_UPDATE_GOLD=1 pytest tests/test_render_html.py
    (docs/report.md says what that rebuilds)."""
    if os.environ.get("DSLOGS_UPDATE_GOLD") == "1":
        GOLD_DIR.mkdir(parents=True, exist_ok=True)
        model = _build_gold_model()
        (GOLD_DIR / "report_model.json").write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        (GOLD_DIR / "report.html").write_text(scrub(render_html(model), model), encoding="utf-8")
    model = _gold_model()
    got = scrub(render_html(model), model)
    want = (GOLD_DIR / "report.html").read_text(encoding="utf-8")
    if got != want:
        out = REPO / "test-output"
        out.mkdir(exist_ok=True)
        (out / "report.gold-actual.html").write_text(got, encoding="utf-8")
    assert got == want, "HTML differs from tests/gold/report.html (actual in test-output/report.gold-actual.html)"


def _build_gold_model() -> dict:
    """The real model of sample_logs/ when the analyzer can build it, else the fixture."""
    from fixtures.report_models import real_model

    return real_model()


def test_gold_scrub_removes_only_volatile_parts(model):
    a = copy.deepcopy(model)
    b = copy.deepcopy(model)
    b["generated_at"] = "2030-01-01T00:00:00+00:00"
    b["dslogs_version"] = "9.9.9"
    assert scrub(render_html(a, fallback_svg=False), a) == scrub(render_html(b, fallback_svg=False), b)
    b["sessions"][0]["requests"] += 1
    assert scrub(render_html(a, fallback_svg=False), a) != scrub(render_html(b, fallback_svg=False), b)


# -- dslogs render --------------------------------------------------------------------------


def test_render_cli_rebuilds_the_same_html_from_saved_json(tmp_path, model):
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app
    from dslogs.analyzer.model.report import load_report_json, report_to_json

    saved = tmp_path / "day.json"
    saved.write_text(report_to_json(model), encoding="utf-8")
    result = CliRunner().invoke(app, ["render", str(saved), "--out", str(tmp_path / "day.html")])
    assert result.exit_code == 0, result.output
    rebuilt = (tmp_path / "day.html").read_text(encoding="utf-8")
    assert rebuilt == render_html(load_report_json(saved))
    assert rebuilt == render_html(model), "the fixture is already rounded: JSON round trip changes nothing"
    result = CliRunner().invoke(app, ["render", str(saved)])
    assert result.exit_code == 0 and (tmp_path / "day.html").read_text(encoding="utf-8") == rebuilt


def test_render_cli_rejects_a_file_that_is_not_a_report(tmp_path):
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "something/else"}', encoding="utf-8")
    result = CliRunner().invoke(app, ["render", str(bad)])
    assert result.exit_code == 2
    assert "not a valid dslogs.report/1 model" in result.output


@pytest.fixture(scope="module")
def sample_model():
    pytest.importorskip("dslogs.analyzer.ingest.logs")
    from fixtures.report_models import real_model

    return real_model()


def test_analyze_then_json_then_render_equals_analyze_html(sample_model, tmp_path):
    from dslogs.analyzer.model.report import load_report_json, report_to_json

    saved = tmp_path / "m.json"
    saved.write_text(report_to_json(sample_model), encoding="utf-8")
    assert render_html(load_report_json(saved)) == render_html(sample_model)


def test_a_minimal_model_renders(tmp_path):
    """Only the top-level keys the report's JSON Schema requires: every other part is optional to
    the renderer."""
    m = {"schema": "dslogs.report/1", "window": {"since": None, "until": None}, "ingest": {"files": 1, "events": 3},
         "stages": [], "requests": {"count": 0}, "sessions": [], "findings": []}
    page = render_html(m)
    parsed = parse_page(page)
    assert "No stage timings in these logs." in parsed.texts
    assert "No sessions in this window." in parsed.texts
    assert "window.vegaEmbed=" not in page


def test_cli_analyze_html_equals_analyze_json_then_render(sample_model, tmp_path):
    """The user's path: `analyze --format json` then `render` gives the page `analyze` writes
    (two analyze runs differ only in generated_at)."""
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    logs = str(REPO / "sample_logs" / "mixed")
    runner = CliRunner()
    direct, saved, rebuilt = tmp_path / "a.html", tmp_path / "m.json", tmp_path / "r.html"
    for args in (["analyze", logs, "--no-cache", "--tz", "UTC", "--out", str(direct)],
                 ["analyze", logs, "--no-cache", "--tz", "UTC", "--format", "json", "--out", str(saved)],
                 ["render", str(saved), "--out", str(rebuilt)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    model = json.loads(saved.read_text(encoding="utf-8"))
    a = direct.read_text(encoding="utf-8")
    b = rebuilt.read_text(encoding="utf-8")
    assert scrub(a, model) == scrub(b, model)
    assert len(a.encode("utf-8")) <= MAX_BYTES


def test_memory_labels_and_axes_say_mib(model):
    """GPU and host memory fields are MiB: evidence-table labels and chart axes say so; log
    volume stays decimal MB (bytes / 1e6, the 1 MB/s threshold of 000 §3.2)."""
    from dslogs.analyzer.render.html import detail_label

    assert detail_label("reserved_slope_mb_per_min") == "reserved slope MiB/min"
    assert detail_label("rise_mb") == "rise MiB" and detail_label("kv_cache_size_max_mb") == "KV cache size max MiB"
    assert detail_label("swing_max_busy_mb_per_s") == "swing max busy MiB/s"
    assert detail_label("kv_cache_size_mb_threshold") == "KV cache size MiB threshold"
    assert detail_label("ghost_share_p50") == "ghost share p50"
    assert detail_label("rss_slope_mb_per_min") == "RSS slope MiB/min" and detail_label("gpu_wait_pct_p50") == "GPU wait % p50"
    specs = {c.id: json.dumps(c.spec) for c in charts.build_charts(model)}
    for cid in ("memory_timeline", "gpu_timeline"):
        assert "(MiB)" in specs[cid] and "(MB)" not in specs[cid], cid
    assert "MB written per" in specs["log_volume"]


@pytest.mark.parametrize(("logs", "says", "never"), [
    # v1 events (the collector's format) without its health lines: never "not written by the collector"
    ("sample_logs/concurrent_leak", "the 3,312 trace schema v1 events hold no collector health line", "legacy"),
    ("sample_logs/seed_format", "written by article 003's logger (legacy format), not by the dslogs collector", "v1"),
])  # fmt: skip
def test_an_empty_collector_section_says_why_for_the_formats_read(logs, says, never):
    from dslogs.analyzer.usecases.analyze import analyze_logs

    model = analyze_logs([logs], use_cache=False)
    assert not (model.get("series") or {}).get("collector")
    section = re.search(r'<section id="sec-collector">(.*?)</section>', render_html(model), re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", " ", section).replace("&#39;", "'").split())
    assert says in text and never not in text.split("No collector events", 1)[1], text
