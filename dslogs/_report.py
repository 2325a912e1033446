"""``Report``: the ``dslogs.report/1`` model as typed objects, rendered inline in a notebook.

The typed objects are the model's own declarations (``dslogs.analyzer.model.types``), re-exported: a
field of the model is a field here."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.model.types import (
    ChecklistItem,
    Finding,
    Judged,
    LatencyStats,
    Requests,
    SessionRow,
    Stage,
)

if TYPE_CHECKING:
    import altair as alt

__all__ = ["ChecklistItem", "Finding", "Judged", "LatencyStats", "Page", "Report", "Requests", "SessionRow", "Stage",
           "altair_chart", "inline_frame", "load"]

# Suffix of Report.save's path -> format (render_report's).
SAVE_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}


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
        from dslogs.analyzer.core.outfile import write_out

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
        from dslogs.analyzer.render.charts.specs import build_charts

        return {c.id: c.spec for c in build_charts(self.model)}


class Report(Page):
    """The diagnosis of a window of logs (``logs.report()``, ``dslogs.load_report(path)``).

    ``findings``, ``checklist``, ``stages``, ``requests`` and ``sessions`` (the sessions table: each
    row's readings and, in ``judged``, what each per-session rule judged of it) are typed views of
    the model;
    ``model`` is the ``dslogs.report/1`` dict itself (docs/internals.md). In a notebook the
    report shows inline as the HTML report; ``save`` writes html, md or json by suffix."""

    _title = "dslogs report"

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model
        self.findings = [Finding.from_model(f) for f in model.get("findings") or []]
        self.checklist = [ChecklistItem.from_model(c) for c in model.get("checklist") or []]
        self.stages = [Stage.from_model(s) for s in model.get("stages") or []]
        self.requests = Requests.from_model(model.get("requests") or {})
        self.sessions = [SessionRow.from_model(s) for s in model.get("sessions") or []]

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
        from dslogs.analyzer.render.report import render_report

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
    from dslogs.analyzer.model.report import load_report_json

    if not isinstance(path, str | os.PathLike):
        raise UsageError(f"load_report: path is {type(path).__name__}, expected a path (str or os.PathLike)")
    return Report(load_report_json(path))
