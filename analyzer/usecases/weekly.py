"""``dslogs report weekly``: one ISO week of the selected logs against the week before.

Default week: the last *full* ISO week present in the logs (``model.weekly.default_week``). Both
weeks are analysed as ``dslogs analyze`` would over their bounds (``usecases.analyze``), and
``model.weekly.compare_models`` compares the two report models.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path

from dslogs.analyzer import ingest
from dslogs.analyzer.core.errors import DslogsError, UsageError
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.core.time import zone as tz_zone
from dslogs.analyzer.model.weekly import (
    compare_models,
    default_week,
    load_previous_model,
    parse_week,
    previous_week,
    stamp,
    week_bounds,
    week_label,
)
from dslogs.analyzer.usecases.analyze import analyze


def newest_log_day(selection: Selection) -> date:
    """The newest day in the logs: from the days discovery reads in file names when every file
    has one (cheap, no reading), else the newest event's day (datasets, unnamed files)."""
    files = ingest.discover(list(selection.paths)).files
    if files and all(f.day is not None for f in files):
        return max(f.day for f in files)
    days = event_days(selection)
    if not days:
        raise UsageError(f"no events with timestamps in {', '.join(selection.paths)}: cannot pick a default --week")
    return days[-1]


def event_days(selection: Selection) -> list[date]:
    """The days (in the selection's zone) that hold events, from the data: with DuckDB every day
    (SQL over the events), with Spark the days between the first and the last event."""
    whole = selection.window(None, None)
    if whole.engine == "duckdb":
        # ingest.open sets the session's TimeZone to tz: a TIMESTAMPTZ cast to DATE is tz's day
        with ingest.open(whole, materialize=False) as db:
            return [r[0] for r in db.con.execute(
                "SELECT DISTINCT CAST(ts AS DATE) AS d FROM events WHERE ts IS NOT NULL ORDER BY d").fetchall()]  # fmt: skip
    window = analyze(whole).get("window") or {}
    first, last = stamp(window.get("first_event")), stamp(window.get("last_event"))
    if first is None or last is None:
        return []
    zone = tz_zone(whole.tz)
    d, end = first.astimezone(zone).date(), last.astimezone(zone).date()
    days = []
    while d <= end:
        days.append(d)
        d += timedelta(days=1)
    return days


def weeks_with_data(selection: Selection) -> list[str]:
    """ISO weeks (in the selection's zone) that hold events, from the data itself."""
    return sorted({week_label(*d.isocalendar()[:2]) for d in event_days(selection)})


def weekly(selection: Selection, week: str | None = None, previous: Path | None = None) -> dict:
    """Analyse ``week`` (default: the last full ISO week in the logs) and the week before it.

    ``previous``: last week's report model saved by ``analyze --format json``, used instead of
    analysing that week again (on a fleet that halves the weekly job).

    An empty week says which weeks hold logs; when the default (last full) week is empty, the
    newest day's own week so far is shown instead (fresh logs, started this week)."""
    zone = tz_zone(selection.tz)
    last_day = None if week else newest_log_day(selection)
    target = parse_week(week) if week else default_week(last_day)
    prev_start, prev_end = week_bounds(*previous_week(*target), zone)
    # A bad --previous fails before any (possibly cluster-sized) analysis runs.
    prev = load_previous_model(previous, prev_start, prev_end) if previous is not None else None

    def analyze_week(start: datetime, end: datetime) -> dict:
        return analyze(selection.window(start, end, start.isoformat(), end.isoformat()))

    notes: list[str] = []
    this = analyze_week(*week_bounds(*target, zone))
    so_far = None
    if not (this.get("ingest") or {}).get("events"):
        have = weeks_with_data(selection)
        own = tuple(last_day.isocalendar()[:2]) if last_day else None
        if own and own != target and week_label(*own) in have:
            notes.append(f"{week_label(*target)}, the last full week, has no logs; showing {week_label(*own)} so far "
                         f"({date.fromisocalendar(*own, 1)} – {last_day}). Weeks with logs: {', '.join(have)}.")  # fmt: skip
            target, so_far = own, last_day
            prev_start, prev_end = week_bounds(*previous_week(*target), zone)
            if previous is not None:
                prev = load_previous_model(previous, prev_start, prev_end)
            this = analyze_week(*week_bounds(*target, zone))
        else:
            notes.append(f"No logs in {week_label(*target)}. Weeks with logs: {', '.join(have) or 'none'}; "
                         "pick one with --week.")
    if prev is None:
        try:
            prev = analyze_week(prev_start, prev_end)
        except DslogsError:
            prev = {}  # nothing logged the week before: every finding is new
    model = compare_models(this, prev, target, zone)
    model["notes"] = notes + model["notes"]
    if so_far is not None:
        model["this"]["so_far"] = so_far.isoformat()
    return model


def build_weekly(paths, week: str | None = None, previous: Path | None = None, **options) -> dict:
    """``weekly`` with the selection's options as keywords (``Selection.build``'s), for scripts
    and tests."""
    return weekly(Selection.build(paths, **options), week=week, previous=previous)
