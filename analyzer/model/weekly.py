"""The weekly model (``dslogs.weekly/1``): one ISO week of logs against the week before.

Both weeks go through the same analysis as the daily report (``dslogs.analyzer.usecases.weekly`` opens
them); this module only compares the two report models: per-stage p50/p95 change (a rise over 20 % is a regression), request
latency and goodput, new / resolved / persisting findings, traffic, errors, sessions affected.

Default week: the last *full* ISO week present in the logs — the week of the newest log day if
that day is a Sunday (the week's last day), otherwise the week before it. Week boundaries are
local midnight on Mondays in `--tz` (default: this machine's zone), like legacy timestamps.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from pathlib import Path

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.severity import SEVERITIES
from dslogs.analyzer.core.textsafe import visible
from dslogs.analyzer.core.thresholds import WEEK_MIN_COVERAGE
from dslogs.analyzer.core.time import parse_iso
from dslogs.analyzer.model.diff import REGRESSION_PCT, change_pct, verdict_pct

WEEK_RE = re.compile(r"^(\d{4})-?W(\d{1,2})$", re.IGNORECASE)


# -- weeks ----------------------------------------------------------------------------------


def parse_week(text: str) -> tuple[int, int]:
    m = WEEK_RE.match(text.strip())
    if not m:
        raise UsageError(f"--week {text!r}: expected an ISO week like 2026-W48")
    year, week = int(m.group(1)), int(m.group(2))
    try:
        monday = date.fromisocalendar(year, week, 1)
    except ValueError:
        raise UsageError(f"--week {text!r}: {year} has no ISO week {week}") from None
    try:
        # the week before (compared against) and the week's end must exist too, with a day of
        # margin for any zone
        monday - timedelta(days=8)
        monday + timedelta(days=8)
    except OverflowError:
        raise UsageError(f"--week {text!r}: out of range (weeks of years 1 to 9999, not the first or last)") from None
    return year, week


def week_label(year: int, week: int) -> str:
    return f"{year}-W{week:02d}"


def previous_week(year: int, week: int) -> tuple[int, int]:
    iso = (date.fromisocalendar(year, week, 1) - timedelta(days=7)).isocalendar()
    return iso[0], iso[1]


def week_bounds(year: int, week: int, tz) -> tuple[datetime, datetime]:
    monday = date.fromisocalendar(year, week, 1)
    start = datetime.combine(monday, time(0), tzinfo=tz)
    end = datetime.combine(monday + timedelta(days=7), time(0), tzinfo=tz)
    return start, end


def default_week(last_day: date) -> tuple[int, int]:
    """The last full ISO week: the newest day's own week only if that day is its Sunday."""
    year, week, weekday = last_day.isocalendar()
    if weekday == 7:
        return year, week
    return previous_week(year, week)




# -- comparing two report models ---------------------------------------------------------


def _week_summary(model: dict, label: str, start: datetime, end: datetime) -> dict:
    """One side's facts. Session counts are the SQL ones: ``sessions_total`` (a row per session
    of the week) and each finding's ``session_count``, never the lengths of the capped id lists."""
    ingest = model.get("ingest") or {}
    requests = model.get("requests") or {}
    sessions = model.get("sessions") or []
    window = model.get("window") or {}
    findings = model.get("findings") or []
    listed = {s for f in findings for s in f.get("session_ids") or []}
    listed |= {s.get("session_id") for s in sessions if s.get("findings")}
    counts = [int(f.get("session_count") or len(f.get("session_ids") or [])) for f in findings]
    # The union of the findings' sessions is exact while no finding's list was cut; past that it
    # is at least the largest finding's count (and is said to be a lower bound).
    capped = any(c > len(f.get("session_ids") or []) for c, f in zip(counts, findings, strict=True))
    affected = max([len(listed), *counts])
    total = model.get("sessions_total")
    count = requests.get("count")
    errors = requests.get("errors")
    first, last = stamp(window.get("first_event")), stamp(window.get("last_event"))
    week_hours = (end - start).total_seconds() / 3600
    hours = None
    if first is not None and last is not None:
        hours = round(max(0.0, (min(last, end) - max(first, start)).total_seconds()) / 3600, 1)
    return {
        "week": label, "since": start.isoformat(), "until": end.isoformat(),
        "first_day": start.date().isoformat(), "last_day": (end - timedelta(days=1)).date().isoformat(),
        "first_event": window.get("first_event"), "last_event": window.get("last_event"),
        "hours": hours, "week_hours": round(week_hours, 1),
        "has_data": bool(ingest.get("events")),
        "files": ingest.get("files", 0), "events": ingest.get("events", 0), "bad_lines": ingest.get("bad_lines", 0),
        "hosts": [h.get("host") for h in model.get("hosts") or []],
        "requests": count or 0, "errors": errors or 0,
        "error_rate": round(errors / count, 4) if count and errors is not None else None,
        "goodput": requests.get("goodput"),
        "sessions": int(total) if total is not None else len(sessions),
        "sessions_affected": affected, "sessions_affected_at_least": capped,
        "findings": {sev: sum(1 for f in findings if f.get("severity") == sev)
                     for sev in SEVERITIES},
    }  # fmt: skip


def too_partial(side: dict) -> str | None:
    """Why ``side`` cannot carry a regression verdict (a part of its week, or too few requests),
    or None."""
    from dslogs.analyzer.model.diff import MIN_COUNT

    if not side["has_data"]:
        return None  # an empty side: every finding is new, and the notes say so
    if side["hours"] is not None and side["hours"] < WEEK_MIN_COVERAGE * side["week_hours"]:
        return (f"{side['week']} covers {side['hours']:g} h of its {side['week_hours']:g} h "
                f"(under {WEEK_MIN_COVERAGE:.0%})")  # fmt: skip
    if side["requests"] < MIN_COUNT:
        return f"{side['week']} holds {side['requests']} requests (under {MIN_COUNT})"
    return None


def _weekly_rows(rows: list[dict], kind: str) -> list[dict]:
    """The diff's metric rows in the weekly shape (p50/p95, `_prev` for last week)."""
    out = []
    for r in rows:
        if kind == "stage":
            row = {"stage": r["label"], "count": r.get("count_after"), "count_prev": r.get("count_before")}
        else:
            row = {"metric": r["metric"], "label": r["label"], "unit": r["unit"]}
        for q in ("p50", "p95"):
            c = r.get(q) or {}
            now_key = f"{q}_ms" if kind == "stage" else q
            row[now_key] = c.get("after")
            row[f"{now_key}_prev"] = c.get("before")
            row[f"{q}_change_pct"] = c.get("change_pct")
            row[f"{q}_verdict"] = c.get("verdict", "n/a")
        row["regression"] = "regression" in (row["p50_verdict"], row["p95_verdict"])
        out.append(row)
    return out


def compare_models(this: dict, prev: dict, week: tuple[int, int], tz, limit: float = REGRESSION_PCT) -> dict:
    """The weekly model: `this` week's report model against `prev` (the week before).

    A case of `dslogs diff` (analyzer/model/diff.py): the two weeks' models are diffed as saved
    reports, so a `--previous` model and the Spark engine give the same weekly report as
    analysing both weeks with DuckDB; `dslogs diff LOGS --before … --after …` adds significance
    and the request mix."""
    from dslogs.analyzer.model.diff import Side, diff_sides

    pweek = previous_week(*week)
    this_start, this_end = week_bounds(*week, tz)
    prev_start, prev_end = week_bounds(*pweek, tz)
    d = diff_sides(Side(week_label(*pweek), prev or {}, "report"), Side(week_label(*week), this or {}, "report"), limit)
    stages = _weekly_rows(d["stages"], "stage")
    metrics = _weekly_rows(d["request_metrics"], "request")

    this_sum = _week_summary(this, week_label(*week), this_start, this_end)
    prev_sum = _week_summary(prev, week_label(*pweek), prev_start, prev_end)
    traffic = []
    for key, label, rise_is_bad in (("requests", "requests", None), ("errors", "errors", True),
                                    ("error_rate", "error rate", True), ("goodput", "goodput", False),
                                    ("sessions", "sessions", None), ("sessions_affected", "sessions affected", True),
                                    ("events", "events", None), ("bad_lines", "damaged lines", True)):
        pct = change_pct(this_sum[key], prev_sum[key])
        traffic.append({"key": key, "label": label, "this": this_sum[key], "previous": prev_sum[key],
                        "change_pct": pct,
                        "verdict": "n/a" if rise_is_bad is None else verdict_pct(pct, rise_is_bad, limit)})
    notes = []
    partial = [why for why in (too_partial(prev_sum), too_partial(this_sum)) if why]
    if partial:
        # "too few", as diff says: no side that holds a part of its week is called a regression
        for row in traffic:
            if row["verdict"] not in ("n/a",) and row["change_pct"] is not None:
                row["verdict"] = "too few"
        for row in stages + metrics:
            for q in ("p50", "p95"):
                if row[f"{q}_verdict"] in ("regression", "improved", "steady"):
                    row[f"{q}_verdict"] = "too few"
            row["regression"] = False
        notes.append("; ".join(partial) + ": no regression verdicts, changes shown as they are.")
    summary = [line for line in d["summary"] if not (partial and line.startswith("REGRESSION"))]
    return {
        "schema": "dslogs.weekly/1",
        "generated_at": this.get("generated_at") or datetime.now().astimezone().isoformat(timespec="seconds"),
        "dslogs_version": this.get("dslogs_version") or prev.get("dslogs_version") or "",
        "week": week_label(*week),
        "previous_week": week_label(*pweek),
        "tz": str(tz),
        "regression_threshold_pct": limit,
        "this": this_sum,
        "previous": prev_sum,
        "traffic": traffic,
        "stages": stages,
        "request_metrics": metrics,
        "regressions": sum(r["regression"] for r in stages) + sum(r["regression"] for r in metrics),
        "findings": d["findings"],
        "summary": summary,
        "memory": d["memory"],
        "notes": notes,
        "errors": {"this": this.get("errors") or [], "previous": prev.get("errors") or []},
    }


def stamp(text) -> datetime | None:
    try:
        stamp = parse_iso(str(text))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else None


def load_previous_model(path: Path, start: datetime, end: datetime) -> dict:
    """A saved report model standing for the week [start, end): it must be a dslogs report whose
    events all lie in that week (a model of another week would make every number a false
    regression)."""
    from dslogs.analyzer.model.load import check_model, parse_json

    label = f"--previous {visible(str(path))}"
    model = parse_json(path, label)
    if not isinstance(model, dict) or "schema" not in model:
        raise UsageError(f"{label}: not a dslogs report model; "
                         "save one with `dslogs analyze LOGS --since … --until … --format json --out FILE`")  # fmt: skip
    check_model(model, "report", label)
    window = model.get("window") or {}
    first, last = stamp(window.get("first_event")), stamp(window.get("last_event"))
    if first is not None and last is not None and (first < start or last >= end):
        raise UsageError(f"--previous {path}: its events run {window['first_event']} – {window['last_event']}, "
                         f"not inside the previous week {start.date()} – {(end - timedelta(days=1)).date()}")  # fmt: skip
    return model
