"""What if (model/whatif.py): the service model fitted from the logs and the simulation of other
settings, on the simulator's scenarios with a known truth, through the command line, the report
and the Python API."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import as_source
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.metrics.registry import parameters
from dslogs.analyzer.model import whatif
from dslogs.analyzer.usecases.analyze import build_capacity
from tests.ingest_lines import v1_request, write_lines

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
KEYS = {"limit", "users", "e2e_p50_ms", "e2e_p95_ms", "ttft_p95_ms", "queue_p95_ms", "tokens_per_s",
        "requests_per_s", "slo_share", "oom_risk"}


def _model(name: str, grid: dict | None = None) -> dict:
    return build_capacity(open_logs([str(SAMPLES / name)], use_cache=False), defaults(), grid)


def _truth(name: str) -> dict:
    truth = json.loads((SAMPLES / name / "truth.json").read_text())
    return truth["scenarios"][name]["details"]["capacity"]


@pytest.mark.parametrize("name", ["concurrency_cliff", "oom_at_concurrency"])
def test_predicted_knee_and_oom_level_equal_the_truth(name):
    model = _model(name)
    (cap,) = model["capacity"]
    truth = _truth(name)
    service = cap["service"]
    # the knee the simulation predicts: each limit held full, its throughput read as the curve is
    assert whatif.predicted_knee(service, cap["top_level"], defaults()["concurrency_cliff"]["knee_share"]) \
        == truth["knee"]
    assert service["oom_level"] == truth["oom_level"]
    # at the OOM level the simulated service spends its time past it; below, never
    below = whatif.simulate(service, truth["oom_level"] - 1, 12, slo=defaults()["slo"])
    at = whatif.simulate(service, truth["oom_level"], 12, slo=defaults()["slo"])
    assert below["oom_risk"] == 0.0 and at["oom_risk"] > 0.5
    # a limit the logs measured reproduces the level's measured throughput (users never thinking)
    measured = {lv["level"]: lv["tokens_per_s"] for lv in cap["levels"]}
    held = whatif.simulate({**service, "think_ms": [0.0]}, 2, 2)
    assert held["tokens_per_s"] == pytest.approx(measured[2], rel=0.05)


def test_simulation_is_deterministic_and_cheap():
    service = _model("concurrency_cliff")["capacity"][0]["service"]
    t0 = time.perf_counter()
    a = whatif.what_if(service, [1, 2, 4, 8], [6, 12], defaults()["slo"])
    cost = time.perf_counter() - t0
    b = whatif.what_if(service, [1, 2, 4, 8], [6, 12], defaults()["slo"])
    assert a == b
    assert cost < 5, cost
    # more users at one limit: longer waits; a limit past the highest level measured says so
    by = {(c["limit"], c["users"]): c for c in a["what_if"]}
    assert by[(2, 12)]["queue_p95_ms"] > by[(2, 6)]["queue_p95_ms"]
    assert any("limit 8 is past the highest level" in n for n in a["notes"])


def test_cli_what_if_json_has_the_cells_and_max_users():
    res = CliRunner().invoke(app, ["capacity", str(SAMPLES / "concurrency_cliff"), "--no-cache", "--format", "json",
                                   "--limits", "1,2,4", "--users", "6,12", "--max-new-tokens", "64",
                                   "--num-beams", "1"])
    assert res.exit_code == 0, res.output
    model = json.loads(res.stdout)
    cells = model["what_if"]
    assert [(c["limit"], c["users"]) for c in cells] == [(1, 6), (1, 12), (2, 6), (2, 12), (4, 6), (4, 12)]
    assert all(set(c) == KEYS for c in cells)
    assert [m["limit"] for m in model["max_users"]] == [1, 2, 4]
    # the top-level cells are the busiest process's, not computed again
    assert model["capacity"][0]["what_if"] == cells
    # capping the output shortens the replies: fewer tokens per request than uncapped
    full = _model("concurrency_cliff", {"limits": [2], "users": [6]})["what_if"][0]
    capped = next(c for c in cells if (c["limit"], c["users"]) == (2, 6))
    assert capped["e2e_p50_ms"] < full["e2e_p50_ms"]


@pytest.mark.parametrize("args, what", [
    (["--limits", "1,x"], "--limits"), (["--users", "0"], "--users"), (["--num-beams", "4"], "--num-beams"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
])
def test_cli_bad_what_if_option_exits_2(args, what):
    res = CliRunner().invoke(app, ["capacity", str(SAMPLES / "concurrency_cliff"), "--no-cache", *args])
    assert res.exit_code == 2
    assert what in res.output and "Traceback" not in res.output


def test_no_prediction_without_enough_traffic():
    model = _model("capacity_small")
    for cap in model["capacity"]:
        service = cap.get("service") or {}
        assert not cap.get("what_if")
        if service:
            assert "a prediction needs" in service["needs"] and "would settle it" in service["needs"]
    assert model["what_if"] == [] and model["max_users"] == []


def test_report_section_api_and_command_show_the_same_numbers(tmp_path):
    import dslogs
    from dslogs.analyzer.render.report import render_capacity
    from dslogs.analyzer.usecases.analyze import analyze_logs

    cap = _model("concurrency_cliff")
    report = analyze_logs([str(SAMPLES / "concurrency_cliff")], use_cache=False)
    assert report["capacity"][0]["what_if"] == cap["capacity"][0]["what_if"]
    assert report["capacity"][0]["users_at_slo"] == cap["capacity"][0]["users_at_slo"]
    api = dslogs.open(str(SAMPLES / "concurrency_cliff"), use_cache=False).capacity()
    assert [vars(w) for w in api.what_if()] == cap["what_if"]
    again = api.what_if([1, 2], [6])
    assert [vars(w) for w in again] == _model("concurrency_cliff", {"limits": [1, 2], "users": [6]})["what_if"]
    # capacity in users: the recommended limit, as code for the stack the logs came from, the SLO named
    c = cap["capacity"][0]
    assert c["setting_code"].startswith(f"demo.queue(default_concurrency_limit={c['recommendation']['limit']}")
    assert "TTFT ≤ 1000 ms" in c["users_text"] and f"{c['users_at_slo']} user" in c["users_text"]
    html = render_capacity(cap, "html")
    md = render_capacity(cap, "md")
    for text in (html, md):
        assert "Capacity in users" in text and "What if" in text
    e2e = f"{cap['what_if'][0]['e2e_p95_ms']:,.0f}"
    assert e2e in md


def test_sample_of_a_busy_process_is_the_first_5000_by_id_hash_with_whole_session_think_times(tmp_path):
    """Past 5,000 requests in a process the sample is the 5,000 first by the hash of the request
    id (then the id), and each picked request's think time reads its session's next request,
    picked or not: the query sorts only the requests under the cut and their sessions."""
    n, t0 = 5200, datetime(2026, 11, 23, 10, 0)
    lines = []
    for i in range(n):  # 3 requests per session, 3 s apart (each takes 2.3 s: no overlap)
        lines += v1_request(f"s{i // 3}", f"r{i}", t0 + timedelta(seconds=3 * i))
    write_lines(tmp_path / "busy_20261123.jsonl", lines)
    db = open_logs([str(tmp_path)], use_cache=False)
    rows = as_source(db).run(["service_requests"], parameters(defaults(), "hour"))["service_requests"]
    want = [r[0] for r in db.con.execute(
        "SELECT request_id FROM requests ORDER BY hash(request_id), request_id LIMIT 5000").fetchall()]
    assert sorted(r["request_id"] for r in rows) == sorted(want)
    think = {r["request_id"]: r["think_ms"] for r in rows}
    # the next turn of the session arrives 3 s after this one, which took 2,329 ms end to end
    for rid, got in think.items():
        i = int(rid[1:])
        assert got == (pytest.approx(3000 - 2329) if i % 3 < 2 and i + 1 < n else None), rid
    # most picked requests' next turn was not picked itself
    assert sum(1 for rid in think if f"r{int(rid[1:]) + 1}" not in think) > 50


# The simulation as it was before its speed per level was kept and its loop hoisted: the same floating
# operations in the same order must give the same cells bit for bit.
def _former_rate(agg, k):
    xs = sorted(agg)
    if k in agg:
        return agg[k]
    if k < xs[0]:
        return agg[xs[0]] * k / xs[0]
    if k > xs[-1]:
        return agg[xs[-1]]
    i = whatif.bisect_left(xs, k)
    a, b = xs[i - 1], xs[i]
    return agg[a] + (agg[b] - agg[a]) * (k - a) / (b - a)


def _former_speed(agg, k):
    return _former_rate(agg, k) / k / _former_rate(agg, 1)


def _former_simulate(service, limit, users, *, max_new_tokens=None, num_beams=None, slo=None,
                     seed=whatif.SEED, n_requests=whatif.SIM_REQUESTS):
    import heapq
    import math
    import random

    rng = random.Random(f"{seed}:{limit}:{users}:{max_new_tokens}:{num_beams}")
    mix = whatif._requests(service, max_new_tokens, num_beams)
    thinks = service.get("think_ms") or [0.0]
    agg = {int(k): v for k, v in service["rate_per_level"].items()}
    oom_level = service.get("oom_level")
    slo = slo or {}
    arrivals = []
    for u in range(users):
        heapq.heappush(arrivals, (rng.choice(thinks) * rng.random(), u))
    queue, running, pending, done = [], [], [], []
    handoff = service.get("handoff_ms") or 0.0
    now, oom_time, t0 = 0.0, 0.0, None
    qhead, seq = 0, 0
    while len(done) < n_requests:
        k = len(running)
        v = _former_speed(agg, k) if k else 0.0
        t_next, which = (arrivals[0][0], -1) if arrivals else (math.inf, -1)
        if pending and pending[0][0] < t_next:
            t_next, which = pending[0][0], -2
        for i, r in enumerate(running):
            left = r[2] if r[4] is None else r[3]
            t = now + left / v
            if t < t_next:
                t_next, which = t, i
        dt = t_next - now
        if t0 is not None and oom_level and k >= oom_level:
            oom_time += dt
        for r in running:
            work = dt * v
            if r[4] is None:
                used = min(work, r[2])
                r[2] -= used
                work -= used
            r[3] = max(0.0, r[3] - work)
        now = t_next
        if which == -1:
            _, u = heapq.heappop(arrivals)
            queue.append((now, u, rng.choice(mix)))
        elif which == -2:
            _, _, (arr, u, (pre, dec, n)) = heapq.heappop(pending)
            running.append([arr, now, pre, dec, None if pre > 0 else now, n, u])
        else:
            r = running[which]
            if r[4] is None:
                r[2], r[4] = 0.0, now
            else:
                r[3] = 0.0
            if r[3] <= 1e-9:
                running.pop(which)
                done.append((r[0], r[1], r[4], now, r[5]))
                if len(done) == whatif.WARMUP:
                    t0 = now
                heapq.heappush(arrivals, (now + rng.choice(thinks), r[6]))
                if handoff and qhead < len(queue):
                    seq += 1
                    heapq.heappush(pending, (now + handoff, seq, queue[qhead]))
                    qhead += 1
        while qhead < len(queue) and len(running) + len(pending) < limit:
            arr, u, (pre, dec, n) = queue[qhead]
            qhead += 1
            running.append([arr, now, pre, dec, None if pre > 0 else now, n, u])
    kept = done[whatif.WARMUP:]
    span_ms = max(now - (t0 or 0.0), 1e-9)
    e2e = [end - arr for arr, _, _, end, _ in kept]
    ttft = [ft - arr for arr, _, ft, _, _ in kept]
    queue_ms = [st - arr for arr, st, _, _, _ in kept]
    tpot = [(end - ft) / (n - 1) if n > 1 else 0.0 for _, _, ft, end, n in kept]
    ttft_slo, tpot_slo = slo.get("ttft_ms", math.inf), slo.get("tpot_ms", math.inf)
    within = sum(1 for a, b in zip(ttft, tpot, strict=True) if a <= ttft_slo and b <= tpot_slo)
    pct = whatif._pct
    # unrounded: a difference in the last bit shows
    return {"e2e": (pct(e2e, 0.5), pct(e2e, 0.95)), "ttft": pct(ttft, 0.95), "queue": pct(queue_ms, 0.95),
            "tokens_per_s": sum(n for *_, n in kept) / span_ms * 1000, "requests_per_s": len(kept) / span_ms * 1000,
            "slo_share": within / len(kept), "oom_risk": oom_time / span_ms if oom_level else None}


@pytest.mark.parametrize("seed", range(8))
def test_simulation_gives_the_former_cells_bit_for_bit(seed):
    import random

    rnd = random.Random(seed)
    levels = sorted(rnd.sample(range(1, 40), rnd.randint(1, 6)))
    service = {
        "rate_per_level": {str(k): rnd.uniform(5, 400) * (k ** rnd.uniform(0.2, 1.0)) for k in levels},
        "mix": [[rnd.choice([0.0, rnd.uniform(1, 500)]), rnd.uniform(10, 9000), rnd.randint(1, 600),
                 rnd.choice([1, 1, 1, 4]), rnd.choice([None, 256])] for _ in range(rnd.randint(1, 60))],
        "think_ms": sorted(rnd.uniform(0, 20000) for _ in range(rnd.randint(0, 30))),
        "handoff_ms": rnd.choice([0.0, rnd.uniform(0.1, 50)]),
        "oom_level": rnd.choice([None, rnd.randint(2, 30)]),
        "greedy_token_ms": rnd.choice([None, rnd.uniform(5, 40)]),
    }
    slo = {"ttft_ms": rnd.uniform(100, 5000), "tpot_ms": rnd.uniform(10, 200)}
    former_pct = whatif._pct
    cells = []
    for limit, users in [(1, 1), (rnd.randint(1, 20), rnd.randint(1, 60)), (levels[-1] + 3, rnd.randint(1, 90))]:
        for opts in ({}, {"max_new_tokens": 100, "num_beams": 1}):
            want = _former_simulate(service, limit, users, slo=slo, n_requests=300, **opts)
            seen = {}

            def unrounded(values, q, _seen=seen):
                v = former_pct(values, q)
                _seen.setdefault(q, []).append(v)
                return v

            whatif._pct = unrounded  # the cell rounds what is compared: catch the figures before
            try:
                got = whatif.simulate(service, limit, users, slo=slo, n_requests=300, **opts)
            finally:
                whatif._pct = former_pct
            assert (seen[0.5][0], seen[0.95][0]) == want["e2e"]
            assert seen[0.95][1:] == [want["ttft"], want["queue"]]
            assert got["tokens_per_s"] == round(want["tokens_per_s"], 1)
            assert got["requests_per_s"] == round(want["requests_per_s"], 2)
            assert got["slo_share"] == round(want["slo_share"], 2)
            assert got["oom_risk"] == (round(want["oom_risk"], 2) if want["oom_risk"] is not None else None)
            cells.append(want["tokens_per_s"])
    assert len(set(cells)) > 1  # the settings made different simulations
    agg = {int(x): v for x, v in service["rate_per_level"].items()}
    for k in [0.5, 1, 1.0, 2.7, *levels, levels[-1] + 0.5, 1000]:
        assert whatif._speed_of(agg)(k) == _former_speed(agg, k) == whatif.speed(agg, k)
