"""Evidence before verdicts: what pinned a finding on its sessions, read from their requests.

The rules judge metric tables; the report then has the request rows of the sessions it names
(the drill-down, ``queries/session_requests.sql``). From those rows this module gives each finding
that names sessions
- for memory findings (GPU memory, host RAM), the requests that kept memory: before, after, what
  they kept and how many requests were in flight when they started (``memory_requests``);
- for findings whose fix names causes (OOM), the factors present or absent in the affected
  requests: beams, input length, history length, max_new_tokens (``request_factors``), and a fix
  text that names only the present ones (``fix_for``).
"""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt

ATTRIBUTION_DOC = "docs/rules.md#attribution-by-request"
EVIDENCE_REQUESTS = 8  # requests shown per session in a memory finding's evidence
# the readings a memory rule's evidence is taken from, in order of preference
MEMORY_RULES = {"memory_leak": ("allocated", "reserved"), "rss_growth": ("rss",)}
FACTOR_RULES = ("oom",)
# 003 §4.3: keep the last 8 turns of history (about 1500 tokens); a later turn carries more
HISTORY_TURNS = 8


def _kept(row: dict, bases: tuple[str, ...] = ("allocated", "reserved")) -> tuple[str, float] | None:
    """(basis, MiB) a request kept: allocated after − before (the collector's own reading), else
    reserved after − before (or the process's RSS for host RAM); None without a pair."""
    for basis in bases:
        before, after = row.get(f"{basis}_mb_before"), row.get(f"{basis}_mb_after")
        if before is not None and after is not None:
            return basis, after - before
    return None


def memory_requests(rows: list[dict], limit: int | None = EVIDENCE_REQUESTS,
                    bases: tuple[str, ...] = ("allocated", "reserved"), verdict: dict | None = None,
                    figure: str = "rise_mb") -> dict:
    """A session's requests, in time order, with their before/after reading, what they kept
    (after − before: the process's change, other requests' leaks and working memory included)
    and the requests in flight when they started; without before/after pairs (article 003's
    snapshots) the snapshot after each request and its rise over the previous one.

    With ``verdict`` (the session's row in the finding's details: ``figure`` is the MiB it was
    judged by, ``credited`` what attribution credited each request with), every request it
    credited is listed with ``credited_mb`` (null: before the turn from which the session kept,
    not counted), and the list adds up to the verdict: ``credited_mb`` is the sum of the listed
    ones, ``left_out`` names each credited request the drill-down has no row for and why.
    Without a verdict, the ``limit`` requests that kept the most."""
    out = []
    deltas = [(r, k) for r in rows if (k := _kept(r, bases)) is not None]
    credited = {c["request_id"]: c.get("credited_mb") for c in (verdict or {}).get("credited") or []}
    if deltas:
        basis = deltas[0][1][0]
        if credited:
            top = [(r, k) for r, k in deltas if r.get("request_id") in credited]
        else:
            top = sorted(deltas, key=lambda rk: -rk[1][1])[:limit]
        for r, (b, kept) in sorted(top, key=lambda rk: (rk[0].get("turn_index") or 0)):
            row = {"turn_index": r.get("turn_index"), "request_id": r.get("request_id"),
                   "start_ts": r.get("start_ts"), f"{b}_before_mb": r.get(f"{b}_mb_before"),
                   f"{b}_after_mb": r.get(f"{b}_mb_after"), "kept_mb": round(kept, 1),
                   "inflight": r.get("inflight")}  # fmt: skip
            if credited:
                row["credited_mb"] = credited[r.get("request_id")]
            out.append(row)
        entry = {"basis": f"{'host RAM (RSS)' if basis == 'rss' else basis} before/after each request",
                 "requests": out}
        listed = {r.get("request_id") for r, _k in top}
        with_pair = {r.get("request_id") for r, _k in deltas}
        missing = []
        for r in rows:
            if r.get("request_id") in listed or r.get("turn_index") is None:
                continue
            if r.get("request_id") not in with_pair:
                why = "no before/after reading"
            elif credited:
                why = "not judged: not among the requests attribution credited"
            else:
                why = f"not among the {limit} requests that kept the most"
            missing.append({"turn_index": r.get("turn_index"), "why": why})
        if missing:
            # a turn the chart and table skip says why (the reader would otherwise guess)
            entry["missing"] = missing
        if credited:
            listed = {r["request_id"] for r in out}
            entry["credited_mb"] = sum(r["credited_mb"] for r in out if r["credited_mb"] is not None)
            entry["verdict_mb"] = verdict.get(figure)
            entry["left_out"] = [{"request_id": rid, "credited_mb": mb, "why": NOT_IN_DRILLDOWN}
                                 for rid, mb in credited.items() if rid not in listed and mb is not None]
        return entry
    if "reserved" not in bases:
        return {"basis": "no before/after reading per request", "requests": []}
    snaps = [r for r in rows if r.get("reserved_mb") is not None]
    prev = None
    rises = []
    for r in snaps:
        rise = None if prev is None else r["reserved_mb"] - prev
        rises.append((r, rise))
        prev = r["reserved_mb"]
    whole = verdict is not None and verdict.get(figure) is not None
    top = [rr for rr in rises if rr[1] is not None]
    if not whole:
        top = sorted(top, key=lambda rr: -rr[1])[:limit]
    for r, rise in sorted(top, key=lambda rr: rr[0].get("turn_index") or 0):
        out.append({"turn_index": r.get("turn_index"), "request_id": r.get("request_id"),
                    "start_ts": r.get("start_ts"), "reserved_after_mb": r.get("reserved_mb"),
                    "kept_mb": round(rise, 1), "inflight": r.get("inflight")})  # fmt: skip
    entry = {"basis": "reserved_mb snapshot after each request (rise over the previous one)", "requests": out}
    if whole:
        # the verdict's rise is the session's last snapshot − its first, which need not be
        # those taken after its first and last request in the drill-down
        entry["credited_mb"] = sum(rise for _r, rise in top)
        entry["verdict_mb"] = verdict[figure]
        rest = verdict[figure] - (snaps[-1]["reserved_mb"] - snaps[0]["reserved_mb"] if snaps else 0.0)
        entry["left_out"] = ([{"request_id": None, "credited_mb": rest, "why": OUTSIDE_SNAPSHOTS}]
                             if abs(rest) >= 0.05 else [])
    return entry


NOT_IN_DRILLDOWN = "credited, but not among the session's requests in the report's drill-down (report.detail_requests)"
OUTSIDE_SNAPSHOTS = ("the session's first or last reserved_mb snapshot is not one taken after a request in "
                     "the drill-down")
# the MiB a memory rule's verdict on a session is, in its finding's details
VERDICT_FIGURE = {"memory_leak": "rise_mb", "rss_growth": "rss_kept_mb"}


def _affected(rows: list[dict], rule: str) -> list[dict]:
    """The requests a finding is about: for OOM the failed ones (else all of the session)."""
    if rule == "oom":
        failed = [r for r in rows if r.get("status") == "error" or r.get("error_type")]
        return failed or rows
    return rows


def request_factors(rows: list[dict], t: dict) -> list[dict]:
    """The usual causes of GPU memory pressure (003 §3.2, §4.3), each present or absent in
    ``rows``, with what was seen."""
    beams = max((max(r.get("num_beams") or 1, r.get("failed_num_beams") or 1) for r in rows), default=None)
    inputs = max((r["input_len"] for r in rows if r.get("input_len") is not None), default=None)
    turns = max((r["turn_index"] for r in rows if r.get("turn_index") is not None), default=None)
    mnt = max((max(r.get("max_new_tokens") or 0, r.get("failed_max_new_tokens") or 0) for r in rows), default=None)
    long_input = t["slow_prefill"]["long_input_tokens"]
    high_mnt = t["high_max_tokens"]["max_new_tokens"]
    return [
        {"factor": "beam search", "present": bool(beams and beams > t["beam_search"]["num_beams"]),
         "seen": f"num_beams up to {fmt.prose(beams)}" if beams else "num_beams not logged"},
        {"factor": "long input", "present": bool(inputs and inputs >= long_input),
         "seen": f"input up to {fmt.prose(inputs)} tokens (long: ≥ {fmt.prose(long_input)})" if inputs else "input_len not logged"},
        {"factor": "long history", "present": bool(turns and turns > HISTORY_TURNS),
         "seen": f"turn {fmt.prose(turns)} at most (long: after turn {HISTORY_TURNS})" if turns else "turns not known"},
        {"factor": "large max_new_tokens", "present": bool(mnt and mnt >= high_mnt),
         "seen": f"max_new_tokens up to {fmt.prose(mnt)} (large: ≥ {fmt.prose(high_mnt)})" if mnt else "max_new_tokens not logged"},
    ]  # fmt: skip


# what to do about each factor when it is present (003 §3.2, §4.3)
_FACTOR_FIX = {
    "beam search": ("cap num_beams at 1 server-side, whatever a request asks for; retry an OOM that still "
                    "happens once with greedy decoding (num_beams=1, do_sample=False) (003 §3.2)"),
    "long input": "cap the input length (truncate or summarise long prompts) (003 §4.3)",
    "long history": "trim the dialogue history to the last 8 turns (003 §4.3)",
    "large max_new_tokens": "bound max_new_tokens (003 §3.2)",
}


def fix_for(rule: str, factors: list[dict], default: str) -> str:
    """The fix of ``rule`` naming only the causes present in its requests."""
    if rule != "oom":
        return default
    present = [f["factor"] for f in factors if f["present"]]
    head = "Catch torch.cuda.OutOfMemoryError around generate and log it"
    if present:
        return f"{head}; {'; '.join(_FACTOR_FIX[p] for p in present)}."
    return (f"{head}. None of beam search, a long input, a long history or a large max_new_tokens is present "
            "in the failing requests: look at what else held GPU memory then (requests in flight, other "
            "processes on the GPU, a leak) in the memory section.")


def attach(findings: list[dict], details: dict[str, list[dict]], t: dict) -> None:
    """Give each finding that names sessions its evidence from their request rows (in place)."""
    for f in findings:
        sids = [s for s in f.get("session_ids") or [] if s in details]
        if not sids:
            continue
        ev = f.setdefault("evidence", {})
        if f["rule"] in MEMORY_RULES and f.get("scope") == "session":
            bases = MEMORY_RULES[f["rule"]]
            verdicts = {v.get("session_id"): v for v in (ev.get("details") or {}).get("sessions") or []}
            ev["requests"] = [{"session_id": s, **memory_requests(details[s], bases=bases, verdict=verdicts.get(s),
                                                                  figure=VERDICT_FIGURE[f["rule"]])}
                              for s in sids]
            if len(sids) < len(f.get("session_ids") or []):
                # the drill-down holds report.detail_sessions sessions: the others' requests are
                # not in the model
                ev["requests_truncated"] = True
                ev["requests_total"] = len(f["session_ids"])
            ev["doc"] = ATTRIBUTION_DOC
        if f["rule"] in FACTOR_RULES:
            rows = [r for s in sids for r in _affected(details[s], f["rule"])]
            ev["factors"] = request_factors(rows, t)
            f["fix"] = fix_for(f["rule"], ev["factors"], f.get("fix") or "")
