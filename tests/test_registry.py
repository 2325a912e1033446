"""Rules, charts, series and metric queries are registered once, and every link
between them resolves: a rule's findings point at report sections and charts that exist (on the
page too), a rule reads the metric tables it declares, a chart reads series the model has, every
query file is read by something, every rule has a simulator scenario.

The rules run on every folder of sample_logs/ (one per simulator scenario, plus the concurrent
ones, the seed format and a mixed fleet), so every rule fires at least once here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dslogs.analyzer import rules
from dslogs.analyzer.core.resources import query_names
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.core.thresholds import DEFAULTS, defaults
from dslogs.analyzer.engines.compute import compute_metrics
from dslogs.analyzer.engines.registry import open_engine
from dslogs.analyzer.metrics.registry import DRILLDOWN_QUERIES, METRIC_QUERIES
from dslogs.analyzer.model import report
from dslogs.analyzer.model.report import (
    INGEST_SERIES,
    REPORT_INPUTS,
    SERIES,
    build_report_from_metrics,
)
from dslogs.analyzer.render.charts import specs as charts
from dslogs.analyzer.render.charts.specs import CHARTS, build_charts
from dslogs.analyzer.render.html import SECTION_IDS, render_html
from dslogs.analyzer.rules import RULE_IDS, RULES, evaluate_rules, registry
from dslogs.analyzer.rules.attribution import Credits
from dslogs.analyzer.rules.registry import RULE_SPECS
from dslogs.analyzer.simulate import SCENARIOS

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (REPO / "sample_logs").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def sample_metrics() -> dict[str, tuple[dict, dict]]:
    """folder name -> (metric tables, ingest block), read once for the module."""
    out = {}
    for folder in SAMPLES:
        source = open_engine(Selection.build([str(folder)], use_cache=False))
        try:
            out[folder.name] = (compute_metrics(source, defaults()), dict(source.ingest))
        finally:
            source.close()
    return out


# -- the checkers (what a typo trips) -----------------------------------------------------------


def evidence_problems(findings: list[dict]) -> list[str]:
    """Why a finding's evidence link would not resolve: a section the page lacks, a chart not
    registered, or one its rule does not declare (or that sits in another section)."""
    out = []
    for f in findings:
        spec = RULE_SPECS.get(f.get("rule"))
        if spec is None:
            out.append(f"finding of unregistered rule {f.get('rule')!r}")
            continue
        ev = f.get("evidence") or {}
        section, chart = ev.get("section"), ev.get("chart")
        if section not in SECTION_IDS:
            out.append(f"{spec.id}: section {section!r} is not a report section")
        elif section not in spec.sections:
            out.append(
                f"{spec.id}: section {section!r} is not among its declared sections {spec.sections}"
            )
        if chart is None:
            continue
        if chart not in CHARTS:
            out.append(f"{spec.id}: chart {chart!r} is not a registered chart")
        elif chart not in spec.charts:
            out.append(f"{spec.id}: chart {chart!r} is not among its declared charts {spec.charts}")
        elif CHARTS[chart].section != section:
            out.append(
                f"{spec.id}: chart {chart!r} sits in section {CHARTS[chart].section!r}, not {section!r}"
            )
    return out


def _rule_of(fn: ast.FunctionDef) -> str | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "rule" and d.args:
            return d.args[0].value
    return None


def literal_problems(source: str) -> list[str]:
    """Every `section=` / `chart=` string literal in a rule function (keyword arguments and
    `section, chart = ...` tuple assignments), checked like evidence_problems: branches the
    sample logs never reach are checked too."""
    out = []
    for fn in ast.parse(source).body:
        if not isinstance(fn, ast.FunctionDef) or (rid := _rule_of(fn)) is None:
            continue
        spec = RULE_SPECS.get(rid)
        pairs: list[tuple[str, ast.AST]] = []
        for node in ast.walk(fn):
            if isinstance(node, ast.keyword) and node.arg in ("section", "chart"):
                pairs.append((node.arg, node.value))
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Tuple)
            ):
                for target, value in zip(node.targets[0].elts, node.value.elts, strict=False):
                    if isinstance(target, ast.Name) and target.id in ("section", "chart"):
                        pairs.append((target.id, value))
        for kind, value in pairs:
            if not isinstance(value, ast.Constant) or value.value is None:
                continue
            where = f"{rid} (line {value.lineno})"
            if kind == "section" and value.value not in SECTION_IDS:
                out.append(f"{where}: section {value.value!r} is not a report section")
            elif kind == "chart" and value.value not in CHARTS:
                out.append(f"{where}: chart {value.value!r} is not a registered chart")
            elif spec is not None and value.value not in (
                spec.sections if kind == "section" else spec.charts
            ):
                out.append(f"{where}: {kind} {value.value!r} is not declared in its @rule")
    return out


# -- findings point where the report shows them ------------------------------------------------


def test_every_finding_on_the_sample_logs_points_at_a_registered_chart_and_section(sample_metrics):
    fired = set()
    problems = []
    for name, (metrics, ingest) in sample_metrics.items():
        findings, _ = evaluate_rules(metrics, ingest, defaults())
        problems += [f"{name}: {p}" for p in evidence_problems(findings)]
        fired |= {f["rule"] for f in findings}
    assert not problems, "\n".join(problems)
    assert fired == set(RULE_IDS), f"rules that fire on no sample folder: {set(RULE_IDS) - fired}"


def rules_source() -> str:
    """Every rule module's source, in one text."""
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "analyzer" / "rules").glob("*.py")))


def test_every_section_and_chart_literal_in_the_rules_is_registered():
    assert literal_problems(rules_source()) == []


def test_a_typo_in_a_chart_or_section_id_is_caught(sample_metrics):
    metrics, ingest = sample_metrics["gpu_starved"]
    findings, _ = evaluate_rules(metrics, ingest, defaults())
    (f,) = [f for f in findings if f["rule"] == "gpu_starved"]
    assert evidence_problems([f]) == []
    chart_typo = {**f, "evidence": {**f["evidence"], "chart": "gpu_timelne"}}
    section_typo = {**f, "evidence": {**f["evidence"], "section": "gpus"}}
    other_rules_chart = {**f, "evidence": {**f["evidence"], "chart": "gpu_wait_hist"}}
    assert evidence_problems([chart_typo]) == [
        "gpu_starved: chart 'gpu_timelne' is not a registered chart"
    ]
    assert "gpu_starved: section 'gpus' is not a report section" in evidence_problems(
        [section_typo]
    )
    assert "not among its declared charts" in evidence_problems([other_rules_chart])[0]
    source = rules_source()
    typo = source.replace('chart="gpu_timeline"', 'chart="gpu_timelne"', 1)
    assert typo != source
    assert [p.split(": ", 1)[1] for p in literal_problems(typo)] == [
        "chart 'gpu_timelne' is not a registered chart"
    ]
    typo = source.replace('section="header", chart=None', 'section="headr", chart=None')
    assert typo != source
    assert [p.split(": ", 1)[1] for p in literal_problems(typo)] == [
        "section 'headr' is not a report section"
    ]


def test_the_rendered_pages_hold_every_anchor_their_findings_link(sample_metrics):
    """On the page a finding links `#chart-<id>` (its chart was drawn) or `#sec-<id>`: every link
    resolves, and no finding whose chart has data falls back to a section link."""
    for name, (metrics, ingest) in sample_metrics.items():
        model = build_report_from_metrics(metrics, ingest, {}, defaults())
        if not model["findings"]:
            continue
        page = render_html(model, fallback_svg=False)
        ids = set(re.findall(r'\bid="([^"]+)"', page))
        links = set(re.findall(r'href="#([^"]+)"', page))
        assert links <= ids, (name, sorted(links - ids))
        drawn = {c.id for c in build_charts(model)}
        for f in model["findings"]:
            chart = f["evidence"]["chart"]
            if chart in drawn:
                assert f"chart-{chart}" in links, (name, f["rule"], chart)
            else:
                assert f"sec-{f['evidence']['section']}" in links, (name, f["rule"])


# -- the registries agree with each other -------------------------------------------------------


def test_rule_registrations_name_what_exists():
    assert tuple(RULES) == RULE_IDS == tuple(RULE_SPECS)
    for spec in RULE_SPECS.values():
        assert set(spec.sections) <= SECTION_IDS, spec.id
        assert set(spec.charts) <= set(CHARTS), spec.id
        assert {CHARTS[c].section for c in spec.charts} <= set(spec.sections), spec.id
        assert set(spec.inputs) <= set(METRIC_QUERIES), spec.id
        assert spec.id in DEFAULTS, spec.id
    assert rules.GPU_RULES == tuple(r for r, s in RULE_SPECS.items() if s.gpu)


def test_every_threshold_table_belongs_to_a_rule_or_the_report():
    # [slo], [checklist] and [report] are the report's; every other table is one rule's numbers
    assert set(DEFAULTS) == set(RULE_IDS) | {"slo", "checklist", "report"}


def test_a_second_registration_or_a_missing_threshold_table_fails_at_import():
    def fn(m, ingest, t):
        return None

    kw = {"severity": "warning", "source": "—", "fix": "…", "inputs": (), "sections": ("header",), "needs": ()}
    with pytest.raises(ValueError, match="registered twice"):
        registry.rule("oom", **kw)(fn)
    # a rule's numbers are its table in analyzer/core/thresholds.py
    with pytest.raises(ValueError, match=r"no threshold table \[no_such_rule\]"):
        registry.rule("no_such_rule", **kw)(fn)
    with pytest.raises(ValueError, match="severity"):
        registry.rule("no_such_rule", **{**kw, "severity": "fatal"})(fn)
    with pytest.raises(ValueError, match="registered twice"):
        charts.chart("gpu_timeline", section="gpu", series=())(fn)
    assert "no_such_rule" not in RULE_SPECS


def test_chart_registrations_name_what_exists():
    for spec in CHARTS.values():
        # the diff and weekly pages' charts read their own models, not the report's series
        assert spec.page != "report" or spec.section in SECTION_IDS, spec.id
        assert set(spec.series) <= set(SERIES) | set(INGEST_SERIES), spec.id
        assert set(spec.flag_rules) <= set(RULE_IDS), spec.id
    # every SERIES table is a metric query, and every series is drawn or shown on the page
    page_code = "".join(
        (REPO / p).read_text(encoding="utf-8")
        for p in ("analyzer/render/html.py", "analyzer/model/diff.py", "templates/report.html")
    )
    for key, (table, _columns) in SERIES.items():
        assert table in METRIC_QUERIES, key
        drawn = any(key in c.series for c in CHARTS.values())
        assert drawn or f'"{key}"' in page_code, f"series {key!r} is neither drawn nor shown"


def test_every_declared_series_column_is_a_column_of_its_query(sample_metrics):
    """A `-- series <key>: <columns>` header names columns its query returns (a typo would give
    the model a column of None)."""
    seen = {key: set() for key in SERIES}
    for metrics, _ingest in sample_metrics.values():
        for key, (table, columns) in SERIES.items():
            for row in metrics[table][:1]:
                assert set(columns) <= set(row), (key, table, set(columns) - set(row))
                seen[key] |= set(columns)
    assert all(seen.values()), (
        f"series no sample folder fills: {[k for k, v in seen.items() if not v]}"
    )


def test_every_ingest_series_has_its_columns_on_a_sample_folder(sample_metrics):
    """A series built from ingest (INGEST_SERIES) has the columns it declares, and some sample
    folder fills it."""
    seen = {key: False for key in INGEST_SERIES}
    for metrics, ingest in sample_metrics.values():
        series = build_report_from_metrics(metrics, ingest, {}, defaults())["series"]
        for key, columns in INGEST_SERIES.items():
            for row in series.get(key) or []:
                assert set(row) == set(columns), (key, set(row) ^ set(columns))
                seen[key] = True
    assert all(seen.values()), f"ingest series no sample folder fills: {[k for k, v in seen.items() if not v]}"


def test_every_registered_chart_is_drawn_from_some_sample_folder(sample_metrics):
    # build_charts raises when a chart comes back under another id or section than registered
    drawn: set[str] = set()
    for metrics, ingest in sample_metrics.values():
        drawn |= {
            c.id for c in build_charts(build_report_from_metrics(metrics, ingest, {}, defaults()))
        }
    report_charts = {c.id for c in CHARTS.values() if c.page == "report"}
    assert drawn == report_charts, f"charts no sample folder draws: {report_charts - drawn}"


# -- metric tables: declared = read, and every query read by something --------------------------


class Recorder(dict):
    """A metric-table dict that notes which tables are read."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


class ThresholdRecorder(dict):
    def __init__(self, *a):
        super().__init__(*a)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def test_each_rule_reads_exactly_the_tables_it_declares(sample_metrics):
    """What a rule reads, on every sample folder and with each table it read emptied in turn
    (a fallback input is read only when the first choice is missing): its declared inputs, all
    of them, and its own threshold table only."""
    seen: dict[str, set[str]] = {r: set() for r in RULE_IDS}

    def run(name, rid, metrics, ingest) -> set[str]:
        spec = RULE_SPECS[rid]
        m, t = Recorder(metrics), ThresholdRecorder(defaults())
        spec.fn(m, ingest, t)
        assert m.read <= set(spec.inputs), (name, rid, m.read - set(spec.inputs))
        assert t.read <= {rid}, (name, rid, t.read)  # its numbers: thresholds.DEFAULTS[id]
        seen[rid] |= m.read
        return m.read

    for name, (metrics, ingest) in sample_metrics.items():
        for rid in RULE_IDS:
            for table in run(name, rid, metrics, ingest):
                run(name, rid, {**metrics, table: []}, ingest)
    unread = {
        r: set(RULE_SPECS[r].inputs) - seen[r]
        for r in RULE_IDS
        if set(RULE_SPECS[r].inputs) - seen[r]
    }
    assert not unread, f"declared inputs the rule never read: {unread}"


def test_the_report_reads_exactly_its_declared_tables(sample_metrics, monkeypatch):
    # The rules' reads are theirs (checked above); what the model reads besides is REPORT_INPUTS
    # and SERIES.
    # (the memory verdicts and the RSS credits, computed once for their rules and the model,
    # read the rules' tables)
    monkeypatch.setattr(report, "evaluate_rules", lambda m, i, t, leak=None, rss=None: ([], []))
    monkeypatch.setattr(
        report, "memory_leak_verdicts", lambda m, t: {"sessions": {}, "processes": []}
    )
    monkeypatch.setattr(report, "rss_credits", lambda m, t: Credits({}))
    declared = (
        set(REPORT_INPUTS)
        | {table for table, _ in SERIES.values()}
        | {"_params", "session_requests"}
    )
    seen: set[str] = set()
    for name, (metrics, ingest) in sample_metrics.items():
        m = Recorder(metrics)
        build_report_from_metrics(m, ingest, {}, defaults())
        assert m.read <= declared, (name, m.read - declared)
        seen |= m.read
    assert seen == declared


def test_every_query_file_is_read_by_a_rule_a_series_or_the_report():
    used = (
        {t for s in RULE_SPECS.values() for t in s.inputs}
        | {table for table, _ in SERIES.values()}
        | set(REPORT_INPUTS)
        | set(DRILLDOWN_QUERIES)
        | {"host_devices"}  # evaluate_rules: which hosts get no GPU verdict
    )
    assert set(query_names()) - used == set(), "queries nothing reads"
    assert used - set(query_names()) == set(), "declared tables without a queries/<name>.sql"


# -- every rule has a scenario and a documented row ----------------------------------------------


def test_every_rule_has_a_simulator_scenario_and_a_sample_folder():
    # the main simulator's scenarios, or the concurrent one's named after their rule (capacity)
    from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS

    own = {name: s for name, s in CONCURRENT_SCENARIOS.items() if s.rule == name}
    for rid in RULE_IDS:
        spec = SCENARIOS.get(rid) or own.get(rid)
        assert spec is not None and spec.rule == rid, rid
        assert (REPO / "sample_logs" / rid / "truth.json").is_file(), rid
    assert {s.rule for s in SCENARIOS.values() if s.rule} | set(own) == set(RULE_IDS)


def _doc_rows() -> dict[str, dict[str, str]]:
    """docs/rules.md, outside its generated parts: rule id -> {column header: cell} for every
    table row that names a rule."""
    rows: dict[str, dict[str, str]] = {}
    header: list[str] = []
    text = re.sub(r"<!-- generated: .*?<!-- end generated -->", "", (REPO / "docs" / "rules.md").read_text(encoding="utf-8"), flags=re.S)
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        m = re.fullmatch(r"`([a-z_0-9]+)`", cells[0])
        if header[0] == "rule" and m and m.group(1) in RULE_SPECS:
            assert m.group(1) not in rows, f"docs/rules.md: two rows for {m.group(1)}"
            rows[m.group(1)] = dict(zip(header, cells, strict=True))
    return rows


def test_docs_rules_md_prose_names_only_registered_rules():
    """Every rule has its generated row (id, severity, source, fix, tables, thresholds:
    tests/test_gen_docs.py); the prose tables that say in detail what fires a rule name only
    registered rules, once each."""
    rows = _doc_rows()
    assert set(rows) <= set(RULE_IDS), set(rows) - set(RULE_IDS)
    assert all(row["fires when (default)" if "fires when (default)" in row else "fires when"] for row in rows.values())
