"""The weekly report's pages: Markdown and HTML (with its chart as static SVG) of the model that
``dslogs.analyzer.model.weekly`` builds."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.model.diff import REGRESSION_PCT
from dslogs.analyzer.render.diff_md import md_finding_changes, md_text


def render_markdown_weekly(model: dict) -> str:
    t, p = model["this"], model["previous"]
    lim = model.get("regression_threshold_pct", REGRESSION_PCT)
    def covers(side: dict) -> str:
        hours = side.get("hours")
        return "" if hours is None else f", events over {hours:g} h of {side.get('week_hours', 168):g} h"

    out = [f"# dslogs weekly report {model['week']}", "",
           f"{model['week']} ({t['first_day']} – {t['last_day']}{covers(t)}) against {model['previous_week']} "
           f"({p['first_day']} – {p['last_day']}{covers(p)}), time zone {model['tz']}. "
           f"Regression: a rise of more than {lim:g} %.", ""]
    for note in model.get("notes") or []:
        out += [f"> {md_text(fmt.note_message(note))}", ""]
    if not p["has_data"]:
        out += [f"> No logs for {model['previous_week']}: nothing to compare, every finding counts as new.", ""]
    if model.get("summary"):
        out += ["## What changed", ""] + [f"- {md_text(line)}" for line in model["summary"]] + [""]
    out += ["## Traffic and errors", "", f"| | {model['week']} | {model['previous_week']} | change |", "|---|---:|---:|---:|"]
    for r in model["traffic"]:
        flag = " **regression**" if r["verdict"] == "regression" else ""
        this_v = fmt.share(r["this"]) if r["key"] in ("error_rate", "goodput") else fmt.with_unit(r["this"])
        prev_v = fmt.share(r["previous"]) if r["key"] in ("error_rate", "goodput") else fmt.with_unit(r["previous"])
        out.append(f"| {r['label']} | {this_v} | {prev_v} | {fmt.signed_pct(r['change_pct'])}{flag} |")
    out += ["", f"## Stage latency ({model['regressions']} regressions)", "",
            "| stage | p50 ms | prev | change | p95 ms | prev | change |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in model["stages"]:
        cells = []
        for q in ("p50", "p95"):
            mark = " **▲**" if r[f"{q}_verdict"] == "regression" else ""
            cells += [fmt.with_unit(r[f"{q}_ms"]), fmt.with_unit(r[f"{q}_ms_prev"]), fmt.signed_pct(r[f"{q}_change_pct"]) + mark]
        out.append(f"| {'**' + str(r['stage']) + '**' if r['regression'] else r['stage']} | " + " | ".join(cells) + " |")
    if model["request_metrics"]:
        out += ["", "## Requests", "", "| metric | p50 | prev | change | p95 | prev | change |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in model["request_metrics"]:
            cells = []
            for q in ("p50", "p95"):
                mark = " **▲**" if r[f"{q}_verdict"] == "regression" else ""
                cells += [fmt.with_unit(r[q]), fmt.with_unit(r[f"{q}_prev"]), fmt.signed_pct(r[f"{q}_change_pct"]) + mark]
            out.append(f"| {r['label']} ({r['unit']}) | " + " | ".join(cells) + " |")
    out += md_finding_changes(model["findings"], with_fix=True)
    return "\n".join(out) + "\n"


def weekly_chart_svg(model: dict) -> str | None:
    """Static SVG of the weekly page's chart (no JavaScript needed)."""
    from dslogs.analyzer.render.charts import specs as charts
    from dslogs.analyzer.render.html import chart_svg, stable_svg_ids

    made = charts.page_charts("weekly", model)
    svg = chart_svg(made[0].spec) if made else None
    return stable_svg_ids(svg, "svg-weekly") if svg else None


def render_html_weekly(model: dict) -> str:
    from markupsafe import Markup

    from dslogs.analyzer.render.html import render_page

    svg = weekly_chart_svg(model)
    ctx = {"w": model, "generated_at": model.get("generated_at", ""), "version": model.get("dslogs_version", ""),
           "chart_svg": Markup(svg) if svg else None}
    return render_page("weekly.html", ctx, with_charts=False)


def render_weekly(model: dict, fmt: str) -> str:
    if fmt == "json":
        import json

        return json.dumps(model, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "md":
        return render_markdown_weekly(model)
    if fmt == "html":
        return render_html_weekly(model)
    raise UsageError(f"--format {fmt!r}: expected html, json or md")
