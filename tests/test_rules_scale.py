"""Rules at scale: a finding over many sessions lists every one of them, worst first in its
details, and holds no session it did not flag."""

from __future__ import annotations

from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.rules.decode import rule_gpu_wait


def test_a_finding_over_many_sessions_lists_them_all():
    th = defaults()
    rows = [{"session_id": f"s{i:05d}", "host": "gpu-01", "count": 10, "gpu_wait_pct_p50": 61 + i / 100,
             "gpu_wait_pct_p90": 70, "gpu_wait_pct_max": 80} for i in range(1000)]  # fmt: skip
    rows.append({"session_id": "calm", "host": "gpu-01", "count": 10, "gpu_wait_pct_p50": 20.0,
                 "gpu_wait_pct_p90": 30, "gpu_wait_pct_max": 40})
    outcome = rule_gpu_wait({"gpu_wait_per_session": rows}, {}, th)
    (f,) = outcome.findings
    # whole in machine output: every flagged id (sorted), every flagged session's row (worst first)
    assert f["session_count"] == 1000 and f["session_ids"] == [f"s{i:05d}" for i in range(1000)]
    details = f["evidence"]["details"]["sessions"]
    assert [r["session_id"] for r in details] == [f"s{i:05d}" for i in range(999, -1, -1)]
    assert f["value"] == details[0]["gpu_wait_pct_p50"] == 61 + 999 / 100


def test_rules_over_compact_tables_keep_only_the_hits():
    # The per-session tables of a large window as rows.Rows (30 k sessions): the rules give what
    # they give over lists, and read them as streams: at no point do they hold a row dict per
    # session (their peak stays under one table's worth of dicts).
    import tracemalloc

    import duckdb

    from dslogs.analyzer.metrics.results import result_rows
    from dslogs.analyzer.rules import evaluate_rules

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    base = "SELECT 's' || lpad(i::VARCHAR, 6, '0') AS session_id, 'gpu-0' || (i % 3) AS host, {} FROM range(30000) t(i)"
    odd = "i % 1000 = 7"  # one session in a thousand fires
    tables = {
        "memory_per_session": "1234 + i % 4 AS pid, 12 AS samples, 1000.0 AS reserved_first_mb, "
        f"CASE WHEN {odd} THEN 1900.0 ELSE 1010.0 END AS reserved_last_mb, 0.5 AS reserved_slope_mb_per_min, "
        "20.0 AS minutes, TIMESTAMPTZ '2026-11-23 00:00:00+00' + to_seconds(i * 60) AS first_ts, "
        "TIMESTAMPTZ '2026-11-23 00:20:00+00' + to_seconds(i * 60) AS last_ts, "
        f"CASE WHEN {odd} THEN 1500.0 ELSE 10.0 END AS ghost_p50_mb, 0.6 AS ghost_share_p50, "
        "20.0 AS ghost_max_mb, 1100.0 AS reserved_max_mb, 900.0 AS allocated_max_mb",
        "gpu_wait_per_session": f"8 AS count, CASE WHEN {odd} THEN 90.0 ELSE 5.0 END AS gpu_wait_pct_p50, "
        "10.0 AS gpu_wait_pct_p90",
        "decode_per_session": f"8 AS requests, CASE WHEN {odd} THEN 400.0 ELSE 20.0 END AS tpot_p50_ms, "
        "80.0 AS gpu_util_pct_p50, 30.0 AS tpot_max_ms",
        "generate_params_per_session": f"8 AS num_beams_count, CASE WHEN {odd} THEN 4 ELSE 1 END AS num_beams_max, "
        "8 AS max_new_tokens_count, 1024 AS max_new_tokens_max, 8 AS output_len_count, 700 AS output_len_max",
        "kv_cache_per_session": f"CASE WHEN {odd} THEN 9000 ELSE 800 END AS kv_seq_len_max, "
        "40.0 AS kv_cache_size_max_mb",
        "prefill_growth_per_session": "8 AS turns, 20.0 AS prefill_first_ms, 25.0 AS prefill_last_ms, "
        "0.1 AS prefill_r2, 0.5 AS prefill_slope_ms_per_turn",
    }

    def metrics(compact_rows: int) -> dict:
        return {name: result_rows(con.execute(base.format(cols)), compact_rows=compact_rows)
                for name, cols in tables.items()}  # fmt: skip

    th = defaults()
    want = evaluate_rules(metrics(10**9), {}, th)
    compact = metrics(0)
    tracemalloc.start()
    got = evaluate_rules(compact, {}, th)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == want
    fired = {f["rule"] for f in got[0]}
    assert {"gpu_wait", "ghost_memory", "memory_leak", "beam_search", "kv_cache_bloat"} <= fired
    tracemalloc.start()
    as_dicts = list(compact["memory_per_session"])
    one_table = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del as_dicts
    assert peak < one_table, (peak, one_table)
