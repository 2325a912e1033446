"""Rules at scale (issue 16 item 4): a finding over many sessions lists the worst ones, not the
first ids in alphabetical order (session_count keeps the full number)."""

from __future__ import annotations

from analyzer.rules import MAX_FINDING_SESSIONS, rule_gpu_wait
from analyzer.thresholds import defaults


def test_a_finding_over_many_sessions_lists_the_worst_ones():
    th = defaults()
    rows = [{"session_id": f"s{i:05d}", "host": "gpu-01", "count": 10, "gpu_wait_pct_p50": 61 + i / 100,
             "gpu_wait_pct_p90": 70, "gpu_wait_pct_max": 80} for i in range(1000)]  # fmt: skip
    outcome = rule_gpu_wait({"gpu_wait_per_session": rows}, {}, th)
    (f,) = outcome.findings
    assert f["session_count"] == 1000 and len(f["session_ids"]) == MAX_FINDING_SESSIONS
    # the listed ones are the highest waits (the rule's order), shown sorted by id
    assert f["session_ids"] == [f"s{i:05d}" for i in range(1000 - MAX_FINDING_SESSIONS, 1000)]
