"""``dslogs.diff``: before against after, as ``dslogs diff BEFORE AFTER``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dslogs._report import Page, _float, _int, _str

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = ("p50", "p95", "p99")


def _paths(side: Any) -> list[str]:
    if isinstance(side, (str, os.PathLike)):
        return [os.fspath(side)]
    return [os.fspath(p) for p in side]


@dataclass(frozen=True)
class PercentileChange:
    """One percentile of a metric, before → after, with its confidence interval and verdict."""

    before: float | None
    after: float | None
    change_pct: float | None
    ci_pct: tuple[float, float] | None  # the change's interval (bootstrap), %
    significant: bool
    verdict: str  # regression, improvement, steady, mix, too few

    @classmethod
    def from_model(cls, d: Any) -> PercentileChange | None:
        if not isinstance(d, dict):
            return None
        ci = d.get("ci_pct")
        return cls(before=_float(d.get("before")), after=_float(d.get("after")),
                   change_pct=_float(d.get("change_pct")),
                   ci_pct=(float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2
                   and all(_float(x) is not None for x in ci) else None,
                   significant=bool(d.get("significant")), verdict=_str(d.get("verdict")))


@dataclass(frozen=True)
class MetricChange:
    """A stage's or a request metric's latency before → after (TTFT, TPOT, prefill, ...)."""

    metric: str  # ttft_ms, prefill_ms, ...
    label: str
    kind: str  # stage or request
    unit: str
    verdict: str
    count_before: int
    count_after: int
    percentiles: dict[str, PercentileChange] = field(default_factory=dict)  # p50, p95, p99

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> MetricChange:
        pcts = {q: pc for q in PERCENTILES if (pc := PercentileChange.from_model(d.get(q))) is not None}
        return cls(metric=_str(d.get("metric")), label=_str(d.get("label")), kind=_str(d.get("kind")),
                   unit=_str(d.get("unit")), verdict=_str(d.get("verdict")),
                   count_before=_int(d.get("count_before")), count_after=_int(d.get("count_after")),
                   percentiles=pcts)


@dataclass(frozen=True)
class RateChange:
    """A rate before → after (error rate, goodput, ...), in points, with its test."""

    metric: str
    label: str
    before: float | None
    after: float | None
    change_pts: float | None
    p_value: float | None
    significant: bool
    verdict: str

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> RateChange:
        return cls(metric=_str(d.get("metric")), label=_str(d.get("label")), before=_float(d.get("before")),
                   after=_float(d.get("after")), change_pts=_float(d.get("change_pts")),
                   p_value=_float(d.get("p_value")), significant=bool(d.get("significant")),
                   verdict=_str(d.get("verdict")))


@dataclass(frozen=True)
class FindingChange:
    """A finding that is new after, resolved since before, or there on both sides."""

    change: str  # new, resolved or persisting
    rule: str
    severity: str
    scope: str
    message: str
    fix: str
    sessions: int
    hosts: list[str] = field(default_factory=list)

    @classmethod
    def from_model(cls, change: str, d: dict[str, Any]) -> FindingChange:
        return cls(change=change, rule=_str(d.get("rule")), severity=_str(d.get("severity")),
                   scope=_str(d.get("scope")), message=_str(d.get("message")), fix=_str(d.get("fix")),
                   sessions=_int(d.get("sessions")), hosts=[str(h) for h in d.get("hosts") or []])


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
        self.findings: list[FindingChange] = [FindingChange.from_model(change, f)
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
        from analyzer.model.diff import has_regression

        return bool(has_regression(self.model))

    def render(self, fmt: str = "html") -> str:
        from analyzer.render.diff_html import render_diff

        return str(render_diff(self.model, fmt))

    def _specs(self) -> dict[str, dict[str, Any]]:
        from analyzer.render.charts.specs import page_charts

        return {c.id: c.spec for c in page_charts("diff", self.model)}

    def __repr__(self) -> str:
        new = sum(f.change == "new" for f in self.findings)
        return (f"<dslogs.Diff regression={self.has_regression()}, {len(self.regressions)} regressed metric(s), "
                f"{new} new finding(s)>")


def compare(before: Any, after: Any, tz: str | None = None,
            thresholds: str | os.PathLike[str] | None = None,
            limit: float | None = None, session_attr: str | None = None, engine: str = "duckdb") -> Diff:
    import analyzer.rules  # noqa: F401  (the rules declare their threshold tables)
    from analyzer.core.selection import Selection
    from analyzer.model.diff import REGRESSION_PCT
    from analyzer.usecases.diff import diff

    side = Selection.build(_paths(before), tz=tz, thresholds_file=thresholds, session_attr=session_attr, engine=engine)
    model = diff(side, side.with_paths(_paths(after)), REGRESSION_PCT if limit is None else limit)
    return Diff(model)
