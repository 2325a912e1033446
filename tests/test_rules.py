"""Rules over hand-made metric tables: each fires on its symptom at the seed's threshold, passes
just below it, and reports no_data (never pass) when its inputs are missing. Thresholds load
from TOML with unknown keys rejected."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dslogs.analyzer.core import thresholds as declared
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.thresholds import defaults, load_thresholds
from dslogs.analyzer.rules import RULE_IDS, RULE_INFO, RULES, evaluate_rules

# The rules the seed articles define: each must stay registered. Rules added since need no entry here;
# docs/rules.md's generated table and test_registry's scenario check cover every registration.
SEED_RULE_IDS = (
    "memory_leak", "ghost_memory", "oom", "gpu_wait", "cpu_bound", "kv_cache_bloat", "beam_search",
    "high_max_tokens", "long_output", "slow_tokenize", "slow_prefill", "slow_decode", "slow_ttft",
    "slow_format", "low_gpu_util", "gpu_starved", "memory_thrash", "rss_growth", "log_volume",
    "collector_drops", "bad_lines",
)  # fmt: skip

T = defaults()
NO_INGEST = {"files": 1, "events": 10, "bad_lines": 0, "skipped_files": 0}


def run(rule: str, metrics: dict, ingest=NO_INGEST, thresholds=None):
    return RULES[rule](metrics, ingest, thresholds or T)


def session(sid="s1", host="h1", **kw):
    return {"session_id": sid, "host": host, **kw}


def test_every_seed_rule_exists_with_severity_fix_and_source():
    assert set(SEED_RULE_IDS) <= set(RULE_IDS)
    assert len(set(RULE_IDS)) == len(RULE_IDS)
    for rule in RULE_IDS:
        severity, source, fix = RULE_INFO[rule]
        assert severity in ("critical", "warning", "info")
        assert fix and source
        assert rule in declared.DEFAULTS, rule
    assert RULE_INFO["oom"][0] == "critical" and RULE_INFO["memory_leak"][0] == "critical"
    assert RULE_INFO["bad_lines"][0] == "info"


def test_default_thresholds_are_the_seeds():
    assert T["memory_leak"]["slope_mb_per_min"] == 50 and T["memory_leak"]["rise_mb"] == 200
    assert T["ghost_memory"]["ghost_mb"] == 1024 and T["ghost_memory"]["ghost_share"] == 0.5
    assert T["gpu_wait"]["gpu_wait_pct"] == 60
    assert T["cpu_bound"] == {"gpu_util_pct": 20, "tpot_ms": 130}
    assert T["kv_cache_bloat"]["kv_seq_len"] == 2048 and T["kv_cache_bloat"]["kv_cache_size_mb"] == 8192
    assert T["high_max_tokens"]["max_new_tokens"] == 4096 and T["long_output"]["output_len"] == 3000
    assert T["slow_tokenize"]["p50_ms"] == 100
    assert (T["slow_prefill"]["p50_ms"], T["slow_prefill"]["long_p50_ms"]) == (900, 2500)
    assert T["slow_decode"]["tpot_p50_ms"] == 130 and T["slow_ttft"]["p50_ms"] == 1000
    assert (T["slow_format"]["warning_p50_ms"], T["slow_format"]["critical_p50_ms"]) == (30, 100)
    assert T["low_gpu_util"]["peak_pct"] == 65
    assert T["gpu_starved"]["util_pct"] == 20 and T["gpu_starved"]["mem_used_share"] == 0.9
    assert T["memory_thrash"]["util_pct"] == 80 and T["memory_thrash"]["swing_mb_per_s"] == 2048
    assert T["rss_growth"]["rise_mb"] == 100 and T["rss_growth"]["min_r2"] == 0.8
    assert T["log_volume"]["bytes_per_s"] == 1_000_000
    assert T["slo"] == {"ttft_ms": 1000, "tpot_ms": 130}
    for table, keys in declared.SOURCES.items():
        for key, src in keys.items():
            assert src, f"{table}.{key} has no source"


def test_the_threshold_table_is_whole_without_the_rules():
    """Core holds every table itself: asking before any rule is imported gives them all, the
    rules' included (the metric SQL binds them as $<table>_<key>, a user's TOML may name any)."""
    code = (
        "import sys\n"
        "from dslogs.analyzer.core import thresholds as t\n"
        "assert 'dslogs.analyzer.rules' not in sys.modules\n"
        "assert t.load_thresholds(None)['memory_leak']['rise_mb'] == 200.0\n"
        "names = set(t.defaults())\n"
        "import dslogs.analyzer.rules\n"
        "assert names == set(dslogs.analyzer.rules.RULE_IDS) | {'slo', 'checklist', 'report'}, names\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout


@pytest.mark.parametrize("spec, needle", [
    ({"scratch": {}}, "has no keys"),
    ({"scratch": {"x": 1}}, "(default number, source text)"),
    ({"scratch": {"x": (1, "")}}, "(default number, source text)"),
    ({"scratch": {"x": (True, "ours")}}, "(default number, source text)"),
])
def test_each_threshold_has_its_default_and_source(spec, needle):
    with pytest.raises(ValueError) as err:
        declared._checked(spec)
    assert needle in str(err.value)
    assert declared._checked(declared.TABLES) is declared.TABLES


# -- thresholds file ---------------------------------------------------------------------------


def test_thresholds_toml_overrides_and_keeps_other_defaults(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("[memory_leak]\nslope_mb_per_min = 30\n[slo]\nttft_ms = 800\n", encoding="utf-8")
    t = load_thresholds(f)
    assert t["memory_leak"]["slope_mb_per_min"] == 30.0
    assert t["memory_leak"]["rise_mb"] == 200
    assert t["slo"]["ttft_ms"] == 800.0
    assert declared.DEFAULTS["memory_leak"]["slope_mb_per_min"] == 50  # defaults untouched


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[memory_leak]\nslope = 3\n", "'memory_leak.slope'"),
        ("[memroy_leak]\nslope_mb_per_min = 3\n", "'memroy_leak'"),
        ("[memory_leak]\nslope_mb_per_min = 'fast'\n", "memory_leak.slope_mb_per_min must be float"),
        ("memory_leak = 3\n", "must be a table"),
        ("[memory_leak\n", "invalid TOML"),
    ],
)
def test_thresholds_file_errors_name_the_key_and_file(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as exc:
        load_thresholds(f)
    assert needle in str(exc.value) and str(f) in str(exc.value)


def test_thresholds_file_missing(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_thresholds(tmp_path / "nope.toml")


# -- no data is never a pass --------------------------------------------------------------------


def test_every_rule_reports_no_data_on_empty_metrics():
    findings, statuses = evaluate_rules({}, NO_INGEST, T)
    assert findings == []
    by_rule = {s["rule"]: s["status"] for s in statuses}
    assert [s["rule"] for s in statuses] == list(RULE_IDS)
    # bad_lines reads ingest counts, which always exist.
    assert by_rule.pop("bad_lines") == "pass"
    assert set(by_rule.values()) == {"no_data"}, by_rule


def test_legacy_like_metrics_no_data_for_prefill_params_samplers():
    m = {
        "stage_percentiles": [{"stage": "tokenize", "count": 5, "p50_ms": 20.0}],
        "decode_per_session": [session(requests=5, tpot_count=5, tpot_p50_ms=40.0, gpu_util_count=0,
                                       gpu_util_pct_p50=None)],
        "generate_params_per_session": [session(requests=5, num_beams_count=0, num_beams_max=None,
                                                max_new_tokens_count=0, output_len_count=5, output_len_max=300)],
        "prefill_by_input_class": [],
        "goodput": [{"requests": 5, "ok": 5, "errors": 0}],
    }
    _f, statuses = evaluate_rules(m, NO_INGEST, T)
    by_rule = {s["rule"]: s["status"] for s in statuses}
    for rule in ("slow_prefill", "beam_search", "high_max_tokens", "low_gpu_util", "gpu_starved",
                 "memory_thrash", "rss_growth", "collector_drops", "cpu_bound", "slow_format"):
        assert by_rule[rule] == "no_data", rule
    for rule in ("slow_tokenize", "long_output", "slow_decode", "oom"):
        assert by_rule[rule] == "pass", rule


# -- session rules: fire at the threshold, quiet below ---------------------------------------------


def mem(sid, slope, first, last, samples=5, **kw):
    return session(sid, samples=samples, reserved_slope_mb_per_min=slope, reserved_first_mb=first,
                   reserved_last_mb=last, reserved_r2=0.95, **kw)


def test_memory_leak_is_the_turn_based_rise_whatever_the_slope():
    """003 §5.3: reserved_mb over consecutive turns moving beyond ±200 MiB, a second or ten
    minutes apart (the slope alone missed slow leaks and turns within one second)."""
    m = {"memory_per_session": [
        mem("leak", 73.2, 4000, 4800),
        mem("steep_but_small", 120.0, 4000, 4150),  # noise over a short session
        mem("slow", 30.0, 4000, 4900),  # turns ten minutes apart: under 50 MiB/min, still +900 MiB
        mem("same_second", None, 4000, 8500),  # turns within a second: no per-minute slope
        mem("two_samples", 200.0, 4000, 5000, samples=2),
    ]}
    out = run("memory_leak", m)
    assert out.status == "fired"
    (f,) = out.findings
    assert f["session_ids"] == ["leak", "same_second", "slow"] and f["severity"] == "critical"
    assert f["value"] == 4500 and f["threshold"] == 200 and f["unit"] == "MiB"
    assert f["scope"] == "session" and f["hosts"] == ["h1"]
    assert "del outputs" in f["fix"] and f["source"].startswith("000 §5")
    assert f["evidence"]["chart"] == "memory_timeline"
    m["memory_per_session"] = [r for r in m["memory_per_session"] if r["session_id"] in ("steep_but_small", "two_samples")]
    assert run("memory_leak", m).status == "pass"


def test_memory_leak_naming_most_concurrent_sessions_of_a_process_is_process_scoped():
    """Without deltas, per-process reserved_mb rising under every session served at once would
    name them all: one process finding instead."""
    def at(sid, first, last, rise, pid=7):
        return mem(sid, 60.0, 4000, 4000 + rise, pid=pid, first_ts=f"2026-11-23T10:{first:02d}:00+00:00",
                   last_ts=f"2026-11-23T10:{last:02d}:00+00:00")

    crowd = [at(f"s{i}", i, 30 + i, 300 + 10 * i) for i in range(6)]
    out = run("memory_leak", {"memory_per_session": crowd})
    (f,) = out.findings
    assert f["scope"] == "process" and f["session_ids"] == [] and f["hosts"] == ["h1"]
    assert "h1/7" in f["message"] and "no session stands out" in f["message"]
    # one after another in the same process: each session is judged on its own turns
    seq = [at(f"s{i}", 10 * i, 10 * i + 5, 300) for i in range(5)]
    (f,) = run("memory_leak", {"memory_per_session": seq}).findings
    assert f["scope"] == "session" and len(f["session_ids"]) == 5


def test_ghost_memory_needs_size_and_share():
    m = {"memory_per_session": [
        session("ghost", ghost_p50_mb=5600.0, ghost_share_p50=0.61),
        session("beams", ghost_p50_mb=2300.0, ghost_share_p50=0.40),  # big but under half
        session("ok", ghost_p50_mb=700.0, ghost_share_p50=0.18),
    ], "memory_per_host": [{"host": "h2", "ghost_p50_mb": 3000.0, "ghost_share_p50": 0.7, "samples": 9}]}
    out = run("ghost_memory", m)
    assert [f["scope"] for f in out.findings] == ["session", "host"]
    assert out.findings[0]["session_ids"] == ["ghost"]
    assert out.findings[1]["hosts"] == ["h2"]


def test_oom_from_errors_or_counter_and_counted_once():
    m = {"goodput": [{"requests": 10}], "oom_per_session": [
        session("a", oom_errors=1, num_ooms_rise=1, sample_msg="CUDA out of memory"),
        session("b", oom_errors=0, num_ooms_rise=2),
        {"session_id": None, "host": "h9", "oom_errors": 1, "num_ooms_rise": 0},
    ]}
    out = run("oom", m)
    sess = [f for f in out.findings if f["scope"] == "session"][0]
    assert sess["session_ids"] == ["a", "b"] and sess["severity"] == "critical"
    # value and message count the same thing: every OOM of the sessions (a: one OOM seen both as
    # an error and a counter rise counts once; b: two counter rises), not the worst session's
    assert sess["value"] == 3 and sess["unit"] == "OOMs"
    assert sess["message"].startswith("3 OOMs in 2 sessions")
    assert [r["ooms"] for r in sess["evidence"]["details"]["sessions"]] == [1, 2]
    assert [f["hosts"] for f in out.findings if f["scope"] == "host"] == [["h9"]]
    assert run("oom", {"goodput": [{"requests": 10}], "oom_per_session": []}).status == "pass"


@pytest.mark.parametrize(
    "rule, table, fire_row, quiet_row",
    [
        ("gpu_wait", "gpu_wait_per_session", {"gpu_wait_pct_p50": 60.5}, {"gpu_wait_pct_p50": 60.0}),
        ("cpu_bound", "decode_per_session", {"gpu_util_pct_p50": 12.0, "tpot_p50_ms": 200.0},
         {"gpu_util_pct_p50": 25.0, "tpot_p50_ms": 200.0}),
        ("slow_decode", "decode_per_session", {"tpot_p50_ms": 131.0}, {"tpot_p50_ms": 130.0}),
        ("beam_search", "generate_params_per_session", {"num_beams_count": 3, "num_beams_max": 5},
         {"num_beams_count": 3, "num_beams_max": 1}),
        ("high_max_tokens", "generate_params_per_session", {"max_new_tokens_count": 3, "max_new_tokens_max": 4096},
         {"max_new_tokens_count": 3, "max_new_tokens_max": 4095}),
        ("long_output", "generate_params_per_session", {"output_len_count": 3, "output_len_max": 3001},
         {"output_len_count": 3, "output_len_max": 3000}),
        ("kv_cache_bloat", "kv_cache_per_session", {"kv_seq_len_max": 2049}, {"kv_seq_len_max": 2048}),
        ("kv_cache_bloat", "kv_cache_per_session", {"kv_seq_len_max": 100, "kv_cache_size_max_mb": 8200.0},
         {"kv_seq_len_max": 100, "kv_cache_size_max_mb": 8000.0}),
    ],
)
def test_session_rule_boundaries(rule, table, fire_row, quiet_row):
    m = {table: [session("bad", **fire_row), session("good", **quiet_row)]}
    out = run(rule, m)
    assert out.status == "fired"
    assert [f["session_ids"] for f in out.findings if f["scope"] == "session"] == [["bad"]]
    m = {table: [session("good", **quiet_row)]}
    assert run(rule, m).status == "pass"


def test_kv_cache_bloat_falls_back_to_prefill_growth_without_kv_len():
    grow = session("grow", turns=20, prefill_first_ms=800.0, prefill_last_ms=4200.0, prefill_r2=0.93,
                   prefill_slope_ms_per_turn=170.0)
    healthy = session("healthy", turns=8, prefill_first_ms=150.0, prefill_last_ms=700.0, prefill_r2=0.9,
                      prefill_slope_ms_per_turn=70.0)
    out = run("kv_cache_bloat", {"prefill_growth_per_session": [grow, healthy]})
    assert out.findings[0]["session_ids"] == ["grow"]
    # With kv_seq_len logged, the length decides, not the prefill curve.
    kv = {"kv_cache_per_session": [session("grow", kv_seq_len_max=1500)], "prefill_growth_per_session": [grow]}
    assert run("kv_cache_bloat", kv).status == "pass"


def test_kv_cache_bloat_evidence_leads_to_what_fired_it():
    """The card links where its numbers are drawn: the KV growth chart for a long KV cache, the
    prefill-by-turn chart when only prefill growth (no kv_seq_len) fired; value and message
    speak of that evidence."""
    grow = session("grow", turns=20, prefill_first_ms=800.0, prefill_last_ms=4200.0, prefill_r2=0.93,
                   prefill_slope_ms_per_turn=170.0)
    (f,) = run("kv_cache_bloat", {"kv_cache_per_session": [session("long", kv_seq_len_max=6250)]}).findings
    assert (f["evidence"]["section"], f["evidence"]["chart"]) == ("kv", "kv_growth")
    assert (f["value"], f["unit"]) == (6250, "tokens") and "6,250 tokens" in f["message"]
    assert "prefill" not in f["message"]
    (f,) = run("kv_cache_bloat", {"prefill_growth_per_session": [grow]}).findings
    assert (f["evidence"]["section"], f["evidence"]["chart"]) == ("prefill", "prefill_by_turn")
    assert f["value"] == 5.25 and f["threshold"] == 2.0 and "5.2" in f["message"] and "KV cache past" not in f["message"]
    both = {"kv_cache_per_session": [session("long", kv_seq_len_max=6250)], "prefill_growth_per_session": [grow]}
    (f,) = run("kv_cache_bloat", both).findings
    assert (f["evidence"]["section"], f["evidence"]["chart"]) == ("kv", "kv_growth")
    assert f["session_ids"] == ["grow", "long"] and "prefill climbs" in f["message"]


def test_slow_decode_global_and_legacy_upper_bound_message():
    m = {"decode_per_session": [session("a", tpot_p50_ms=150.0), session("b", tpot_p50_ms=140.0)],
         "request_latency_percentiles": [{"metric": "tpot_ms", "count": 10, "p50": 145.0, "upper_bound_count": 10}]}
    out = run("slow_decode", m)
    scopes = sorted(f["scope"] for f in out.findings)
    assert scopes == ["global", "session"]
    glob = [f for f in out.findings if f["scope"] == "global"][0]
    assert "upper bound" in glob["message"] and glob["session_ids"] == []


# -- global rules ---------------------------------------------------------------------------


def stage(name, p50, count=10):
    return {"stage": name, "count": count, "p50_ms": p50}


def test_slow_tokenize_and_format_severity_levels():
    assert run("slow_tokenize", {"stage_percentiles": [stage("tokenize", 100.0)]}).status == "pass"
    out = run("slow_tokenize", {"stage_percentiles": [stage("tokenize", 250.0)]})
    assert out.findings[0]["scope"] == "global" and out.findings[0]["value"] == 250.0
    assert run("slow_format", {"stage_percentiles": [stage("format", 29.0)]}).status == "pass"
    warn = run("slow_format", {"stage_percentiles": [stage("format", 45.0)]}).findings[0]
    crit = run("slow_format", {"stage_percentiles": [stage("format", 180.0)]}).findings[0]
    assert (warn["severity"], warn["threshold"]) == ("warning", 30)
    assert (crit["severity"], crit["threshold"]) == ("critical", 100)


def test_slow_prefill_per_input_class():
    rows = [{"input_class": "short", "count": 50, "p50_ms": 850.0},
            {"input_class": "long", "count": 5, "p50_ms": 2600.0}]
    out = run("slow_prefill", {"prefill_by_input_class": rows})
    assert [(f["value"], f["threshold"]) for f in out.findings] == [(2600.0, 2500)]
    rows[0]["p50_ms"] = 950.0
    assert len(run("slow_prefill", {"prefill_by_input_class": rows}).findings) == 2


def test_slow_ttft():
    m = {"request_latency_percentiles": [{"metric": "ttft_ms", "count": 9, "p50": 1400.0}]}
    assert run("slow_ttft", m).findings[0]["value"] == 1400.0
    m["request_latency_percentiles"][0]["p50"] = 999.0
    assert run("slow_ttft", m).status == "pass"


# -- host rules --------------------------------------------------------------------------------


def test_low_gpu_util_prefers_samplers_then_request_util():
    m = {"gpu_util_while_busy": [{"host": "a", "gpu_index": 0, "busy_samples": 100, "util_peak_busy": 57.0},
                                 {"host": "b", "gpu_index": 0, "busy_samples": 100, "util_peak_busy": 97.0}],
         "gpu_util_per_host_requests": [{"host": "b", "requests": 5, "util_peak": 20.0},
                                        {"host": "c", "requests": 5, "util_peak": 40.0}]}
    out = run("low_gpu_util", m)
    assert sorted(f["hosts"][0] for f in out.findings) == ["a", "c"]


def test_gpu_starved_is_time_weighted():
    rows = [{"host": "a", "gpu_index": 0, "sampled_s": 86400.0, "starved_s": 70000.0},
            {"host": "b", "gpu_index": 0, "sampled_s": 86400.0, "starved_s": 100.0}]
    out = run("gpu_starved", {"gpu_per_host": rows})
    assert [f["hosts"] for f in out.findings] == [["a"]]


def test_memory_thrash_needs_several_swings():
    rows = [{"host": "a", "gpu_index": 0, "pairs": 900, "thrash_pairs": 400, "swing_max_busy_mb_per_s": 3700.0},
            {"host": "b", "gpu_index": 0, "pairs": 900, "thrash_pairs": 1, "swing_max_busy_mb_per_s": 5000.0}]
    out = run("memory_thrash", {"gpu_memory_swing": rows})
    assert [f["hosts"] for f in out.findings] == [["a"]]


def test_rss_growth_needs_rise_and_fit():
    rows = [{"host": "a", "pid": 1, "samples": 100, "rss_first_mb": 1290, "rss_last_mb": 1710,
             "rss_slope_mb_per_min": 0.3, "rss_r2": 0.99},
            {"host": "b", "pid": 2, "samples": 100, "rss_first_mb": 1200, "rss_last_mb": 1350,
             "rss_slope_mb_per_min": 0.1, "rss_r2": 0.3}]  # noisy band, not a trend
    out = run("rss_growth", {"rss_per_process": rows})
    assert [(f["hosts"], f["scope"]) for f in out.findings] == [(["a"], "process")]


def test_log_volume_and_collector_drops_and_bad_lines():
    lv = {"log_volume_peak_minute": [{"host": "a", "peak_bytes": 84e6, "peak_bytes_per_s": 1.4e6},
                                     {"host": "b", "peak_bytes": 3e5, "peak_bytes_per_s": 5e3}]}
    assert [f["hosts"] for f in run("log_volume", lv).findings] == [["a"]]
    missing = {"_params": [{"line_bytes": False}], "log_volume_peak_minute": []}
    assert run("log_volume", missing).status == "no_data"
    collector = {**missing, "collector_write_rate": [{"host": "a", "peak_bytes_per_s": 1.4e6, "peak_from": "t"},
                                                     {"host": "b", "peak_bytes_per_s": 900.0}]}
    (f,) = run("log_volume", collector).findings
    assert f["hosts"] == ["a"] and f["evidence"]["details"]["source"] == "collector bytes_written"
    cd = {"collector_health": [{"host": "a", "dropped": 118}, {"host": "b", "dropped": 0}]}
    assert [f["hosts"] for f in run("collector_drops", cd).findings] == [["a"]]
    out = run("bad_lines", {}, ingest={**NO_INGEST, "bad_lines": 3,
                                      "bad_line_samples": [{"file": "f", "line": 2, "reason": "x"}]})
    (f,) = out.findings
    assert f["severity"] == "info" and f["scope"] == "ingest" and f["value"] == 3
    assert f["message"] == "3 malformed lines skipped while reading the logs"
    # a file that could not be read at all is said too, not left to the details
    out = run("bad_lines", {}, ingest={**NO_INGEST, "bad_lines": 5, "skipped_files": 1})
    assert out.findings[0]["message"] == "5 malformed lines skipped while reading the logs, and 1 file not read"


def test_overridden_threshold_changes_the_verdict(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("[gpu_wait]\ngpu_wait_pct = 80\n", encoding="utf-8")
    m = {"gpu_wait_per_session": [session("w", gpu_wait_pct_p50=70.0)]}
    assert run("gpu_wait", m).status == "fired"
    assert run("gpu_wait", m, thresholds=load_thresholds(f)).status == "pass"


def test_findings_sorted_by_severity():
    m = {"memory_per_session": [mem("leak", 90.0, 4000, 5000)],
         "gpu_wait_per_session": [session("w", gpu_wait_pct_p50=75.0)]}
    findings, _ = evaluate_rules(m, {**NO_INGEST, "bad_lines": 1}, T)
    assert [f["severity"] for f in findings] == ["critical", "warning", "info"]


def test_memory_is_worded_in_mib_everywhere():
    """The *_mb fields are MiB (torch and NVML bytes / 2**20): findings and checklist say MiB and
    GiB, never MB or GB, so a value reads the same in a card, a table and a threshold."""
    import re

    from dslogs.analyzer.model.report import build_checklist

    m = {
        "memory_per_session": [mem("leak", 73.2, 4000, 4800, ghost_p50_mb=5600.0, ghost_share_p50=0.61)],
        "memory_per_host": [{"host": "h2", "ghost_p50_mb": 3000.0, "ghost_share_p50": 0.7, "samples": 9}],
        "rss_per_process": [{"host": "a", "pid": 1, "samples": 100, "rss_first_mb": 1290, "rss_last_mb": 1710,
                             "rss_slope_mb_per_min": 0.3, "rss_r2": 0.99}],
        "gpu_memory_swing": [{"host": "a", "gpu_index": 0, "pairs": 900, "thrash_pairs": 400,
                              "swing_max_busy_mb_per_s": 3700.0}],
    }
    findings, _ = evaluate_rules(m, NO_INGEST, T)
    assert {f["rule"] for f in findings} == {"memory_leak", "ghost_memory", "rss_growth", "memory_thrash"}
    for f in findings:
        assert f["unit"] in ("MiB", "MiB/min", "MiB/s"), (f["rule"], f["unit"])
        assert not re.search(r"\b[MG]B\b", f["message"]), f["message"]
        assert "MiB" in f["message"], f["message"]
    items = {c["id"]: c for c in build_checklist(m, T)}
    for cid in ("reserved_band", "kv_cache_size"):
        assert items[cid]["unit"] == "MiB" and not re.search(r"\b[MG]B\b", items[cid]["label"]), items[cid]
    assert "±200 MiB" in items["reserved_band"]["label"] and "8 GiB" in items["kv_cache_size"]["label"]


def test_rss_growth_of_a_process_beside_named_sessions_says_what_they_kept():
    """A process whose RSS rose 1,000 MiB while one session's own requests kept 200 of it: two
    findings, the process one saying what the named session kept rather than that no session
    stands out (a reader took the two for a contradiction)."""
    proc = [{"host": "a", "pid": 1, "samples": 100, "rss_first_mb": 1000, "rss_last_mb": 2000,
             "rss_slope_mb_per_min": 10.0, "rss_r2": 0.99}]
    deltas = [{"session_id": sid, "host": "a", "pid": 1, "rss_delta_mb": kept, "ended_during": []}
              for sid, kept in (("leak", 40.0), ("ok", 0.5)) for _ in range(5)]
    out = run("rss_growth", {"rss_per_process": proc, "request_memory_deltas": deltas})
    by_scope = {f["scope"]: f for f in out.findings}
    assert by_scope["session"]["session_ids"] == ["leak"]
    kept = by_scope["session"]["value"]
    assert kept == pytest.approx(200, abs=5)
    msg = by_scope["process"]["message"]
    assert "no session stands out" not in msg
    assert f"the sessions the session finding names kept {kept:g} MiB of it" in msg, msg


def test_every_citation_in_a_rules_fix_and_source_is_in_the_reports_sources_list():
    """A reader checks a fix's "(000 §2.2, §4.2)" against the page's Sources list: each cited
    section must be listed there, and what the list says of it must be what the fix leans on."""
    from dslogs.analyzer.render.glossary import SOURCES, citations, source_sections

    listed = {key for _, key, _ in source_sections()}
    for rule_id, (_, source, fix) in RULE_INFO.items():
        for text in (source, fix):
            for m, key, _ in citations(text):
                assert key, (rule_id, m.group(0), text)
                assert key.removesuffix(" table") in listed, (rule_id, key)
    # the max_new_tokens fix cites 000 §2.2 and §4.2: both say so in the list, not only NVML
    for key in ("000 §2.2", "000 §4.2"):
        assert "max_tokens" in SOURCES[key], key
    assert [k for _, k, _ in citations(RULE_INFO["high_max_tokens"][1])] == ["000 §2.2", "000 §4.2"]


def test_a_fix_speaks_of_the_stack_the_logs_came_from():
    from dslogs.analyzer.model.report import speak_stack
    from dslogs.analyzer.rules.memory import SESSION_STATE_ANY

    fix = RULE_INFO["memory_leak"][2]
    assert SESSION_STATE_ANY in fix
    f = [{"fix": fix, "hosts": ["vm"]}]
    speak_stack(f, {("vm", 1): "gradio"})
    assert "gr.State" in f[0]["fix"] and "st.session_state" not in f[0]["fix"]
    # unknown stack, or two stacks among the finding's hosts: both named
    for stacks in ({}, {("vm", 1): "gradio", ("vm", 2): "vllm"}):
        f = [{"fix": fix, "hosts": ["vm"]}]
        speak_stack(f, stacks)
        assert "st.session_state" in f[0]["fix"] and "gr.State" in f[0]["fix"]


def _keepers(kept: dict[str, float], ghost: float = 0.0, kv_mb: float | None = 0.005, share: float = 0.0):
    """memory_leak's tables for sessions keeping ``kept`` MiB per request (4 requests each, no
    overlap), their readings holding ``ghost`` MiB of cache (reserved − allocated) and a KV cache
    of ``kv_mb`` MiB at most."""
    deltas = [{"session_id": sid, "host": "vm", "pid": 1, "request_id": f"{sid}-{i}", "gpu_delta_mb": mb,
               "ended_during": []} for sid, mb in kept.items() for i in range(4)]
    deltas += [{"session_id": "quiet", "host": "vm", "pid": 1, "request_id": f"q-{i}", "gpu_delta_mb": 0.0,
                "ended_during": []} for i in range(4)]
    mem_rows = [session(sid, "vm", pid=1, samples=4, ghost_p50_mb=ghost, ghost_share_p50=share) for sid in kept]
    kv = [session(sid, "vm", kv_cache_size_max_mb=kv_mb) for sid in kept] if kv_mb is not None else []
    return {"request_memory_deltas": deltas, "memory_per_session": mem_rows, "kv_cache_per_session": kv}


def test_memory_leak_fix_follows_what_the_readings_show():
    """Allocated memory kept (reserved ≈ allocated): live tensors, which empty_cache cannot free,
    so the fix is dropping the references; and a KV cache far smaller than what each request kept
    cannot be it (a reader distrusted both pieces of advice on such a run)."""
    (f,) = run("memory_leak", _keepers({"a": 512.0, "b": 300.0})).findings
    assert "del outputs" in f["fix"] and "cannot free" in f["fix"]
    assert "then `torch.cuda.empty_cache()`" not in f["fix"] and "past_key_values" not in f["fix"]
    assert "Not the KV cache: at most 0.005 MiB" in f["fix"] and "003 §4.1" in f["fix"]
    # readings that show cache (reserved well over allocated): empty_cache frees it
    (f,) = run("memory_leak", _keepers({"a": 512.0}, ghost=3000.0, share=0.6)).findings
    assert "then `torch.cuda.empty_cache()`" in f["fix"] and "cannot free" not in f["fix"]
    # a KV cache the size of what was kept, or none logged: sharing it stays advised (000 §5)
    for kv in (400.0, None):
        (f,) = run("memory_leak", _keepers({"a": 512.0}, kv_mb=kv)).findings
        assert "past_key_values" in f["fix"] and "000 §5" in f["fix"]


def test_memory_leak_names_no_single_worst_session_on_a_tie():
    (f,) = run("memory_leak", _keepers({"a": 512.0, "b": 512.0})).findings
    assert "worst session" not in f["message"] and "over 4 requests in each session" in f["message"], f["message"]
    (f,) = run("memory_leak", _keepers({"a": 512.0, "b": 512.0, "c": 300.0})).findings
    assert "in the 2 worst sessions (2,048 MiB over 4 requests each;" in f["message"], f["message"]
    (f,) = run("memory_leak", _keepers({"a": 512.0, "c": 300.0})).findings
    assert "in the worst session (2,048 MiB over 4 requests;" in f["message"], f["message"]


def test_oom_fix_caps_beams_and_retries_greedy_not_a_circular_fallback():
    """num_beams=1 with do_sample=False is greedy: "num_beams=1, falling back to greedy" said the
    same thing twice. 003 §3.2: force num_beams=1 whatever the request asks, and retry what still
    runs out of memory greedily."""
    from dslogs.analyzer.rules.evidence import fix_for, request_factors

    factors = request_factors([{"num_beams": 1, "failed_num_beams": 5, "input_len": 5, "turn_index": 2,
                                "max_new_tokens": 256}], T)
    fix = fix_for("oom", factors, RULE_INFO["oom"][2])
    assert "cap num_beams at 1 server-side" in fix and "falling back" not in fix, fix
    assert "do_sample=False" in fix and "003 §3.2" in fix
    assert "cap num_beams at 1" in RULE_INFO["oom"][2] and "fall back to greedy" not in RULE_INFO["oom"][2]
