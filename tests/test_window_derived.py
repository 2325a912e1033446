"""A window over cached logs (analyzer/viewdefs.window_from_derived): requests and sessions wholly
inside the window come from the cache's derived tables, only the sessions its edges cut are
computed again. The report must equal the one computed from the logs alone (--no-cache) for any
window, apart from generated_at and the ingest block's run counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from dslogs.analyzer.ingest import viewdefs
from dslogs.analyzer.simulate import simulate
from dslogs.analyzer.usecases.analyze import analyze_logs
from tests.model_helpers import record_windows, stable

SCENARIOS = ["healthy", "memory_leak", "oom", "rss_growth", "beam_search", "bad_lines"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("window") / "logs"
    # 36 hours on two hosts in daily files (a window prunes some), ~200 sessions, some crossing
    # midnight
    simulate(out, SCENARIOS, seed=7, fmt="v1", events=60000, hosts=2, start="2026-11-23T18:00",
             hours=36, max_turns=6)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def cuts(logs) -> list[str]:
    """Instants in the middle of sessions (each a window edge that cuts a session)."""
    from dslogs.analyzer.ingest.logs import open_logs

    with open_logs([str(logs)], use_cache=False, materialize=False) as db:
        rows = db.con.execute(
            "SELECT first_ts + (last_ts - first_ts) / 2 FROM sessions "
            "WHERE last_ts - first_ts > INTERVAL 1 MINUTE ORDER BY first_ts"
        ).fetchall()
    picked = [rows[int(len(rows) * q)][0] for q in (0.1, 0.4, 0.7)]
    return [t.isoformat() for t in picked]


@pytest.fixture
def used(monkeypatch):
    """Records whether each run took its window from the derived tables."""
    return record_windows(monkeypatch)


# (since, until): an index into ``cuts`` (an instant inside a session), an ISO text, or None
WINDOWS = [
    (0, None),  # cuts the sessions running then, open end (an hourly cron's --since)
    (1, 2),  # both edges
    (None, 1),  # until only
    ("2026-11-24T23:00:00+00:00", None),  # the first day's file pruned
    ("2026-11-24T12:00:00+00:00", "2026-11-24T12:00:01+00:00"),  # a second: hardly any event
]


def edge(value, cuts):
    return cuts[value] if isinstance(value, int) else value


@pytest.mark.parametrize(("since", "until"), WINDOWS)
def test_a_window_over_the_derived_tables_equals_the_full_computation(
    logs, cuts, tmp_path, used, since, until
):
    since, until = edge(since, cuts), edge(until, cuts)
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)  # unwindowed: stores requests_all, sessions_all
    warm = analyze_logs([str(logs)], since=since, until=until, cache=cache)
    assert used[-1] is True  # the window was built from the derived tables
    cold = analyze_logs([str(logs)], since=since, until=until, use_cache=False)
    assert stable(warm) == stable(cold)


def test_the_derived_window_holds_sessions_inside_and_cut_like_the_views(logs, cuts, tmp_path):
    from dslogs.analyzer.ingest.logs import open_logs

    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)
    with open_logs([str(logs)], since=cuts[0], until=cuts[2], cache=cache, materialize=False) as db:
        con = db.con
        assert con.execute("SELECT count(*) FROM _dslogs_inner").fetchall()[0][0] > 10
        assert con.execute("SELECT count(*) FROM _dslogs_edge_sessions").fetchall()[0][0] >= 2
        # the same rows as the views computed from the window's events alone
        requests = viewdefs.view_sql("requests")
        sessions = viewdefs.view_sql("sessions").replace("FROM requests", f"FROM ({requests})")
        for view, sql in (("requests", requests), ("sessions", sessions)):
            got = con.execute(f"SELECT * FROM {view} ORDER BY ALL").fetchall()
            want = con.execute(f"SELECT * FROM ({sql}) ORDER BY ALL").fetchall()
            assert got == want and len(got) > 10


def test_a_cache_without_derived_tables_computes_the_window_from_events(logs, cuts, tmp_path, used):
    cache = tmp_path / "c.duckdb"
    # only windowed runs: the derived tables are never built, the window is computed as before
    warm = analyze_logs([str(logs)], since=cuts[0], cache=cache)
    assert used == [False]
    cold = analyze_logs([str(logs)], since=cuts[0], use_cache=False)
    assert stable(warm) == stable(cold)


def test_a_grown_file_keeps_the_window_on_the_derived_tables(logs, cuts, tmp_path, used):
    # the derived tables are kept in step with a file that shrank (read whole again) and then
    # grew (only its new lines read): the hourly cron over today's growing file
    # (tests/test_grow.py)
    import shutil

    copy_ = tmp_path / "logs"
    shutil.copytree(logs, copy_)
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(copy_)], cache=cache)
    plain = sorted(p for p in copy_.rglob("*.jsonl"))[-1]
    lines = plain.read_bytes().splitlines(keepends=True)
    plain.write_bytes(b"".join(lines[: len(lines) // 2]))  # as it was an hour earlier
    analyze_logs([str(copy_)], cache=cache)  # derived tables of the shorter file
    plain.write_bytes(b"".join(lines))  # grown
    warm = analyze_logs([str(copy_)], since=cuts[0], cache=cache)
    assert used[-1] is True
    cold = analyze_logs([str(copy_)], since=cuts[0], use_cache=False)
    assert stable(warm) == stable(cold)
