"""Static SVG pictures of the report's Vega-Lite specs, for readers without JavaScript.

A second chart engine (vl-convert) took seconds per report to draw a dozen pictures nobody
interacts with. This draws the small part of Vega-Lite that `dslogs.analyzer.render.charts.specs` writes — unit,
layer, hconcat and vconcat specs with inline data; line, area, bar, rule and point marks;
quantitative (linear or log), temporal (UTC) and nominal-colour encodings; `fold` and
`datum.f == 'v'` filter transforms — straight from the spec, in a few milliseconds. Time axes
print a 24-hour clock, numbers are plain decimals (0.2 reads "0.2", never "200m"); the units
live in the axis titles. Anything it does not know returns None and the page says the chart
needs JavaScript. Every text goes through `html.escape`; no ids, no scripts, no external refs.
"""

from __future__ import annotations

import html
import math
import re
from datetime import UTC, datetime

from dslogs.analyzer.core import format as fmt

PALETTE = ["#2e6fdb", "#e8772e", "#2e9e6b", "#c43d52", "#7d55c7", "#8c6d31", "#d1569b", "#5b6b7f"]
FONT = "system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 8, 38  # panel margins: y labels + title, x labels + title
LEGEND_W = 170
GAP_H, GAP_V = 24, 18
MAX_POINTS = 400  # dots drawn per panel (lines stay whole)
TIME_STEPS_MS = [s * 1000 for s in (60, 300, 900, 1800, 3600, 10800, 21600, 43200, 86400, 172800, 604800, 2592000)]
_FILTER = re.compile(r"^\s*datum\.(\w+)\s*==\s*'([^']*)'\s*$")


class Unsupported(ValueError):
    """The spec uses something this drawer does not know."""


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def fmt_time(ms: float, step_ms: float) -> str:
    """24-hour clock; the date (`Nov 24`) at midnight and on steps of a day or more."""
    t = datetime.fromtimestamp(ms / 1000, tz=UTC)
    if step_ms >= 86_400_000 or (t.hour == 0 and t.minute == 0):
        return f"{t:%b} {t.day}"
    return f"{t:%H:%M}"


# -- scales -----------------------------------------------------------------------------------


class Scale:
    def __init__(self, kind: str, domain: tuple[float, float], rng: tuple[float, float]) -> None:
        self.kind, self.rng = kind, rng
        lo, hi = domain
        if kind == "log":
            lo, hi = max(lo, 1e-9), max(hi, 1e-9)
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
            if lo == hi:
                hi = lo * 10
        elif lo == hi:
            lo, hi = (lo - 1, hi + 1) if kind == "time" else (min(0, lo), hi + 1 if hi >= 0 else 0)
        self.domain = (lo, hi)

    def __call__(self, v: float) -> float:
        lo, hi = self.domain
        if self.kind == "log":
            f = (math.log10(max(v, 1e-12)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        else:
            f = (v - lo) / (hi - lo)
        return self.rng[0] + f * (self.rng[1] - self.rng[0])

    def inside(self, v: float) -> bool:
        lo, hi = self.domain
        return lo - (hi - lo) * 1e-9 <= v <= hi + (hi - lo) * 1e-9

    def ticks(self, count: int) -> list[tuple[float, str]]:
        lo, hi = self.domain
        if self.kind == "log":
            decades = range(round(math.log10(lo)), round(math.log10(hi)) + 1)
            mult = (1,) if len(decades) > 3 else (1, 2, 5)
            return [(m * 10.0 ** d, fmt.axis(m * 10.0 ** d)) for d in decades for m in mult
                    if lo <= m * 10.0 ** d <= hi]
        if self.kind == "time":
            step = next((s for s in TIME_STEPS_MS if (hi - lo) / s <= count), TIME_STEPS_MS[-1])
            first = math.ceil(lo / step) * step
            return [(t, fmt_time(t, step)) for t in _frange(first, hi, step)]
        step = _nice_step((hi - lo) / max(count, 1))
        first = math.ceil(lo / step - 1e-9) * step
        return [(t, fmt.axis(round(t, 10))) for t in _frange(first, hi + step * 1e-9, step)]


def _frange(start: float, stop: float, step: float) -> list[float]:
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    return [start + i * step for i in range(max(0, min(n, 200)))]


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(raw))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= raw)


def _nice_max(hi: float) -> float:
    if hi <= 0:
        return 1.0
    step = _nice_step(hi / 4)
    return math.ceil(hi / step - 1e-9) * step


# -- spec reading -------------------------------------------------------------------------------


def _rows(unit: dict, inherited: list[dict] | None) -> list[dict]:
    data = unit.get("data")
    rows = list(data.get("values") or []) if isinstance(data, dict) else list(inherited or [])
    for t in unit.get("transform") or []:
        if "fold" in t:
            key, value = (t.get("as") or ["key", "value"])[:2]
            rows = [{**r, key: f, value: r.get(f)} for r in rows for f in t["fold"]]
        elif "filter" in t:
            m = _FILTER.match(str(t["filter"]))
            if not m:
                raise Unsupported(f"filter {t['filter']!r}")
            rows = [r for r in rows if str(r.get(m.group(1))) == m.group(2)]
        else:
            raise Unsupported(f"transform {sorted(t)}")
    return rows


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    return None


def _color_scale(layers: list[tuple[dict, list[dict]]]) -> tuple[str | None, dict, dict | None]:
    """(field, value → colour, channel) of the panel's colour encoding, Vega-Lite's way:
    the scale's own domain/range, else the `sort` order, else values sorted."""
    for unit, _ in layers:
        enc = unit.get("encoding") or {}
        ch = enc.get("color")
        if isinstance(ch, dict) and ch.get("field"):
            f = ch["field"]
            scale = ch.get("scale") or {}
            domain = scale.get("domain") or ch.get("sort")
            seen = sorted({str(r.get(f)) for _, rs in layers for r in rs if r.get(f) is not None})
            if isinstance(domain, list):
                domain = [str(d) for d in domain] + [v for v in seen if v not in [str(d) for d in domain]]
            else:
                domain = seen
            colours = scale.get("range") if isinstance(scale.get("range"), list) else PALETTE
            return f, {v: colours[i % len(colours)] for i, v in enumerate(domain)}, ch
    return None, {}, None


def _dash_scale(layers: list[tuple[dict, list[dict]]]) -> tuple[str | None, dict]:
    for unit, _ in layers:
        ch = (unit.get("encoding") or {}).get("strokeDash")
        if isinstance(ch, dict) and ch.get("field"):
            scale = ch.get("scale") or {}
            dom, rng = scale.get("domain") or [], scale.get("range") or []
            return ch["field"], {str(d): r for d, r in zip(dom, rng, strict=False)}
    return None, {}


# -- drawing ------------------------------------------------------------------------------------


def _path(points: list[tuple[float, float]], step_after: bool = False) -> str:
    out = []
    for i, (x, y) in enumerate(points):
        if i and step_after:
            out.append(f"H{x:.1f}")
        out.append(f"{'L' if i else 'M'}{x:.1f},{y:.1f}")
    return "".join(out)


def _dash(d) -> str:
    if isinstance(d, list) and d and any(d[1:]):
        return f' stroke-dasharray="{",".join(str(v) for v in d)}"'
    return ""


class Panel:
    """One plot area (a unit spec or a layer of them) drawn into an SVG group."""

    def __init__(self, spec: dict, inherited: list[dict] | None, size: tuple[int, int]) -> None:
        parts = spec.get("layer") or [spec]
        base_rows = _rows(spec, inherited) if "layer" in spec else inherited
        self.layers = [(u, _rows(u, base_rows)) for u in parts]
        for u, _ in self.layers:
            if any(k in u for k in ("layer", "hconcat", "vconcat", "facet", "repeat")):
                raise Unsupported("nested composition")
        self.width = int(spec.get("width") or size[0])
        self.height = int(spec.get("height") or size[1])
        self.color_field, self.colors, self.color_channel = _color_scale(self.layers)
        self.dash_field, self.dashes = _dash_scale(self.layers)
        legend = self.color_channel.get("legend", {}) if self.color_channel else None
        self.legend = bool(self.color_field) and legend is not None and len(self.colors) > 1

    def _channel(self, name: str) -> dict:
        for u, _ in self.layers:
            ch = (u.get("encoding") or {}).get(name)
            if isinstance(ch, dict) and ch.get("field"):
                return ch
        return {}

    def _scales(self) -> tuple[Scale, Scale]:
        xch, ych = self._channel("x"), self._channel("y")
        if not xch or not ych:
            raise Unsupported("a panel without x and y")
        xkind = "time" if xch.get("type") == "temporal" else ("log" if (xch.get("scale") or {}).get("type") == "log" else "linear")
        ykind = "log" if (ych.get("scale") or {}).get("type") == "log" else "linear"
        if xch.get("type") not in ("temporal", "quantitative") or ych.get("type", "quantitative") != "quantitative":
            raise Unsupported("nominal position")
        xs, ys = [], []
        for u, rows in self.layers:
            enc = u.get("encoding") or {}
            mark = (u.get("mark") or {}).get("type") if isinstance(u.get("mark"), dict) else u.get("mark")
            for key, out in (("x", xs), ("x2", xs)):
                f = (enc.get(key) or {}).get("field")
                if f:
                    out += [v for v in (_num(r.get(f)) for r in rows) if v is not None]
            yf = (enc.get("y") or {}).get("field")
            if yf:
                if mark == "bar" and (enc.get("y") or {}).get("stack") and "x2" not in enc:
                    totals: dict = {}
                    xf = enc["x"]["field"]
                    for r in rows:
                        totals[r.get(xf)] = totals.get(r.get(xf), 0) + (_num(r.get(yf)) or 0)
                    ys += list(totals.values())
                else:
                    ys += [v for v in (_num(r.get(yf)) for r in rows) if v is not None and (ykind != "log" or v > 0)]
        xdom = (xch.get("scale") or {}).get("domain")
        if isinstance(xdom, list) and len(xdom) == 2:
            xd = (float(xdom[0]), float(xdom[1]))
        elif xs:
            xd = (min(xs), max(xs))
        else:
            raise Unsupported("no x values")
        ydom = (ych.get("scale") or {}).get("domain")
        if isinstance(ydom, list) and len(ydom) == 2:
            yd = (float(ydom[0]), float(ydom[1]))
        elif ys:
            zero = ykind != "log" and (ych.get("scale") or {}).get("zero", True) is not False
            lo, hi = (min(0.0, min(ys)) if zero else min(ys)), max(ys)
            if ykind == "linear":
                hi = _nice_max(hi) if zero else hi + (hi - lo) * 0.05 or hi + 1
                lo = lo if zero else lo - (hi - lo) * 0.05
            yd = (lo, hi)
        else:
            yd = (0.0, 1.0)
        return Scale(xkind, xd, (0, self.width)), Scale(ykind, yd, (self.height, 0))

    def draw(self, ox: float, oy: float) -> list[str]:
        x, y = self._scales()
        out = [f'<g transform="translate({ox:.0f},{oy:.0f})">',
               f'<rect width="{self.width}" height="{self.height}" fill="#fff" stroke="#e4e7ec"/>']
        xch, ych = self._channel("x"), self._channel("y")
        yticks = y.ticks(max(2, self.height // 40))
        xticks = x.ticks(max(2, self.width // 90))
        for v, label in yticks:
            py = y(v)
            out.append(f'<line x1="0" x2="{self.width}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eaecf0"/>'
                       f'<text x="-5" y="{py + 3.5:.1f}" text-anchor="end">{esc(label)}</text>')
        last_right = -1e9
        for v, label in xticks:
            px = x(v)
            out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{self.height}" y2="{self.height + 4}" stroke="#98a2b3"/>')
            w = len(label) * 6.4  # about the advance of an 11 px sans-serif digit
            anchor = "start" if px - w / 2 < 0 else "end" if px + w / 2 > self.width else "middle"
            left = px if anchor == "start" else px - w if anchor == "end" else px - w / 2
            if left > last_right + 6 and -2 <= px <= self.width + 2:  # skip labels that would overlap
                out.append(f'<text x="{px:.1f}" y="{self.height + 15}" text-anchor="{anchor}">{esc(label)}</text>')
                last_right = left + w
        out.append(f'<line x1="0" x2="{self.width}" y1="{self.height}" y2="{self.height}" stroke="#98a2b3"/>')
        xtitle, ytitle = xch.get("title", xch.get("field")), ych.get("title", ych.get("field"))
        if xtitle:
            out.append(f'<text x="{self.width / 2:.0f}" y="{self.height + 31}" text-anchor="middle" class="t">{esc(xtitle)}</text>')
        if ytitle:
            out.append(f'<text transform="translate({-LEFT + 12},{self.height / 2:.0f}) rotate(-90)" text-anchor="middle" class="t">{esc(ytitle)}</text>')
        for unit, rows in self.layers:
            out += self._marks(unit, rows, x, y)
        out.append("</g>")
        return out

    def _colour(self, unit: dict, row: dict) -> str:
        mark = unit.get("mark") if isinstance(unit.get("mark"), dict) else {}
        if mark.get("color"):
            return mark["color"]
        if self.color_field and (unit.get("encoding") or {}).get("color"):
            return self.colors.get(str(row.get(self.color_field)), PALETTE[0])
        return PALETTE[0]

    def _marks(self, unit: dict, rows: list[dict], x: Scale, y: Scale) -> list[str]:
        mark = unit.get("mark") if isinstance(unit.get("mark"), dict) else {"type": unit.get("mark")}
        kind = mark.get("type")
        enc = unit.get("encoding") or {}
        xf, yf = (enc.get("x") or {}).get("field"), (enc.get("y") or {}).get("field")
        x2f = (enc.get("x2") or {}).get("field")
        out: list[str] = []
        opacity = mark.get("opacity")
        op = f' opacity="{opacity}"' if opacity is not None else ""
        if kind == "rule" and yf is None:  # a vertical rule at x (a deploy on a timeline)
            for r in rows:
                v = _num(r.get(xf))
                if v is not None and x.inside(v):
                    out.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="0" y2="{self.height}" '
                               f'stroke="{self._colour(unit, r)}"{_dash(mark.get("strokeDash"))}/>')
            return out
        if kind == "rule":
            for r in rows:
                v = _num(r.get(yf))
                if v is not None and y.inside(v):
                    out.append(f'<line x1="0" x2="{self.width}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                               f'stroke="{self._colour(unit, r)}"{_dash(mark.get("strokeDash"))}/>')
            return out
        if kind == "bar":
            return self._bars(unit, mark, rows, x, y, xf, yf, x2f, op)
        if kind not in ("line", "area", "point"):
            raise Unsupported(f"mark {kind}")
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault((str(r.get(self.color_field)) if self.color_field else None,
                               str(r.get(self.dash_field)) if self.dash_field else None), []).append(r)
        dots = 0
        for (_, dash_key), members in groups.items():
            members = sorted((r for r in members if _num(r.get(xf)) is not None), key=lambda r: r[xf])
            colour = self._colour(unit, members[0]) if members else PALETTE[0]
            segments, seg = [], []
            for r in members:
                xv, yv = _num(r.get(xf)), _num(r.get(yf))
                if yv is None or (y.kind == "log" and yv <= 0) or not x.inside(xv):
                    if seg:
                        segments.append(seg)
                    seg = []
                    continue
                seg.append((x(xv), y(min(max(yv, y.domain[0]), y.domain[1]))))
            if seg:
                segments.append(seg)
            step = mark.get("interpolate") == "step-after"
            width = mark.get("strokeWidth", 1.5)
            dash = _dash(self.dashes.get(dash_key)) if dash_key is not None else ""
            for s in segments:
                if kind == "area":
                    d = _path(s, step)
                    out.append(f'<path d="{d}V{self.height}H{s[0][0]:.1f}Z" fill="{colour}"{op} stroke="none"/>')
                    if mark.get("line"):
                        out.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1"/>')
                elif kind == "line" and len(s) > 1:
                    out.append(f'<path d="{_path(s, step)}" fill="none" stroke="{colour}" stroke-width="{width}"{dash}/>')
                if (kind == "point" or mark.get("point") or len(s) == 1) and dots < MAX_POINTS:
                    radius = 2.2 if kind != "point" else 3
                    out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{radius}" fill="{colour}"/>' for px, py in s]
                    dots += len(s)
        return out

    def _bars(self, unit, mark, rows, x: Scale, y: Scale, xf, yf, x2f, op) -> list[str]:
        out: list[str] = []
        if x2f:  # binned: one rectangle per bin, its edges from the data
            for r in rows:
                a, b, v = _num(r.get(xf)), _num(r.get(x2f)), _num(r.get(yf))
                if None in (a, b, v) or v <= 0 or (x.kind == "log" and a <= 0):
                    continue
                x0, x1 = sorted((x(max(a, x.domain[0])), x(min(b, x.domain[1]))))
                out.append(f'<rect x="{x0:.1f}" y="{y(v):.1f}" width="{max(x1 - x0 - 0.5, 0.8):.1f}" '
                           f'height="{max(y(y.domain[0]) - y(v), 0):.1f}" fill="{self._colour(unit, r)}"{op}/>')
            return out
        xs = sorted({v for v in (_num(r.get(xf)) for r in rows) if v is not None})
        gaps = [b - a for a, b in zip(xs, xs[1:], strict=False) if b > a]
        bw = max(1.0, min((x(xs[0] + min(gaps)) - x(xs[0])) * 0.85, 40.0)) if gaps else 6.0
        base: dict = {}
        order = list(self.colors) if self.color_field else [None]
        for r in sorted(rows, key=lambda r: order.index(str(r.get(self.color_field))) if self.color_field and str(r.get(self.color_field)) in order else 0):
            xv, v = _num(r.get(xf)), _num(r.get(yf))
            if xv is None or v is None or v <= 0 or not x.inside(xv):
                continue
            start = base.get(xv, 0.0)
            base[xv] = start + v
            top, bottom = y(start + v), y(start)
            out.append(f'<rect x="{x(xv) - bw / 2:.1f}" y="{top:.1f}" width="{bw:.1f}" height="{max(bottom - top, 0.5):.1f}" '
                       f'fill="{self._colour(unit, r)}"{op}/>')
        return out

    def legend_svg(self, ox: float, oy: float) -> list[str]:
        title = self.color_channel.get("title") if self.color_channel else None
        out = [f'<g transform="translate({ox:.0f},{oy:.0f})">']
        dy = 0
        if title:
            out.append(f'<text y="10" class="t">{esc(title)}</text>')
            dy = 18
        for i, (value, colour) in enumerate(list(self.colors.items())[:12]):
            label = value if len(value) <= 26 else value[:25] + "…"
            out.append(f'<rect x="0" y="{dy + i * 16}" width="10" height="10" fill="{colour}"/>'
                       f'<text x="15" y="{dy + i * 16 + 9}">{esc(label)}</text>')
        out.append("</g>")
        return out


def render_svg(spec: dict) -> str | None:
    """The chart as one standalone <svg> string, or None when the spec is outside the subset."""
    try:
        return _render(spec)
    except (Unsupported, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _render(spec: dict) -> str:
    title = spec.get("title")
    text, subtitle = (title.get("text"), title.get("subtitle")) if isinstance(title, dict) else (title, None)
    head = (18 if text else 0) + (16 if subtitle else 0) + (8 if text or subtitle else 0)
    rows = list((spec.get("data") or {}).get("values") or []) if isinstance(spec.get("data"), dict) else None
    if "hconcat" in spec or "vconcat" in spec:
        horizontal = "hconcat" in spec
        panels = [Panel(p, rows, (300, 200)) for p in spec.get("hconcat" if horizontal else "vconcat")]
    else:
        panels = [Panel(spec, None, (400, 200))]
    if not panels:
        raise Unsupported("no panels")
    legend_panel = next((p for p in panels if p.legend), None)
    body: list[str] = []
    ox, oy, width, height = 0.0, float(head), 0.0, 0.0
    for i, p in enumerate(panels):
        body += p.draw(ox + LEFT, oy + TOP)
        w, h = LEFT + p.width + RIGHT, TOP + p.height + BOTTOM
        if "hconcat" in spec:
            ox += w + GAP_H
            width = ox
            height = head + h
        else:
            oy += h + (GAP_V if i < len(panels) - 1 else 0)
            width = max(width, w)
            height = oy
    if legend_panel is not None:
        body += legend_panel.legend_svg(width + 4, head + TOP)
        width += LEGEND_W
        height = max(height, head + TOP + 18 + 16 * min(12, len(legend_panel.colors)))
    top = []
    if text:
        top.append(f'<text x="0" y="14" class="h">{esc(text)}</text>')
    if subtitle:
        top.append(f'<text x="0" y="{32 if text else 14}" class="s">{esc(subtitle)}</text>')
    # inline SVG styles apply to the whole page: every selector stays inside .static-chart
    style = (f".static-chart text{{font:11px {FONT};fill:#475467}}.static-chart .t{{fill:#344054;font-weight:500}}"
             ".static-chart .h{font-size:13px;font-weight:600;fill:#101828}.static-chart .s{fill:#667085}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="static-chart" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}"><style>{style}</style>' + "".join(top + body) + "</svg>")
