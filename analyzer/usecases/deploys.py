"""``dslogs deploys``: the deploys of a log set (``model.deploys``), each analysed over its own
window as ``dslogs analyze`` does and compared with the one before it by ``dslogs diff``'s
``diff_sides``; without records, a change point in the per-minute latencies."""

from __future__ import annotations

from datetime import datetime

from dslogs.analyzer import ingest
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.jsonable import clean
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.model import deploys as dm
from dslogs.analyzer.model.diff import REGRESSION_PCT, diff_sides
from dslogs.analyzer.usecases.analyze import load_side


def _timeline(selection: Selection, change_point: bool = False, read: tuple[str, list[dm.Instance]] | None = None,
              ) -> tuple[str, list[dm.Instance], list[list[dm.Instance]], dict | None]:
    """The deploys of the whole log set (so d1, d2, ... are the same whatever window a command
    looks at), read with DuckDB on every engine (the records are a handful of rows), or ``read``
    from it already (``read_instances`` of an open LogSet's ``whole_events``); with
    ``change_point``, the candidate minute of a regression within the selection's window when
    there are no records."""
    if read is not None and not change_point:
        source, insts = read
        return source, insts, dm.group_deploys(insts), None
    whole = selection.window(None, None)
    with ingest.open(whole, materialize=False) as db:
        source, insts = dm.read_instances(db.con)
        candidate = dm.candidate_change(db.con) if change_point and source != "records" and not selection.windowed else None
    if change_point and source != "records" and selection.windowed:
        with ingest.open(selection, materialize=False) as db:
            candidate = dm.candidate_change(db.con)
    return source, insts, dm.group_deploys(insts), candidate


def _side(selection: Selection, lo: datetime | None, hi: datetime | None, label: str):
    return load_side(selection.window(lo, hi, dm.iso(lo), dm.iso(hi)), label)


def deploys(selection: Selection, limit: float = REGRESSION_PCT, only_recorded: bool = False,
            change_point: bool = True, baseline_outside: bool = True,
            read: tuple[str, list[dm.Instance]] | None = None) -> dict:
    """The deploys model ``dslogs.deploys/1`` of one log set; ``only_recorded``: no deploys (and no
    analysis) when the logs have no records and no OTLP versions; ``change_point``: look for one
    when there are no records (two more analyses). In a window, the first deploy is compared with
    the deploy before it over that deploy's whole window, outside the asked one (its row's
    ``baseline`` says so); ``baseline_outside=False`` leaves it unjudged (a caller that drops it).
    ``read``: the whole log set's starts, read already (see ``_timeline``)."""
    from dslogs.analyzer import __version__

    if selection.windowed:
        # a deploy's window is cut from the whole log set: a window would cut a deploy short
        lo, hi = selection.since, selection.until
    else:
        lo = hi = None
    source, insts, groups, candidate = _timeline(selection, change_point and not only_recorded, read)
    if only_recorded and source == "processes":
        groups, candidate = [], None
    starts = [g[0].start for g in groups]
    rows = []
    prev_side = prev_cfg = prev_ref = None
    before = None  # the last deploy wholly before the asked window
    for n, (group, (w_lo, w_hi)) in enumerate(zip(groups, dm.window_bounds(starts), strict=True)):
        whole = (w_lo, w_hi)
        if lo is not None:
            w_lo = max(w_lo, lo) if w_lo is not None else lo
        if hi is not None:
            w_hi = min(w_hi, hi) if w_hi is not None else hi
        if w_lo is not None and w_hi is not None and w_lo >= w_hi:
            if lo is not None and whole[1] is not None and whole[1] <= lo:
                before = (n, group, whole)
            continue  # outside the asked window
        if prev_side is None and before is not None and baseline_outside:
            # the deploy before this one ran before the window: it is the baseline all the same
            b_n, b_group, (b_lo, b_hi) = before
            prev_side = _side(selection, b_lo, b_hi, _side_label(b_n, b_group))
            prev_cfg = dm.merged_config(b_group)
            prev_ref = {"id": dm.deploy_id(b_n), "since": dm.iso(b_lo), "until": dm.iso(b_hi), "outside_window": True}
        label = next((i.label for i in group if i.label), None)
        did = dm.deploy_id(n)
        side = _side(selection, w_lo, w_hi, _side_label(n, group))
        cfg = dm.merged_config(group)
        diff = diff_sides(prev_side, side, limit) if prev_side is not None else None
        verdict, reasons = dm.verdict(diff)
        window = side.model.get("window") or {}
        rows.append({
            "id": did, "label": label, "start": dm.iso(group[0].start),
            "first_event": window.get("first_event"), "last_event": window.get("last_event"),
            "requests": (side.model.get("requests") or {}).get("count") or 0,
            "errors": (side.model.get("requests") or {}).get("errors") or 0,
            "processes": [{"host": i.host, "pid": i.pid, "key": i.key} for i in group],
            "config": cfg,
            "changes": dm.changes(prev_cfg, cfg) if prev_cfg is not None else [],
            "verdict": verdict, "reasons": reasons,
            "baseline": prev_ref if diff is not None else None,
            "metric_changes": dm.metric_changes(diff),
            "memory": diff.get("memory") if diff else [],
            "summary": diff.get("summary") if diff else [],
        })
        prev_side, prev_cfg = side, cfg
        prev_ref = {"id": did, "since": dm.iso(w_lo), "until": dm.iso(w_hi), "outside_window": False}
    found = _change_point(selection, candidate, insts, limit) if candidate and change_point else None
    notes = []
    if source == "processes":
        notes.append("no deploy records in these logs (the dslogs collector writes them; OTLP spans give them "
                     "with service.version): what each process ran with is unknown, so its starts are listed as one "
                     "deploy and a regression among them is searched for as a change point.")
    model = {"schema": dm.SCHEMA, "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
             "dslogs_version": __version__, "source": source, "regression_threshold_pct": limit,
             "deploys": rows, "change_point": found, "notes": notes}
    return clean(model)


def _side_label(n: int, group: list[dm.Instance]) -> str:
    label = next((i.label for i in group if i.label), None)
    return f"{dm.deploy_id(n)} ({label or group[0].start.isoformat(timespec='seconds')})"


def _change_point(selection: Selection, candidate: dict, insts: list[dm.Instance], limit: float) -> dict | None:
    """The candidate minute, diffed before against after; kept only when it is a regression."""
    at = candidate["at"]
    before = _side(selection, selection.since, at, f"before {at.isoformat(timespec='minutes')}")
    after = _side(selection, at, selection.until, f"from {at.isoformat(timespec='minutes')}")
    diff = diff_sides(before, after, limit)
    verdict, reasons = dm.verdict(diff)
    if verdict != "regression":
        return None
    near = dm.near_start(at, insts)
    where = (f"a process started there ({near.host or 'unnamed host'} pid {near.pid}, {near.start.isoformat(timespec='seconds')})"
             if near is not None and near.start > insts[0].start else "no deploy found there")
    return {"at": dm.iso(at), "metric": candidate["metric"], "verdict": verdict, "reasons": reasons,
            "metric_changes": dm.metric_changes(diff), "deploy": None if near is None else near.key,
            "summary": [f"a regression began at {at.isoformat(timespec='minutes')} ({', '.join(reasons[:4])}); {where}."]}


def report_deploys(selection: Selection, read: tuple[str, list[dm.Instance]] | None = None) -> list[dict]:
    """The deploys a report's timelines mark: each one's id, label, first event and verdict, from
    ``deploys`` (one analysis per deploy; no change-point search); none when no deploy but the log
    set's first starts in the selection's window (nothing there to judge). ``read``: as ``deploys``;
    without it the whole log set is read here, once."""
    read = read or _timeline(selection)[:2]
    if not dm.starts_within(dm.group_deploys(read[1]), selection.since, selection.until):
        return []
    keep = ("id", "label", "first_event", "verdict", "reasons", "baseline")
    return [{k: d.get(k) for k in keep} for d in deploys(selection, change_point=False, read=read)["deploys"]]


def week_deploys(selection: Selection, week: dict) -> list[dict]:
    """The deploys that started in a weekly model's week, each judged against the deploy before it
    (which may have started the week before): recorded deploys only, so a weekly report over logs
    without records analyses nothing more."""
    this, prev = week.get("this") or {}, week.get("previous") or {}
    lo, hi = prev.get("since") or this.get("since"), this.get("until")
    if not lo or not hi:
        return []
    lo_t, hi_t = datetime.fromisoformat(lo), datetime.fromisoformat(hi)
    model = deploys(selection.window(lo_t, hi_t, lo, hi), only_recorded=True, baseline_outside=False)
    since = datetime.fromisoformat(this["since"]) if this.get("since") else lo_t
    return [d for d in model["deploys"] if datetime.fromisoformat(d["start"]) >= since]


def deploy_sides(selection: Selection, names: list[str]) -> tuple[Selection, Selection]:
    """``dslogs diff LOGS --deploy A --deploy B``: the two deploys' windows (ids d1, d2, ... as
    ``dslogs deploys`` lists them, or their labels)."""
    if len(names) != 2:
        raise UsageError("--deploy: give it twice, e.g. --deploy d1 --deploy d3 (ids or labels from `dslogs deploys`)")
    _, _, groups, _ = _timeline(selection)
    starts = [g[0].start for g in groups]
    bounds = dm.window_bounds(starts)
    out = []
    for name in names:
        hit = None
        for n, g in enumerate(groups):
            if name == dm.deploy_id(n) or any(i.label == name for i in g):
                hit = n
                break
        if hit is None:
            known = ", ".join(f"{dm.deploy_id(n)}" + (f" ({g[0].label})" if g[0].label else "") for n, g in enumerate(groups))
            raise UsageError(f"--deploy {name}: no such deploy; these logs have {known or 'none'}")
        lo, hi = bounds[hit]
        out.append(selection.window(lo, hi, f"{name} {dm.iso(lo) or ''}", dm.iso(hi)))
    return out[0], out[1]


def deploys_logs(paths, limit: float = REGRESSION_PCT, **options) -> dict:
    """``deploys`` with the selection's options as keywords (``Selection.build``'s)."""
    return deploys(Selection.build(paths, **options), limit)
