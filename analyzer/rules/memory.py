"""Memory rules: leaks that sessions keep, ghost memory held by the caching allocator, OOMs."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.attribution import _proc_name, memory_leak_verdicts
from dslogs.analyzer.rules.registry import (
    RuleOutcome,
    _host_findings,
    _plural,
    _scan,
    _session_rule,
    cpu_only_hosts,
    finding,
    rule,
)

COUNTED = {"requests": "requests_counted"}

# Where a fix names the app's per-session state, the words for the stack that served the
# finding's processes (model.report.process_stacks: gradio, vllm or unknown); unknown keeps both.
SESSION_STATE_ANY = ("per-session state (Streamlit: st.session_state or st.cache_resource; Gradio: gr.State "
                     "or a dict keyed by session)")
SESSION_STATE = {
    "gradio": "per-session state (gr.State, or a dict keyed by session in the app)",
    "vllm": "per-request state kept after the request ends (a dict of outputs keyed by request)",
}


def fix_for_stack(fix: str, stacks: set) -> str:
    """``fix`` in the words of the one stack that served the finding's processes; unchanged
    where they are unknown or several."""
    words = SESSION_STATE.get(next(iter(stacks))) if len(stacks) == 1 else None
    return fix.replace(SESSION_STATE_ANY, words) if words else fix


# An amount explains the memory a session kept only where it is of that size: under a tenth of
# what each request kept, neither the allocator's cache (what empty_cache frees) nor the KV cache
# (what sharing it with past_key_values saves, 000 §5) can be what was kept.
EXPLAINS_SHARE = 0.1


def leak_fix(hit: list[dict], m: dict) -> str:
    """The memory_leak fix for what the flagged sessions' readings show: allocated memory (live
    tensors, which torch.cuda.empty_cache() cannot free) or cache (reserved over allocated); and
    the KV cache's advice only where the KV cache is large enough to be what they kept."""
    # what each session kept per request where its requests were judged, else over its turns
    kept = {v["session_id"]: v.get("leak_per_request_mb") or v["rise_mb"] for v in hit}
    cached, live = 0, []
    for r in m.get("memory_per_session", []):
        if r["session_id"] in kept and r.get("ghost_p50_mb") is not None:
            if r["ghost_p50_mb"] >= EXPLAINS_SHARE * kept[r["session_id"]]:
                cached += 1
            else:
                live.append(r["ghost_p50_mb"])
    kv = [r["kv_cache_size_max_mb"] for r in m.get("kv_cache_per_session", [])
          if r["session_id"] in kept and r.get("kv_cache_size_max_mb") is not None]
    rates = [v.get("leak_per_request_mb") for v in hit]
    state = f"never keep GPU tensors in {SESSION_STATE_ANY} (003 §4.1)"
    if live and not cached:
        head = ("Drop the references the app keeps: free what generate returns as soon as it is decoded "
                f"(`del outputs`), {state}. The kept memory is allocated, not cache (reserved − allocated "
                f"in these sessions' readings: median {fmt.significant(max(live))} MiB at most): live tensors, "
                "which `torch.cuda.empty_cache()` cannot free")
    elif cached:
        head = ("Free what generate returns as soon as it is decoded (`del outputs`, then "
                "`torch.cuda.empty_cache()`: these sessions' readings show cache, reserved over allocated), "
                f"{state}")
    else:
        head = ("Free what generate returns as soon as it is decoded (`del outputs`, then "
                f"`torch.cuda.empty_cache()` for what the cache holds), {state}")
    if kv and None not in rates and max(kv) < EXPLAINS_SHARE * min(rates):
        return (f"{head}. Not the KV cache: at most {fmt.significant(max(kv))} MiB per request in these sessions, "
                f"far below the {fmt.prose(min(rates))} MiB each request kept.")
    return (f"{head}; and pass past_key_values to generate() explicitly so the KV cache is shared, not "
            "rebuilt (000 §5).")


@rule(
    "memory_leak",
    severity="critical",
    source="000 §5 table; 003 §4.1, §5.3",
    fix=(
        "Free what generate returns as soon as it is decoded (`del outputs`, then `torch.cuda.empty_cache()` "
        f"for what the cache holds), never keep GPU tensors in {SESSION_STATE_ANY} (003 §4.1), and pass "
        "past_key_values to generate() explicitly so the KV cache is shared, not rebuilt (000 §5)."
    ),
    inputs=("memory_per_session", "request_memory_deltas", "memory_per_process", "host_devices",
            "kv_cache_per_session"),
    needs=("gpu_memory",),
    sections=("memory",),
    charts=("memory_timeline",),
    gpu=True,
)
def rule_memory_leak(m, ingest, t, verdicts: dict | None = None) -> RuleOutcome:
    th = t["memory_leak"]
    # the report computes them once for this rule and its checklist (evaluate_rules' leak)
    verdicts = memory_leak_verdicts(m, t) if verdicts is None else verdicts
    sessions, processes = verdicts["sessions"], verdicts["processes"]
    if not sessions and not processes:
        cpu = cpu_only_hosts(m)
        why = f"; {_plural(len(cpu), 'host')} without a GPU (device cpu)" if cpu else ""
        return RuleOutcome("memory_leak", "no_data",
                           f"no session has {th['min_samples']}+ gpu_memory snapshots or GPU memory deltas{why}")
    findings = []
    hit = sorted((v for v in sessions.values() if v["flagged"]), key=lambda v: (-v["rise_mb"], v["session_id"]))
    if hit:
        by_delta = [v for v in hit if v["basis"] == "request deltas"]
        parts = []
        if by_delta:
            # a session's per-request figure is its kept total over its counted requests: a mean,
            # said with the total it comes from so it reads as one
            top = max(by_delta, key=lambda v: (v["leak_per_request_mb"], v["session_id"]))
            # sessions whose figure reads the same as the worst one's tie with it: none is "the" worst
            tied = [v for v in by_delta if fmt.prose(v["leak_per_request_mb"]) == fmt.prose(top["leak_per_request_mb"])]
            same = len({(fmt.prose(v["rise_mb"]), v.get("requests")) for v in tied}) == 1
            over = f"{fmt.prose(top['rise_mb'])} MiB over {_plural(top.get('requests') or 0, 'request')}"
            if len(tied) == 1:
                where = "" if len(by_delta) == 1 else " in the worst session"
            elif len(tied) == len(by_delta):
                where = ""
                over = f"{over} in each session" if same else f"up to {fmt.prose(max(v['rise_mb'] for v in tied))} MiB a session"
            else:
                where = f" in the {len(tied)} worst sessions"
                over = f"{over} each" if same else f"up to {fmt.prose(max(v['rise_mb'] for v in tied))} MiB a session"
            parts.append(f"requests keep {fmt.prose(top['leak_per_request_mb'])} MiB of GPU memory each on average{where} "
                         f"({over}; other requests' leaks subtracted) in {_plural(len(by_delta), 'session')}")
        if len(by_delta) < len(hit):
            parts.append(f"reserved_mb rises up to {fmt.prose(max(v['rise_mb'] for v in hit if v['basis'] != 'request deltas'))} "
                         f"MiB over consecutive turns in {_plural(len(hit) - len(by_delta), 'session')}")
        findings.append(finding(
            "memory_leak", scope="session", value=hit[0]["rise_mb"], threshold=th["rise_mb"], unit="MiB",
            message="; ".join(parts) + f" (more than {fmt.prose(th['rise_mb'])} MiB per session, 003 §5.3)",
            section="memory", chart="memory_timeline",
            # requests_counted: the requests per request × requests is over (from the first that
            # kept), not the session's requests
            details={"sessions": [{COUNTED.get(k, k): v.get(k)
                                   for k in ("session_id", "host", "pid", "basis", "rise_mb", "leak_per_request_mb",
                                             "requests", "requests_read", "reserved_first_mb", "reserved_last_mb",
                                             "reserved_slope_mb_per_min", "samples", "minutes", "credited")
                                   if v.get(k) is not None}
                                  for v in hit],
                     "checked_sessions": len(sessions)}
                    | ({"set_aside": verdicts["set_aside"]} if verdicts.get("set_aside") else {}),
            session_ids=[v["session_id"] for v in hit], hosts=[v.get("host") for v in hit],
        ))
        # one more read of two per-session tables, only when sessions are flagged
        findings[-1]["fix"] = leak_fix(hit, m)
    for p in processes:
        if p["basis"] == "request before/after":
            msg = (f"process {_proc_name((p['host'], p['pid']))}: reserved +{fmt.mib(p['rise_mb'])} over "
                   f"{fmt.prose(p.get('minutes') or 0, 0)} min across {_plural(p.get('sessions') or 0, 'session')} "
                   f"(up to {p.get('inflight_max') or 1} requests at once); no session stands out")
        else:
            msg = (f"process {_proc_name((p['host'], p['pid']))}: reserved_mb rises up to {fmt.mib(p['rise_mb'])} in "
                   f"{p['flagged_sessions']} of the {p['sessions']} sessions it served at the same time: torch "
                   "reports memory per process, so no session stands out")
        findings.append(finding(
            "memory_leak", scope="process", value=p["rise_mb"], threshold=th["rise_mb"], unit="MiB", message=msg,
            section="memory", chart="memory_timeline", details=p, hosts=[p.get("host")],
        ))
    if not findings:
        return RuleOutcome("memory_leak", "pass", f"{_plural(len(sessions), 'session')} checked")
    return RuleOutcome("memory_leak", "fired", f"{_plural(len(hit), 'session')}, {_plural(len(processes), 'process')}",
                       findings)


@rule(
    "ghost_memory",
    severity="warning",
    source="000 §1.1",
    fix=(
        "PyTorch's caching allocator holds blocks that nvidia-smi shows as used but new requests "
        "cannot get, which leads to OOM later: release tensors (`del outputs`) and call "
        "`torch.cuda.empty_cache()` after large generations (000 §1.1; 003 §4.1)."
    ),
    inputs=("memory_per_session", "memory_per_host"),
    needs=("gpu_memory",),
    sections=("memory",),
    charts=("memory_timeline",),
    gpu=True,
)
def rule_ghost_memory(m, ingest, t) -> RuleOutcome:
    th = t["ghost_memory"]

    def fires(r):
        return (r.get("ghost_p50_mb") or 0) > th["ghost_mb"] and (r.get("ghost_share_p50") or 0) > th["ghost_share"]

    # read once, keeping only the sessions that fire (the table may hold 400 k+ sessions)
    scanned = _scan((r for r in m.get("memory_per_session", []) if r.get("ghost_p50_mb") is not None), fires)
    sessions = scanned[0]
    hosts = [r for r in m.get("memory_per_host", []) if r.get("ghost_p50_mb") is not None]
    if not sessions and not hosts:
        return RuleOutcome("ghost_memory", "no_data", "no gpu_memory snapshot with both reserved_mb and allocated_mb")
    findings = []
    if sessions:
        findings += _session_rule(
            "ghost_memory", (), fires, lambda r: r["ghost_p50_mb"], scanned=scanned,
            threshold=th["ghost_mb"], unit="MiB",
            describe=lambda n, v: (
                f"median reserved − allocated (cache held by PyTorch) up to {fmt.prose(v)} MiB, over "
                f"{fmt.prose(100 * th['ghost_share'])} % of reserved, in {_plural(n, 'session')}"
            ),
            section="memory", chart="memory_timeline",
            detail_keys=("ghost_p50_mb", "ghost_share_p50", "ghost_max_mb", "reserved_max_mb", "allocated_max_mb"),
            no_data_reason="",
        ).findings
    host_hit = [r for r in hosts if fires(r)]
    findings += _host_findings(
        "ghost_memory", host_hit, value_key="ghost_p50_mb", threshold=th["ghost_mb"], unit="MiB",
        message_of=lambda r: f"{r['host'] or 'the unnamed host'}: median reserved − allocated is {fmt.prose(r['ghost_p50_mb'])} MiB "
                             f"({fmt.prose(100 * r['ghost_share_p50'])} % of reserved)",
        section="memory", chart="memory_timeline",
        detail_keys=("ghost_p50_mb", "ghost_share_p50", "ghost_max_mb", "samples"),
    )
    checked = f"{_plural(sessions, 'session')}, {_plural(len(hosts), 'host')} checked"
    return RuleOutcome("ghost_memory", "fired" if findings else "pass", checked, findings)


def oom_count(row: dict) -> int:
    """OOMs of one session: one OOM usually shows both as an error event and as a num_ooms rise,
    so take the larger of the two counts rather than their sum."""
    return max(int(row.get("oom_errors") or 0), int(row.get("num_ooms_rise") or 0))


@rule(
    "oom",
    severity="critical",
    source="003 §3.2, §5.3",
    fix=(
        "Catch torch.cuda.OutOfMemoryError around generate and log it; cap num_beams at 1 and bound "
        "max_new_tokens server-side, whatever a request asks for, retry an OOM that still happens once with "
        "greedy decoding (num_beams=1, do_sample=False), and trim the dialogue history (003 §3.2, §4.3)."
    ),
    inputs=("oom_per_session", "goodput", "memory_per_session", "memory_per_host", "generate_params_per_session"),
    needs=(),
    sections=("errors",),
    charts=("errors_timeline",),
)
def rule_oom(m, ingest, t) -> RuleOutcome:
    th = t["oom"]
    has_inputs = bool(m.get("goodput") and (m["goodput"][0].get("requests") or 0) > 0) or bool(
        m.get("memory_per_session") or m.get("memory_per_host") or m.get("oom_per_session")
    )
    if not has_inputs:
        return RuleOutcome("oom", "no_data", "no requests or gpu_memory events")
    rows = [{**r, "ooms": oom_count(r)} for r in m.get("oom_per_session", [])]
    hit = [r for r in rows if r["ooms"] >= th["min_events"]]
    if not hit:
        return RuleOutcome("oom", "pass", "no OOM error and no num_ooms rise")
    findings = []
    in_sessions = [r for r in hit if r.get("session_id") is not None]
    if in_sessions:
        # value = every OOM of the flagged sessions, the number the message and the no_oom
        # checklist item give; the worst session's count is in the message and the details
        total = sum(r["ooms"] for r in in_sessions)
        errors = sum(r["oom_errors"] or 0 for r in in_sessions)
        rises = sum(r["num_ooms_rise"] or 0 for r in in_sessions)
        worst = max(r["ooms"] for r in in_sessions)
        seen = [part for n, part in ((errors, _plural(errors, "OOM error event")), (rises, f"num_ooms rose {rises}×")) if n]
        how = " and ".join(seen) + (", an OOM seen both ways counted once" if errors and rises else "")
        most = f"up to {worst} in one session; " if len(in_sessions) > 1 else ""
        sample = next((r["sample_msg"] for r in in_sessions if r.get("sample_msg")), None)
        # The failed attempt's params (error event) name the cause a fallback retry hides (003 §3.2).
        oom_ids = {r["session_id"] for r in in_sessions}
        fallback = [r for r in m.get("generate_params_per_session", [])
                    if r["session_id"] in oom_ids and (r.get("beam_fallback_requests") or 0) > 0]
        cause = ""
        if fallback:
            beams = max(r.get("failed_num_beams_max") or 0 for r in fallback)
            cause = (f"; OOM with num_beams={fmt.prose(beams)}, then greedy fallback, in "
                     f"{_plural(len(fallback), 'session')}")
        findings.append(finding(
            "oom", scope="session", value=total, threshold=th["min_events"], unit="OOMs",
            message=f"{_plural(total, 'OOM')} in {_plural(len(in_sessions), 'session')} ({most}{how}){cause}",
            section="errors", chart="errors_timeline",
            details={"sessions": [{**{k: r.get(k) for k in ("session_id", "host")}, "ooms": r["ooms"],
                                   **{k: r.get(k) for k in ("oom_errors", "num_ooms_rise", "first_ts", "error_type")}}
                                  for r in in_sessions],
                     "sample_msg": sample},
            session_ids=[r["session_id"] for r in in_sessions], hosts=[r.get("host") for r in in_sessions],
        ))
    for r in hit:
        if r.get("session_id") is None:
            findings.append(finding(
                "oom", scope="host", value=r["ooms"], threshold=th["min_events"], unit="OOMs",
                message=f"{_plural(r['ooms'], 'OOM')} on {r.get('host') or 'an unnamed host'} outside any session",
                section="errors", chart="errors_timeline",
                details={k: r.get(k) for k in ("oom_errors", "num_ooms_rise", "first_ts", "sample_msg")},
                hosts=[r.get("host")],
            ))
    return RuleOutcome("oom", "fired", _plural(len(hit), "session/host"), findings)


