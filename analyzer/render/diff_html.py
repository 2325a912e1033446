"""The diff page: ``templates/diff.html`` on the report's ``base.html`` and partials (autoescape
on), with the report's charts drawn for before and after on one axis (interactive with
JavaScript, vl-convert SVG without it)."""

from __future__ import annotations

from markupsafe import Markup

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.model.diff import QUANTILES, diff_to_json
from dslogs.analyzer.render.charts import specs as charts
from dslogs.analyzer.render.diff_md import render_markdown_diff


def render_html_diff(d: dict, fallback_svg: bool = True) -> str:
    from dslogs.analyzer.render.html import chart_svg, render_page, stable_svg_ids

    by_section: dict[str, list[dict]] = {}
    specs: dict[str, dict] = {}
    for chart in charts.page_charts("diff", d):
        svg = chart_svg(chart.spec) if fallback_svg else None
        if svg is not None:
            svg = stable_svg_ids(svg, f"svg-{chart.id}")
        specs[chart.id] = chart.spec
        by_section.setdefault(chart.section, []).append(
            {"id": chart.id, "title": chart.title, "timeline": False, "notes": chart.notes,
             "svg": Markup(svg) if svg else None})  # fmt: skip
    ctx = {"d": d, "charts": by_section, "specs": specs, "quantiles": [q for q, _ in QUANTILES],
           "generated_at": d.get("generated_at", ""), "version": d.get("dslogs_version", "")}
    return render_page("diff.html", ctx, with_charts=bool(specs))


def render_diff(d: dict, fmt: str) -> str:
    if fmt == "json":
        return diff_to_json(d)
    if fmt == "md":
        return render_markdown_diff(d)
    if fmt == "html":
        return render_html_diff(d)
    raise UsageError(f"--format {fmt!r}: expected html, json or md")
