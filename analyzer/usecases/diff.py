"""``dslogs diff``: two sides (log sets, windows of one log set, or saved report models), each
opened once on the selection's engine and analysed as ``dslogs analyze`` does (the same report
model, so the same percentiles), compared by ``model.diff.diff_sides``."""

from __future__ import annotations

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.core.time import parse_window
from dslogs.analyzer.model.diff import REGRESSION_PCT, diff_sides, parse_range
from dslogs.analyzer.usecases.analyze import load_side


def diff(before: Selection, after: Selection, limit: float = REGRESSION_PCT) -> dict:
    """The diff model ``dslogs.diff/1`` of two selections."""
    return diff_sides(load_side(before, _label("before", before)), load_side(after, _label("after", after)), limit)


def _label(side: str, selection: Selection) -> str:
    if not selection.windowed:
        return side
    return f"{side} ({selection.since_text or ''}..{selection.until_text or ''})"


def split(selection: Selection, before_range: str | None, after_range: str | None) -> tuple[Selection, Selection]:
    """One log set split by time: ``--before A..B --after C..D`` (either end may be empty)."""
    if not before_range or not after_range:
        raise UsageError("give both --before START..END and --after START..END to split one log set by time")
    sides = []
    for text, option in ((before_range, "--before"), (after_range, "--after")):
        since, until = parse_range(text, option)
        try:
            lo, hi = parse_window(since, until, selection.tz)
        except UsageError as exc:
            raise UsageError(f"{option} {exc}") from None
        sides.append(selection.window(lo, hi, since, until))
    return sides[0], sides[1]


def sides(selection: Selection, before_range: str | None = None,
          after_range: str | None = None) -> tuple[Selection, Selection]:
    """``dslogs diff``'s two sides: the selection split by time (``--before``/``--after``), or
    its two paths BEFORE AFTER (log folders, files or saved report JSON)."""
    if before_range is not None or after_range is not None:
        return split(selection, before_range, after_range)
    if len(selection.paths) != 2:
        raise UsageError("usage: dslogs diff BEFORE AFTER, or dslogs diff LOGS... --before START..END --after START..END")
    return selection.with_paths(selection.paths[:1]), selection.with_paths(selection.paths[1:])


def build_diff(before: list[str] | None = None, after: list[str] | None = None, logs: list[str] | None = None,
               before_range: str | None = None, after_range: str | None = None, limit: float = REGRESSION_PCT,
               **options) -> dict:
    """``diff`` with the selection's options as keywords (``Selection.build``'s), for scripts and
    tests: BEFORE and AFTER log sets, or ``logs`` split by ``before_range`` / ``after_range``."""
    if logs is not None:
        b, a = split(Selection.build(logs, **options), before_range, after_range)
    else:
        b = Selection.build(before or [], **options)
        a = b.with_paths(after or [])
    return diff(b, a, limit)
