"""Thresholds: every number a rule, the checklist or the report judges by, with its default and
where that default comes from, overridable from a TOML file.

``TABLES`` holds them all, table -> key -> (default, source): one table per rule id (the rule
reads ``thresholds[<its id>]``), plus ``[slo]``, ``[checklist]`` and ``[report]``. The metric
queries bind a threshold as the parameter ``$<table>_<key>`` (``metrics.registry.parameters``),
so this table is the only place a default is written.

The file mirrors ``DEFAULTS``, e.g.::

    [memory_leak]
    slope_mb_per_min = 30

    [slo]
    ttft_ms = 800

A key that is not in ``DEFAULTS`` is a ``UsageError`` naming the key and the file (a typo must
not silently keep the default). Values must have the default's type (ints are accepted for
floats). Each default cites the section of the seed article it comes from (docs/sources.md);
the few that are ours (no seed gives a number) say so ("ours: " and the reason).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from dslogs.analyzer.core.errors import UsageError

# Weekly report: a side whose events span less than this share of its week's hours gets no
# regression verdict. Ours (no seed gives one): an LLM service's load follows the hour and the
# weekday, so a part of a week set against a whole one compares a part of that cycle (8 busy
# hours against 168 read as +19,050 % errors); half a week holds every hour of the day at least
# three times. The other condition, 30 requests a side, is the diff's MIN_COUNT.
WEEK_MIN_COVERAGE = 0.5

Spec = dict[str, dict[str, tuple[int | float, str]]]


def _checked(tables: Spec) -> Spec:
    """``tables`` if every entry is (default number, source text); a mistake fails at import."""
    for table, keys in tables.items():
        if not keys:
            raise ValueError(f"threshold table [{table}] has no keys")
        for key, entry in keys.items():
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str) and entry[1]
                    and isinstance(entry[0], int | float) and not isinstance(entry[0], bool)):
                raise ValueError(f"threshold {table}.{key} must be (default number, source text), got {entry!r}")
    return tables


# Table -> key -> (default, source). Seeds: 000 = system resource monitoring guide, 003 = JSONL
# logger / latency slices / health-check list. The rules' tables come first, in the order the
# rules are evaluated (dslogs.analyzer.rules.AREAS, then each module's order), then the shared ones:
# the order reports and docs/rules.md list them in.
TABLES: Spec = _checked({
    # memory rules (analyzer/rules/memory.py)
    "memory_leak": {
        "slope_mb_per_min": (50.0, "000 §5 table: nvidia-smi memory rising > 50 MiB/min"),
        "rise_mb": (200.0, "003 §5.3: reserved_mb must stay within ±200 MB"),
        "min_samples": (3, "ours: a trend needs at least three gpu_memory snapshots"),
        "leak_per_request_mb": (48.0, "ours: allocated memory a session's requests keep on average, after "
                                      "other requests' leaks are subtracted, above a 1.5B model's KV cache "
                                      "and activations (~15-60 MiB per request)"),
        "most_sessions_share": (0.5, "ours: flagging more than half the sessions active at once in one process "
                                     "blames the process (torch reports memory per process)"),
    },
    "ghost_memory": {
        "ghost_mb": (1024.0, "000 §1.1: reserved − allocated far above allocated"),
        "ghost_share": (0.5, "000 §1.1: more than half of reserved is cache"),
    },
    "oom": {
        "min_events": (1, "003 §5.3: no OOMError / CUDA out of memory at all"),
    },
    # decode rules (analyzer/rules/decode.py)
    "gpu_wait": {
        "gpu_wait_pct": (60.0, "003 §4.2: gpu_wait_pct > 60 %"),
    },
    "cpu_bound": {
        "gpu_util_pct": (20.0, "003 §4.2: GPU utilisation below 20 %"),
        "tpot_ms": (130.0, "003 §5.2: decode time per token < 130 ms"),
    },
    "kv_cache_bloat": {
        "kv_seq_len": (2048, "003 §4.3: kv_seq_len > 2048 grows memory fast"),
        "kv_cache_size_mb": (8192.0, "003 §5.4: kv_cache_size_mb < 8.0 GB"),
        "prefill_growth_ratio": (2.0, "003 §5.4: a long context may double prefill, no more"),
        "prefill_growth_min_ms": (2500.0, "003 §5.4: prefill < 2.5 s for a 1200-token prompt"),
        "prefill_growth_min_r2": (0.8, "ours: same fit quality as rss_growth (000 §3.3)"),
        "prefill_growth_min_turns": (5, "ours: growth needs a few turns to show"),
    },
    # params rules (analyzer/rules/params.py)
    "beam_search": {
        "num_beams": (1, "003 §3.2: num_beams=5 by mistake, should be 1"),
    },
    "high_max_tokens": {
        "max_new_tokens": (4096, "000 §2.2: max_tokens set too large (e.g. 4096)"),
    },
    "long_output": {
        "output_len": (3000, "000 §4.2: 3000+ token outputs slow post-processing"),
    },
    # latency rules (analyzer/rules/latency.py)
    "slow_tokenize": {
        "p50_ms": (100.0, "003 §5.2: tokenize_time < 100 ms (000 §4.2: 50 ms ideal)"),
    },
    "slow_prefill": {
        "p50_ms": (900.0, "003 §5.2: prefill_time < 900 ms"),
        "long_p50_ms": (2500.0, "003 §5.4: prefill < 2.5 s for a 1200-token input"),
        "long_input_tokens": (1200, "003 §5.4: the 1200-token long-context test"),
    },
    "slow_decode": {
        "tpot_p50_ms": (130.0, "003 §5.2: decode_time/token < 130 ms"),
    },
    "slow_ttft": {
        "p50_ms": (1000.0, "003 §5.2 (prefill < 900 ms + tokenize); ours: the goodput SLO"),
    },
    "queue_wait": {
        "p95_ms": (1000.0, "000 §4.1 (requests backing up); the TTFT SLO of 1 s spent waiting alone"),
    },
    "slow_format": {
        "warning_p50_ms": (30.0, "000 §4.2: postprocess should be < 30 ms"),
        "critical_p50_ms": (100.0, "000 §4.2: postprocess > 100 ms means oversized output"),
    },
    # hosts rules (analyzer/rules/hosts.py)
    "low_gpu_util": {
        "peak_pct": (65.0, "003 §5.3: gpu_util_pct peak > 65 %"),
    },
    "gpu_starved": {
        "util_pct": (20.0, "000 §2.1: utilization.gpu long below 20 %"),
        "mem_used_share": (0.9, "000 §2.1: memory.used near the limit (> 22 of 24 GB)"),
        "min_time_share": (0.5, "ours: 'long-term' (长期) read as at least half of the sampled time"),
        "max_sample_weight_s": (60.0, "ours: one sample stands for at most a minute (idle tick)"),
    },
    "memory_thrash": {
        "util_pct": (80.0, "000 §2.1: utilization.gpu high (> 80 %)"),
        "swing_mb_per_s": (2048.0, "000 §2.1: memory.used swinging ±2 GB per second"),
        "min_pairs": (3, "ours: a few swings, not one allocation"),
        "max_gap_s": (10.0, "ours: samples further apart than this are a gap, not a swing"),
    },
    "rss_growth": {
        "rise_mb": (100.0, "000 §3.3: RSS 1250 → 1380 → 1520 MB rising one way"),
        "min_r2": (0.8, "ours: a steady one-way rise (R² ≥ 0.8)"),
        "min_samples": (3, "ours: a trend needs at least three samples"),
        "leak_per_request_mb": (24.0, "ours: RSS a session's requests keep on average, other requests' "
                                      "leaks subtracted (tokenizer/Python buffers come and go)"),
        "held_rise_mb": (100.0, "000 §3.3: a rise that holds (last third's low over first third's high), "
                                "for step-shaped growth under concurrent traffic"),
    },
    # collector rules (analyzer/rules/collector.py)
    "log_volume": {
        "bytes_per_s": (1_000_000.0, "000 §5 table: iotop WRITE > 1 MB/s from app.py"),
        "max_heartbeat_gap_s": (120.0, "ours: collector heartbeats further apart are a gap"),
    },
    "collector_drops": {
        "dropped": (0, "ours: any dropped event is a hole in the data"),
    },
    "bad_lines": {
        "lines": (0, "ours: any skipped line is reported (info)"),
    },
    # capacity rules (analyzer/rules/capacity.py)
    "concurrency_cliff": {
        "time_share": (0.1, "ours: the service spends more than a tenth of its busy time beyond its knee (000 §1.3)"),
        "knee_share": (0.05, "ours: throughput within 5 % of its best has stopped rising (000 §1.3)"),
        "min_level_requests": (20, "ours: a level with fewer requests is marked sparse and left out of the knee"),
        "min_levels": (3, "ours: a knee needs a level below it, itself and one above"),
        "min_requests": (200, "ours: traffic before a concurrency setting is recommended"),
        "oom_share": (0.95, "ours: reserved memory past 95 % of the GPU's total makes an OOM likely (000 §1.3)"),
        "min_mb_per_request": (8.0, "ours: a smaller fitted slope is noise, not memory per request"),
    },
    "oom_at_concurrency": {
        "min_ooms": (2, "ours: OOMs at more than one request, so a level can be told"),
        "top_share": (0.8, "ours: most OOMs at the highest in-flight levels (000 §1.3: past what the GPU holds)"),
        "memory_share": (0.7, "ours: where memory is measured, the levels the OOMs cluster at hold 70 %+ of the "
                              "GPU's total: OOMs from what requests ask (beams, long outputs) at a busy moment are not "
                              "the concurrency's"),
    },
    # shared: the goodput SLO, the checklist's own checks, the report's sizes
    "slo": {
        "ttft_ms": (1000.0, "ours: the goodput SLO"),
        "tpot_ms": (130.0, "003 §5.2 (decode < 130 ms per token): the goodput SLO"),
    },
    "checklist": {
        "short_input_tokens": (200, "ours: a 'simple question' like 1+1等于几 (003 §5.2)"),
        "short_e2e_ms": (1200.0, "003 §5.2: end-to-end < 1.2 s"),
        "short_answer_tokens": (16, "ours: the short answer 003 §5.2's 1.2 s budget holds; a longer "
                                    "reply counts its first this many tokens"),
        "reserved_band_mb": (200.0, "003 §5.3: reserved_mb within ±200 MB"),
    },
    "report": {
        "max_sessions": (1000, "ours: sessions listed in the model (flagged ones always)"),
        "detail_sessions": (50, "ours: sessions with a request drill-down"),
        "detail_requests": (100, "ours: requests per drill-down session"),
        "timeline_sessions": (12, "ours: sessions in the memory / KV timelines"),
        "timeline_points": (120, "ours: points per session in those timelines"),
        "slowest_sessions": (20, "ours: rows in the slowest-sessions table"),
        "future_margin_min": (60, "ours: naive timestamps this far after now mean a time-zone mix-up"),
        "unknown_session_share": (0.5, "ours: above this share of requests without a session id, say so"),
    },
})

DEFAULTS: dict[str, dict[str, int | float]] = {
    table: {key: value for key, (value, _src) in keys.items()} for table, keys in TABLES.items()
}
SOURCES: dict[str, dict[str, str]] = {
    table: {key: src for key, (_value, src) in keys.items()} for table, keys in TABLES.items()
}


def defaults() -> dict[str, dict[str, object]]:
    """A fresh copy of the default thresholds."""
    return {table: dict(keys) for table, keys in DEFAULTS.items()}


def _check_type(path: Path, dotted: str, value: object, default: object) -> object:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise UsageError(
            f"{path}: threshold {dotted} must be {type(default).__name__}, got {value!r}"
        )
    _check_range(path, dotted, value)
    return value


def _check_range(path: Path, dotted: str, value: object) -> None:
    """Every threshold is a finite amount, count or share, never negative (``-inf`` would
    silently turn a rule off, ``nan`` compares false both ways); shares and R² lie in [0, 1],
    percentages in [0, 100]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    key = dotted.rsplit(".", 1)[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{path}: threshold {dotted} must be a finite number, got {value!r}")
    if value < 0:
        raise UsageError(f"{path}: threshold {dotted} must not be negative, got {value!r}")
    if (key.endswith("_share") or key.endswith("r2")) and value > 1:
        raise UsageError(f"{path}: threshold {dotted} is a share between 0 and 1, got {value!r}")
    if key.endswith("_pct") and value > 100:
        raise UsageError(f"{path}: threshold {dotted} is a percentage between 0 and 100, got {value!r}")


def load_thresholds(path: Path | str | None) -> dict[str, dict[str, object]]:
    """Defaults overridden by the TOML file at ``path`` (None: the defaults)."""
    result = defaults()
    if path is None:
        return result
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: thresholds file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read thresholds file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    for table, keys in data.items():
        if table not in result:
            raise UsageError(
                f"{path}: unknown threshold key {table!r} (valid tables: {', '.join(result)})"
            )
        if not isinstance(keys, dict):
            raise UsageError(f"{path}: {table!r} must be a table ([{table}]), got {keys!r}")
        for key, value in keys.items():
            dotted = f"{table}.{key}"
            if key not in result[table]:
                raise UsageError(
                    f"{path}: unknown threshold key {dotted!r} "
                    f"(valid in [{table}]: {', '.join(result[table])})"
                )
            result[table][key] = _check_type(path, dotted, value, result[table][key])
    return result
