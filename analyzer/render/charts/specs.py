"""Vega-Lite chart specs as plain dicts (dslogs.analyzer.render.charts.vl) from the models only: the report's
aggregated `series`, and the diff and weekly models for their pages' charts.

Every chart reads a few hundred rows at most: the diagnosis side already aggregates, and this
module caps again before charting (re-bucketing long timelines, limiting lines per chart and
points per line) so the HTML stays small for a day or a year of logs.

Timeline charts share one time range: each declares a `time_range` param that drives its x
scale through `domainRaw`; the overview chart carries an interval selection named `brush`,
and the page script copies the brush extent into every timeline view's `time_range`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dslogs.analyzer.core import textsafe
from dslogs.analyzer.core.severity import severity_rank
from dslogs.analyzer.core.time import parse_iso
from dslogs.analyzer.render.charts import vl as alt
from dslogs.analyzer.rules.registry import KV_RULES, MEMORY_RULES

MAX_BUCKETS = 400  # per timeline; a year of logs becomes daily buckets
MAX_LINES = 8  # series (hosts, sessions, error types) per chart
MAX_POINTS_PER_LINE = 240
MAX_ROWS_PER_CHART = 2400  # buckets × lines: more lines mean coarser buckets
NICE_STEPS_S = [1, 5, 10, 15, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800, 2592000]

BRUSH = "brush"
TIME_RANGE = "time_range"
WIDTH = 860
HALF_WIDTH = 400

SEVERITY_COLORS = {"critical": "#b42318", "warning": "#b54708", "info": "#175cd3"}
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
CONFIG = {
    "font": FONT,
    "view": {"stroke": "#e4e7ec"},
    "axis": {"labelColor": "#475467", "titleColor": "#344054", "gridColor": "#eaecf0",
             "domainColor": "#98a2b3", "tickColor": "#98a2b3", "labelFontSize": 11, "titleFontSize": 11,
             "titleFontWeight": 500},
    "legend": {"labelFontSize": 11, "titleFontSize": 11, "labelLimit": 180, "orient": "right"},
    "title": {"fontSize": 13, "fontWeight": 600, "anchor": "start", "color": "#101828",
              "subtitleColor": "#667085", "subtitleFontSize": 11},
    "range": {"category": ["#2e6fdb", "#e8772e", "#2e9e6b", "#c43d52", "#7d55c7", "#8c6d31",
                           "#d1569b", "#5b6b7f"]},
}


@dataclass
class Chart:
    """One chart: its DOM id, the report section it belongs to and its Vega-Lite spec."""

    id: str
    section: str
    title: str
    spec: dict
    timeline: bool = False
    notes: list[str] = field(default_factory=list)


# -- data shaping -------------------------------------------------------------------------


def _step_label(seconds: int) -> str:
    if seconds % 86400 == 0:
        days = seconds // 86400
        return "1 day" if days == 1 else f"{days} days"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60:
        return f"{seconds} s"
    return f"{seconds // 60} min"


def coarsen(rows: list[dict], ts_key: str, keys: tuple[str, ...], aggs: dict[str, str],
            max_buckets: int = MAX_BUCKETS, max_rows: int = MAX_ROWS_PER_CHART) -> tuple[list[dict], str | None]:
    """Re-bucket a timeline to at most `max_buckets` buckets and about `max_rows` rows (fewer
    buckets when there are many groups); returns (rows, step label or None).

    aggs maps a value field to `sum`, `max`, `mean` or `wmean` (weighted by `count`, for
    percentiles: a bucket's p95 becomes the count-weighted mean of the finer buckets' p95 — an
    approximation, said on the chart).
    """
    rows = [r for r in rows if r.get(ts_key)]
    stamps = sorted({r[ts_key] for r in rows})
    n_groups = max(1, len({tuple(r.get(k) for k in keys) for r in rows}))
    max_buckets = max(24, min(max_buckets, max_rows // n_groups))
    if len(stamps) <= max_buckets:
        return rows, None
    times = [parse_iso(s) for s in (stamps[0], stamps[-1])]
    span = (times[1] - times[0]).total_seconds()
    step = next((s for s in NICE_STEPS_S if span / s <= max_buckets - 1), None)
    if step is None:
        step = int(math.ceil(span / (max_buckets - 1) / 86400) * 86400)
    offset = times[0].utcoffset() or timedelta(0)
    tzinfo = times[0].tzinfo
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        t = parse_iso(r[ts_key])
        local = t.timestamp() + offset.total_seconds()
        start = datetime.fromtimestamp(local - local % step - offset.total_seconds(), tz=tzinfo)
        groups[(start.isoformat(timespec="milliseconds"), *(r.get(k) for k in keys))].append(r)
    out = []
    for gkey, members in sorted(groups.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0])):
        row = {ts_key: gkey[0], **dict(zip(keys, gkey[1:], strict=True))}
        weights = [m.get("count") or 0 for m in members]
        for name, how in aggs.items():
            vals = [(m.get(name), w) for m, w in zip(members, weights, strict=True) if m.get(name) is not None]
            if not vals:
                row[name] = None
            elif how == "sum":
                row[name] = sum(v for v, _ in vals)
            elif how == "max":
                row[name] = max(v for v, _ in vals)
            elif how == "wmean" and sum(w for _, w in vals) > 0:
                row[name] = round(sum(v * w for v, w in vals) / sum(w for _, w in vals), 3)
            else:
                row[name] = round(sum(v for v, _ in vals) / len(vals), 3)
        out.append(row)
    return out, _step_label(step)


def top_groups(rows: list[dict], key: str, weight: str, limit: int = MAX_LINES,
               first: list | None = None) -> list:
    """The `limit` most important values of `key`: those in `first`, then by summed `weight`."""
    totals: dict = defaultdict(float)
    for r in rows:
        totals[r.get(key)] += float(r.get(weight) or 0)
    chosen = [v for v in (first or []) if v in totals][:limit]
    for v, _ in sorted(totals.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        if len(chosen) >= limit:
            break
        if v not in chosen:
            chosen.append(v)
    return chosen


def thin(rows: list[dict], limit: int = MAX_POINTS_PER_LINE) -> list[dict]:
    """Keep at most `limit` evenly spaced rows, always the first and the last."""
    if len(rows) <= limit:
        return rows
    idx = sorted({round(i * (len(rows) - 1) / (limit - 1)) for i in range(limit)})
    return [rows[i] for i in idx]


# -- chart helpers --------------------------------------------------------------------------


@dataclass
class TimeAxis:
    """How every timeline chart shows time: in the report's own zone (the offset of its first
    event, as the page header prints it) rather than the viewer's, and over one shared extent
    so the overview and the charts under it line up."""

    offset_s: float = 0.0
    label: str = "UTC"
    domain: list[int] | None = None  # shifted epoch ms [start, end]
    step_s: int = 3600

    def ms(self, text: str) -> int:
        # Epoch ms moved by the zone offset; charts read them on a UTC scale, so the axis
        # prints the report zone's wall clock whatever the viewer's zone is.
        return int((parse_iso(text).timestamp() + self.offset_s) * 1000)


BUCKET_STEP_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def time_axis(model: dict) -> TimeAxis:
    model = textsafe.for_charts(model)  # times a chart cannot place (year 1, BC) left out
    window = model.get("window") or {}
    first = window.get("first_event") or window.get("since")
    offset = 0.0
    if first:
        try:
            delta = parse_iso(str(first)).utcoffset()
            offset = delta.total_seconds() if delta else 0.0
        except ValueError:
            offset = 0.0
    if offset:
        sign = "+" if offset > 0 else "-"
        minutes = int(abs(offset)) // 60
        label = f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    else:
        label = "UTC"
    tx = TimeAxis(offset_s=offset, label=label, step_s=BUCKET_STEP_S.get(model.get("series_bucket") or "hour", 3600))
    series = model.get("series") or {}
    stamps = [tx.ms(r["bucket"]) for k in timeline_series() for r in series.get(k) or [] if r.get("bucket")]
    if stamps:
        end = max(stamps) + tx.step_s * 1000
        last = window.get("last_event") or window.get("until")
        if last:
            try:
                # the last bucket is cut where the logs end, not an hour (or a day) later
                end = min(end, max(max(stamps) + 60_000, tx.ms(str(last))))
            except ValueError:
                pass
        tx.domain = [min(stamps), end]
    return tx


def _data(rows: list[dict], time_key: str | None = None, tx: TimeAxis | None = None) -> alt.Data:
    """Inline rows; timestamps become epoch milliseconds (Vega-Lite reads them as times, and
    they are half the bytes of ISO strings), shifted into the report's zone."""
    if time_key:
        tx = tx or TimeAxis()
        rows = [dict(r, **{time_key: tx.ms(r[time_key])}) for r in rows]
    return alt.Data(values=rows)


def _time_scale(tx: TimeAxis | None, brushed: bool = True) -> alt.Scale:
    kw = {"type": "utc"}
    if tx is not None and tx.domain:
        kw["domain"] = tx.domain
    if brushed:
        kw["domainRaw"] = alt.ExprRef(TIME_RANGE)  # overrides `domain` while a range is brushed
    return alt.Scale(**kw)


def _time_title(tx: TimeAxis | None) -> str:
    return f"time ({(tx or TimeAxis()).label})"


# Vega's default time labels are a 12-hour clock without AM/PM ("02:52" for 14:52): a
# 24-hour clock at every level, the date where a day (or a month) starts.
TIME_LABELS = {"year": "%Y", "quarter": "%b %d", "month": "%b %d", "week": "%b %d", "date": "%b %d",
               "hours": "%H:%M", "minutes": "%H:%M", "seconds": "%H:%M:%S", "milliseconds": "%H:%M:%S.%L"}
# Plain decimals on millisecond axes: d3's "~s" wrote 0.2 ms as "200m" (milli-milliseconds).
MS_LABELS = ",~r"


# Over more than a day an hour label alone ("18:00 / 06:00") does not say which day: hours and
# minutes carry the date too.
TIME_LABELS_DAYS = {**TIME_LABELS, "hours": "%b %d %H:%M", "minutes": "%b %d %H:%M"}


# A month's first day on an axis of days is a day like the others ("Dec 01", not "Dec 2026");
# over more than a quarter, ticks fall on months and name them with their year.
MONTH_TICKS = {"month": "%b %Y", "quarter": "%b %Y"}
QUARTER_MS = 92 * 86_400_000


def _time_axis_def(tx: TimeAxis | None = None) -> alt.Axis:
    span = tx.domain[1] - tx.domain[0] if tx is not None and tx.domain is not None else None
    labels = TIME_LABELS_DAYS if span is not None and span > 86_400_000 else TIME_LABELS
    if span is not None and span > QUARTER_MS:
        labels = {**labels, **MONTH_TICKS}
    return alt.Axis(labelOverlap=True, labelSeparation=10, labelFlush=True, format=labels)


def _time_x(field_name: str, tx: TimeAxis | None = None) -> alt.X:
    return alt.X(f"{field_name}:T", title=_time_title(tx), scale=_time_scale(tx), axis=_time_axis_def(tx))


def _time_tip(field_name: str, title: str = "bucket", seconds: bool = False) -> alt.Tooltip:
    fmt = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return alt.Tooltip(f"{field_name}:T", title=title, format=fmt, formatType="utc")


def fill_gaps(rows: list[dict], ts_key: str, keys: tuple[str, ...], value: str, step_s: int,
              groups: list[tuple] | None = None, max_fill: int = 10000) -> list[dict]:
    """Zero rows for the empty buckets between a group's first and last bucket: a step line
    otherwise carries the last value across hours with no traffic at all."""
    by_group: dict[tuple, set[str]] = defaultdict(set)
    for r in rows:
        by_group[tuple(r.get(k) for k in keys)].add(r[ts_key])
    out = list(rows)
    for g, stamps in by_group.items():
        if groups is not None and g not in groups:
            continue
        times = sorted(parse_iso(s) for s in stamps)
        have = {t.timestamp() for t in times}
        t, added = times[0], 0
        while t < times[-1] and added < max_fill:
            try:
                t = t + timedelta(seconds=step_s)
            except OverflowError:  # an event stamped in year 9999: no bucket after it
                break
            if t.timestamp() not in have:
                out.append({ts_key: t.isoformat(timespec="milliseconds"), **dict(zip(keys, g, strict=True)), value: 0})
                added += 1
        # a step-after line ends at its last point: a closing zero lets the last bucket show its width
        try:
            end = times[-1] + timedelta(seconds=step_s)
        except OverflowError:
            continue
        out.append({ts_key: end.isoformat(timespec="milliseconds"), **dict(zip(keys, g, strict=True)), value: 0})
    return out


def _time_param() -> alt.Parameter:
    return alt.param(name=TIME_RANGE, value=None)


def count_scale(values) -> alt.Scale:
    """A y scale for counts with room above the tallest bar and a tick at its top. Vega's own
    "nice" rounds 11 to 11 (its step is 1 at ten ticks) while the axis labels every second
    tick, so the tallest bar met the frame above the last label and read as cut off."""
    hi = max((v for v in values if v is not None), default=0)
    if hi <= 0:
        return alt.Scale(domain=[0, 1], nice=False)
    raw = hi / 5
    exp = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * exp for m in (1, 2, 5, 10) if m * exp >= raw)
    return alt.Scale(domain=[0, (math.floor(hi / step) + 1) * step], nice=False)


def _stacked(rows: list[dict], key: str, value: str) -> list[float]:
    """Per-`key` totals: the height of a stacked bar."""
    totals: dict = defaultdict(float)
    for r in rows:
        totals[r.get(key)] += r.get(value) or 0
    return list(totals.values())


def _finish(chart, title: str, subtitle: str | None = None) -> dict:
    t = alt.TitleParams(text=title, subtitle=subtitle) if subtitle else title
    spec = chart.properties(title=t).to_dict()
    spec["config"] = CONFIG
    return spec


def _notes(*labels: tuple[str, str | None]) -> list[str]:
    return [f"{what} re-bucketed to {step}" for what, step in labels if step]


def break_gaps(rows: list[dict], ts_key: str, key: str, fields: tuple[str, ...]) -> list[dict]:
    """One null row per line inside each stretch with no buckets at all, so the line breaks there
    instead of drawing a straight trend across hours that have no data."""
    stamps = sorted({r[ts_key] for r in rows})
    if len(stamps) < 3:
        return rows
    times = [parse_iso(t) for t in stamps]
    diffs = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    step = min(d for d in diffs if d > 0)
    groups = sorted({r.get(key) for r in rows}, key=str)
    out = list(rows)
    for a, d in zip(times, diffs, strict=False):
        if d > step * 1.5:
            gap = (a + timedelta(seconds=step)).isoformat(timespec="milliseconds")
            out += [{ts_key: gap, key: g, **dict.fromkeys(fields)} for g in groups]
    return out


DEPLOY_COLOR, REGRESSION_COLOR = "#6941c6", "#b42318"


def with_deploys(chart, field_name: str, x: alt.X, ctx: ChartContext):
    """The chart with a dashed vertical rule at each deploy's first event (its id, label and
    verdict in the tooltip), on the chart's own time field and axis ``x``; the chart alone
    without deploys."""
    rows = [{field_name: d["first_event"], "deploy": d["id"], "label": d.get("label") or "", "verdict": d["verdict"],
             "why": "; ".join((d.get("reasons") or [])[:3])} for d in ctx.deploys if d.get("first_event")]
    if not rows:
        return chart
    rules = []
    for regression in (False, True):  # two colours, no colour scale: the chart's legend stays its own
        part = [r for r in rows if (r["verdict"] == "regression") == regression]
        if part:
            rules.append(alt.Chart(_data(part, field_name, ctx.tx)).mark_rule(
                color=REGRESSION_COLOR if regression else DEPLOY_COLOR, strokeDash=[4, 3], strokeWidth=1.5, clip=True,
            ).encode(x=x, tooltip=["deploy:N", "label:N", "verdict:N", alt.Tooltip("why:N", title="why"),
                                   _time_tip(field_name, "first event", seconds=True)]))  # fmt: skip
    for rule in rules:
        chart = chart + rule  # one flat layer (a layer's `+` appends): the static SVG draws no nested layers
    return chart


def _few_points(rows: list[dict], key: str, limit: int = 48) -> bool:
    """Dots on a line when its buckets are few: three hourly points should not read as a trace."""
    per: dict = defaultdict(int)
    for r in rows:
        per[r.get(key)] += 1
    return bool(per) and max(per.values()) <= limit


# -- the registry -----------------------------------------------------------------------------
# Each chart is registered once, by @chart on the function that draws it: its id (the page's
# `chart-<id>` anchor, and what a finding's evidence.chart names), the report section it sits in
# (render_html.SECTIONS), the model series it reads (model["series"], built by report.py's
# SERIES from the metric queries) and whether it follows the shared time range. build_charts
# draws them in registration order, which is the page order within a section.


@dataclass(frozen=True)
class ChartContext:
    """What a chart may use besides its series."""

    tx: TimeAxis  # the report's time zone and shared extent
    flagged: list  # sessions that findings of the chart's flag_rules name, taking turns
    thresholds: dict  # the thresholds the model was built with
    deploys: list = field(default_factory=list)  # the model's deploys, drawn as rules on the timelines
    named: dict = field(default_factory=dict)  # session -> the rules of every finding naming it, worst first
    sessions_total: int | None = None  # the sessions in the report, with readings or not
    detailed: frozenset = frozenset()  # the sessions of the report's drill-down


@dataclass(frozen=True)
class ChartSpec:
    id: str
    section: str
    series: tuple[str, ...]
    timeline: bool
    flag_rules: tuple[str, ...]
    make: Callable[[dict, ChartContext], Chart | None]
    page: str = "report"


CHARTS: dict[str, ChartSpec] = {}


def chart(chart_id: str, *, section: str, series: tuple[str, ...] = (), timeline: bool = False,
          flag_rules: tuple[str, ...] = (), page: str = "report") -> Callable:
    """Register ``fn(series, ctx) -> Chart | None`` as chart ``chart_id``; flag_rules are the rules
    whose flagged sessions the chart draws first. A chart of another ``page`` ("diff", "weekly")
    is ``fn(model, None)`` over that page's model (see ``page_charts``)."""

    def register(fn: Callable) -> Callable:
        if chart_id in CHARTS:
            raise ValueError(f"chart {chart_id!r} registered twice")
        CHARTS[chart_id] = ChartSpec(chart_id, section, tuple(series), timeline, tuple(flag_rules), fn, page)
        return fn

    return register


def timeline_series() -> tuple[str, ...]:
    """Series drawn on the shared time axis (its extent spans them all)."""
    return tuple(dict.fromkeys(k for c in CHARTS.values() if c.timeline and c.page == "report" for k in c.series))


# -- the charts -----------------------------------------------------------------------------


@chart("overview", section="timeline", series=("stage_latency_by_hour", "errors_timeline"))
def overview_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx = ctx.tx
    stage_rows = series.get("stage_latency_by_hour") or []
    counts = defaultdict(int)
    stage_totals = defaultdict(int)
    for r in stage_rows:
        stage_totals[r.get("stage")] += r.get("count") or 0
    pick = next((s for s in ("request", "input", "inference", "decode", "prefill") if stage_totals.get(s)), None)
    if pick is None and stage_totals:
        pick = max(stage_totals, key=lambda s: stage_totals[s])
    for r in stage_rows:
        if r.get("stage") == pick and r.get("bucket"):
            counts[r["bucket"]] += r.get("count") or 0
    rows = [{"bucket": b, "kind": "requests", "count": c} for b, c in counts.items()]
    errs = defaultdict(int)
    for r in series.get("errors_timeline") or []:
        if r.get("bucket"):
            errs[r["bucket"]] += r.get("count") or 0
    rows += [{"bucket": b, "kind": "errors", "count": c} for b, c in errs.items()]
    if not rows:
        return None
    tx = tx or TimeAxis()
    # hours without a single request are zero, not the previous hour's count held flat
    rows = fill_gaps(rows, "bucket", ("kind",), "count", tx.step_s, groups=[("requests",)])
    rows, step = coarsen(rows, "bucket", ("kind",), {"count": "sum"})
    rows.sort(key=lambda r: (r["bucket"], r["kind"]))
    brush = alt.selection_interval(name=BRUSH, encodings=["x"])
    bucket = _step_label(tx.step_s) if not step else step
    x = alt.X("bucket:T", title=None, scale=_time_scale(tx, brushed=False), axis=_time_axis_def(tx))
    base = alt.Chart(_data(rows, "bucket", tx)).encode(
        x=x,
        y=alt.Y("count:Q", title=f"per {bucket}", axis=alt.Axis(tickCount=3), scale=count_scale(r.get("count") for r in rows)),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=["requests", "errors"], range=["#2e6fdb", "#b42318"]),
                        legend=alt.Legend(orient="top", direction="horizontal", offset=2)),
        tooltip=[_time_tip("bucket"), "kind:N", "count:Q"],
    )
    chart = with_deploys(
        base.transform_filter("datum.kind == 'requests'").mark_area(opacity=0.35, interpolate="step-after", line=True, clip=True)
        .add_params(brush)
        + base.transform_filter("datum.kind == 'errors'").mark_bar(opacity=0.9, clip=True),
        "bucket", x, ctx).properties(width=WIDTH, height=56)
    what = f"{pick} events" if pick and pick != "request" else "requests"
    sub = (f"{what} and errors per {bucket}, times in {tx.label} — drag to select a time range for every "
           "timeline chart; double-click clears it")
    return Chart("overview", "timeline", "Traffic overview", _finish(chart, "Traffic overview", sub),
                 notes=_notes(("overview", step)))


@chart("latency_hist", section="latency", series=("latency_hist",))
def latency_hist_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = [r for r in series.get("latency_hist") or [] if r.get("metric")]
    if not rows:
        return None
    panels = []
    titles = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "e2e_ms": "end-to-end (ms)"}
    metrics = [m for m in ("ttft_ms", "tpot_ms", "e2e_ms") if any(r["metric"] == m for r in rows)]
    metrics += sorted({r["metric"] for r in rows} - set(metrics))
    for metric in metrics[:4]:
        sub = [r for r in rows if r["metric"] == metric][:200]
        # log-spaced bins (queries/latency_hist.sql) on a log axis: every bin equally wide, so
        # 0.2 ms and 20 s both show their shape; bars span [bin_start, bin_end)
        panels.append(
            alt.Chart(_data(sub)).mark_bar(color="#2e6fdb", opacity=0.85).encode(
                x=alt.X("bin_start:Q", title=titles.get(metric, metric) + ", log scale",
                        scale=alt.Scale(type="log"), axis=alt.Axis(format=MS_LABELS, labelOverlap=True)),
                x2="bin_end:Q",
                y=alt.Y("count:Q", title="requests", scale=count_scale(r.get("count") for r in sub)),
                y2={"datum": 0},  # bars stand on zero (a ranged x alone draws them as ticks)
                tooltip=[alt.Tooltip("bin_start:Q", title="from (ms)", format=",~r"),
                         alt.Tooltip("bin_end:Q", title="to (ms)", format=",~r"), "count:Q"],
            ).properties(width=int(WIDTH / len(metrics[:4])) - 60, height=150)
        )
    chart = alt.hconcat(*panels)
    first = rows[0]
    ratio = (first.get("bin_end") or 0) / first["bin_start"] if first.get("bin_start") else 0
    per_decade = round(1 / math.log10(ratio)) if ratio > 1 else None
    sub = "requests per latency bin" + (f", {per_decade} bins per power of ten" if per_decade else "")
    return Chart("latency_hist", "latency", "Latency distributions", _finish(chart, "Latency distributions", sub))


@chart("stage_latency_by_hour", section="latency", series=("stage_latency_by_hour",), timeline=True)
def stage_latency_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx = ctx.tx
    rows = [r for r in series.get("stage_latency_by_hour") or [] if r.get("bucket") and r.get("stage")]
    if not rows:
        return None
    keep = set(top_groups(rows, "stage", "count"))
    rows = [r for r in rows if r["stage"] in keep]
    rows, step = coarsen(rows, "bucket", ("stage",), {"count": "sum", "p50_ms": "wmean", "p95_ms": "wmean"})
    # log scale: a zero or missing percentile has no place on it
    rows = [{"bucket": r["bucket"], "stage": r["stage"], "count": r.get("count"),
             "p50": r["p50_ms"] if (r.get("p50_ms") or 0) > 0 else None,
             "p95": r["p95_ms"] if (r.get("p95_ms") or 0) > 0 else None} for r in rows]
    rows = break_gaps(rows, "bucket", "stage", ("count", "p50", "p95"))
    base = alt.Chart(_data(rows, "bucket", tx)).transform_fold(["p50", "p95"], as_=["percentile", "ms"]).encode(
        x=_time_x("bucket", tx),
        y=alt.Y("ms:Q", title="ms (log scale)", scale=alt.Scale(type="log"), axis=alt.Axis(format=MS_LABELS)),
        color=alt.Color("stage:N", title="stage"),
        strokeDash=alt.StrokeDash("percentile:N", title="percentile",
                                  scale=alt.Scale(domain=["p50", "p95"], range=[[1, 0], [5, 3]]),
                                  legend=None),  # the subtitle names the dashes; a dashed-line-with-dots symbol draws empty
        tooltip=[_time_tip("bucket"), "stage:N", "percentile:N",
                 alt.Tooltip("ms:Q", format=",.1f"), alt.Tooltip("count:Q", title="events")],
    )
    chart = with_deploys(base.mark_line(
        clip=True, point=_few_points(rows, "stage"), strokeWidth=1.6, invalid="break-paths-show-path-domains").add_params(_time_param()),
        "bucket", _time_x("bucket", tx), ctx).properties(width=WIDTH - 140, height=220)
    sub = "p50 solid, p95 dashed" + (f"; {step} buckets (count-weighted mean of finer percentiles)" if step else "")
    return Chart("stage_latency_by_hour", "latency", "Stage latency over time",
                 _finish(chart, "Stage latency over time", sub), timeline=True, notes=_notes(("stage latency", step)))


@chart("prefill_vs_input", section="prefill", series=("prefill_vs_input",))
def prefill_vs_input_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = [r for r in series.get("prefill_vs_input") or [] if r.get("prefill_p50_ms") is not None][:400]
    if not rows:
        return None
    chart = alt.Chart(_data(rows)).mark_line(point=True, color="#e8772e").encode(
        x=alt.X("input_len_bin:Q", title="input length (tokens, bin start)"),
        y=alt.Y("prefill_p50_ms:Q", title="prefill p50 (ms)"),
        tooltip=["input_len_bin:Q", alt.Tooltip("prefill_p50_ms:Q", format=",.1f"), "count:Q"],
    ).properties(width=HALF_WIDTH - 40, height=200)
    return Chart("prefill_vs_input", "prefill", "Prefill vs input length",
                 _finish(chart, "Prefill vs input length", "prefill p50 per input-length bin"))


@chart("prefill_by_turn", section="prefill", series=("prefill_by_turn",))
def prefill_by_turn_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = [r for r in series.get("prefill_by_turn") or [] if r.get("prefill_p50_ms") is not None][:400]
    if not rows:
        return None
    chart = alt.Chart(_data(rows)).mark_line(point=True, color="#7d55c7").encode(
        x=alt.X("turn_index:Q", title="turn in session", axis=alt.Axis(tickMinStep=1)),
        y=alt.Y("prefill_p50_ms:Q", title="prefill p50 (ms)"),
        tooltip=["turn_index:Q", alt.Tooltip("prefill_p50_ms:Q", format=",.1f"), "count:Q"],
    ).properties(width=HALF_WIDTH - 40, height=200)
    return Chart("prefill_by_turn", "prefill", "Prefill by turn",
                 _finish(chart, "Prefill by turn", "growing prefill with turns means history/KV keeps growing"))


@chart("gpu_timeline", section="gpu", series=("gpu_timeline",), timeline=True)
def gpu_timeline_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx = ctx.tx
    rows = [dict(r, gpu=f"{r.get('host')}/{r.get('gpu_index', 0)}") for r in series.get("gpu_timeline") or []
            if r.get("bucket")]
    if not rows:
        return None
    keep = set(top_groups(rows, "gpu", "util_avg"))
    rows = [r for r in rows if r["gpu"] in keep]
    rows, step = coarsen(rows, "bucket", ("gpu",), {"util_avg": "mean", "util_max": "max", "mem_used_mb_max": "max"})
    base = alt.Chart(_data(rows, "bucket", tx)).encode(x=_time_x("bucket", tx), color=alt.Color("gpu:N", title="host/GPU"))
    tip = [_time_tip("bucket"), "gpu:N"]
    points = _few_points(rows, "gpu")
    util = with_deploys(base.mark_line(clip=True, strokeWidth=1.5, point=points).encode(
        y=alt.Y("util_avg:Q", title="GPU util avg (%)", scale=alt.Scale(domain=[0, 100])),
        tooltip=[*tip, alt.Tooltip("util_avg:Q", format=".1f"), alt.Tooltip("util_max:Q", format=".1f")],
    ).add_params(_time_param()), "bucket", _time_x("bucket", tx), ctx).properties(width=WIDTH - 140, height=150)
    mem = with_deploys(base.mark_line(clip=True, strokeWidth=1.5, point=points).encode(
        y=alt.Y("mem_used_mb_max:Q", title="GPU memory used max (MiB)"),
        tooltip=[*tip, alt.Tooltip("mem_used_mb_max:Q", title="memory used max (MiB)", format=",.0f")],
    ), "bucket", _time_x("bucket", tx), ctx).properties(width=WIDTH - 140, height=150)
    chart = alt.vconcat(util, mem)
    return Chart("gpu_timeline", "gpu", "GPU utilisation and memory",
                 _finish(chart, "GPU utilisation and memory per host",
                         f"from gpu_sample events, per {step or _step_label((tx or TimeAxis()).step_s)}"),
                 timeline=True, notes=_notes(("GPU timeline", step)))


@chart("gpu_wait_hist", section="gpu", series=("gpu_wait_hist",))
def gpu_wait_hist_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = [r for r in series.get("gpu_wait_hist") or [] if r.get("bin_start") is not None][:200]
    if not rows:
        return None
    chart = alt.Chart(_data(rows)).mark_bar(color="#2e9e6b", binSpacing=0).encode(
        x=alt.X("bin_start:Q", bin="binned", title="gpu_wait_pct (%)", scale=alt.Scale(domain=[0, 100])),
        x2="bin_end:Q",
        y=alt.Y("count:Q", title="requests", scale=count_scale(r.get("count") for r in rows)),
        tooltip=["bin_start:Q", "bin_end:Q", "count:Q"],
    ).properties(width=HALF_WIDTH - 40, height=180)
    return Chart("gpu_wait_hist", "gpu", "gpu_wait distribution",
                 _finish(chart, "gpu_wait distribution", "share of generate wall time not spent on CPU (003 §4.2)"))


def _session_age_rows(rows: list[dict], keep: list, fields: tuple[str, ...], tx: TimeAxis | None = None) -> list[dict]:
    """Rows of the kept sessions, thinned, with `turn` = the point's number in its session (1, 2,
    ...: sessions of fast turns and of slow ones side by side, none a near-vertical line) and
    `minute` = minutes since the session's first point (in the tooltip)."""
    tx = tx or TimeAxis()
    out = []
    for sid in keep:
        pts = sorted((r for r in rows if r.get("session_id") == sid), key=lambda r: r["ts"])
        # the request's turn where the series has it (a gap is a turn without a reading); else
        # the request's place among the session's requests, so a request read twice (an OOM
        # and its retry) stays on its one turn
        order = list(dict.fromkeys(r.get("request_id") for r in pts))
        by_request = None not in order
        number = {id(r): r.get("turn_index") or (order.index(r.get("request_id")) + 1 if by_request else i)
                  for i, r in enumerate(pts, start=1)}
        t0 = parse_iso(pts[0]["ts"])
        out += [{"turn": number[id(r)], "minute": round((parse_iso(r["ts"]) - t0).total_seconds() / 60, 2),
                 "ts": tx.ms(r["ts"]), "session_id": sid, **{f: r.get(f) for f in fields}} for r in thin(pts)]
    return out


def _turn_x(out: list[dict]) -> alt.X:
    """The x of a per-session chart: its turns, 1 to the most any session shown has, whole
    numbers only (a scale made "nice" ran to 10 where no session had more than 5 turns)."""
    top = max((r["turn"] for r in out), default=1)
    ticks = {"values": list(range(1, top + 1))} if top <= 20 else {}
    return alt.X("turn:Q", title="turn in the session (one point per turn with a reading)",
                 scale=alt.Scale(domain=[1, max(top, 2)], nice=False),
                 axis=alt.Axis(tickMinStep=1, format="d", **ticks))


def _multi_point_rows(rows: list[dict]) -> list[dict]:
    """Rows of sessions with two samples or more: one sample draws no line and says nothing
    about growth, yet would take a legend entry."""
    per: dict = defaultdict(int)
    for r in rows:
        per[r.get("session_id")] += 1
    return [r for r in rows if per[r.get("session_id")] >= 2]


# a session id in a chart's caption: enough of it to find its row (the tables show the whole id)
CAPTION_ID_CHARS = 8


def _named_drawn(keep: list, named: dict) -> str:
    """The sessions drawn that a finding names, each with its rules: what the caption counts."""
    drawn = [sid for sid in keep if named.get(sid)]
    if not drawn:
        return ""
    ids = "; ".join(f"{str(sid)[:CAPTION_ID_CHARS]} {', '.join(named[sid])}" for sid in drawn)
    return f"the {len(drawn)} that findings name ({ids}), then "


def _named_first(flagged: list, named: dict) -> list:
    """The chart's own flagged sessions, then any other session a finding names: a session a
    finding names is drawn before one that only has larger values."""
    return list(flagged) + [sid for sid in named if sid not in flagged]


def _shown_note(keep: list, rows: list[dict], all_rows: list[dict], ctx: ChartContext,
                added_for: tuple[str, ...], measure: str) -> list[str]:
    """Which sessions a per-session chart draws and why not the others, in words: how many of the
    report's sessions it draws, and every other one accounted for (left out for room, one reading,
    none kept); a session a finding names or a few left out are named. ``added_for``: the rules
    whose named sessions' readings the model adds to the chart's series from the drill-down
    (model.report.NAMED_READINGS); ``measure``: how the series' query ranks the sessions it keeps."""
    named = ctx.named
    kept_limit = (ctx.thresholds.get("report") or {}).get("timeline_sessions")
    sessions_total = ctx.sessions_total
    drawable = list(dict.fromkeys(r.get("session_id") for r in rows))
    listed = set(r.get("session_id") for r in all_rows or rows)
    total = len(drawable)
    notes = []
    if sessions_total:
        notes.append(f"{len(keep)} of the report's {sessions_total} sessions drawn.")
    if len(keep) < total:
        why = _named_drawn(keep, named) + "those with the largest values"
        left = [sid for sid in drawable if sid not in keep]
        # a session left out that some finding names says which (its rules are not this chart's)
        shown = [str(sid)[:CAPTION_ID_CHARS] + (f" ({', '.join(named[sid])})" if named.get(sid) else "") for sid in left]
        out = (f"; left out: {', '.join(shown)}"
               if len(left) <= 3 else "")
        notes.append(f"{len(keep)} of the {total} sessions with per-turn readings drawn: {why} (at most {MAX_LINES} "
                     f"lines, so each stays readable){out}.")
    single = len(listed) - total
    if single > 0:
        notes.append(f"{single} session{'s' if single != 1 else ''} with a single reading left out (no trend to draw).")
    none = (sessions_total or 0) - len(listed)
    if none > 0:
        why = (f"the report keeps per-turn readings for at most {kept_limit} sessions, those this chart's own measure "
               f"ranks first ({measure})"
               + f", and for each session a finding of {_rules_text(added_for)} names"
               if kept_limit and len(listed) >= kept_limit else "their requests logged none (failed before a reading, "
               "or the app logs no per-turn readings for them)")
        notes.append(f"{none} of the report's {sessions_total} sessions {'has' if none == 1 else 'have'} no per-turn "
                     f"reading here: {why}; "
                     "every session's totals are in the Sessions table.")
    counts: dict = defaultdict(int)
    for r in all_rows or rows:
        counts[r.get("session_id")] += 1
    missing = [sid for sid in named if sid not in keep and sid not in drawable]
    one = [sid for sid in missing if counts[sid] == 1]
    unkept = [sid for sid in missing if not counts[sid]]

    def ids(sids: list) -> str:
        return "; ".join(f"{str(sid)[:CAPTION_ID_CHARS]} {', '.join(named[sid])}" for sid in sids)

    if one:
        notes.append(f"Named by a finding but not drawn (a single reading of this kind, no trend): {ids(one)}.")
    # why a named session has no reading here: its requests in the drill-down logged none; it is
    # not in the drill-down; or (named by other rules only) the query did not pick it
    ours = [sid for sid in unkept if set(named[sid]) & set(added_for)]
    reasons = {
        "none of its requests in the report's drill-down logged a reading of this kind":
            [sid for sid in ours if sid in ctx.detailed],
        "no reading of this kind kept for it: not in the report's drill-down":
            [sid for sid in ours if sid not in ctx.detailed],
        (f"not among the {kept_limit} sessions whose per-turn readings the report keeps for this chart, which are "
         f"picked by this chart's own measure before the findings are made; a finding of {_rules_text(added_for)} "
         "adds its sessions" if kept_limit and len(listed) >= kept_limit else "no reading of this kind in the logs"):
            [sid for sid in unkept if sid not in ours],
    }
    for why, sids in reasons.items():
        if sids:
            notes.append(f"Named by a finding but not drawn ({why}): {ids(sids)}; see "
                         f"{'its' if len(sids) == 1 else 'their'} drill-down.")
    return notes


def _rules_text(rules: tuple[str, ...]) -> str:
    return ", ".join(rules[:-1]) + f" or {rules[-1]}" if len(rules) > 1 else "".join(rules)


@chart("memory_timeline", section="memory", series=("memory_timeline",), flag_rules=MEMORY_RULES)
def memory_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx, flagged = ctx.tx, ctx.flagged
    # x is the session's age, not the wall clock: sessions of a few minutes in a day-long window
    # would be slivers, and on a common origin their slopes compare at a glance.
    all_rows = [r for r in series.get("memory_timeline") or [] if r.get("ts") and r.get("session_id") is not None]
    rows = _multi_point_rows(all_rows)
    if not rows:
        return None
    keep = top_groups(rows, "session_id", "reserved_mb", first=_named_first(flagged, ctx.named))
    out = _session_age_rows(rows, keep, ("reserved_mb", "allocated_mb"), tx)
    base = alt.Chart(_data(out)).transform_fold(["reserved_mb", "allocated_mb"], as_=["kind", "mb"]).encode(
        x=_turn_x(out),
        y=alt.Y("mb:Q", title="GPU memory (MiB)", scale=alt.Scale(zero=False)),
        color=alt.Color("session_id:N", title="session", sort=keep),
        strokeDash=alt.StrokeDash("kind:N", title=None,
                                  scale=alt.Scale(domain=["reserved_mb", "allocated_mb"], range=[[1, 0], [4, 3]]),
                                  legend=None),  # named in the subtitle
        tooltip=["session_id:N", _time_tip("ts", "time", seconds=True),
                 "turn:Q", alt.Tooltip("minute:Q", title="minutes since its first sample", format=",.1f"), "kind:N", alt.Tooltip("mb:Q", title="MiB", format=",.0f")],
    )
    chart = base.mark_line(strokeWidth=1.6, point=alt.OverlayMarkDef(size=12)).properties(width=WIDTH - 220, height=220)
    sub = "reserved solid, allocated dashed; a steady climb of reserved is a leak (000 §5), a wide gap is cache held by PyTorch"
    notes = _shown_note(keep, rows, all_rows, ctx, MEMORY_RULES, "a flag of its rules, then the largest trend")
    per_turn: dict = defaultdict(int)
    for r in out:
        per_turn[(r["session_id"], r["turn"])] += 1
    twice = list(dict.fromkeys(sid for (sid, _), n in per_turn.items() if n > 1))
    if twice:
        notes.append(f"{', '.join(str(sid)[:CAPTION_ID_CHARS] for sid in twice)}: a request read more than once "
                     "(an attempt and its retry) has its readings on its one turn.")
    return Chart("memory_timeline", "memory", "GPU memory per session", _finish(chart, "GPU memory per session", sub),
                 notes=notes)


@chart("kv_growth", section="kv", series=("kv_growth",), flag_rules=KV_RULES)
def kv_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx, flagged = ctx.tx, ctx.flagged
    limit_tokens = (ctx.thresholds.get("kv_cache_bloat") or {}).get("kv_seq_len")
    all_rows = [r for r in series.get("kv_growth") or [] if r.get("ts") and r.get("session_id") is not None]
    rows = _multi_point_rows(all_rows)
    if not rows:
        return None
    keep = top_groups(rows, "session_id", "kv_seq_len", first=_named_first(flagged, ctx.named))
    out = _session_age_rows(rows, keep, ("kv_seq_len", "kv_cache_size_mb"), tx)
    chart = alt.Chart(_data(out)).mark_line(point=alt.OverlayMarkDef(size=14), strokeWidth=1.5).encode(
        x=_turn_x(out),
        y=alt.Y("kv_seq_len:Q", title="KV sequence length (tokens)"),
        color=alt.Color("session_id:N", title="session", sort=keep),
        tooltip=["session_id:N", _time_tip("ts", "time", seconds=True),
                 "kv_seq_len:Q", alt.Tooltip("kv_cache_size_mb:Q", title="kv_cache_size (MiB)", format=",.1f")],
    )
    sub = "kv_seq_len per session (003 §4.3)"
    if limit_tokens:
        # the rule's threshold drawn where it applies, so "past the line" reads at a glance
        rule = alt.Chart(alt.Data(values=[{"limit": limit_tokens}])).mark_rule(
            color=SEVERITY_COLORS["warning"], strokeDash=[6, 4]).encode(y="limit:Q")
        chart = alt.layer(chart, rule)
        sub = f"kv_seq_len per session; dashed line: the {limit_tokens:,.0f}-token threshold (003 §4.3)"
    chart = chart.properties(width=WIDTH - 220, height=200)
    return Chart("kv_growth", "kv", "KV cache growth", _finish(chart, "KV cache growth", sub),
                 notes=_shown_note(keep, rows, all_rows, ctx, KV_RULES, "the longest KV sequence"))


@chart("errors_timeline", section="errors", series=("errors_timeline",), timeline=True)
def errors_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx = ctx.tx
    rows = [r for r in series.get("errors_timeline") or [] if r.get("bucket")]
    if not rows:
        return None
    keep = set(top_groups(rows, "error_type", "count"))
    rows = [dict(r, error_type=r.get("error_type") if r.get("error_type") in keep else "other") for r in rows]
    rows, step = coarsen(rows, "bucket", ("error_type",), {"count": "sum"})
    chart = with_deploys(alt.Chart(_data(rows, "bucket", tx)).mark_bar(clip=True).encode(
        x=_time_x("bucket", tx),
        y=alt.Y("count:Q", title="errors", stack=True, scale=count_scale(_stacked(rows, "bucket", "count"))),
        color=alt.Color("error_type:N", title="error type"),
        tooltip=[_time_tip("bucket"), "error_type:N", "count:Q"],
    ).add_params(_time_param()), "bucket", _time_x("bucket", tx), ctx).properties(width=WIDTH - 200, height=160)
    return Chart("errors_timeline", "errors", "Errors over time", _finish(chart, "Errors over time", f"per {step or _step_label((tx or TimeAxis()).step_s)} and type"),
                 timeline=True, notes=_notes(("errors", step)))


@chart("log_volume", section="collector", series=("log_volume",), timeline=True)
def log_volume_chart(series: dict, ctx: ChartContext) -> Chart | None:
    tx = ctx.tx
    rows = [r for r in series.get("log_volume") or [] if r.get("bucket")]
    if not rows:
        return None
    keep = set(top_groups(rows, "host", "bytes"))
    rows = [r for r in rows if r.get("host") in keep]
    tx = tx or TimeAxis()
    rows = fill_gaps(rows, "bucket", ("host",), "bytes", tx.step_s)
    rows, step = coarsen(rows, "bucket", ("host",), {"bytes": "sum", "events": "sum"})
    rows = [{"bucket": r["bucket"], "host": r.get("host") if r.get("host") is not None else "(no host field)", "mb": round((r.get("bytes") or 0) / 1e6, 3),
             "events": r.get("events")} for r in rows]
    chart = alt.Chart(_data(rows, "bucket", tx)).mark_line(clip=True, interpolate="step-after", strokeWidth=1.5).encode(
        x=_time_x("bucket", tx),
        y=alt.Y("mb:Q", title=f"MB written per {step or _step_label(tx.step_s)}"),
        color=alt.Color("host:N", title="host"),
        tooltip=[_time_tip("bucket"), "host:N", alt.Tooltip("mb:Q", format=",.2f"),
                 alt.Tooltip("events:Q", format=",")],
    ).add_params(_time_param()).properties(width=WIDTH - 160, height=150)
    return Chart("log_volume", "collector", "Log volume", _finish(chart, "Log volume", "size of the log lines written, per bucket and host"),
                 timeline=True, notes=_notes(("log volume", step)))


# Process names run long (host/pid): the capacity charts keep their legends under the plots, so
# a chart's width is its plots' and fits the report's column at a 1280 px viewport.
_BELOW = {"orient": "bottom", "direction": "vertical", "labelLimit": 320}


def _capacity_rows(series: dict) -> list[dict]:
    rows = [r for r in series.get("capacity") or [] if r.get("level") is not None][:400]
    for r in rows:
        r["process"] = f"{r.get('host') or 'unnamed host'}/{r.get('pid')}" if r.get("pid") is not None \
            else (r.get("host") or "unnamed host")
    return rows


@chart("capacity_throughput", section="capacity", series=("capacity",))
def capacity_throughput_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = _capacity_rows(series)
    if not rows:
        return None
    x = alt.X("level:Q", title="requests in flight", axis=alt.Axis(tickMinStep=1))
    tips = ["process:N", "level:Q", "requests:Q", alt.Tooltip("tokens_per_s:Q", format=",.0f"),
            alt.Tooltip("tpot_p95_ms:Q", format=",.0f"), alt.Tooltip("service_ttft_p95_ms:Q", format=",.0f"),
            alt.Tooltip("queue_p95_ms:Q", format=",.0f")]
    tput = alt.Chart(_data([r for r in rows if r.get("tokens_per_s") is not None])).mark_line(point=True).encode(
        x=x, y=alt.Y("tokens_per_s:Q", title="output tokens/s (all requests)"),
        color=alt.Color("process:N", title="process", legend=alt.Legend(**_BELOW)), tooltip=tips,
    ).properties(width=(WIDTH - 140) // 2, height=200, title="Throughput")
    lat_rows = [{**r, "metric": m, "ms": r[k]} for r in rows
                for m, k in (("TPOT p95", "tpot_p95_ms"), ("TTFT p95 (no queue)", "service_ttft_p95_ms"),
                             ("queue p95", "queue_p95_ms")) if r.get(k) is not None and r[k] > 0]
    lat = alt.Chart(_data(lat_rows)).mark_line(point=True).encode(
        x=x, y=alt.Y("ms:Q", title="ms (log)", scale=alt.Scale(type="log")),
        color=alt.Color("metric:N", title="latency", legend=alt.Legend(**_BELOW)),
        # the dashes tell processes apart: with one process the throughput legend names it
        strokeDash=alt.StrokeDash("process:N", title="process",
                                  legend=alt.Legend(**_BELOW) if len({r["process"] for r in rows}) > 1 else None),
        tooltip=["process:N", "metric:N", "level:Q", alt.Tooltip("ms:Q", format=",.1f")],
    ).properties(width=(WIDTH - 140) // 2, height=200, title="Latency")
    spec = alt.hconcat(tput, lat).to_dict()
    spec["title"] = alt.TitleParams(text="Throughput and latency against requests in flight",
                                    subtitle="where throughput stops rising is the knee (000 §1.3)")
    spec["config"] = CONFIG
    spec["resolve"] = {"scale": {"color": "independent"}}
    return Chart("capacity_throughput", "capacity", "Throughput and latency against requests in flight", spec)


@chart("capacity_memory", section="capacity", series=("capacity",))
def capacity_memory_chart(series: dict, ctx: ChartContext) -> Chart | None:
    rows = [r for r in _capacity_rows(series) if r.get("reserved_peak_mb") is not None]
    if not rows:
        return None
    x = alt.X("level:Q", title="requests in flight", axis=alt.Axis(tickMinStep=1))
    mem = alt.Chart(_data(rows)).mark_line(point=True).encode(
        x=x, y=alt.Y("reserved_peak_mb:Q", title="peak reserved (MiB)"),
        color=alt.Color("process:N", title="process", legend=alt.Legend(**_BELOW)),
        tooltip=["process:N", "level:Q", "requests:Q", alt.Tooltip("reserved_peak_mb:Q", format=",.0f"),
                 alt.Tooltip("allocated_peak_mb:Q", format=",.0f"), "oom_requests:Q"],
    )
    totals = [{"gpu_total_mb": t} for t in sorted({r["gpu_total_mb"] for r in rows if r.get("gpu_total_mb")})]
    chart = mem
    if totals:
        chart = mem + alt.Chart(_data(totals)).mark_rule(color="#b42318", strokeDash=[4, 3]).encode(
            y="gpu_total_mb:Q", tooltip=[alt.Tooltip("gpu_total_mb:Q", title="GPU total (MiB)", format=",.0f")])
    chart = chart.properties(width=HALF_WIDTH - 40, height=200)
    return Chart("capacity_memory", "capacity", "Memory against requests in flight",
                 _finish(chart, "Memory against requests in flight",
                         "dashed: the GPU's total memory" if totals else "no GPU total logged: no line for it"))


@chart("server_gauges", section="server", series=("server_gauges",))
def server_gauges_chart(series: dict, ctx: ChartContext) -> Chart | None:
    """Queue depth, running batch and KV-cache use from the servers' Prometheus snapshots."""
    tx = ctx.tx or TimeAxis()
    rows = [r for r in series.get("server_gauges") or [] if r.get("ts") and r.get("value") is not None]
    if len({r["ts"] for r in rows}) < 2:
        return None
    rows = [dict(r, line=f"{r.get('server')} · {r.get('gauge')}") for r in rows]
    keep = list(dict.fromkeys(r["line"] for r in rows))[:MAX_LINES]
    rows = [r for r in rows if r["line"] in keep][: MAX_ROWS_PER_CHART]
    base = alt.Chart(_data(rows, "ts", tx)).encode(
        x=alt.X("ts:T", title=_time_title(tx), axis=_time_axis_def()),
        color=alt.Color("line:N", title="server · gauge"),
        tooltip=[_time_tip("ts", "snapshot", seconds=True), "line:N", "metric:N",
                 alt.Tooltip("value:Q", format=",.3~f")],
    )  # fmt: skip
    counts = base.transform_filter("datum.gauge != 'kv_cache_usage'").mark_line(point=True, strokeWidth=1.5).encode(
        y=alt.Y("value:Q", title="requests")).properties(width=WIDTH - 140, height=150)  # fmt: skip
    usage = base.transform_filter("datum.gauge == 'kv_cache_usage'").mark_line(point=True, strokeWidth=1.5).encode(
        y=alt.Y("value:Q", title="KV-cache usage (0-1)")).properties(width=WIDTH - 140, height=120)  # fmt: skip
    return Chart("server_gauges", "server", "Server queue and KV cache",
                 _finish(alt.vconcat(counts, usage), "Server queue, batch and KV-cache usage",
                         "gauges of the servers' Prometheus snapshots, one point per snapshot"))  # fmt: skip


def build_charts(model: dict) -> list[Chart]:
    """All charts the model has data for, in report order (CHARTS)."""
    model = textsafe.for_charts(model)  # log-derived strings, before altair/vl-convert see them
    series = model.get("series") or {}
    ordered = sorted(model.get("findings") or [], key=lambda f: severity_rank(f.get("severity")))
    tx = time_axis(model)
    thresholds = model.get("thresholds") or {}
    named: dict = {}
    for f in ordered:
        for sid in f.get("session_ids") or []:
            if f.get("rule") not in named.setdefault(sid, []):
                named[sid].append(f.get("rule"))
    made = []
    for spec in CHARTS.values():
        if spec.page != "report":
            continue
        flagged = _take_turns([f.get("session_ids") or [] for f in ordered if f.get("rule") in spec.flag_rules])
        c = spec.make(series, ChartContext(tx, flagged, thresholds, model.get("deploys") or [], named,
                                           model.get("sessions_total"), frozenset(model.get("session_details") or {})))
        if c is None:
            continue
        if (c.id, c.section, c.timeline) != (spec.id, spec.section, spec.timeline):
            # a chart drawn under another id or section than registered would break its links
            raise ValueError(f"chart {spec.id!r} registered in {spec.section!r} (timeline={spec.timeline}) "
                             f"but drawn as {c.id!r} in {c.section!r} (timeline={c.timeline})")
        made.append(c)
    return made


def _take_turns(groups: list[list]) -> list:
    """Ids of several findings interleaved (first of each, then second of each, …), so a chart
    with a few lines shows sessions of every finding, not only of the first one."""
    out: list = []
    for i in range(max((len(g) for g in groups), default=0)):
        for g in groups:
            if i < len(g) and g[i] not in out:
                out.append(g[i])
    return out


# -- the diff and weekly pages ----------------------------------------------------------------
# Registered like the report's charts (page="diff" / "weekly"): they take that page's model.

SIDE_SCALE = alt.Scale(domain=["before", "after"], range=["#98a2b3", "#2e6fdb"])
VERDICT_SCALE = alt.Scale(domain=["regression", "mix", "steady", "improved", "too few", "n/a"],
                          range=["#b42318", "#b54708", "#98a2b3", "#067647", "#d0d5dd", "#d0d5dd"])  # fmt: skip
CHANGE_SCALE = alt.Scale(domain=["regression", "steady", "improved"], range=["#b42318", "#98a2b3", "#067647"])


def page_charts(page: str, model: dict) -> list[Chart]:
    """The charts of a diff or weekly page that its model has data for, in registration order."""
    made = [spec.make(model, None) for spec in CHARTS.values() if spec.page == page]
    return [c for c in made if c is not None]


def _dumbbell(rows: list[dict], key: str, before: str, after: str, color, width: int, step: int,
              tooltip: list | None = None):
    """p95 before → after per row on a log axis: a rule between a grey dot and a coloured dot."""
    base = alt.Chart(alt.Data(values=rows)).encode(y=alt.Y(f"{key}:N", title=None, sort=[r[key] for r in rows]))
    x = alt.X(f"{before}:Q", title="p95 ms (log scale)", scale=alt.Scale(type="log", nice=False, padding=12))
    tip = {"tooltip": tooltip} if tooltip else {}
    return alt.layer(
        base.mark_rule(strokeWidth=3, opacity=0.6).encode(x=x, x2=f"{after}:Q", color=color),
        base.mark_point(filled=True, size=60, color="#98a2b3").encode(x=x, **tip),
        base.mark_point(filled=True, size=80).encode(x=alt.X(f"{after}:Q"), color=color, **tip),
    ).properties(width=width, height=alt.Step(step))


@chart("diff_p95", section="summary", page="diff")
def diff_p95_chart(d: dict, _ctx: None) -> Chart | None:
    rows = []
    for r in d["stages"] + d["request_metrics"]:
        c = r.get("p95") or {}
        if (c.get("before") or 0) > 0 and (c.get("after") or 0) > 0 and r["unit"] == "ms":
            rows.append({"metric": r["label"], "before": c["before"], "after": c["after"], "verdict": c.get("verdict") or "n/a"})
    if not rows:
        return None
    color = alt.Color("verdict:N", title="p95 verdict", scale=VERDICT_SCALE, legend=alt.Legend(orient="top"))
    chart = _dumbbell(rows, "metric", "before", "after", color, WIDTH - 200, 22,
                      tooltip=["metric:N", "before:Q", "after:Q", "verdict:N"])
    return Chart("diff_p95", "summary", "p95 before and after",
                 _finish(chart, "p95 before → after", "grey dot before, coloured dot after"))


@chart("diff_latency_hist", section="latency", page="diff")
def diff_latency_chart(d: dict, _ctx: None) -> Chart | None:
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
    return Chart("diff_latency_hist", "latency", "Latency distributions before and after", spec)


@chart("diff_prefill_vs_input", section="mix", page="diff")
def diff_prefill_chart(d: dict, _ctx: None) -> Chart | None:
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
    return Chart("diff_prefill_vs_input", "mix", "Prefill vs input length before and after", spec)


@chart("weekly_p95", section="stages", page="weekly")
def weekly_p95_chart(w: dict, _ctx: None) -> Chart | None:
    """p95 per stage, last week → this week."""
    # stage names come from the logs: vl-convert aborts on control characters
    rows = [{"stage": textsafe.visible(str(r["stage"])), "prev": r["p95_ms_prev"], "this": r["p95_ms"],
             "change": "regression" if r["p95_verdict"] == "regression" else
                       "improved" if r["p95_verdict"] == "improved" else "steady"}
            for r in w["stages"][:12]
            if (r.get("p95_ms") or 0) > 0 and (r.get("p95_ms_prev") or 0) > 0]  # fmt: skip
    if not rows:
        return None
    color = alt.Color("change:N", title="p95 change", scale=CHANGE_SCALE, legend=alt.Legend(orient="top"))
    chart = _dumbbell(rows, "stage", "prev", "this", color, 620, 24)
    sub = f"grey dot {w['previous_week']}, coloured dot {w['week']}"
    return Chart("weekly_p95", "stages", "p95 per stage", _finish(chart, "p95 per stage", sub))
