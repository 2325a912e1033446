"""Comparing report models across runs: what describes the run rather than the logs."""

from __future__ import annotations

import copy

# Differs between any two runs, cached or not. Spelled out here rather than taken from
# dslogs.analyzer.model.result_cache.RUN_KEYS so a test fails if the code starts ignoring more of the model.
RUN_INGEST = ("seconds", "read_files", "cached_files", "renamed_files", "cache")


def stable(model: dict) -> dict:
    """The model without generated_at and the ingest block's run counters."""
    m = copy.deepcopy(model)
    m.pop("generated_at")
    for k in RUN_INGEST:
        m["ingest"].pop(k, None)
    return m


def record_windows(monkeypatch) -> list[bool]:
    """Whether each run took its window from the derived tables (viewdefs.window_from_derived's
    answers, in order)."""
    from dslogs.analyzer.ingest import viewdefs

    calls: list[bool] = []
    original = viewdefs.window_from_derived

    def recording(*args, **kw):
        calls.append(original(*args, **kw))
        return calls[-1]

    monkeypatch.setattr(viewdefs, "window_from_derived", recording)
    return calls


def uncached_report_text(folder, tz: str | None = None) -> str:
    """The JSON report of ``folder`` read without the cache, less what describes the run (its
    time and how long reading took): equal text for equal reports."""
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.model.report import report_to_json
    from dslogs.analyzer.usecases.analyze import build_report

    db = open_logs([str(folder)], use_cache=False, tz=tz)
    try:
        model = build_report(db)
    finally:
        db.close()
    model.pop("generated_at")
    model["ingest"].pop("seconds")  # how long reading took
    return report_to_json(model)
