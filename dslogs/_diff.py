"""``dslogs.diff``: before against after, as ``dslogs diff BEFORE AFTER``."""

from __future__ import annotations

import os
from typing import Any

from dslogs._report import Page


def _paths(side: Any) -> list[str]:
    if isinstance(side, (str, os.PathLike)):
        return [os.fspath(side)]
    return [os.fspath(p) for p in side]


class Diff(Page):
    """Before against after: latency changes with their significance, the request mix,
    findings new and resolved. ``model`` is the diff model (``dslogs diff --format json``)."""

    _title = "dslogs diff"

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model

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
        return f"<dslogs.Diff regression={self.has_regression()}>"


def compare(before: Any, after: Any, tz: str | None = None,
            thresholds: str | os.PathLike[str] | None = None,
            limit: float | None = None, session_attr: str | None = None) -> Diff:
    from analyzer.model.diff import REGRESSION_PCT, build_diff

    model = build_diff(before=_paths(before), after=_paths(after), tz=tz,
                       thresholds_file=thresholds,
                       limit=REGRESSION_PCT if limit is None else limit, session_attr=session_attr)
    return Diff(model)
