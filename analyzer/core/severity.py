"""Finding severities, most severe first: the one order findings are judged and listed in."""

from __future__ import annotations

from typing import Literal, get_args

# a Literal, so that the model's types (analyzer/model/types.py) and mypy see the same three
Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[str, ...] = get_args(Severity)
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def severity_rank(severity: str | None) -> int:
    """A severity's place in ``SEVERITIES``; an unknown or missing one sorts after them all."""
    return SEVERITY_RANK.get(severity or "", len(SEVERITIES))
