"""The same logs give the same numbers on every run: no metric depends on how DuckDB's threads
split the rows. Floating sums (regr_slope, regr_r2, avg, sum over DOUBLE) did: the partial sums
of each thread are added in the order the threads finish, so two runs of the same code on the
same files differed in the 9th-10th digit, and a value on the report's 3-decimal edge flipped.
The trends and averages are integer sums now (analyzer/ingest/views/sessions.sql, queries/)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from ingest_lines import v1

from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import all_query_names
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics.registry import bucket_for_span, parameters, sql_params
from dslogs.analyzer.metrics.results import run_metric
from dslogs.analyzer.model import report
from dslogs.analyzer.rules import hosts as host_rules
from dslogs.analyzer.rules import memory as memory_rules

# More events than three of DuckDB's row groups (122,880 rows), so that every scan is split
# between threads; faults that give the slopes something to fit.
EVENTS = 300_000
THREADS = (1, 2, 3, 8)


@pytest.fixture(scope="module")
def big_logs(tmp_path_factory):
    from dslogs.analyzer.simulate import simulate

    root = tmp_path_factory.mktemp("exact") / "logs"
    simulate(root, scenarios=["memory_leak", "rss_growth", "kv_cache_bloat", "ghost_memory"], seed=3, days=2,
             events=EVENTS)  # fmt: skip
    return root


def _tables(con) -> dict[str, str]:
    """The views and every metric query, as SQL (session_requests needs ids: left out)."""
    out = {"sessions": "SELECT * FROM sessions", "requests": "SELECT * FROM requests"}
    out.update({n: load_query(n) for n in all_query_names() if n != "session_requests"})
    return out


def _snapshot(con, tables: dict[str, str], params: dict) -> dict[str, list[str]]:
    """Each table's rows as exact text (repr of a float round-trips its bits), in a fixed order
    (a table's own ORDER BY may leave ties; only the values are compared here)."""
    out = {}
    for name, sql in tables.items():
        used = {k: params[k] for k in sql_params(sql)}
        rows = con.execute(sql, used).fetchall() if used else con.execute(sql).fetchall()
        out[name] = sorted(map(repr, rows))
    return out


@pytest.mark.slow
def test_every_view_and_metric_is_bit_identical_across_threads_and_runs(big_logs):
    db = open_logs([str(big_logs)], use_cache=False, materialize=False)
    try:
        con = db.con
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 2 * 122_880
        span = run_metric(con, "time_span", {})[0]
        params = parameters(defaults(), bucket_for_span(span["first_event"], span["last_event"]))
        tables = _tables(con)
        runs = []
        for threads in (*THREADS, *THREADS):  # each thread count twice: run-to-run as well
            con.execute(f"SET threads = {threads}")
            runs.append((threads, _snapshot(con, tables, params)))
        first = runs[0][1]
        # the data exercises the exact columns (a slope over nothing would prove nothing)
        sessions = con.execute(
            "SELECT count(reserved_slope_mb_per_min), count(reserved_r2), count(allocated_slope_mb_per_min), "
            "count(rss_slope_mb_per_min) FROM sessions"
        ).fetchone()
        assert min(sessions) > 1000
        differ = {}
        for threads, snap in runs[1:]:
            for name, rows in snap.items():
                if rows != first[name]:
                    differ.setdefault(name, []).append(threads)
        assert not differ, (
            f"tables that differ from the single-threaded run (thread counts): {differ}"
        )
    finally:
        db.close()


# -- the exact formulas keep regr_slope / regr_r2's meaning ---------------------------------------


def _exact_fit(points: list[tuple[Fraction, Fraction]]) -> tuple[float | None, float | None]:
    """Least squares with rationals: (slope, r2) as regr_slope/regr_r2 define them."""
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    dxx = n * sum(x * x for x, _ in points) - sx * sx
    dxy = n * sum(x * y for x, y in points) - sx * sy
    dyy = n * sum(y * y for _, y in points) - sy * sy
    if dxx == 0:
        return None, None
    return float(dxy / dxx), 1.0 if dyy == 0 else float(dxy * dxy / (dxx * dyy))


def _gpu(ts: datetime, sid: str, reserved: float | None, allocated: float | None) -> dict:
    return v1(ts.isoformat(timespec="milliseconds"), "gpu_memory", sid, None, reserved_mb=reserved,
              allocated_mb=allocated, num_ooms=0)  # fmt: skip


def test_slopes_equal_the_exact_least_squares_and_regr_edge_cases(tmp_path):
    t0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    # minutes and MiB with the digits the collector writes (0.1 MiB, ms)
    leak = [(37.123, 4180.0), (95.5, 4200.3), (151.877, 4180.7), (210.0, 4391.1), (333.3, 4390.9)]
    lines = [_gpu(t0 + timedelta(seconds=s), "leak", r, r - 555.5) for s, r in leak]
    lines += [_gpu(t0, "one", 4000.0, 3000.0)]  # one sample: no slope
    lines += [
        _gpu(t0, "instant", 4000.0, 3000.0),
        _gpu(t0, "instant", 4100.0, 3000.0),
    ]  # one instant
    lines += [_gpu(t0 + timedelta(minutes=m), "flat", 4000.0, None) for m in range(3)]  # r2 = 1
    # a value no GPU has: left out of the trend instead of overflowing the integer sums
    lines += [
        _gpu(t0 + timedelta(minutes=m), "huge", v, 10.0)
        for m, v in ((0, 100.0), (1, 1e300), (2, 300.0))
    ]
    path = tmp_path / "h1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    db = open_logs([str(path)], use_cache=False)
    try:
        got = {
            r[0]: r[1:]
            for r in db.con.execute(
                "SELECT session_id, reserved_slope_mb_per_min, reserved_r2, allocated_slope_mb_per_min FROM sessions"
            ).fetchall()
        }
        per_session = {r["session_id"]: r for r in run_metric(db.con, "memory_per_session", {})}
    finally:
        db.close()
    want_slope, want_r2 = _exact_fit([(Fraction(s) / 60, Fraction(str(r))) for s, r in leak])
    assert got["leak"][0] == want_slope and got["leak"][1] == want_r2
    assert (
        got["leak"][2]
        == _exact_fit([(Fraction(s) / 60, Fraction(str(r)) - Fraction("555.5")) for s, r in leak])[
            0
        ]
    )
    m = per_session["leak"]
    assert (m["reserved_slope_mb_per_min"], m["reserved_r2"]) == (want_slope, want_r2)
    # regr_slope's edge cases kept: no spread in time -> no slope (NaN, shown as None, in the
    # metric table; NULL in the view); no spread in the values -> r2 = 1
    assert got["one"] == (None, None, None) and got["instant"] == (None, None, None)
    assert (
        per_session["one"]["reserved_slope_mb_per_min"] is None
        and per_session["one"]["reserved_r2"] is None
    )
    assert got["flat"][:2] == (0.0, 1.0) and got["flat"][2] is None
    assert per_session["flat"]["reserved_r2"] == 1.0
    assert (
        got["huge"][0]
        == _exact_fit([(Fraction(0), Fraction(100)), (Fraction(2), Fraction(300))])[0]
        == 100.0
    )
    assert math.isclose(per_session["huge"]["reserved_slope_mb_per_min"], 100.0)


# -- memory_leak_verdicts once per report -----------------------------------------------------


@pytest.mark.parametrize("logs", ["memory_leak", "process_leak", "cpu_only"])
def test_memory_leak_verdicts_run_once_per_report_and_agree(logs, monkeypatch):
    """The rule and the checklist's reserved_band row read one computation of the verdicts (it
    costs 0.1-0.2 s at 1.57 M events), and the model is the one of each computing its own."""
    from pathlib import Path

    from dslogs.analyzer.engines.compute import compute_metrics

    db = open_logs(
        [str(Path(__file__).resolve().parents[1] / "sample_logs" / logs)], use_cache=False
    )
    try:
        metrics = compute_metrics(db)
        t = defaults()
        calls = []
        real = memory_rules.memory_leak_verdicts

        def counted(m, th):
            calls.append(1)
            return real(m, th)

        rss_calls = []
        real_rss = host_rules.rss_credits

        def rss_counted(m, th):
            rss_calls.append(1)
            return real_rss(m, th)

        with monkeypatch.context() as mp:
            mp.setattr(memory_rules, "memory_leak_verdicts", counted)
            mp.setattr(report, "memory_leak_verdicts", counted)
            mp.setattr(host_rules, "rss_credits", rss_counted)
            mp.setattr(report, "rss_credits", rss_counted)
            once = report.build_report_from_metrics(metrics, db.ingest, db.window, t)
        assert len(calls) == 1 and len(rss_calls) == 1
        # each its own, as before
        evaluate, checklist = report.evaluate_rules, report.build_checklist
        monkeypatch.setattr(
            report, "evaluate_rules", lambda m, i, th, leak=None, rss=None: evaluate(m, i, th)
        )
        monkeypatch.setattr(
        report, "build_checklist", lambda m, th, leak=None, *rest: checklist(m, th, None, *rest)
    )
        apart = report.build_report_from_metrics(metrics, db.ingest, db.window, t)
    finally:
        db.close()
    once.pop("generated_at")
    apart.pop("generated_at")
    assert once == apart
    if logs != "cpu_only":
        assert any(f["rule"] == "memory_leak" for f in once["findings"])
        assert {c["id"]: c for c in once["checklist"]}["reserved_band"]["status"] == "FAIL"
