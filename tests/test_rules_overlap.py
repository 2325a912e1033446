"""memory_leak's "most sessions of the process at once" check by binary search (rules._Overlaps)
gives the pairwise scan's answers (rules._overlap) on any mix of intervals."""

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.rules import _overlap, _Overlaps

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
