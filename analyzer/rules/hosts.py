"""Host and GPU rules: utilisation, starvation, memory thrash, host RSS growth."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.attribution import (
    Credits,
    attribute_deltas,
    credited_requests,
    kept_in_all,
)
from dslogs.analyzer.rules.registry import (
    RuleOutcome,
    _host_findings,
    _plural,
    finding,
    rule,
)

# -- hosts -----------------------------------------------------------------------------------


def host_gpu_peaks(m) -> dict:
    """Each host's GPU utilisation peak while its requests ran (host -> {host, util_peak, samples,
    source}): the samplers' busiest GPU, else the decode events' gpu_util_pct. low_gpu_util and
    the checklist's gpu_util_peak row judge these."""
    peaks: dict = {}
    for r in m.get("gpu_util_while_busy", []):
        if (r.get("busy_samples") or 0) > 0 and r.get("util_peak_busy") is not None:
            cur = peaks.get(r["host"])
            peaks[r["host"]] = {"host": r["host"], "util_peak": max(r["util_peak_busy"], (cur or {}).get("util_peak", 0)),
                                "samples": r["busy_samples"] + (cur or {}).get("samples", 0), "source": "gpu_sample"}
    for r in m.get("gpu_util_per_host_requests", []):
        if r["host"] not in peaks and (r.get("requests") or 0) > 0 and r.get("util_peak") is not None:
            peaks[r["host"]] = {"host": r["host"], "util_peak": r["util_peak"], "samples": r["requests"],
                                "source": "decode gpu_util_pct"}
    return peaks


@rule(
    "low_gpu_util",
    severity="warning",
    source="003 §5.3",
    fix=(
        "The GPU never gets busy while requests run (peak < 65 %): the bottleneck is before the "
        "GPU (preprocessing, GIL, logging, data movement); see gpu_wait and cpu_bound "
        "(003 §4.2, §5.3; 000 §1.2)."
    ),
    inputs=("gpu_util_while_busy", "gpu_util_per_host_requests"),
    needs=("gpu_util",),
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_low_gpu_util(m, ingest, t) -> RuleOutcome:
    th = t["low_gpu_util"]["peak_pct"]
    peaks = host_gpu_peaks(m)
    if not peaks:
        return RuleOutcome("low_gpu_util", "no_data", "no GPU utilisation measured while requests ran")
    hit = [p for p in peaks.values() if p["util_peak"] < th]
    if not hit:
        return RuleOutcome("low_gpu_util", "pass", f"{_plural(len(peaks), 'host')} checked")
    findings = _host_findings(
        "low_gpu_util", hit, value_key="util_peak", threshold=th, unit="%",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'}: GPU utilisation never exceeds {fmt.prose(r['util_peak'])} % "
            "while requests run"
        ),
        section="gpu", chart="gpu_timeline", detail_keys=("util_peak", "samples", "source"),
    )
    return RuleOutcome("low_gpu_util", "fired", _plural(len(hit), "host"), findings)


@rule(
    "gpu_starved",
    severity="warning",
    source="000 §2.1",
    fix=(
        "GPU memory is nearly full while the GPU idles: it is waiting for data (data loading or "
        "CPU preprocessing is the bottleneck), and whatever holds the memory (another process, "
        "cached blocks) squeezes new requests (000 §2.1, §1.1)."
    ),
    inputs=("gpu_per_host",),
    needs=("gpu_util",),
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_gpu_starved(m, ingest, t) -> RuleOutcome:
    th = t["gpu_starved"]
    rows = [{**r, "starved_share": (r.get("starved_s") or 0) / r["sampled_s"]}
            for r in m.get("gpu_per_host", []) if (r.get("sampled_s") or 0) > 0]
    if not rows:
        return RuleOutcome("gpu_starved", "no_data", "no gpu_sample events with utilisation and memory total")
    hit = [r for r in rows if r["starved_share"] >= th["min_time_share"]]
    if not hit:
        return RuleOutcome("gpu_starved", "pass", f"{_plural(len(rows), 'GPU')} checked")
    findings = _host_findings(
        "gpu_starved", hit, value_key="starved_share", threshold=th["min_time_share"], unit="share of time",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'} GPU {r.get('gpu_index')}: {fmt.prose(100 * r['starved_share'])} % of the time "
            f"util < {fmt.prose(th['util_pct'])} % with memory > {fmt.prose(100 * th['mem_used_share'])} % used"
        ),
        section="gpu", chart="gpu_timeline",
        detail_keys=("gpu_index", "starved_s", "sampled_s", "starved_samples", "util_p50", "mem_used_share_p50",
                     "mem_used_max_mb", "mem_total_mb"),
    )
    return RuleOutcome("gpu_starved", "fired", _plural(len(hit), "GPU"), findings)


@rule(
    "memory_thrash",
    severity="warning",
    source="000 §2.1",
    fix=(
        "High utilisation with GPU memory swinging by gigabytes per second: the KV cache is "
        "not shared or batching is disorganised, every request allocates and frees again; pass "
        "past_key_values to generate() explicitly (000 §2.1, §5)."
    ),
    inputs=("gpu_memory_swing",),
    needs=("gpu_util",),
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_memory_thrash(m, ingest, t) -> RuleOutcome:
    th = t["memory_thrash"]
    rows = [r for r in m.get("gpu_memory_swing", []) if (r.get("pairs") or 0) > 0]
    if not rows:
        return RuleOutcome("memory_thrash", "no_data",
                           f"no consecutive gpu_sample pairs with memory used ≤ {fmt.prose(th['max_gap_s'])} s apart")
    hit = [r for r in rows if (r.get("thrash_pairs") or 0) >= th["min_pairs"]]
    if not hit:
        return RuleOutcome("memory_thrash", "pass", f"{_plural(len(rows), 'GPU')} checked")
    findings = _host_findings(
        "memory_thrash", hit, value_key="swing_max_busy_mb_per_s", threshold=th["swing_mb_per_s"], unit="MiB/s",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'} GPU {r.get('gpu_index')}: memory used swings up to {fmt.prose(r['swing_max_busy_mb_per_s'])} MiB/s "
            f"while util > {fmt.prose(th['util_pct'])} % ({_plural(r['thrash_pairs'], 'time')})"
        ),
        section="gpu", chart="gpu_timeline",
        detail_keys=("gpu_index", "thrash_pairs", "busy_pairs", "pairs", "swing_max_busy_mb_per_s", "interval_p50_s"),
    )
    return RuleOutcome("memory_thrash", "fired", _plural(len(hit), "GPU"), findings)


def rss_credits(m, t) -> Credits:
    """What each session's own requests kept of host RAM (``attribute_deltas`` over the RSS
    deltas): computed once per report for rss_growth and the sessions table."""
    return attribute_deltas(m.get("request_memory_deltas", []), "rss_delta_mb",
                            min_requests=t["rss_growth"]["min_samples"])


def rss_judgement(credits: Credits, sid: str, t) -> dict | None:
    """What rss_growth judged of one session, flagged or not, under its finding's names; None
    when it judged nothing of it."""
    c = credits.get(sid)
    if c is None or c[1] < t["rss_growth"]["min_samples"]:
        return None
    rate, n = c
    # requests_counted: the requests per request × requests is over (from the first that kept)
    return {"rss_kept_mb": kept_in_all(rate, n), "rss_kept_per_request_mb": rate, "requests_counted": n,
            "requests_read": credits.read(sid)}


def rss_fix(leaking: int, judged: int, th: dict) -> str:
    """The rss_growth fix for what its sessions show: a leak in a few of the sessions judged is
    state kept per session (per-request objects would grow in every session); in most of them,
    objects created again per request."""
    if judged and leaking * 2 <= judged:
        return (f"{leaking} of the {judged} sessions judged keep host memory on their own requests; the others "
                f"keep {fmt.prose(th['leak_per_request_mb'])} MiB per request or less, or {fmt.prose(th['rise_mb'])} MiB "
                "in all or less (the thresholds), so the memory is held per session: look for state keyed by session (a cache or dict "
                "of histories, outputs or tensors appended on every turn) and bound it or drop it when the session "
                "ends (000 §3.3). Checked and absent: growth in every session, which a tokenizer or pipeline "
                "created again per request would give.")
    return (f"{leaking} of the {judged} sessions judged keep host memory on their own requests: Python objects are "
            "not released on every request. Check whether the tokenizer or pipeline is instantiated again per "
            "request; create them once and reuse (000 §3.3).")


def _sessions_part(kept_mb: float | None, judged: bool) -> str:
    """How a process's RSS finding stands to the session finding of the same rule: the sessions
    it names kept part of this rise, the rest is what this finding is about."""
    if kept_mb:
        return (f"; the sessions the session finding names kept {fmt.prose(kept_mb)} MiB of it, "
                "the rest no session's requests explain")
    return "; no session stands out" if judged else ""


@rule(
    "rss_growth",
    severity="warning",
    source="000 §3.3",
    fix=(
        "Host memory (RSS) rises one way: Python objects are not released. Check whether the "
        "tokenizer or pipeline is instantiated again per request; create them once and reuse "
        "(000 §3.3)."
    ),
    inputs=("rss_per_process", "request_memory_deltas"),
    needs=(),
    sections=("memory",),
)
def rule_rss_growth(m, ingest, t, rates: Credits | None = None) -> RuleOutcome:
    th = t["rss_growth"]
    rows = [{**r, "rise_mb": (r.get("rss_last_mb") or 0) - (r.get("rss_first_mb") or 0)}
            for r in m.get("rss_per_process", []) if (r.get("samples") or 0) >= th["min_samples"]]
    # the report computes them once for this rule and its sessions table
    rates = rss_credits(m, t) if rates is None else rates
    if not rows and not rates:
        return RuleOutcome("rss_growth", "no_data", f"no process with {th['min_samples']}+ process_sample events")
    leaking = {}
    judged = 0
    for sid in rates:
        v = rss_judgement(rates, sid, t)
        judged += v is not None
        if (v is not None and v["rss_kept_per_request_mb"] > th["leak_per_request_mb"]
                and v["rss_kept_mb"] > th["rise_mb"]):
            leaking[sid] = {"session_id": sid, **v}
    deltas = m.get("request_memory_deltas", [])
    if leaking:
        # host and pid of those sessions only, from their last row (the table has one row per request)
        for r in deltas:
            v = leaking.get(r["session_id"])
            if v is not None:
                v.update(host=r.get("host"), pid=r.get("pid"))
        credited_requests(deltas, "rss_delta_mb", rates, leaking)
    rates.release()
    leaky = sorted(leaking.values(), key=lambda v: (-v["rss_kept_mb"], v["session_id"]))
    findings = []
    if leaky:
        details = {"sessions": [{k: v.get(k) for k in ("session_id", "host", "pid", "rss_kept_per_request_mb",
                                                       "requests_counted", "requests_read", "rss_kept_mb",
                                                       "credited")}
                                for v in leaky]}
        if rates.set_aside:
            # drops of RSS no request caused (a garbage collection), left out of the credits: with
            # them, a process's steps add up to its requests' credits
            details["set_aside"] = rates.set_aside
        findings.append(finding(
            "rss_growth", scope="session", value=leaky[0]["rss_kept_mb"], threshold=th["rise_mb"], unit="MiB",
            message=(f"host memory (RSS) kept by their own requests: up to {fmt.prose(leaky[0]['rss_kept_mb'])} MiB "
                     f"({fmt.prose(leaky[0]['rss_kept_per_request_mb'])} MiB per request) in {_plural(len(leaky), 'session')}"),
            section="memory", chart=None,
            details=details,
            session_ids=[v["session_id"] for v in leaky], hosts=[v["host"] for v in leaky],
        ))
        findings[-1]["fix"] = rss_fix(len(leaky), judged, th)
    pinned: dict[tuple, float] = {}
    for v in leaky:
        pinned[(v["host"], v["pid"])] = pinned.get((v["host"], v["pid"]), 0.0) + v["rss_kept_mb"]
    hit = []
    for r in rows:
        linear = (r["rise_mb"] > th["rise_mb"] and (r.get("rss_slope_mb_per_min") or 0) > 0
                  and (r.get("rss_r2") or 0) >= th["min_r2"])
        stairs = (r.get("rss_held_rise_mb") or 0) > th["held_rise_mb"]
        growth = max(r["rise_mb"], r.get("rss_held_rise_mb") or 0)
        rest = growth - pinned.get((r.get("host"), r.get("pid")), 0.0)
        # What sessions' own requests explain is theirs; the process keeps the rest, if most.
        if (linear or stairs) and rest > th["rise_mb"] and rest > 0.5 * growth:
            hit.append({**r, "shape": "steady" if linear else "steps"})
    findings += _host_findings(
        "rss_growth", hit, value_key="rise_mb", threshold=th["rise_mb"], unit="MiB", scope="process",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'} pid {r.get('pid')}: RSS rises {fmt.prose(r['rise_mb'])} MiB "
            f"({fmt.prose(r.get('rss_slope_mb_per_min'), 2)} MiB/min, R² {fmt.prose(r.get('rss_r2'), 2)}"
            + (f"; in steps, {fmt.prose(r.get('rss_held_rise_mb'))} MiB held" if r["shape"] == "steps" else "")
            + _sessions_part(pinned.get((r.get("host"), r.get("pid"))), bool(rates)) + ")"
        ),
        section="memory", chart=None,
        detail_keys=("pid", "rss_first_mb", "rss_last_mb", "rss_slope_mb_per_min", "rss_r2", "rss_held_rise_mb",
                     "shape", "minutes", "samples"),
    )
    if not findings:
        return RuleOutcome("rss_growth", "pass", f"{_plural(len(rows), 'process')} checked")
    return RuleOutcome("rss_growth", "fired", f"{_plural(len(leaky), 'session')}, {_plural(len(hit), 'process')}",
                       findings)


