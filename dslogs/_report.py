"""``Report``: the ``dslogs.report/1`` model as typed objects, rendered inline in a notebook."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.core.errors import UsageError

if TYPE_CHECKING:
    import altair as alt

# Suffix of Report.save's path -> format (render_report's).
SAVE_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _str(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Finding:
    """One rule that fired: what, how sure (value against threshold), where, and the fix."""

    rule: str
    severity: str  # critical, warning or info
    scope: str  # session, host, process or service
    message: str
    fix: str
    source: str  # the article section the threshold and fix come from
    value: Any
    threshold: Any
    unit: str
    session_ids: list[str] = field(default_factory=list)  # the first few, worst first
    session_count: int = 0
    hosts: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> Finding:
        return cls(rule=_str(d.get("rule")), severity=_str(d.get("severity")),
                   scope=_str(d.get("scope")), message=_str(d.get("message")),
                   fix=_str(d.get("fix")), source=_str(d.get("source")), value=d.get("value"),
                   threshold=d.get("threshold"), unit=_str(d.get("unit")),
                   session_ids=[str(s) for s in d.get("session_ids") or []],
                   session_count=_int(d.get("session_count")),
                   hosts=[str(h) for h in d.get("hosts") or []],
                   evidence=dict(d.get("evidence") or {}))


@dataclass(frozen=True)
class ChecklistItem:
    """One line of the article's checklist: PASS, FAIL or NO DATA, with the measured value."""

    id: str
    label: str
    status: str
    value: Any
    threshold: Any
    unit: str
    source: str
    note: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> ChecklistItem:
        note = d.get("note")
        return cls(id=_str(d.get("id")), label=_str(d.get("label")), status=_str(d.get("status")),
                   value=d.get("value"), threshold=d.get("threshold"), unit=_str(d.get("unit")),
                   source=_str(d.get("source")), note=None if note is None else str(note))


@dataclass(frozen=True)
class Stage:
    """Duration percentiles of one pipeline stage (tokenize, prefill, decode, ...), in ms."""

    stage: str
    count: int
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> Stage:
        return cls(stage=_str(d.get("stage")), count=_int(d.get("count")),
                   p50_ms=_float(d.get("p50_ms")), p90_ms=_float(d.get("p90_ms")),
                   p95_ms=_float(d.get("p95_ms")), p99_ms=_float(d.get("p99_ms")),
                   max_ms=_float(d.get("max_ms")))


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of one request metric over the window."""

    count: int
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def from_model(cls, d: Any) -> LatencyStats | None:
        if not isinstance(d, dict):
            return None
        return cls(count=_int(d.get("count")), p50=_float(d.get("p50")), p90=_float(d.get("p90")),
                   p95=_float(d.get("p95")), p99=_float(d.get("p99")), max=_float(d.get("max")))


@dataclass(frozen=True)
class Requests:
    """The requests of the window: counts, latency percentiles, goodput; ``raw`` holds every
    other figure of the model's ``requests`` block (prefill/decode ratios, reasoning share)."""

    count: int
    ok: int
    errors: int
    ttft_ms: LatencyStats | None
    tpot_ms: LatencyStats | None
    e2e_ms: LatencyStats | None
    ttfa_ms: LatencyStats | None
    tokens_per_s: LatencyStats | None
    goodput: float | None
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> Requests:
        stats = LatencyStats.from_model
        return cls(count=_int(d.get("count")), ok=_int(d.get("ok")), errors=_int(d.get("errors")),
                   ttft_ms=stats(d.get("ttft_ms")), tpot_ms=stats(d.get("tpot_ms")),
                   e2e_ms=stats(d.get("e2e_ms")), ttfa_ms=stats(d.get("ttfa_ms")),
                   tokens_per_s=stats(d.get("tokens_per_s")), goodput=_float(d.get("goodput")),
                   raw=dict(d))


class Page:
    """What a model with a page has in the API (``Report``, ``Capacity``): text in each format,
    ``save`` by suffix, the page inline in a notebook, and its charts as specs or altair charts."""

    model: dict[str, Any]
    _title = "dslogs"

    def render(self, fmt: str = "html") -> str:
        raise NotImplementedError

    def to_json(self) -> str:
        return self.render("json")

    def to_markdown(self) -> str:
        return self.render("md")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the page; the suffix picks the format (.html, .md, .json)."""
        target = Path(path)
        fmt = SAVE_FORMATS.get(target.suffix.lower())
        if fmt is None:
            raise UsageError(f"{target}: cannot tell the format from the suffix; use one of "
                             f"{', '.join(SAVE_FORMATS)}")
        from analyzer.core.outfile import write_out

        # as every --out: a temporary beside the target, renamed once complete; a path that
        # cannot be written is a UsageError naming it
        write_out(target, self.render(fmt), option="save")
        return target

    def _repr_html_(self) -> str:
        return inline_frame(self.render("html"), self._title)

    # -- charts --------------------------------------------------------------------------------

    @property
    def chart_ids(self) -> list[str]:
        """The charts this page draws (the ids ``chart`` takes)."""
        return list(self._specs())

    def chart_spec(self, chart_id: str) -> dict[str, Any]:
        """The Vega-Lite spec the page draws as ``chart_id`` (a plain dict)."""
        specs = self._specs()
        if chart_id not in specs:
            raise UsageError(f"no chart {chart_id!r} here; there are: {', '.join(specs) or 'none'}")
        return specs[chart_id]

    def chart(self, chart_id: str) -> alt.TopLevelMixin:
        """Chart ``chart_id`` as an altair chart built from the page's own spec, to change
        (``.properties(width=800)``, ``.interactive()``) or save."""
        return altair_chart(self.chart_spec(chart_id))

    def _specs(self) -> dict[str, dict[str, Any]]:
        from analyzer.render.charts.specs import build_charts

        return {c.id: c.spec for c in build_charts(self.model)}


class Report(Page):
    """The diagnosis of a window of logs (``logs.report()``, ``dslogs.load_report(path)``).

    ``findings``, ``checklist``, ``stages`` and ``requests`` are typed views of the model;
    ``model`` is the ``dslogs.report/1`` dict itself (docs/internals.md). In a notebook the
    report shows inline as the HTML report; ``save`` writes html, md or json by suffix."""

    _title = "dslogs report"

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model
        self.findings = [Finding.from_model(f) for f in model.get("findings") or []]
        self.checklist = [ChecklistItem.from_model(c) for c in model.get("checklist") or []]
        self.stages = [Stage.from_model(s) for s in model.get("stages") or []]
        self.requests = Requests.from_model(model.get("requests") or {})

    @property
    def window(self) -> dict[str, Any]:
        return dict(self.model.get("window") or {})

    @property
    def ingest(self) -> dict[str, Any]:
        return dict(self.model.get("ingest") or {})

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        found = ", ".join(f"{n} {sev}" for sev, n in counts.items()) or "no findings"
        failed = sum(1 for c in self.checklist if c.status == "FAIL")
        return (f"<dslogs.Report {self.requests.count} requests, {found}, "
                f"{failed} of {len(self.checklist)} checks failing>")

    def render(self, fmt: str = "html") -> str:
        """The report as text: html (the self-contained page), md or json."""
        from analyzer.render.report import render_report

        return str(render_report(self.model, fmt))


def altair_chart(spec: dict[str, Any]) -> alt.TopLevelMixin:
    """An altair chart of the right kind (single, layered, concatenated) for a Vega-Lite spec."""
    from dslogs._extras import need

    alt_ = need("altair", "Report.chart")
    kinds = (("layer", "LayerChart"), ("vconcat", "VConcatChart"), ("hconcat", "HConcatChart"),
             ("concat", "ConcatChart"), ("facet", "FacetChart"), ("repeat", "RepeatChart"))
    name = next((cls for key, cls in kinds if key in spec), "Chart")
    chart: alt.TopLevelMixin = getattr(alt_, name).from_dict(_named_selections(spec))
    return chart


def _named_selections(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with each selection of a view inside a layer or concat moved to the top level
    and bound to that view by name. altair lifts such a selection itself on ``to_dict`` but,
    for a view read with ``from_dict`` (which has no name), binds it to no view at all: the
    overview's brush would select nothing."""
    out: dict[str, Any] = json.loads(json.dumps(spec))
    lifted: list[dict[str, Any]] = []

    def visit(node: dict[str, Any], path: str) -> None:
        for key in ("layer", "vconcat", "hconcat", "concat"):
            for i, child in enumerate(node.get(key) or []):
                if not isinstance(child, dict):
                    continue
                selections = [p for p in child.get("params") or [] if "select" in p]
                if selections and "mark" in child:
                    child.setdefault("name", f"dslogs_{path}{key}_{i}")
                    rest = [p for p in child["params"] if "select" not in p]
                    if rest:
                        child["params"] = rest
                    else:
                        del child["params"]
                    lifted.extend(dict(p, views=[child["name"]]) for p in selections)
                visit(child, f"{path}{key}_{i}_")

    visit(out, "")
    if lifted:
        out["params"] = list(out.get("params") or []) + lifted
    return out


def inline_frame(page: str, title: str) -> str:
    """A self-contained page as notebook output: inside an iframe its styles and scripts stay
    its own (nothing leaks into the notebook, no notebook style changes it), its charts draw
    from the Vega bundle the page carries (offline), and ``sandbox`` keeps its scripts away from
    the notebook's origin."""
    return (f'<iframe title="{html.escape(title)}" srcdoc="{html.escape(page, quote=True)}" '
            'sandbox="allow-scripts allow-popups" '
            'style="width:100%;height:80vh;min-height:480px;border:1px solid #d0d7de;'
            'border-radius:4px" loading="lazy"></iframe>')


def load(path: str | os.PathLike[str]) -> Report:
    from analyzer.model.report import load_report_json

    return Report(load_report_json(path))
