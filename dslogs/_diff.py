"""``dslogs.diff``: before against after, as ``dslogs diff BEFORE AFTER``; its typed objects are
the diff model's own declarations (``dslogs.analyzer.model.types``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dslogs._report import Page
from dslogs.analyzer.model.types import FindingSummary, MetricChange, PercentileChange, RateChange

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Diff", "FindingChange", "MetricChange", "PercentileChange", "RateChange", "compare"]


def _paths(side: Any) -> list[str]:
    if isinstance(side, (str, os.PathLike)):
        return [os.fspath(side)]
    if isinstance(side, list | tuple) and side and all(isinstance(p, (str, os.PathLike)) for p in side):
        return [os.fspath(p) for p in side]
    from dslogs.analyzer.core.errors import UsageError

    raise UsageError(f"diff: a side is {type(side).__name__}, expected logs or a saved report: a path or a "
                     f"non-empty list of paths")


@dataclass(frozen=True, kw_only=True)
class FindingChange(FindingSummary):
    """A finding that is new after, resolved since before, or there on both sides: the diff's
    finding summary with the list it sits in."""

    change: str  # new, resolved or persisting


class Diff(Page):
    """Before against after: latency changes with their significance, the request mix,
    findings new and resolved. ``model`` is the diff model (``dslogs diff --format json``)."""

    _title = "dslogs diff"

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model
        rows = [r for part in ("stages", "request_metrics") for r in model.get(part) or [] if isinstance(r, dict)]
        self.changes: list[MetricChange] = [MetricChange.from_model(r) for r in rows]
        self.rates: list[RateChange] = [RateChange.from_model(r) for r in model.get("rates") or [] if isinstance(r, dict)]
        found: dict[str, Any] = model["findings"] if isinstance(model.get("findings"), dict) else {}
        self.findings: list[FindingChange] = [FindingChange.from_model({**f, "change": change})
                                              for change in ("new", "resolved", "persisting")
                                              for f in found.get(change) or [] if isinstance(f, dict)]
        self.regressions: list[str] = [str(r) for r in model.get("regressions") or []]
        self.summary: list[str] = [str(r) for r in model.get("summary") or []]

    def table(self) -> pd.DataFrame:
        """Every metric's percentiles before → after as one DataFrame (a row per metric and
        percentile), for sorting and plotting in a notebook."""
        from dslogs._extras import need

        pandas = need("pandas", "Diff.table")
        rows = [{"metric": c.metric, "label": c.label, "kind": c.kind, "unit": c.unit, "percentile": q,
                 **{k: v for k, v in vars(pc).items() if k != "ci_pct"},
                 "ci_low_pct": pc.ci_pct[0] if pc.ci_pct else None,
                 "ci_high_pct": pc.ci_pct[1] if pc.ci_pct else None}
                for c in self.changes for q, pc in c.percentiles.items()]
        frame: pd.DataFrame = pandas.DataFrame(rows)
        return frame

    def has_regression(self) -> bool:
        """A significant regression beyond the limit (``dslogs diff --fail-on-regression``)."""
        from dslogs.analyzer.model.diff import has_regression

        return bool(has_regression(self.model))

    def render(self, fmt: str = "html") -> str:
        from dslogs.analyzer.render.diff_html import render_diff

        return str(render_diff(self.model, fmt))

    def _specs(self) -> dict[str, dict[str, Any]]:
        from dslogs.analyzer.render.charts.specs import page_charts

        return {c.id: c.spec for c in page_charts("diff", self.model)}

    def __repr__(self) -> str:
        new = sum(f.change == "new" for f in self.findings)
        return (f"<dslogs.Diff regression={self.has_regression()}, {len(self.regressions)} regressed metric(s), "
                f"{new} new finding(s)>")


def compare(before: Any, after: Any, tz: str | None = None,
            thresholds: str | os.PathLike[str] | None = None,
            limit: float | None = None, session_attr: str | None = None, engine: str = "duckdb") -> Diff:
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.model.diff import REGRESSION_PCT
    from dslogs.analyzer.usecases.diff import diff

    side = Selection.build(_paths(before), tz=tz, thresholds_file=thresholds, session_attr=session_attr, engine=engine)
    model = diff(side, side.with_paths(_paths(after)), REGRESSION_PCT if limit is None else limit)
    return Diff(model)
