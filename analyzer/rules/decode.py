"""Per-session decode and GPU rules: GPU wait, CPU-bound decode, KV-cache bloat."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.registry import (
    RuleOutcome,
    _plural,
    _scanned,
    _session_rule,
    _session_scan,
    finding,
    rule,
)

# -- decode / GPU per session ----------------------------------------------------------------


@_session_scan("gpu_wait")
def _gpu_wait_scan(t):
    th = t["gpu_wait"]["gpu_wait_pct"]
    return ("gpu_wait_per_session", lambda r: r.get("gpu_wait_pct_p50") is not None,
            lambda r: r["gpu_wait_pct_p50"] > th)  # fmt: skip


@rule(
    "gpu_wait",
    severity="warning",
    source="003 §4.2",
    fix=(
        "The CPU waits on the GPU for most of generate while the GPU is not busy: a data "
        "movement bottleneck. Move inputs to model.device once before generate, turn off "
        "pin_memory, tokenize on the CPU (return_tensors='np') and convert once with "
        "torch.tensor(...).to(device) (003 §4.2)."
    ),
    inputs=("gpu_wait_per_session",),
    needs=("gpu_util",),
    sections=("gpu",),
    charts=("gpu_wait_hist",),
    gpu=True,
)
def rule_gpu_wait(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["gpu_wait"]["gpu_wait_pct"]
    fires, scanned = _scanned("gpu_wait", m, t, scanned)
    return _session_rule(
        "gpu_wait", (), fires, lambda r: r["gpu_wait_pct_p50"], scanned=scanned,
        threshold=th, unit="%",
        describe=lambda n, v: f"median gpu_wait_pct up to {fmt.prose(v)} % (CPU waiting on the GPU) in {_plural(n, 'session')}",
        section="gpu", chart="gpu_wait_hist",
        detail_keys=("gpu_wait_pct_p50", "gpu_wait_pct_p90", "count"),
        no_data_reason="no request measured gpu_wait_pct",
    )


@_session_scan("cpu_bound")
def _cpu_bound_scan(t):
    th = t["cpu_bound"]
    util, tpot = th["gpu_util_pct"], th["tpot_ms"]
    return ("decode_per_session",
            lambda r: r.get("gpu_util_pct_p50") is not None and r.get("tpot_p50_ms") is not None,
            lambda r: r["gpu_util_pct_p50"] < util and r["tpot_p50_ms"] > tpot)  # fmt: skip


@rule(
    "cpu_bound",
    severity="warning",
    source="003 §4.2; 000 §1.2",
    fix=(
        "GPU idle while decode is slow: the Python process is the bottleneck (GIL, HTTP/JSON "
        "work, heavy logging). Turn off DEBUG logging (logging.disable(logging.INFO)), reuse "
        "one tokenizer, keep pre/post-processing off the generate thread (000 §1.2, §5; "
        "003 §4.2)."
    ),
    inputs=("decode_per_session",),
    needs=("gpu_util",),
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_cpu_bound(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["cpu_bound"]
    fires, scanned = _scanned("cpu_bound", m, t, scanned)
    return _session_rule(
        "cpu_bound", (), fires, lambda r: r["tpot_p50_ms"], scanned=scanned,
        threshold=th["tpot_ms"], unit="ms/token",
        describe=lambda n, v: (
            f"GPU under {fmt.prose(th['gpu_util_pct'])} % busy while decode takes up to {fmt.prose(v)} ms/token "
            f"in {_plural(n, 'session')}"
        ),
        section="gpu", chart="gpu_timeline",
        detail_keys=("gpu_util_pct_p50", "tpot_p50_ms", "requests"),
        no_data_reason="no request with both gpu_util_pct and tpot",
    )


@rule(
    "kv_cache_bloat",
    severity="warning",
    source="003 §4.3, §5.4",
    fix=(
        "The context keeps growing: keep use_cache=True, truncate the history to a sliding "
        "window (the last 8 turns, about 1500 tokens) and reuse the cache (reorder_cache) "
        "instead of rebuilding it every turn (003 §4.3)."
    ),
    inputs=("kv_cache_per_session", "prefill_growth_per_session"),
    needs=("kv_cache",),
    sections=("kv", "prefill"),
    charts=("kv_growth", "prefill_by_turn"),
)
def rule_kv_cache_bloat(m, ingest, t) -> RuleOutcome:
    th = t["kv_cache_bloat"]
    # Each table read once as a stream, keeping the hits and the ids of sessions with a logged KV
    # length, not a dict of every session's row (400 k+ sessions). Both tables have one row per
    # session (their queries group by session_id).
    hit: list[dict] = []
    kv_ids: set[str] = set()
    kv_len_logged: set[str] = set()
    for r in m.get("kv_cache_per_session", []):
        sid = r["session_id"]
        kv_ids.add(sid)
        seq, size = r.get("kv_seq_len_max"), r.get("kv_cache_size_max_mb")
        if seq is not None:
            kv_len_logged.add(sid)
        if (seq is not None and seq > th["kv_seq_len"]) or (size is not None and size > th["kv_cache_size_mb"]):
            hit.append({"session_id": sid, "host": r.get("host"), "kv_seq_len_max": seq,
                        "kv_cache_size_max_mb": size, "why": "kv"})
    growth_only = 0  # sessions in the growth table and not in the KV table
    # Prefill growing with turns is the evidence when the KV length itself was not logged.
    for g in m.get("prefill_growth_per_session", []):
        sid = g["session_id"]
        growth_only += sid not in kv_ids
        if sid in kv_len_logged:
            continue
        first, last, r2 = g.get("prefill_first_ms"), g.get("prefill_last_ms"), g.get("prefill_r2")
        if (
            first and last and r2 is not None
            and (g.get("turns") or 0) >= th["prefill_growth_min_turns"]
            and last >= th["prefill_growth_ratio"] * first
            and last > th["prefill_growth_min_ms"]
            and (g.get("prefill_slope_ms_per_turn") or 0) > 0
            and r2 >= th["prefill_growth_min_r2"]
        ):
            hit.append({"session_id": sid, "host": g.get("host"), "prefill_first_ms": first,
                        "prefill_last_ms": last, "prefill_r2": r2, "turns": g.get("turns"), "why": "prefill"})
    checked = len(kv_ids) + growth_only
    if not checked:
        return RuleOutcome("kv_cache_bloat", "no_data", "no kv_seq_len, kv_cache_size_mb or prefill timing")
    if not hit:
        return RuleOutcome("kv_cache_bloat", "pass", f"{checked} sessions checked")
    hit.sort(key=lambda r: (-(r.get("kv_seq_len_max") or 0), r["session_id"]))
    n = len(hit)
    by_kv = [r for r in hit if r["why"] == "kv"]
    by_prefill = [r for r in hit if r["why"] == "prefill"]
    for r in by_prefill:
        r["prefill_growth_ratio"] = r["prefill_last_ms"] / r["prefill_first_ms"]
    parts = []
    if by_kv:
        longest = max((r.get("kv_seq_len_max") or 0) for r in by_kv)
        largest = max((r.get("kv_cache_size_max_mb") or 0) for r in by_kv)
        size = f", {fmt.prose(largest)} MiB" if largest > th["kv_cache_size_mb"] else ""
        parts.append(f"KV cache past {fmt.prose(th['kv_seq_len'])} tokens or {fmt.prose(th['kv_cache_size_mb'])} MiB "
                     f"(up to {fmt.prose(longest)} tokens{size}) in {_plural(len(by_kv), 'session')}")
    if by_prefill:
        ratio = max(r["prefill_growth_ratio"] for r in by_prefill)
        parts.append(f"prefill climbs with turns (last turn up to {fmt.prose(ratio)}× the first) in "
                     f"{_plural(len(by_prefill), 'session')} without kv_seq_len logged")
    # The card's value, chart and section follow the evidence: a logged KV length is drawn in
    # the KV growth chart; prefill growth alone shows only in the prefill-by-turn chart.
    if by_kv:
        value, threshold, unit, section, chart = longest or None, th["kv_seq_len"], "tokens", "kv", "kv_growth"
    else:
        value, threshold, unit = ratio, th["prefill_growth_ratio"], "× first-turn prefill"
        section, chart = "prefill", "prefill_by_turn"
    f = finding(
        "kv_cache_bloat", scope="session", value=value, threshold=threshold, unit=unit,
        message="; ".join(parts),
        section=section, chart=chart,
        details={"sessions": hit, "kv_cache_size_mb_threshold": th["kv_cache_size_mb"],
                 "checked_sessions": checked},
        session_ids=[r["session_id"] for r in hit], hosts=[r.get("host") for r in hit],
    )
    return RuleOutcome("kv_cache_bloat", "fired", _plural(n, "session"), [f])


