"""Capacity rules (000 §1.3): time spent beyond the throughput knee, OOMs at the highest in-flight
levels. The curve they read is analyzer/rules/capacity_curve.py's, the report's capacity section's."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.capacity_curve import SETTING, _proc, group_levels, knee_of, time_beyond
from dslogs.analyzer.rules.registry import RuleOutcome, _plural, finding, rule


@rule(
    "concurrency_cliff",
    severity="warning",
    source="000 §1.3",
    fix=(
        "One prompt in 1.2 s does not mean five users at once will hold (000 §1.3): past the "
        "concurrency the box can take, throughput stops rising and every request waits longer. "
        f"Cap requests in flight at the knee ({SETTING}) and let the framework queue the rest; the "
        "capacity section gives the level and its evidence."
    ),
    inputs=("capacity_per_level",),
    needs=(),
    sections=("capacity",),
    charts=("capacity_throughput",),
)
def rule_concurrency_cliff(m, ingest, t) -> RuleOutcome:
    th = t["concurrency_cliff"]
    groups = [rows for rows in group_levels(m) if rows]
    if not groups:
        return RuleOutcome("concurrency_cliff", "no_data", "no request with a start and an end")
    judged, unjudged = [], []
    for rows in groups:
        levels, knee = knee_of(rows, th)
        # too little traffic to recommend a setting (the capacity section's own bar) judges nothing
        if sum(lv.get("requests") or 0 for lv in levels) < th["min_requests"]:
            knee = None
        (judged if knee is not None else unjudged).append((rows[0].get("host"), rows[0].get("pid"), levels, knee))
    if not judged:
        return RuleOutcome("concurrency_cliff", "no_data",
                           "no throughput knee in the levels seen (" + "; ".join(
                               f"{_proc(h, p)}: {sum(lv.get('requests') or 0 for lv in levels)} requests up to "
                               f"{levels[-1]['level']} in flight, "
                               f"{_plural(sum(1 for lv in levels if not lv['sparse']), 'level')} with "
                               f"{th['min_level_requests']}+ requests" for h, p, levels, _ in unjudged[:3])
                           + f"; a knee needs {th['min_requests']}+ requests over {th['min_levels']}+ such levels, "
                             "one below it and one above)")
    findings = []
    for host, pid, levels, knee in judged:
        beyond, total = time_beyond(levels, knee)
        share = beyond / total if total else 0.0
        if share <= th["time_share"]:
            continue
        at_knee = next(lv for lv in levels if lv["level"] == knee)
        above = [lv for lv in levels if lv["level"] > knee and not lv["sparse"]]
        worst = max(above, key=lambda lv: lv.get("tpot_p95_ms") or 0, default=None)
        detail = ""
        if worst is not None and worst.get("tokens_per_s") is not None:
            detail = (f"; at {worst['level']} in flight {fmt.prose(worst['tokens_per_s'], 0)} tokens/s "
                      f"(knee {fmt.prose(at_knee['tokens_per_s'], 0)}), TPOT p95 {fmt.prose(worst.get('tpot_p95_ms') or 0, 0)} ms "
                      f"(knee {fmt.prose(at_knee.get('tpot_p95_ms') or 0, 0)} ms)")
        findings.append(finding(
            "concurrency_cliff", scope="host", value=round(100 * share, 1), threshold=100 * th["time_share"], unit="%",
            message=(f"{_proc(host, pid)} runs beyond its throughput knee ({knee} requests in flight) "
                     f"{fmt.prose(100 * share, 0)} % of its busy time{detail}"),
            section="capacity", chart="capacity_throughput",
            details={"knee": knee, "time_beyond_s": round(beyond, 1), "busy_s": round(total, 1),
                     "levels": [{k: lv.get(k) for k in ("level", "requests", "time_s", "tokens_per_s", "tpot_p95_ms")}
                                for lv in levels]},
            hosts=[host],
        ))
    if not findings:
        return RuleOutcome("concurrency_cliff", "pass", f"{_plural(len(judged), 'process')} within their knee")
    return RuleOutcome("concurrency_cliff", "fired", f"{_plural(len(findings), 'process')}", findings)


def oom_cluster(levels: list[dict], th: dict) -> dict | None:
    """Where a process's OOMs cluster (``levels`` sorted by level, ``th`` oom_at_concurrency's
    thresholds): the lowest level from which ``top_share`` of them happened, with the OOM rate at
    and above it against the rate below; None when they do not cluster."""
    ooms = sum(lv.get("oom_requests") or 0 for lv in levels)
    if ooms < th["min_ooms"] or len(levels) < 2:
        return None
    # the highest level from which top_share of the OOMs are at or above it
    acc = 0
    start = None
    for lv in sorted(levels, key=lambda lv: -lv["level"]):
        acc += lv.get("oom_requests") or 0
        if acc >= th["top_share"] * ooms:
            start = lv["level"]
            break
    if start is None or start <= max(levels[0]["level"], 1):
        return None  # they happen from the lowest level up (one request alone included): not the load
    hi = [lv for lv in levels if lv["level"] >= start]
    lo = [lv for lv in levels if lv["level"] < start]
    rate_hi = sum(lv.get("oom_requests") or 0 for lv in hi) / max(1, sum(lv.get("requests") or 0 for lv in hi))
    rate_lo = sum(lv.get("oom_requests") or 0 for lv in lo) / max(1, sum(lv.get("requests") or 0 for lv in lo))
    if rate_hi <= 4 * rate_lo:
        return None
    peak = max((lv.get("reserved_peak_mb") or 0 for lv in hi), default=0)
    total = max((lv.get("gpu_total_mb") or 0 for lv in levels), default=0)
    if peak and total and peak < th["memory_share"] * total:
        return None  # the GPU had room at those levels: the requests' own asks, not how many ran
    return {"from_level": start, "ooms": ooms, "rate_at_or_above": rate_hi, "rate_below": rate_lo,
            "reserved_peak_mb": peak or None, "gpu_total_mb": total or None,
            "per_level": [{"level": lv["level"], "requests": lv.get("requests"), "oom_requests": lv.get("oom_requests") or 0}
                          for lv in levels]}


@rule(
    "oom_at_concurrency",
    severity="critical",
    source="000 §1.3",
    fix=(
        "OOMs come once more requests run at once than GPU memory holds (000 §1.3: past that "
        "batch the allocator fragments and fails). Cap requests in flight below the level where "
        f"they start ({SETTING}), bound max_new_tokens and the history each request carries, so "
        "each in-flight request needs less memory."
    ),
    inputs=("capacity_per_level", "generate_params_per_session"),
    needs=(),
    sections=("capacity",),
    charts=("capacity_memory",),
)
def rule_oom_at_concurrency(m, ingest, t) -> RuleOutcome:
    th = t["oom_at_concurrency"]
    groups = [rows for rows in group_levels(m) if rows]
    if not groups:
        return RuleOutcome("oom_at_concurrency", "no_data", "no request with a start and an end")
    beam_ooms: dict = {}
    for r in m.get("generate_params_per_session", []):
        beam_ooms[r.get("host")] = beam_ooms.get(r.get("host"), 0) + (r.get("beam_oom_requests") or 0)
    findings, from_beams = [], 0
    for levels in groups:
        cl = oom_cluster(levels, th)
        if cl is None:
            continue
        host, pid = levels[0].get("host"), levels[0].get("pid")
        if beam_ooms.get(host, 0) >= cl["ooms"]:
            # every OOM was a beam request's (num_beams > 1): what it asked, not how many ran at once
            from_beams += cl["ooms"]
            continue
        findings.append(finding(
            "oom_at_concurrency", scope="host", value=cl["ooms"], threshold=th["min_ooms"], unit="OOMs",
            message=(f"{_proc(host, pid)}: {_plural(cl['ooms'], 'request')} hit an OOM, "
                     f"clustered at {cl['from_level']}+ requests in flight ({fmt.prose(100 * cl['rate_at_or_above'], 1)} % "
                     f"of requests there, {fmt.prose(100 * cl['rate_below'], 1)} % below)"),
            section="capacity", chart="capacity_memory", details=cl, hosts=[host],
        ))
    if not findings:
        n = sum(sum(lv.get("oom_requests") or 0 for lv in levels) for levels in groups)
        if from_beams:
            return RuleOutcome("oom_at_concurrency", "pass",
                               f"{_plural(n, 'OOM')}; {fmt.prose(from_beams)} of them in requests with num_beams > 1, "
                               "which the beam_search and oom findings explain: not the load")
        return RuleOutcome("oom_at_concurrency", "pass", f"{_plural(n, 'OOM')}, none clustered at high in-flight levels")
    return RuleOutcome("oom_at_concurrency", "fired", f"{_plural(len(findings), 'process')}", findings)
