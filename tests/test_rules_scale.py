"""Rules at scale (issue 16 item 4): memory_leak's "sessions active at the same time" counts
(rules._co_active, rules._active_with) against the pairwise definition (rules._overlap) they
replace: the same numbers on any group, including touching ranges, missing and reversed times;
a finding over many sessions lists the worst ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.rules import MAX_FINDING_SESSIONS, _active_with, _co_active, _overlap, rule_gpu_wait
from analyzer.thresholds import defaults

STAMP = st.one_of(
    st.none(), st.integers(0, 40).map(lambda m: f"2026-11-23T10:{m:02d}:00.000+00:00")
)


@st.composite
def groups(draw):
    n = draw(st.integers(1, 30))
    rows = []
    for i in range(n):
        first = draw(STAMP)
        last = draw(STAMP) if first else None
        if first and last is None:
            last = first  # a start always comes with an end (min/max of the same readings)
        rows.append(
            {
                "session_id": f"s{i}",
                "first_ts": first,
                "last_ts": last,
                "flagged": draw(st.booleans()),
            }
        )
    return rows


@settings(max_examples=400, deadline=None)
@given(groups())
def test_counts_match_the_pairwise_definition(group):
    flagged = [v for v in group if v["flagged"]]
    co = _co_active(group, flagged)
    for v in flagged:
        pairwise = [u for u in group if u is v or _overlap(u, v)]
        assert co[v["session_id"]] == (len(pairwise), sum(1 for u in pairwise if u["flagged"]))
    expected = {u["session_id"] for v in flagged for u in group if u is v or _overlap(u, v)}
    assert _active_with(group, flagged) == expected


def test_many_sessions_are_counted_without_a_pairwise_scan():
    # 60 k one-minute sessions of one process, a third flagged: pairwise this is ~1.2e9 checks
    group = [{"session_id": f"s{i}", "first_ts": f"{i:08d}", "last_ts": f"{i + 3:08d}", "flagged": i % 3 == 0}
             for i in range(60_000)]  # fmt: skip
    flagged = [v for v in group if v["flagged"]]
    co = _co_active(group, flagged)
    assert co["s300"] == (
        7,
        3,
    )  # s297..s303 overlap s300 (ends touching count); s297, s300, s303 flagged
    assert len(_active_with(group, flagged)) == 60_000


def test_a_finding_over_many_sessions_lists_the_worst_ones():
    th = defaults()
    rows = [{"session_id": f"s{i:05d}", "host": "gpu-01", "count": 10, "gpu_wait_pct_p50": 61 + i / 100,
             "gpu_wait_pct_p90": 70, "gpu_wait_pct_max": 80} for i in range(1000)]  # fmt: skip
    outcome = rule_gpu_wait({"gpu_wait_per_session": rows}, {}, th)
    (f,) = outcome.findings
    assert f["session_count"] == 1000 and len(f["session_ids"]) == MAX_FINDING_SESSIONS
    # the listed ones are the highest waits (the rule's order), shown sorted by id
    assert f["session_ids"] == [f"s{i:05d}" for i in range(1000 - MAX_FINDING_SESSIONS, 1000)]
