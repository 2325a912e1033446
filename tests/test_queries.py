"""The metric SQL in queries/: numbers checked against numpy on hand-made view tables (the
documented columns of docs/internals.md), plus every query run through the real ingest on the
simulator's sample logs."""

from __future__ import annotations

import importlib.util
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from dslogs.analyzer.core.resources import load_query, query_names
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import compute_metrics, session_requests
from dslogs.analyzer.metrics import registry
from dslogs.analyzer.metrics.registry import (
    DRILLDOWN_QUERIES,
    METRIC_QUERIES,
    bind,
    parameters,
    query_params,
    sql_params,
)
from dslogs.analyzer.metrics.results import run_metric
from tests.diag_fixture_db import fixture_connection

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PCTS = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}
REPO = Path(__file__).resolve().parent.parent


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-9)


# -- the files themselves ------------------------------------------------------------------------


def test_every_query_file_is_registered_and_documented():
    names = set(query_names())
    assert names == set(METRIC_QUERIES) | set(DRILLDOWN_QUERIES)
    all_params = set(parameters(defaults(), "hour")) | {"session_ids"}
    for name in names:
        sql = load_query(name)
        header = sql.split("\n")[0]
        assert header.startswith("-- "), f"{name}.sql has no header comment"
        comment = " ".join(line for line in sql.splitlines() if line.startswith("--"))
        assert re.search(r"\bUnits?\b", comment), f"{name}.sql header does not give the unit"
        # what it binds: what its header declares (query_params refuses a mismatch), each a
        # threshold as $<table>_<key> or one of the registry's own
        assert sql_params(sql) == set(query_params(name)), name
        assert set(query_params(name)) <= all_params, f"{name}.sql uses unknown parameters"
        # Percentiles are linear (quantile_cont), never quantile_disc / approx.
        assert "quantile_disc" not in sql and "approx_quantile" not in sql



@pytest.mark.parametrize("text, needle", [
    # a parameter used but not declared: it would be bound from nowhere
    ("-- params: slo_ttft_ms\nSELECT $slo_ttft_ms, $slo_tpot_ms", "does not declare"),
    # declared but not used
    ("-- params: slo_ttft_ms, slo_tpot_ms\nSELECT $slo_ttft_ms", "does not use"),
    # a name in no threshold table (the former alias of memory_thrash.util_pct)
    ("-- params: thrash_util_pct\nSELECT $thrash_util_pct", "neither a threshold"),
    # a $name in a comment is prose, not a parameter
    ("-- at most $report_timeline_sessions sessions\nSELECT $slo_ttft_ms", "does not declare"),
])
def test_a_query_header_that_does_not_match_its_parameters_is_refused(monkeypatch, text, needle):
    monkeypatch.setattr(registry, "load_query", lambda name: text)
    with pytest.raises(ValueError, match=needle) as err:
        registry.query_params.__wrapped__("scratch")
    assert "scratch.sql" in str(err.value)


def test_the_registry_binds_each_query_its_declared_parameters_and_no_other():
    params = {**parameters(defaults(), "hour"), "session_ids": ["a"]}
    assert set(bind("memory_timeline", params)) == {
        "memory_leak_slope_mb_per_min", "memory_leak_rise_mb", "ghost_memory_ghost_mb",
        "report_timeline_sessions", "report_timeline_points",
    }
    assert bind("session_requests", params) == {"session_ids": ["a"], "report_detail_requests": 100}
    assert bind("time_span", params) == {}
    # a form of the query (stored rows, a merge of partitions) binds those of them it uses
    assert bind("slowest_sessions", params, "SELECT 1") == {}
    with pytest.raises(ValueError, match="does not declare"):
        bind("slowest_sessions", params, "SELECT * FROM t LIMIT $report_timeline_points")
    # every threshold is there under its canonical name, in its default's type, and nothing else
    t = defaults()
    t["slo"]["ttft_ms"] = 800  # an int from a hand-made table binds as the DOUBLE the SQL compares
    p = parameters(t, "hour")
    assert p["slo_ttft_ms"] == 800.0 and isinstance(p["slo_ttft_ms"], float)
    assert set(p) == set(registry.THRESHOLD_PARAMS) | set(registry.OTHER_PARAMS) - {"session_ids"}


# -- numbers against numpy --------------------------------------------------------------------


def _latency_fixture(seed=4, n=400):
    rng = random.Random(seed)
    events, requests = [], []
    for i in range(n):
        ts = T0 + timedelta(seconds=37 * i)
        sid = f"s{i % 23}"
        for stage, scale in (("tokenize", 20), ("prefill", 400), ("decode", 6000), ("format", 3)):
            d = rng.lognormvariate(np.log(scale), 0.6)
            events.append({"ts": ts, "stage": stage, "session_id": sid, "request_id": f"r{i}", "host": "h",
                           "duration_ms": round(d, 3)})
        # A stage that was not measured (-1 in the seed logger) is NULL in the view.
        events.append({"ts": ts, "stage": "queue", "session_id": sid, "request_id": f"r{i}", "host": "h",
                       "duration_ms": None})
        out = rng.randint(1, 900)
        ttft = rng.lognormvariate(np.log(500), 0.5)
        tpot = None if out == 1 else rng.lognormvariate(np.log(60), 0.5)
        requests.append({
            "session_id": sid, "request_id": f"r{i}", "host": "h", "turn_index": i // 23 + 1,
            "start_ts": ts, "end_ts": ts + timedelta(seconds=20), "input_len": rng.randint(5, 3000),
            "output_len": out, "prefill_ms": rng.lognormvariate(np.log(400), 0.4),
            "decode_ms": rng.lognormvariate(np.log(6000), 0.4),
            "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": ttft + rng.uniform(100, 20000),
            "is_error": rng.random() < 0.05, "gpu_wait_pct": rng.uniform(-5, 100),
            "reasoning_share": rng.random(), "reasoning_len": rng.randint(0, 500),
            "tokens_per_s": rng.uniform(5, 40), "ttfa_ms": None if rng.random() < 0.3 else rng.uniform(500, 9000),
        })
    for r in requests:
        r["prefill_decode_ratio"] = r["prefill_ms"] / r["decode_ms"]
    return events, requests


@pytest.fixture(scope="module")
def latency_db():
    events, requests = _latency_fixture()
    return fixture_connection(events, requests), events, requests


def test_stage_percentiles_equal_numpy_linear(latency_db):
    con, events, _ = latency_db
    rows = {r["stage"]: r for r in run_metric(con, "stage_percentiles", {})}
    assert list(rows) == ["tokenize", "prefill", "decode", "format"]  # pipeline order, queue unmeasured
    for stage, row in rows.items():
        values = np.array([e["duration_ms"] for e in events if e["stage"] == stage])
        assert row["count"] == len(values)
        for key, q in PCTS.items():
            assert row[f"{key}_ms"] == approx(np.percentile(values, q, method="linear")), (stage, key)
        assert row["max_ms"] == approx(values.max())


def test_stage_percentiles_over_time_equal_numpy_per_bucket(latency_db):
    con, events, _ = latency_db
    rows = run_metric(con, "stage_percentiles_over_time", {"bucket": "hour"})
    assert rows
    for row in rows:
        start = datetime.fromisoformat(row["bucket"])
        values = np.array([e["duration_ms"] for e in events if e["stage"] == row["stage"]
                           and e["duration_ms"] is not None and start <= e["ts"] < start + timedelta(hours=1)])
        assert row["count"] == len(values)
        assert row["p95_ms"] == approx(np.percentile(values, 95, method="linear"))


def test_request_percentiles_and_goodput(latency_db):
    con, _, requests = latency_db
    rows = {r["metric"]: r for r in run_metric(con, "request_latency_percentiles", {})}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "tokens_per_s", "ttfa_ms"):
        values = np.array([r[metric] for r in requests if r[metric] is not None])
        assert rows[metric]["count"] == len(values)
        for key, q in PCTS.items():
            assert rows[metric][key] == approx(np.percentile(values, q, method="linear")), (metric, key)
    (g,) = run_metric(con, "goodput", {"slo_ttft_ms": 1000.0, "slo_tpot_ms": 130.0})
    good = sum(1 for r in requests if not r["is_error"] and r["ttft_ms"] <= 1000
               and (r["tpot_ms"] is None or r["tpot_ms"] <= 130))
    assert (g["requests"], g["good"], g["errors"]) == (len(requests), good, sum(r["is_error"] for r in requests))
    assert g["goodput"] == approx(good / len(requests))


def test_prefill_ratio_reasoning_and_gpu_wait_hist(latency_db):
    con, _, requests = latency_db
    (ratio,) = run_metric(con, "prefill_decode_ratio", {})
    values = [r["prefill_decode_ratio"] for r in requests]
    assert ratio["p50"] == approx(np.percentile(values, 50, method="linear"))
    (rs,) = run_metric(con, "reasoning_share", {})
    assert rs["share_p50"] == approx(np.percentile([r["reasoning_share"] for r in requests], 50, method="linear"))
    hist = run_metric(con, "gpu_wait_hist", {})
    assert sum(h["count"] for h in hist) == len(requests)
    assert hist[0]["bin_start"] == 0 and hist[-1]["bin_end"] == 100
    # Negative waits (CPU time above wall time) land in the first bin, 100 % in the last.
    first = sum(1 for r in requests if r["gpu_wait_pct"] < 10)
    assert hist[0]["count"] == first


def test_binned_series_are_bounded(latency_db):
    con, _, requests = latency_db
    p = parameters(defaults(), "hour")
    bins = run_metric(con, "prefill_by_input_len", p)
    assert max(b["input_len_bin"] for b in bins) <= p["max_input_tokens"]
    assert sum(b["count"] for b in bins) == len(requests)
    hist = run_metric(con, "latency_hist", p)
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        rows = [h for h in hist if h["metric"] == metric]
        assert len(rows) <= p["max_bins"]
        assert sum(h["count"] for h in rows) == sum(1 for r in requests if r[metric] is not None)
    turns = run_metric(con, "prefill_by_turn", p)
    assert max(t["turn_index"] for t in turns) <= p["max_turn"]


def test_short_prompt_and_input_class_split(latency_db):
    con, _, requests = latency_db
    (short,) = run_metric(con, "short_prompt_e2e", {"checklist_short_input_tokens": 200, "checklist_short_answer_tokens": 16})
    # a reply longer than 16 tokens counts its first 16 (003 §5.2's budget is for a short answer)
    values = [
        r["e2e_ms"] - r["decode_ms"] + 16 * r["tpot_ms"]
        if r["output_len"] > 16 and r["decode_ms"] is not None and r["tpot_ms"] is not None else r["e2e_ms"]
        for r in requests if r["input_len"] < 200
    ]
    assert short["count"] == len(values)
    assert short["p50_ms"] == approx(np.percentile(values, 50, method="linear"))
    classes = {r["input_class"]: r for r in run_metric(con, "prefill_by_input_class", {"slow_prefill_long_input_tokens": 1200})}
    long_values = [r["prefill_ms"] for r in requests if r["input_len"] >= 1200]
    assert classes["long"]["count"] == len(long_values)
    assert classes["long"]["p50_ms"] == approx(np.percentile(long_values, 50, method="linear"))


# -- memory, samplers, counters --------------------------------------------------------------


def test_memory_slope_r2_and_ghost_match_numpy():
    rng = random.Random(2)
    events, minutes, reserved = [], [], []
    for k in range(15):
        t = T0 + timedelta(seconds=50 * k + rng.uniform(0, 20))
        r = 4200 + 73.2 * (t - T0).total_seconds() / 60 + rng.gauss(0, 15)
        minutes.append((t - T0).total_seconds() / 60)
        reserved.append(r)
        events.append({"ts": t, "stage": "gpu_memory", "session_id": "leak", "host": "h", "pid": 1,
                       "reserved_mb": r, "allocated_mb": 3500.0, "num_ooms": 0})
    con = fixture_connection(events)
    (row,) = run_metric(con, "memory_per_session", {})
    slope, intercept = np.polyfit(minutes, reserved, 1)
    r2 = np.corrcoef(minutes, reserved)[0, 1] ** 2
    assert row["reserved_slope_mb_per_min"] == pytest.approx(slope, rel=1e-6)
    assert row["reserved_r2"] == pytest.approx(r2, rel=1e-6)
    assert row["reserved_first_mb"] == reserved[0] and row["reserved_last_mb"] == reserved[-1]
    ghost = np.array(reserved) - 3500.0
    assert row["ghost_p50_mb"] == approx(np.percentile(ghost, 50, method="linear"))
    assert row["ghost_share_p50"] == approx(np.percentile(ghost / np.array(reserved), 50, method="linear"))


def test_rss_slope_per_process():
    events = [{"ts": T0 + timedelta(minutes=k), "stage": "process_sample", "host": "h", "pid": 7,
               "rss_mb": 1250 + 5.0 * k} for k in range(30)]
    events += [{"ts": T0 + timedelta(minutes=k), "stage": "process_sample", "host": "h", "pid": 8,
                "rss_mb": 1300.0 + (k % 2)} for k in range(30)]
    rows = {r["pid"]: r for r in run_metric(fixture_connection(events), "rss_per_process", {})}
    assert rows[7]["rss_slope_mb_per_min"] == pytest.approx(5.0) and rows[7]["rss_r2"] == pytest.approx(1.0)
    assert rows[7]["rss_last_mb"] - rows[7]["rss_first_mb"] == pytest.approx(145.0)
    assert abs(rows[8]["rss_slope_mb_per_min"]) < 0.01


def test_oom_errors_and_counter_rises_per_session():
    ev = [
        {"ts": T0, "stage": "gpu_memory", "session_id": "a", "host": "h", "pid": 1, "reserved_mb": 1.0, "num_ooms": 2},
        {"ts": T0 + timedelta(minutes=1), "stage": "gpu_memory", "session_id": "b", "host": "h", "pid": 1,
         "reserved_mb": 1.0, "num_ooms": 2},  # counter carried over from before: not b's OOM
        {"ts": T0 + timedelta(minutes=2), "stage": "error", "session_id": "b", "host": "h",
         "error_type": "RuntimeError", "error_msg": "CUDA out of memory. Tried to allocate 2 GiB"},
        {"ts": T0 + timedelta(minutes=3), "stage": "gpu_memory", "session_id": "b", "host": "h", "pid": 1,
         "reserved_mb": 1.0, "num_ooms": 3},
        {"ts": T0 + timedelta(minutes=4), "stage": "error", "session_id": "c", "host": "h",
         "error_type": "OOMError", "error_msg": "Beam search OOM, fallback to greedy"},
        {"ts": T0 + timedelta(minutes=5), "stage": "error", "session_id": "d", "host": "h",
         "error_type": "ValueError", "error_msg": "bad top_p"},
    ]
    rows = {r["session_id"]: r for r in run_metric(fixture_connection(ev), "oom_per_session", {})}
    assert set(rows) == {"b", "c"}
    assert (rows["b"]["oom_errors"], rows["b"]["num_ooms_rise"]) == (1, 1)
    assert (rows["c"]["oom_errors"], rows["c"]["num_ooms_rise"]) == (1, 0)


def _gpu_samples(host, seconds, util, mem, total=24576.0):
    return [{"ts": T0 + timedelta(seconds=s), "stage": "gpu_sample", "host": host, "pid": 1, "gpu_index": 0,
             "gpu_util_pct": util(s), "gpu_mem_used_mb": mem(s), "gpu_mem_total_mb": total} for s in seconds]


def test_gpu_swing_and_time_weighted_starvation():
    # Thrashing: 1 Hz, util 90 %, memory alternating by 3000 MiB.
    ev = _gpu_samples("thrash", range(60), lambda s: 90.0, lambda s: 8000.0 + 3000 * (s % 2))
    # Starved: idle ticks once a minute for 50 minutes (util 2 %, 94 % memory), then 300 s busy at 1 Hz.
    idle = list(range(0, 3000, 60))
    busy = list(range(3000, 3300))
    ev += _gpu_samples("starved", idle + busy, lambda s: 2.0 if s < 3000 else 90.0, lambda s: 23100.0)
    con = fixture_connection(ev)
    p = parameters(defaults(), "hour")
    swing = {r["host"]: r for r in run_metric(con, "gpu_memory_swing", p)}
    assert swing["thrash"]["swing_max_busy_mb_per_s"] == pytest.approx(3000.0)
    assert swing["thrash"]["thrash_pairs"] == 59
    assert swing["starved"]["thrash_pairs"] == 0
    hosts = {r["host"]: r for r in run_metric(con, "gpu_per_host", p)}
    s = hosts["starved"]
    # 50 idle samples stand for 60 s each, the busy ones for 1 s: starved most of the time,
    # although most samples are busy ones.
    assert s["starved_samples"] == 50 and s["samples"] == 350
    assert s["starved_s"] == pytest.approx(3000.0)
    assert s["sampled_s"] == pytest.approx(3000.0 + 299.0 + 60.0)  # the last sample counts the cap
    assert s["starved_s"] / s["sampled_s"] > 0.85
    assert hosts["thrash"]["starved_s"] == 0


def test_gpu_util_while_busy_only_counts_request_minutes():
    ev = _gpu_samples("h", range(0, 600, 5), lambda s: 95.0 if s >= 300 else 30.0, lambda s: 5000.0)
    req = [{"session_id": "s", "request_id": "r", "host": "h", "turn_index": 1,
            "start_ts": T0 + timedelta(seconds=10), "end_ts": T0 + timedelta(seconds=130)}]
    (row,) = run_metric(fixture_connection(ev, req), "gpu_util_while_busy", {})
    assert row["util_peak_busy"] == 30.0  # the 95 % samples came when no request ran
    assert row["busy_samples"] == 36  # minutes 0, 1, 2 at one sample per 5 s


def test_log_volume_peak_minute_uses_line_bytes():
    ev = [{"ts": T0 + timedelta(seconds=s), "stage": "process_sample", "host": "h", "line_bytes": 200}
          for s in range(0, 600, 10)]
    ev += [{"ts": T0 + timedelta(minutes=5, seconds=0.5 * k), "stage": "process_sample", "host": "h",
            "line_bytes": 700_000} for k in range(120)]
    (row,) = run_metric(fixture_connection(ev), "log_volume_peak_minute", {})
    assert row["peak_minute"].startswith("2026-12-01T08:05")
    assert row["peak_bytes"] == 120 * 700_000 + 6 * 200
    assert row["peak_bytes_per_s"] == pytest.approx(row["peak_bytes"] / 60)
    # Without line sizes from ingest the log volume tables are empty (rule: no_data).
    legacy_like = [{k: v for k, v in e.items() if k != "line_bytes"} for e in ev]
    metrics = compute_metrics(fixture_connection(legacy_like, line_bytes=False))
    assert metrics["log_volume_peak_minute"] == [] and metrics["_params"][0]["line_bytes"] is False


def test_collector_write_rate_from_cumulative_bytes():
    ev = [{"ts": T0 + timedelta(minutes=k), "stage": "collector", "host": "h", "pid": 1,
           "bytes_written": 1000 * k + (84_000_000 if k >= 5 else 0)} for k in range(10)]
    ev.append({"ts": T0 + timedelta(minutes=30), "stage": "collector", "host": "h", "pid": 1,
               "bytes_written": 500_000_000})  # after a 20-minute gap: not a rate
    (row,) = run_metric(fixture_connection(ev), "collector_write_rate", {"log_volume_max_heartbeat_gap_s": 120.0})
    assert row["intervals"] == 9
    assert row["peak_bytes_per_s"] == pytest.approx((84_000_000 + 1000) / 60)
    assert row["peak_from"].startswith("2026-12-01T08:04")


def test_collector_counters_are_cumulative_per_process():
    ev = [{"ts": T0 + timedelta(minutes=k), "stage": "collector", "host": "h", "pid": pid,
           "written": 10 * k, "dropped": d * k, "queued": k} for k in range(5) for pid, d in ((1, 2), (2, 0))]
    (row,) = run_metric(fixture_connection(ev), "collector_health", {})
    assert (row["dropped"], row["written"], row["processes"]) == (8, 80, 2)


def test_timelines_are_bounded():
    ev = []
    for s in range(30):
        for k in range(500):
            ev.append({"ts": T0 + timedelta(seconds=10 * k), "stage": "gpu_memory", "session_id": f"s{s:02d}",
                       "host": "h", "reserved_mb": 4000.0 + (80 * k / 6 if s == 17 else 0), "allocated_mb": 3500.0})
            ev.append({"ts": T0 + timedelta(seconds=10 * k), "stage": "kv_cache", "session_id": f"s{s:02d}",
                       "host": "h", "kv_seq_len": k * (s + 1), "kv_cache_size_mb": 0.03 * k})
    con = fixture_connection(ev)
    p = parameters(defaults(), "hour")
    mem = run_metric(con, "memory_timeline", p)
    sessions = {r["session_id"] for r in mem}
    assert len(sessions) == p["report_timeline_sessions"] and "s17" in sessions  # the leaking one is shown
    assert len(mem) <= p["report_timeline_sessions"] * (p["report_timeline_points"] + 2)
    kv = run_metric(con, "kv_growth_timeline", p)
    assert {r["session_id"] for r in kv} >= {"s29", "s28"}
    assert len(kv) <= p["report_timeline_sessions"] * (p["report_timeline_points"] + 2)


def test_session_requests_binds_the_id_list():
    req = [{"session_id": sid, "request_id": f"{sid}#{k}", "host": "h", "turn_index": k}
           for sid in ("a", "b'); DROP TABLE requests; --") for k in range(1, 4)]
    con = fixture_connection([], req)
    rows = session_requests(con, ["b'); DROP TABLE requests; --"])
    assert [r["turn_index"] for r in rows] == [1, 2, 3]
    assert session_requests(con, ["a"], defaults())[0]["request_id"] == "a#1"
    assert con.execute("SELECT count(*) FROM requests").fetchall() == [(6,)]


def test_every_query_runs_on_empty_views():
    con = fixture_connection()
    metrics = compute_metrics(con)
    assert set(METRIC_QUERIES) <= set(metrics)
    assert session_requests(con, ["x"]) == []


# -- every query on the real views (ingest of sample_logs/) -------------------------------------

SAMPLES = REPO / "sample_logs"


def _columns(con, name, params):
    return [d[0] for d in con.execute(load_query(name), bind(name, params)).description]


@pytest.mark.skipif(not SAMPLES.is_dir() or importlib.util.find_spec("dslogs.analyzer.ingest.logs") is None,
                    reason="needs sample_logs/ and dslogs.analyzer.ingest.logs (open_logs)")
def test_every_query_runs_on_sample_logs_with_the_expected_columns():
    from dslogs.analyzer.ingest.logs import open_logs

    p = {**parameters(defaults(), "hour"), "session_ids": []}
    expected = {name: _columns(fixture_connection(), name, p) for name in query_names()}
    rows_seen = dict.fromkeys(query_names(), 0)
    folders = [d for d in sorted(SAMPLES.iterdir()) if (d / "truth.json").is_file()]
    assert len(folders) >= 20
    for folder in folders:
        db = open_logs([str(folder)], use_cache=False)
        sessions = [r[0] for r in db.con.execute("SELECT session_id FROM sessions LIMIT 3").fetchall()]
        for name in query_names():
            params = {**p, "session_ids": sessions}
            rows = run_metric(db.con, name, params)
            columns = list(rows[0]) if rows else _columns(db.con, name, params)
            assert columns == expected[name], (folder.name, name)
            rows_seen[name] += len(rows)
    # The simulator writes gpu_memory snapshots only inside sessions (what the collector does after
    # each reply, 003 §4.1), so the per-host table of session-less snapshots stays empty there.
    may_be_empty = {"memory_per_host"}
    empty = [name for name, n in rows_seen.items() if n == 0 and name not in may_be_empty]
    assert not empty, f"queries that returned no rows on any sample folder: {empty}"


def test_bucket_width_follows_the_span():
    from dslogs.analyzer.metrics.registry import bucket_for_span

    t = "2026-01-01T00:00:00+00:00"
    assert bucket_for_span(t, "2026-01-01T02:59:00+00:00") == "minute"
    assert bucket_for_span(t, "2026-01-20T00:00:00+00:00") == "hour"
    assert bucket_for_span(t, "2026-12-31T00:00:00+00:00") == "day"  # a year: 365 buckets, not 8760
    assert bucket_for_span(None, None) == "hour"
