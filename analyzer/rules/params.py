"""Request-parameter rules: beam search, max_new_tokens far above what is used, long outputs."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.registry import (
    SESSION_SCANS,
    RuleOutcome,
    _plural,
    _scanned,
    _session_rule,
    _session_scan,
    rule,
)


@_session_scan("beam_search")
def _beam_search_scan(t):
    th = t["beam_search"]["num_beams"]
    return ("generate_params_per_session", lambda r: (r.get("num_beams_count") or 0) > 0,
            lambda r: r["num_beams_max"] > th)  # fmt: skip


@rule(
    "beam_search",
    severity="warning",
    source="003 §3.2",
    fix=(
        "Generate with num_beams=1 (sampling or greedy) for chat: beam search runs num_beams "
        "branches and multiplies decode work and memory (003 §3.2)."
    ),
    inputs=("generate_params_per_session",),
    needs=(),
    sections=("latency",),
)
def rule_beam_search(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["beam_search"]["num_beams"]
    table, has, _fires = SESSION_SCANS["beam_search"](t)

    def rows():
        return (r for r in m.get(table, []) if has(r))

    fires, scanned = _scanned("beam_search", m, t, scanned)
    outcome = _session_rule(
        "beam_search", (), fires, lambda r: r["num_beams_max"], scanned=scanned,
        threshold=th, unit="beams",
        describe=lambda n, v: f"generate runs beam search ({beams_each(scanned[1])})",
        section="latency", chart=None,
        detail_keys=("num_beams_max", "beam_requests", "requests", "beam_failed_requests", "beam_fallback_requests"),
        no_data_reason="no request logged generate params (num_beams)",
    )
    # A failed attempt's params (error event) keep the cause visible behind a fallback (003 §3.2).
    for f in outcome.findings:
        flagged = set(f["session_ids"])
        f["fix"] = beam_fix([r for r in rows() if r["session_id"] in flagged], f.get("fix") or "")
        fb = [r for r in rows() if r["session_id"] in flagged and (r.get("beam_fallback_requests") or 0) > 0]
        if fb:
            beams = max(r.get("failed_num_beams_max") or 0 for r in fb)
            f["message"] += (f"; OOM with num_beams={fmt.prose(beams)}, then greedy fallback in "
                             f"{_plural(sum(r['beam_fallback_requests'] for r in fb), 'request')} of "
                             f"{_plural(len(fb), 'session')}")
    return outcome


def beams_each(hit: list[dict]) -> str:
    """"num_beams = 5 in 2 sessions", or each value with its sessions when they differ:
    "num_beams = 5 in 1 session, 2 in 1 session" (the largest alone would misstate the others)."""
    counts: dict = {}
    for r in hit:
        counts[r["num_beams_max"]] = counts.get(r["num_beams_max"], 0) + 1
    each = [f"{fmt.prose(v)} in {_plural(n, 'session')}" for v, n in sorted(counts.items(), key=lambda kv: -kv[0])]
    return "num_beams = " + ", ".join(each)


def beam_fix(rows: list[dict], base: str) -> str:
    """The beam_search fix naming what its sessions' requests show: beam requests that failed
    (the OOM 003 §3.2 describes) only when some did; otherwise the cost is their time."""
    beam = sum(r.get("beam_requests") or 0 for r in rows)
    failed = sum(r.get("beam_failed_requests") or 0 for r in rows)
    fallback = sum(r.get("beam_fallback_requests") or 0 for r in rows)
    if failed:
        retried = f", {fallback} of them then answered by a greedy retry" if fallback else ""
        return (f"{base} Here {_plural(failed, 'beam request')} failed (out of memory){retried}: generating "
                "with num_beams=1 from the start avoids the failed attempt.")
    return (f"{base} Checked and absent: no beam request failed ({_plural(beam, 'beam request')} in "
            f"{_plural(len(rows), 'session')}, all answered), so the cost here is time: compare their decode "
            "times in the slow-requests section.")


@_session_scan("high_max_tokens")
def _high_max_tokens_scan(t):
    th = t["high_max_tokens"]["max_new_tokens"]
    return ("generate_params_per_session", lambda r: (r.get("max_new_tokens_count") or 0) > 0,
            lambda r: r["max_new_tokens_max"] >= th)  # fmt: skip


@rule(
    "high_max_tokens",
    severity="warning",
    source="000 §2.2, §4.2",
    fix=(
        "Lower max_new_tokens (the seed app uses 2048): a 4096+ limit lets one request run "
        "thousands of decode steps and hold the GPU (000 §2.2, §4.2)."
    ),
    inputs=("generate_params_per_session",),
    needs=(),
    sections=("latency",),
)
def rule_high_max_tokens(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["high_max_tokens"]["max_new_tokens"]
    fires, scanned = _scanned("high_max_tokens", m, t, scanned)
    return _session_rule(
        "high_max_tokens", (), fires, lambda r: r["max_new_tokens_max"], scanned=scanned,
        threshold=th, unit="tokens",
        describe=lambda n, v: f"max_new_tokens set to {fmt.prose(v)} in {_plural(n, 'session')}",
        section="latency", chart=None, detail_keys=("max_new_tokens_max", "output_len_max"),
        no_data_reason="no request logged generate params (max_new_tokens)",
    )


@_session_scan("long_output")
def _long_output_scan(t):
    th = t["long_output"]["output_len"]
    return ("generate_params_per_session", lambda r: (r.get("output_len_count") or 0) > 0,
            lambda r: r["output_len_max"] > th)  # fmt: skip


@rule(
    "long_output",
    severity="warning",
    source="000 §4.2",
    fix=(
        "Answers of 3000+ tokens make post-processing exceed 100 ms and decode run long: limit "
        "max_tokens in the front end and max_new_tokens in generate (000 §4.2)."
    ),
    inputs=("generate_params_per_session",),
    needs=(),
    sections=("latency",),
)
def rule_long_output(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["long_output"]["output_len"]
    fires, scanned = _scanned("long_output", m, t, scanned)
    return _session_rule(
        "long_output", (), fires, lambda r: r["output_len_max"], scanned=scanned,
        threshold=th, unit="tokens",
        describe=lambda n, v: f"outputs of up to {fmt.prose(v)} tokens in {_plural(n, 'session')}",
        section="latency", chart=None, detail_keys=("output_len_max", "max_new_tokens_max"),
        no_data_reason="no request logged output_len",
    )


