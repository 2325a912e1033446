"""Latency rules over the fleet's stage percentiles: tokenize, prefill, decode, TTFT, format."""

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

# -- global latency ------------------------------------------------------------------------------


def _metric_row(m, table: str, metric: str, key: str = "metric") -> dict | None:
    return next((r for r in m.get(table, []) if r.get(key) == metric), None)


def _p50_rule(rule, row, threshold, *, what, section, chart, no_data_reason, severity=None) -> RuleOutcome:
    if not row or not row.get("count") or row.get("p50_ms", row.get("p50")) is None:
        return RuleOutcome(rule, "no_data", no_data_reason)
    p50 = row.get("p50_ms", row.get("p50"))
    if p50 <= threshold:
        return RuleOutcome(rule, "pass", f"p50 {fmt.prose(p50)} ms ≤ {fmt.prose(threshold)} ms over {row['count']}")
    f = finding(
        rule, scope="global", value=p50, threshold=threshold, unit="ms",
        message=f"{what} p50 is {fmt.prose(p50)} ms (> {fmt.prose(threshold)} ms) over {_plural(row['count'], 'measurement')}",
        section=section, chart=chart, details={k: v for k, v in row.items()}, severity=severity,
    )
    return RuleOutcome(rule, "fired", f"p50 {fmt.prose(p50)} ms", [f])


@rule(
    "slow_tokenize",
    severity="warning",
    source="003 §5.2; 000 §4.2",
    fix=(
        "Tokenizing should take < 100 ms (50 ms ideal): load the tokenizer once and reuse it, "
        "and check it does not add redundant special tokens (000 §4.2, §3.3)."
    ),
    inputs=("stage_percentiles",),
    needs=("tokenize",),
    sections=("latency",),
    charts=("stage_latency_by_hour",),
)
def rule_slow_tokenize(m, ingest, t) -> RuleOutcome:
    row = _metric_row(m, "stage_percentiles", "tokenize", key="stage")
    return _p50_rule("slow_tokenize", row, t["slow_tokenize"]["p50_ms"], what="tokenize",
                     section="latency", chart="stage_latency_by_hour", no_data_reason="no tokenize timing")


@rule(
    "slow_prefill",
    severity="warning",
    source="003 §5.2, §5.4",
    fix=(
        "Prefill cost follows the prompt length: truncate the history (last 8 turns, about "
        "1500 tokens, 003 §4.3), keep use_cache=True and put the inputs on the model's device "
        "before generate (003 §4.2)."
    ),
    inputs=("prefill_by_input_class",),
    needs=("prefill",),
    sections=("prefill",),
    charts=("prefill_vs_input",),
)
def rule_slow_prefill(m, ingest, t) -> RuleOutcome:
    th = t["slow_prefill"]
    classes = {r["input_class"]: r for r in m.get("prefill_by_input_class", [])}
    if not classes:
        return RuleOutcome("slow_prefill", "no_data", "no prefill timing (legacy logs time only inference)")
    short = classes.get("short") or classes.get("unknown")
    outcomes = []
    if short:
        o = _p50_rule("slow_prefill", short, th["p50_ms"],
                      what=f"prefill of prompts < {th['long_input_tokens']} tokens",
                      section="prefill", chart="prefill_vs_input", no_data_reason="")
        outcomes.append(o)
    if classes.get("long"):
        o = _p50_rule("slow_prefill", classes["long"], th["long_p50_ms"],
                      what=f"prefill of prompts ≥ {th['long_input_tokens']} tokens",
                      section="prefill", chart="prefill_vs_input", no_data_reason="")
        outcomes.append(o)
    findings = [f for o in outcomes for f in o.findings]
    reasons = "; ".join(o.reason for o in outcomes if o.reason)
    return RuleOutcome("slow_prefill", "fired" if findings else "pass", reasons, findings)


@_session_scan("slow_decode")
def _slow_decode_scan(t):
    th = t["slow_decode"]["tpot_p50_ms"]
    return ("decode_per_session", lambda r: r.get("tpot_p50_ms") is not None, lambda r: r["tpot_p50_ms"] > th)


@rule(
    "slow_decode",
    severity="warning",
    source="003 §5.2",
    fix=(
        "Decode above 130 ms per token: check GPU utilisation (low means a CPU-GPU imbalance, "
        "003 §4.2), num_beams=1 (003 §3.2) and max_new_tokens; see the gpu_wait and cpu_bound "
        "findings for the cause."
    ),
    inputs=("decode_per_session", "request_latency_percentiles"),
    needs=(),
    sections=("latency",),
    charts=("latency_hist",),
)
def rule_slow_decode(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["slow_decode"]["tpot_p50_ms"]
    fires, scanned = _scanned("slow_decode", m, t, scanned)
    outcome = _session_rule(
        "slow_decode", (), fires, lambda r: r["tpot_p50_ms"], scanned=scanned,
        threshold=th, unit="ms/token",
        describe=lambda n, v: f"median time per output token up to {fmt.prose(v)} ms in {_plural(n, 'session')}",
        section="latency", chart="latency_hist",
        detail_keys=("tpot_p50_ms", "tpot_max_ms", "gpu_util_pct_p50", "tpot_upper_bound_count"),
        no_data_reason="no request with a tpot (decode or inference timing and output_len)",
    )
    overall = _metric_row(m, "request_latency_percentiles", "tpot_ms")
    if overall and overall.get("p50") is not None and overall["p50"] > th:
        bound = " (upper bound: legacy inference_ms / output_len)" if overall.get("upper_bound_count") else ""
        outcome.findings.append(finding(
            "slow_decode", scope="global", value=overall["p50"], threshold=th, unit="ms/token",
            message=f"median time per output token is {fmt.prose(overall['p50'])} ms over all requests{bound}",
            section="latency", chart="latency_hist",
            details={k: overall.get(k) for k in ("count", "p50", "p90", "p99", "upper_bound_count")},
        ))
        session_part = outcome.reason + "; " if outcome.status == "fired" else ""
        outcome.reason = f"{session_part}global p50 {fmt.prose(overall['p50'])} ms"
        outcome.status = "fired"
    return outcome


@rule(
    "slow_ttft",
    severity="warning",
    source="003 §5.2",
    fix=(
        "Time to first token = tokenize + queue + prefill: see which slice dominates in the "
        "stage table. Queue: add workers (demo.launch(server_workers=4), 000 §4.1); prefill: "
        "truncate the history (003 §4.3); tokenize: reuse the tokenizer (000 §4.2)."
    ),
    inputs=("request_latency_percentiles",),
    needs=(),
    sections=("latency",),
    charts=("latency_hist",),
)
def rule_slow_ttft(m, ingest, t) -> RuleOutcome:
    row = _metric_row(m, "request_latency_percentiles", "ttft_ms")
    return _p50_rule("slow_ttft", row, t["slow_ttft"]["p50_ms"], what="time to first token",
                     section="latency", chart="latency_hist",
                     no_data_reason="no ttft (needs prefill timing or request events)")


@rule(
    "queue_wait",
    severity="warning",
    source="000 §4.1",
    fix=(
        "Requests wait before the model runs: arrivals outpace the server (000 §4.1, requests "
        "backing up). Add capacity (more workers or replicas; vLLM: a larger max_num_seqs if "
        "the KV cache allows), or limit concurrency at the front so waits stay bounded."
    ),
    inputs=("stage_percentiles",),
    needs=("queue",),
    sections=("latency",),
    charts=("stage_latency_by_hour",),
)
def rule_queue_wait(m, ingest, t) -> RuleOutcome:
    """The queue stage's p95 (the tail: an overload lasts part of the time), where a source
    measures it (the collector's queue stage, vLLM's time_in_queue)."""
    row = _metric_row(m, "stage_percentiles", "queue", key="stage")
    th = t["queue_wait"]["p95_ms"]
    if not row or not row.get("count") or row.get("p95_ms") is None:
        return RuleOutcome("queue_wait", "no_data", "no queue timing")
    p95 = row["p95_ms"]
    if p95 <= th:
        return RuleOutcome("queue_wait", "pass", f"p95 {fmt.prose(p95)} ms ≤ {fmt.prose(th)} ms over {row['count']}")
    f = finding(
        "queue_wait", scope="global", value=p95, threshold=th, unit="ms",
        message=f"queue wait p95 is {fmt.prose(p95)} ms (> {fmt.prose(th)} ms) over "
                f"{_plural(row['count'], 'request')}: the server is overloaded part of the time",
        section="latency", chart="stage_latency_by_hour", details=dict(row),
    )  # fmt: skip
    return RuleOutcome("queue_wait", "fired", f"p95 {fmt.prose(p95)} ms", [f])


@rule(
    "slow_format",
    severity="warning",
    source="000 §4.2",
    fix=(
        "Post-processing should take < 30 ms; > 100 ms means the reply is too large (3000+ "
        "tokens): limit max_tokens in the front end and keep serialisation and think-chain "
        "parsing light (000 §4.2)."
    ),
    inputs=("stage_percentiles",),
    needs=("format",),
    sections=("latency",),
    charts=("stage_latency_by_hour",),
)
def rule_slow_format(m, ingest, t) -> RuleOutcome:
    th = t["slow_format"]
    row = _metric_row(m, "stage_percentiles", "format", key="stage")
    p50 = row.get("p50_ms") if row else None
    severity = "critical" if p50 is not None and p50 > th["critical_p50_ms"] else None
    threshold = th["critical_p50_ms"] if severity else th["warning_p50_ms"]
    return _p50_rule("slow_format", row, threshold, what="format (post-processing)", section="latency",
                     chart="stage_latency_by_hour", severity=severity,
                     no_data_reason="no format timing (the seed logger writes duration_ms -1)")


