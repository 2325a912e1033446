"""Capacity from the logs (000 §1.3): the curve per in-flight level, the knee and the safe level the
simulator planted, leak or load, the capacity rules, `dslogs capacity`."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random

import pytest

from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.rules.capacity_curve import process_curve
from dslogs.analyzer.simulate.concurrent import simulate_concurrent
from dslogs.analyzer.usecases.analyze import build_report

REPO = Path(__file__).resolve().parents[1]


def _ramp_trace(folder: Path, *, leak_mb: float = 0.0, per_request_mb: float = 150.0, minutes_per_step: int = 10,
                steps: int = 8, seed: int = 3) -> int:
    """A load ramp, which a leak check must not take for a leak: load rises in steps from 1 to
    ``steps`` clients (closed loop), each request leaves nothing behind (reserved before = after),
    the process's reserved memory follows the requests in flight (``per_request_mb`` each) and, with
    ``leak_mb``, also grows by that much per completed request whatever the load. Ends at full load
    (no drain)."""
    rng = Random(seed)
    t_start = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    lines: list[tuple[float, dict]] = []
    running: list[float] = []
    leaked = 0.0
    done = 0
    n = 0
    for step in range(steps):
        t0, t1 = step * minutes_per_step * 60.0, (step + 1) * minutes_per_step * 60.0
        clients = [(t0 + rng.uniform(0, 2), i) for i in range(step + 1)]
        sessions = [f"s{step}-{i}-{rng.getrandbits(32):08x}" for i in range(step + 1)]
        while clients:
            clients.sort()
            t, i = clients.pop(0)
            if t >= t1:
                continue
            running = [e for e in running if e > t]
            level = len(running) + 1
            dur = rng.uniform(4, 7)
            end = t + dur
            running.append(end)
            ended_before = sum(1 for e in running if e <= t)
            reserved = 4000.0 + per_request_mb * level + leaked
            out = rng.randint(80, 160)
            ts = (t_start + timedelta(seconds=end)).isoformat(timespec="milliseconds")
            lines.append((end, {"v": 1, "ts": ts, "stage": "request", "session_id": sessions[i],
                                "request_id": f"r{n}", "host": "gpu-01", "pid": 4242,
                                "duration_ms": round(dur * 1000, 1), "ttft_ms": 150.0, "input_len": 80,
                                "output_len": out, "status": "ok", "device": "cuda:0", "inflight": level,
                                "reserved_mb_before": round(reserved, 1), "reserved_mb_after": round(reserved, 1),
                                "allocated_mb_before": 3500.0, "allocated_mb_after": 3500.0,
                                "done_before": done + ended_before, "done_seq": None}))
            start_ts = (t_start + timedelta(seconds=t)).isoformat(timespec="milliseconds")
            lines.append((t, {"v": 1, "ts": start_ts, "stage": "input", "session_id": sessions[i],
                              "request_id": f"r{n}", "host": "gpu-01", "pid": 4242, "input_len": 100}))
            n += 1
            leaked += leak_mb
            clients.append((end + rng.uniform(0, 0.5), i))
    lines.sort(key=lambda x: x[0])
    seq = 0
    for _, obj in lines:
        if obj["stage"] == "request":
            seq += 1
            obj["done_seq"] = seq
            obj["done_before"] = min(obj["done_before"], seq - 1)
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "ds15b_20261120.jsonl.gz", "wt", encoding="utf-8") as f:
        for _, obj in lines:
            f.write(json.dumps(obj) + "\n")
    return n


def _model(path: Path) -> dict:
    return build_report(open_logs([str(path)], use_cache=False))


def test_memory_that_follows_load_is_not_a_leak(tmp_path):
    _ramp_trace(tmp_path / "load")
    model = _model(tmp_path / "load")
    assert not [f for f in model["findings"] if f["rule"] == "memory_leak"], model["findings"]
    band = next(c for c in model["checklist"] if c["id"] == "reserved_band")
    assert band["status"] != "FAIL"
    (cap,) = model["capacity"]
    # the growth is reported as memory per request in flight instead
    assert cap["mb_per_request"] == pytest.approx(150, rel=0.1)


def test_growth_at_a_steady_level_is_a_leak(tmp_path):
    _ramp_trace(tmp_path / "leak", leak_mb=4.0)
    model = _model(tmp_path / "leak")
    leaks = [f for f in model["findings"] if f["rule"] == "memory_leak" and f["scope"] == "process"]
    assert leaks, [f["rule"] for f in model["findings"]]
    band = next(c for c in model["checklist"] if c["id"] == "reserved_band")
    # FAIL only with a value outside the band
    assert band["status"] == "FAIL" and band["value"] > band["threshold"]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_simulated_knee_and_safe_level(tmp_path, seed):
    simulate_concurrent(tmp_path, "concurrency_cliff", seed=seed)
    truth = json.loads((tmp_path / "truth.json").read_text())["scenarios"]["concurrency_cliff"]["details"]["capacity"]
    model = _model(tmp_path)
    (cap,) = model["capacity"]
    assert cap["knee"] == truth["knee"]
    assert cap["recommendation"] is not None and cap["recommendation"]["limit"] == truth["safe_level"]
    # the OOM level's own reading repeats the level below (its extra requests failed to allocate):
    # left out of the fit, the slope and the extrapolated OOM level are the simulator's
    assert cap["oom_level"] == truth["oom_level"]
    assert cap["mb_per_request"] == pytest.approx(truth["mb_per_request"], rel=0.01)
    fired = {f["rule"] for f in model["findings"]}
    assert {"concurrency_cliff", "oom_at_concurrency"} <= fired
    assert "memory_leak" not in fired


def test_too_little_traffic_gives_no_recommendation(tmp_path):
    simulate_concurrent(tmp_path, "capacity_small", seed=1)
    (cap,) = _model(tmp_path)["capacity"]
    assert cap["recommendation"] is None
    assert "requests" in cap["needs"]


def test_levels_derived_from_intervals_without_inflight():
    """Legacy-style rows (no collector inflight) get their level from overlapping intervals."""
    t = defaults()
    rows = [{"host": "h", "pid": 1, "level": lv, "requests": 50, "time_s": 100.0, "tokens_per_s": tp,
             "tpot_p95_ms": 40.0 + 5 * lv, "service_ttft_p95_ms": 200.0, "reserved_peak_mb": 4000 + 500 * lv,
             "gpu_total_mb": 24576.0, "oom_requests": 0} for lv, tp in ((1, 25), (2, 48), (3, 70), (4, 71), (5, 69))]
    cap = process_curve(rows, t)
    assert cap["knee"] == 3 and cap["recommendation"]["limit"] == 3
    assert cap["mb_per_request"] == pytest.approx(500)
    assert "at 4 TPOT p95 goes from 55 to 60 ms" in cap["recommendation"]["text"]


def test_derived_levels_match_collector_inflight(tmp_path):
    """The SQL's interval-derived level agrees with the collector's inflight on the simulator."""
    simulate_concurrent(tmp_path, "concurrency_cliff", seed=2)
    db = open_logs([str(tmp_path)], use_cache=False)
    sql = (REPO / "queries" / "capacity_per_level.sql").read_text()
    derived = sql.replace("coalesce(r.inflight, s.level) AS level", "s.level AS level")
    assert derived != sql
    from dslogs.analyzer.engines.compute import as_source
    from dslogs.analyzer.metrics.registry import parameters

    params = parameters(defaults(), "hour")
    a = {r["level"]: r["requests"] for r in as_source(db).run(["capacity_per_level"], params)["capacity_per_level"]}
    rel = db.con.execute(derived, {k: v for k, v in params.items() if f"${k}" in derived}).fetchall()
    cols = [d[0] for d in db.con.description]
    b = {row[cols.index("level")]: row[cols.index("requests")] for row in rel}
    assert set(a) == set(b)
    for lv in a:
        assert abs(a[lv] - b[lv]) <= max(3, 0.05 * a[lv])


def test_capacity_command(tmp_path):
    simulate_concurrent(tmp_path / "logs", "concurrency_cliff", seed=1)
    env_py = sys.executable
    md = subprocess.run([env_py, "-m", "dslogs", "capacity", str(tmp_path / "logs"), "--no-cache"],
                        capture_output=True, text=True, timeout=120)
    assert md.returncode == 0, md.stderr
    assert "concurrency_limit" in md.stdout and "| level |" in md.stdout
    js = subprocess.run([env_py, "-m", "dslogs", "capacity", str(tmp_path / "logs"), "--no-cache", "--format", "json"],
                        capture_output=True, text=True, timeout=120)
    doc = json.loads(js.stdout)
    assert doc["capacity"][0]["recommendation"]["limit"] >= 1


def test_tokens_per_level_come_from_decode_at_that_level(tmp_path):
    """Two requests on a box where one request alone decodes at 10 tokens/s and two at about 5
    each: A decodes 0-6 s (20 tokens alone, 10 beside B, 20 alone: 50); B waits in the queue 0-2 s,
    prefills 2-2.5 s, decodes 8 tokens 2.5-4 s. Truth: level 1 (4 s) 10 tokens/s, level 2 (2 s)
    9. Spread evenly over each handler's time, level 1 would read 8.3 and level 2 12.3: a curve
    that rises where the box's is flat."""
    t0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)

    def at(s: float) -> str:
        return (t0 + timedelta(seconds=s)).isoformat()

    base = {"v": 1, "stage": "request", "host": "h", "pid": 1, "status": "ok", "input_len": 8}
    lines = [
        {**base, "ts": at(6), "session_id": "a", "request_id": "a1", "duration_ms": 6000, "ttft_ms": 0.001,
         "output_len": 50},
        {**base, "ts": at(4), "session_id": "b", "request_id": "b1", "duration_ms": 4000, "ttft_ms": 2500,
         "output_len": 8, "queue_ms": 2000},
        {"v": 1, "stage": "queue", "host": "h", "pid": 1, "ts": at(2), "session_id": "b", "request_id": "b1",
         "duration_ms": 2000},
    ]
    (tmp_path / "ds15b_20261120.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    from dslogs.analyzer.engines.compute import as_source
    from dslogs.analyzer.metrics.registry import parameters

    db = open_logs([str(tmp_path)], use_cache=False)
    rows = {r["level"]: r for r in as_source(db).run(["capacity_per_level"], parameters(defaults(), "hour"))[
        "capacity_per_level"]}
    assert rows[1]["time_s"] == pytest.approx(4.0) and rows[2]["time_s"] == pytest.approx(2.0)
    # every token at some level
    assert rows[1]["tokens_per_s"] * 4 + rows[2]["tokens_per_s"] * 2 == pytest.approx(58, rel=1e-4)
    # the exact fit (a request's rate 9.8 alone, 5.3 beside another) gives 9.8 and 9.3; five passes
    # come within 0.5 of it from the even spread's 8.3 and 12.3
    assert 9.5 < rows[1]["tokens_per_s"] < 10.0
    assert 9.3 < rows[2]["tokens_per_s"] < 10.0


def test_a_level_whose_requests_ran_out_of_memory_is_left_out_of_the_memory_fit():
    from dslogs.analyzer.rules.capacity_curve import memory_points

    levels = [{"level": lv, "reserved_peak_mb": 1000.0 + 500 * lv, "oom_requests": 0} for lv in (1, 2, 3, 4)]
    capped = {"level": 5, "reserved_peak_mb": 3000.0, "oom_requests": 4}  # repeats level 4: failed allocations
    rising = {"level": 5, "reserved_peak_mb": 3500.0, "oom_requests": 1}  # an OOM, yet memory rose: a reading
    assert [lv for lv, _ in memory_points([*levels, capped], 8.0)] == [1, 2, 3, 4]
    assert [lv for lv, _ in memory_points([*levels, rising], 8.0)] == [1, 2, 3, 4, 5]
    # too few readings left to fit: all of them count
    assert len(memory_points([levels[0], levels[1], {**capped, "level": 3, "reserved_peak_mb": 2000.0}], 8.0)) == 3


def test_diff_shows_both_capacity_curves(tmp_path):
    """`dslogs diff` of two services: per host pair the knee, the limit and MiB per request in
    flight before → after, and the levels side by side, in Markdown and JSON."""
    from dslogs.analyzer.render.diff_md import render_markdown_diff
    from dslogs.analyzer.usecases.diff import build_diff

    before, after = REPO / "sample_logs" / "concurrency_cliff", REPO / "sample_logs" / "oom_at_concurrency"
    model = build_diff(before=[str(before)], after=[str(after)], use_cache=False)
    (cap,) = model["capacity"]
    sides = {side: _model(path)["capacity"][0] for side, path in (("before", before), ("after", after))}
    for side, c in sides.items():
        assert cap[f"{side}_knee"] == c["knee"] and cap[f"{side}_limit"] == c["recommendation"]["limit"]
        assert cap[f"{side}_mb_per_request"] == pytest.approx(c["mb_per_request"])
    assert (cap["before_knee"], cap["after_knee"]) == (3, 4)
    levels = {r["level"]: r for r in cap["levels"]}
    assert set(levels) == {lv["level"] for c in sides.values() for lv in c["levels"]}
    top_before = max(lv["level"] for lv in sides["before"]["levels"])
    assert levels[top_before]["before"]["requests"] > 0
    text = render_markdown_diff(model)
    assert "knee 3 → 4; recommended limit 3 → 4; MiB per request in flight" in text
    assert "| in flight | requests | tokens/s | TPOT p95 (ms) | peak reserved (MiB) |" in text


def test_min_levels_zero_with_only_sparse_levels(tmp_path):
    """A thresholds file with ``min_levels = 0`` (an IndexError when no level was dense): no
    recommendation, the need said; through ``dslogs capacity`` exit 0."""
    th = {k: dict(v) for k, v in defaults().items()}
    th["concurrency_cliff"].update(min_levels=0, min_requests=0)
    rows = [{"host": "h", "pid": 1, "level": lv, "requests": 3, "tokens_per_s": 10.0 * lv} for lv in (1, 2, 3)]
    out = process_curve(rows, th)
    assert out["recommendation"] is None and "0 such levels (1 more needed)" in out["needs"]
    _ramp_trace(tmp_path / "logs", steps=3, minutes_per_step=2)
    (tmp_path / "t.toml").write_text("[concurrency_cliff]\nmin_levels = 0\nmin_requests = 0\n"
                                     "min_level_requests = 100000\n")  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "dslogs", "capacity", str(tmp_path / "logs"), "--no-cache",
                          "--thresholds", str(tmp_path / "t.toml"), "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("bad", [-5, 0])
def test_inflight_below_one_is_no_level(tmp_path, bad):
    """An ``inflight`` of -5 or 0 (the request itself is running: at least 1) is not drawn as a
    level: the request's level comes from the intervals, as without the field."""
    _ramp_trace(tmp_path / "logs", steps=3, minutes_per_step=2)
    path = tmp_path / "logs" / "ds15b_20261120.jsonl.gz"
    lines = [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines()]
    requests = [e for e in lines if e["stage"] == "request"]
    for e in requests[::3]:
        e["inflight"] = bad
    path.write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in lines).encode()))
    (cap,) = _model(tmp_path / "logs")["capacity"]
    levels = [lv["level"] for lv in cap["levels"]]
    assert min(levels) >= 1 and sum(lv["requests"] for lv in cap["levels"]) == len(requests)


def test_a_falling_or_loose_memory_fit_does_not_read_as_growth():
    """A reader saw "memory grows -149.4 MiB reserved per request in flight, fit R² 0.74" on a run
    whose GPU leak built memory up over time, so its late, low in-flight levels held the most."""
    from dslogs.analyzer.render.glossary import oom_line

    steady = {"mb_per_request": 40.8, "fit_r2": 0.95}
    assert oom_line(steady) == ("not estimated: the logs carry no GPU total (memory grows 40.8 MiB reserved per "
                                "request in flight, fit R² 0.95)")
    falling = oom_line({"mb_per_request": -149.371, "fit_r2": 0.74})
    assert "grows" not in falling and "peak reserved falls as more requests are in flight (-149.4 MiB" in falling
    assert "not a memory per request to trust" in falling and "leak" not in falling
    loose = oom_line({"mb_per_request": 60.0, "fit_r2": 0.5})
    assert "grows" not in loose and "a loose fit (60 MiB reserved per request in flight, fit R² 0.50, under R² 0.80)" in loose
    # where a leak pinned memory in the process, the why: memory built up over the run
    why = oom_line({"mb_per_request": -149.371, "fit_r2": 0.74, "leak_mb": 4096.0})
    assert "a leak (memory_leak, 4,096 MiB in this process) built memory up over the run" in why
