"""The diff page: ``templates/diff.html`` on the report's ``base.html`` and partials (autoescape
on), with the report's charts drawn for before and after on one axis (interactive with
JavaScript, vl-convert SVG without it)."""

from __future__ import annotations

import altair as alt
from markupsafe import Markup

from analyzer.model.diff import QUANTILES
from analyzer.render.charts import specs as charts
from analyzer.render.charts.specs import CONFIG, HALF_WIDTH, WIDTH

SIDE_SCALE = alt.Scale(domain=["before", "after"], range=["#98a2b3", "#2e6fdb"])
VERDICT_SCALE = alt.Scale(domain=["regression", "mix", "steady", "improved", "too few", "n/a"],
                          range=["#b42318", "#b54708", "#98a2b3", "#067647", "#d0d5dd", "#d0d5dd"])  # fmt: skip


def _finish(chart, title: str, subtitle: str) -> dict:
    spec = chart.properties(title=alt.TitleParams(text=title, subtitle=subtitle)).to_dict()
    spec["config"] = CONFIG
    return spec


def latency_overlay(d: dict) -> charts.Chart | None:
    """The report's latency distributions, before and after on one axis (share of requests)."""
    panels = []
    titles = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "e2e_ms": "end-to-end (ms)"}
    for metric, title in titles.items():
        rows = []
        for side in ("before", "after"):
            sub = [r for r in d["series"][side].get("latency_hist") or [] if r.get("metric") == metric][:200]
            total = sum(r.get("count") or 0 for r in sub)
            rows += [{"side": side, "bin_start": r["bin_start"], "bin_end": r["bin_end"],
                      "share": (r.get("count") or 0) / total} for r in sub if total]  # fmt: skip
        if rows:
            panels.append(alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step-after").encode(
                x=alt.X("bin_start:Q", title=title),
                y=alt.Y("share:Q", title="share of requests", axis=alt.Axis(format="%")),
                color=alt.Color("side:N", scale=SIDE_SCALE, title=None, legend=alt.Legend(orient="top")),
                tooltip=["side:N", "bin_start:Q", "bin_end:Q", alt.Tooltip("share:Q", format=".1%")],
            ).properties(width=int(WIDTH / 3) - 60, height=150))
    if not panels:
        return None
    spec = _finish(alt.hconcat(*panels), "Latency distributions", "share of requests per latency bin, before (grey) and after (blue)")
    return charts.Chart("diff_latency_hist", "latency", "Latency distributions before and after", spec)


def prefill_overlay(d: dict) -> charts.Chart | None:
    """Prefill p50 per input-length bin: lines apart = the service changed; the same line with
    traffic moved along it = the mix changed."""
    rows = [{"side": side, **r} for side in ("before", "after")
            for r in d["series"][side].get("prefill_vs_input") or [] if r.get("prefill_p50_ms") is not None]
    if not rows:
        return None
    chart = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("input_len_bin:Q", title="input length (tokens, bin start)"),
        y=alt.Y("prefill_p50_ms:Q", title="prefill p50 (ms)"),
        color=alt.Color("side:N", scale=SIDE_SCALE, title=None, legend=alt.Legend(orient="top")),
        tooltip=["side:N", "input_len_bin:Q", alt.Tooltip("prefill_p50_ms:Q", format=",.1f"), "count:Q"],
    ).properties(width=HALF_WIDTH - 40, height=200)
    spec = _finish(chart, "Prefill vs input length", "same line = same service (a mix change moves traffic along it)")
    return charts.Chart("diff_prefill_vs_input", "mix", "Prefill vs input length before and after", spec)


def p95_dumbbell(d: dict) -> charts.Chart | None:
    rows = []
    for r in d["stages"] + d["request_metrics"]:
        c = r.get("p95") or {}
        if (c.get("before") or 0) > 0 and (c.get("after") or 0) > 0 and r["unit"] == "ms":
            rows.append({"metric": r["label"], "before": c["before"], "after": c["after"], "verdict": c.get("verdict") or "n/a"})
    if not rows:
        return None
    order = [r["metric"] for r in rows]
    base = alt.Chart(alt.Data(values=rows)).encode(y=alt.Y("metric:N", title=None, sort=order))
    x = alt.X("before:Q", title="p95 ms (log scale)", scale=alt.Scale(type="log", nice=False, padding=12))
    color = alt.Color("verdict:N", title="p95 verdict", scale=VERDICT_SCALE, legend=alt.Legend(orient="top"))
    chart = alt.layer(
        base.mark_rule(strokeWidth=3, opacity=0.6).encode(x=x, x2="after:Q", color=color),
        base.mark_point(filled=True, size=60, color="#98a2b3").encode(x=x, tooltip=["metric:N", "before:Q", "after:Q", "verdict:N"]),
        base.mark_point(filled=True, size=80).encode(x=alt.X("after:Q"), color=color,
                                                    tooltip=["metric:N", "before:Q", "after:Q", "verdict:N"]),
    ).properties(width=WIDTH - 200, height=alt.Step(22))
    spec = _finish(chart, "p95 before → after", "grey dot before, coloured dot after")
    return charts.Chart("diff_p95", "summary", "p95 before and after", spec)


def diff_charts(d: dict) -> list[charts.Chart]:
    return [c for c in (p95_dumbbell(d), latency_overlay(d), prefill_overlay(d)) if c is not None]


def render_html_diff(d: dict, fallback_svg: bool = True) -> str:
    from analyzer.render.html import chart_svg, render_page, stable_svg_ids

    by_section: dict[str, list[dict]] = {}
    specs: dict[str, dict] = {}
    for chart in diff_charts(d):
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
