"""Queries rewritten for speed give exactly the tables of their former SQL.

tests/fixtures/query_oracles/<name>.sql is each query as it was before the rewrite (the plain
formulation: windows over every row, date_trunc per row); the current queries/<name>.sql must
return the same rows, value for value, on hand-made views full of the cases the rewrites
special-case: counters that never change, rise or fall, NULL hosts and pids, NULL end times and
values at the k-th request, and zones whose offset is not whole minutes (Africa/Monrovia was
-0:44:30 until 1972), where a UTC minute spans two local minutes.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dslogs.analyzer.core.resources import load_query
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.metrics.registry import parameters, sql_params
from tests.diag_fixture_db import fixture_connection

ORACLES = Path(__file__).resolve().parent / "fixtures" / "query_oracles"


def same(a: list[tuple], b: list[tuple]) -> bool:
    def eq(u, v) -> bool:
        if isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v):
            return True
        return type(u) is type(v) and u == v

    return len(a) == len(b) and all(
        len(x) == len(y) and all(eq(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def both(con, name: str, params: dict) -> tuple[list[tuple], list[tuple]]:
    """The oracle's rows and the current query's, the latter cut to the oracle's columns: a
    query may since have gained columns (memory_per_process's leak-or-load ones), which have no
    former formulation to equal; none of the oracle's may be gone."""
    old, new = (ORACLES / f"{name}.sql").read_text(), load_query(name)

    def run(sql: str) -> tuple[list[str], list[tuple]]:
        cur = con.execute(sql, {k: params[k] for k in sql_params(sql)})
        return [d[0] for d in cur.description], cur.fetchall()

    (old_cols, old_rows), (new_cols, new_rows) = run(old), run(new)
    assert set(old_cols) <= set(new_cols), set(old_cols) - set(new_cols)
    at = [new_cols.index(c) for c in old_cols]
    return old_rows, [tuple(row[i] for i in at) for row in new_rows]


def _memory_views(seed: int, t0: datetime):
    """gpu_memory snapshots (unique instants per process and session: lag's order is defined),
    OOM errors, and requests of which some ran concurrently."""
    rng = random.Random(seed)
    events, requests = [], []
    tick = 0
    for s in range(14):
        sid = None if s == 13 else f"s{s}"
        host = rng.choice(["h1", "h2", None])
        pid = rng.choice([1, 2, 3, None])
        shape = rng.choice(["flat", "rise", "fall", "mixed", "nulls"])
        ooms = rng.randint(0, 3)
        for k in range(rng.randint(1, 9)):
            tick += 1
            ts = t0 + timedelta(seconds=7 * tick + rng.random())
            if shape == "rise":
                ooms += rng.randint(0, 1)
            elif shape == "fall":
                ooms -= rng.randint(0, 1)
            elif shape == "mixed":
                ooms += rng.choice([-1, 0, 2])
            events.append({
                "ts": ts, "stage": "gpu_memory", "session_id": sid, "host": host, "pid": pid,
                "reserved_mb": None if rng.random() < 0.15 else 4000 + 50 * k + rng.uniform(0, 30),
                "allocated_mb": None if rng.random() < 0.1 else 3500 + rng.uniform(0, 300),
                "num_ooms": None if shape == "nulls" and rng.random() < 0.5 else ooms,
            })  # fmt: skip
        if rng.random() < 0.3:
            events.append({"ts": t0 + timedelta(seconds=7 * tick + 3), "stage": "error",
                           "session_id": sid, "host": host,
                           "error_type": rng.choice(["OutOfMemoryError", "RuntimeError"]),
                           "error_msg": rng.choice(["CUDA out of memory", "bad"])})  # fmt: skip
        for r in range(rng.randint(0, 6)):
            tick += 1
            start = t0 + timedelta(seconds=7 * tick + rng.random())
            requests.append({
                "session_id": sid, "request_id": f"{s}-{r}", "host": host, "pid": pid,
                "turn_index": r + 1, "start_ts": start,
                "end_ts": None if rng.random() < 0.1 else start + timedelta(seconds=rng.uniform(0.5, 200)),
                "inflight": rng.choice([1, 1, 1, 2, None]),
                "reserved_mb_before": rng.choice([None, 4000.0 + r]),
                "reserved_mb_after": None if rng.random() < 0.3 else 4100.0 + 10 * r + rng.random(),
                "allocated_mb_before": 3000.0, "allocated_mb_after": rng.choice([None, 3100.0]),
                "rss_mb_before": 1200.0, "rss_mb_after": rng.choice([None, 1250.0]),
            })  # fmt: skip
    return events, requests


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", ["memory_timeline", "oom_per_session", "memory_per_process"])
def test_memory_rewrites_equal_their_former_sql(name, seed):
    events, requests = _memory_views(seed, datetime(2026, 12, 1, 8, tzinfo=UTC))
    con = fixture_connection(events, requests)
    params = {**parameters(defaults(), "hour"), "report_timeline_sessions": 5, "report_timeline_points": 3}
    old, new = both(con, name, params)
    assert same(old, new), (old, new)
    if name == "oom_per_session":
        return
    assert old or name == "memory_per_process" and not requests


def test_rewrites_see_rises_and_processes():
    """The fixtures do hold what the rewrites special-case (else the comparison proves little)."""
    hits = {"rise": 0, "k-th NULL": 0}
    for seed in range(8):
        events, requests = _memory_views(seed, datetime(2026, 12, 1, 8, tzinfo=UTC))
        con = fixture_connection(events, requests)
        hits["rise"] += len(con.execute(load_query("oom_per_session")).fetchall())
        hits["k-th NULL"] += sum(
            r[-2] is None for r in con.execute(load_query("memory_per_process")).fetchall()
        )
    assert hits["rise"] > 0 and hits["k-th NULL"] > 0


@pytest.mark.parametrize(
    "zone, t0",
    [
        ("UTC", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        ("Asia/Kathmandu", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        ("Africa/Monrovia", datetime(1971, 6, 1, 12, tzinfo=UTC)),  # offset -0:44:30
    ],
)
def test_gpu_util_while_busy_equals_its_former_sql(zone, t0):
    rng = random.Random(5)
    events = [
        {"ts": t0 + timedelta(seconds=s + rng.random()), "stage": "gpu_sample",
         "host": rng.choice(["h1", "h2", None]), "gpu_index": rng.choice([0, 1]),
         "gpu_util_pct": rng.uniform(0, 100)}
        for s in range(0, 1800, 3)
    ]  # fmt: skip
    requests = []
    for r in range(40):
        start = t0 + timedelta(seconds=rng.uniform(0, 1800))
        end = start + timedelta(seconds=rng.choice([0.2, 5, 50, 200]))
        requests.append({"session_id": f"s{r % 7}", "request_id": str(r),
                         "host": rng.choice(["h1", "h2", None]),
                         "start_ts": None if r % 11 == 0 else start,
                         "end_ts": None if r % 13 == 0 else end})  # fmt: skip
    con = fixture_connection(events, requests)
    con.execute(f"SET TimeZone = '{zone}'")
    old, new = both(con, "gpu_util_while_busy", {})
    assert old and same(old, new), (old, new)


@pytest.mark.parametrize("ids", [[], [None, "", "  ", "UNKNOWN", "unknown", "a", "a", "b"]])
def test_session_id_coverage_equals_its_former_sql(ids):
    events = [{"ts": datetime(2026, 12, 1, 8, tzinfo=UTC), "stage": stage, "session_id": sid,
               "source_format": fmt}
              for sid in ids for stage, fmt in (("request", "v1"), ("input", "legacy"), ("input", "v1"))]  # fmt: skip
    old, new = both(fixture_connection(events), "session_id_coverage", {})
    assert same(old, new), (old, new)


def test_memory_per_process_ties_on_end_time_pick_by_key():
    """Requests of one process that end at one instant (7 such pairs in the 1.57 M bench logs):
    the k-th by end time is the one with the smaller (session, request) key, whatever order
    DuckDB's threads read them in, so the settled value cannot change between runs."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {"session_id": f"s{i}", "request_id": "r1", "host": "h", "pid": 1,
         "start_ts": t0, "end_ts": t0 + timedelta(seconds=10), "reserved_mb_after": float(i)}
        for i in (9, 3, 7, 1)
    ]  # fmt: skip
    for order in (rows, rows[::-1], rows[1:] + rows[:1]):
        con = fixture_connection(requests=order)
        settled, mid = con.execute(
            "SELECT reserved_settled_mb, reserved_mid_mb FROM ("
            + load_query("memory_per_process")
            + ")"
        ).fetchall()[0]
        assert (settled, mid) == (1.0, 7.0)  # keys s1 < s3 < s7 < s9: 1st and 3rd of 4
