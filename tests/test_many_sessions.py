"""The Python paths that run once per session, made linear for tens of thousands of sessions,
give the direct versions' answers: memory_leak's "most sessions of the process at once" check by
binary search (rules._Overlaps, against the pairwise rules._overlap) and the model's session list
built only for the sessions it lists (report._sessions_block)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.rules.attribution import _overlap, _Overlaps

TIMES = [f"2026-11-23T10:{m:02d}:00.000+00:00" for m in range(12)]


@st.composite
def groups(draw, allow_inverted=False):
    n = draw(st.integers(1, 14))
    group = []
    for i in range(n):
        if draw(st.booleans()) and draw(st.booleans()):
            first = last = None
        else:
            a, b = draw(st.sampled_from(TIMES)), draw(st.sampled_from(TIMES))
            first, last = (a, b) if allow_inverted else (min(a, b), max(a, b))
        group.append(
            {
                "session_id": f"s{i}",
                "first_ts": first,
                "last_ts": last,
                "flagged": draw(st.booleans()),
            }
        )
    return group


def pairwise(group):
    flagged = [v for v in group if v["flagged"]]
    co = {v["session_id"]: [u for u in group if u is v or _overlap(u, v)] for v in flagged}
    counts = {sid: len(us) for sid, us in co.items()}
    flagged_counts = {sid: sum(1 for u in us if u["flagged"]) for sid, us in co.items()}
    active = {u["session_id"] for us in co.values() for u in us}
    return counts, flagged_counts, active


def fast(group):
    flagged = [v for v in group if v["flagged"]]
    co = _Overlaps(group, flagged)
    return ({v["session_id"]: co.count(v) for v in flagged}, {v["session_id"]: co.flagged_count(v) for v in flagged},
            co.active_ids())  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(groups())
def test_binary_search_matches_pairwise(group):
    assert fast(group) == pairwise(group)


@settings(max_examples=150, deadline=None)
@given(groups(allow_inverted=True))
def test_inverted_intervals_fall_back_to_pairwise(group):
    assert fast(group) == pairwise(group)


def test_touching_intervals_overlap():
    a = {"session_id": "a", "first_ts": TIMES[0], "last_ts": TIMES[2], "flagged": True}
    b = {"session_id": "b", "first_ts": TIMES[2], "last_ts": TIMES[4], "flagged": False}
    c = {"session_id": "c", "first_ts": TIMES[5], "last_ts": TIMES[6], "flagged": False}
    co = _Overlaps([a, b, c], [a])
    assert (co.count(a), co.flagged_count(a), co.active_ids()) == (2, 1, {"a", "b"})


def _sessions_block_every_row(metrics, by_session, findings, thresholds):
    """report._sessions_block as it was: a row for every session, then the cut."""
    from dslogs.analyzer.model.report import (
        RULE_IDS,
        SESSION_KEYS,
        SEVERITY_RANK,
        errors_note,
        slope_ok,
    )

    worst = {}
    for f in findings:
        for sid in f["session_ids"]:
            worst[sid] = min(SEVERITY_RANK[f["severity"]], worst.get(sid, 9))
    rises = {
        r["session_id"]: r["reserved_last_mb"] - r["reserved_first_mb"]
        for r in metrics["memory_per_session"]
    }
    rows = []
    for r in metrics["session_summary"]:
        row = {k: r.get(k) for k in SESSION_KEYS}
        row["reserved_rise_mb"] = rises.get(r["session_id"])
        row["slope_ok"] = slope_ok(row.get("duration_min"))
        row["errors_note"] = errors_note(row.get("errors"), None)  # no OOM metric here
        row["findings"] = sorted(set(by_session.get(r["session_id"], [])), key=RULE_IDS.index)
        rows.append(row)
    cap = thresholds["report"]["max_sessions"]
    flagged = sorted((r for r in rows if r["findings"]),
                     key=lambda r: (worst.get(r["session_id"], 9), r.get("first_ts") or "", r["session_id"]))  # fmt: skip
    return (flagged + [r for r in rows if not r["findings"]])[: max(cap, len(flagged))]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(0, 8), st.data())
def test_sessions_block_lists_the_same_rows_as_building_every_row(n, cap, data):
    from dslogs.analyzer.model.report import _sessions_block

    summary = [
        {"session_id": f"s{i:02d}", "first_ts": TIMES[i % 12], "requests": i} for i in range(n)
    ]
    memory = [
        {"session_id": f"s{i:02d}", "reserved_first_mb": 1.0, "reserved_last_mb": float(i)}
        for i in range(n)
    ]
    flagged = data.draw(st.sets(st.integers(0, n - 1)))
    findings = [{"rule": "memory_leak", "severity": data.draw(st.sampled_from(["critical", "warning"])),
                 "session_ids": [f"s{i:02d}"]} for i in sorted(flagged)]  # fmt: skip
    by_session = {f["session_ids"][0]: [f["rule"]] for f in findings}
    metrics = {"session_summary": summary, "memory_per_session": memory}
    thresholds = {**defaults(), "report": {**defaults()["report"], "max_sessions": cap}}
    got = _sessions_block(metrics, by_session, findings, thresholds)
    # the same rows; what the rules judged of each (no samples here: nothing) is beside
    assert all(r.pop("judged") == {} for r in got)
    assert got == _sessions_block_every_row(metrics, by_session, findings, thresholds)
