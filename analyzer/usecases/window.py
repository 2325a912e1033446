"""An empty window said once for every command: where the data is, and a window that holds it."""

from __future__ import annotations

from datetime import timedelta

from dslogs.analyzer import ingest
from dslogs.analyzer.core.selection import Selection


def empty_window_note(selection: Selection) -> dict | None:
    """The note for a window that holds no events while the files hold some: how many files, the
    data's first and last event, and a --since or --until that includes every one of them (in the
    logs' zone, as the options read it)."""
    from dslogs.analyzer.core.time import zone

    whole = selection.window(None, None)
    extent = ingest.data_extent(list(whole.paths), tz=whole.tz, cache=whole.cache, use_cache=whole.use_cache)
    first, last = extent["first"], extent["last"]
    if not extent["events"] or first is None or last is None:
        return None
    where = zone(selection.tz)
    if selection.until is not None and first >= selection.until:
        # the data lies after the window: an --until past the newest event's day takes it all
        hint = f"--until {(last.astimezone(where).date() + timedelta(days=1)).isoformat()}"
    else:
        # before it (or around it): a --since on the first event's day takes it all
        hint = f"--since {first.astimezone(where).date().isoformat()}"
    fmt = "%Y-%m-%d %H:%M:%S %z"
    return {
        "id": "empty_window",
        "message": f"no events in the window, but the {extent['files']:,} log file(s) hold {extent['events']:,} "
                   f"events from {first.strftime(fmt)} to {last.strftime(fmt)} (newest); {hint} would include them",
    }


def note_if_empty(selection: Selection, ingest_block: dict | None) -> dict | None:
    """``empty_window_note`` when a window was asked for and held no event."""
    if selection.windowed and not (ingest_block or {}).get("events"):
        return empty_window_note(selection)
    return None
