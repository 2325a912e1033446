"""``dslogs.diff``: before against after, as ``dslogs diff BEFORE AFTER``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from analyzer.core.errors import UsageError
from dslogs._report import SAVE_FORMATS, inline_frame


def _paths(side: Any) -> list[str]:
    if isinstance(side, (str, os.PathLike)):
        return [os.fspath(side)]
    return [os.fspath(p) for p in side]


class Diff:
    """Before against after: latency changes with their significance, the request mix,
    findings new and resolved. ``model`` is the diff model (``dslogs diff --format json``)."""

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model

    def has_regression(self) -> bool:
        """A significant regression beyond the limit (``dslogs diff --fail-on-regression``)."""
        from analyzer.model.diff import has_regression

        return bool(has_regression(self.model))

    def render(self, fmt: str = "html") -> str:
        from analyzer.render.diff_html import render_diff

        return str(render_diff(self.model, fmt))

    def to_json(self) -> str:
        return self.render("json")

    def to_markdown(self) -> str:
        return self.render("md")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the diff; the suffix picks the format (.html, .md, .json)."""
        target = Path(path)
        fmt = SAVE_FORMATS.get(target.suffix.lower())
        if fmt is None:
            raise UsageError(f"{target}: cannot tell the format from the suffix; use one of "
                             f"{', '.join(SAVE_FORMATS)}")
        target.write_text(self.render(fmt), encoding="utf-8")
        return target

    def _repr_html_(self) -> str:
        return inline_frame(self.render("html"), "dslogs diff")

    def __repr__(self) -> str:
        return f"<dslogs.Diff regression={self.has_regression()}>"


def compare(before: Any, after: Any, tz: str | None = None,
            thresholds: str | os.PathLike[str] | None = None,
            limit: float | None = None) -> Diff:
    from analyzer.model.diff import REGRESSION_PCT, build_diff

    model = build_diff(before=_paths(before), after=_paths(after), tz=tz,
                       thresholds_file=thresholds,
                       limit=REGRESSION_PCT if limit is None else limit)
    return Diff(model)
