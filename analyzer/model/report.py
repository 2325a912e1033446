"""The report model ``dslogs.report/1`` (docs/internals.md): metrics + rules -> one JSON-able dict.

The model is built from the metric tables alone (``build_report_from_metrics``: the rules, the
blocks, the sessions table; ``with_details``: the drill-down and the findings' evidence), so it
is the same whatever engine computed them; the use cases (``dslogs.analyzer.usecases.analyze``) open
the logs, run the queries and hand the tables here. The renderers (html, md, json), the diff
and the weekly report read the model.
"""

from __future__ import annotations

from datetime import datetime

from dslogs.analyzer import __version__
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.jsonable import clean, clean_json
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.metrics.registry import METRIC_QUERIES, query_series
from dslogs.analyzer.model import whatif
from dslogs.analyzer.model.lead import checked, contradictions, lead, slow_requests
from dslogs.analyzer.model.load import load_report_json  # noqa: F401  (the loader, re-exported)
from dslogs.analyzer.rules import (
    RULE_IDS,
    RULES,
    evaluate_checks,
    evaluate_rules,
    evidence,
    rules_unavailable,
)
from dslogs.analyzer.rules.attribution import memory_leak_verdicts, snapshot_rise
from dslogs.analyzer.rules.capacity_curve import capacity_curves
from dslogs.analyzer.rules.hosts import rss_credits, rss_judgement
from dslogs.analyzer.rules.memory import fix_for_stack, oom_count
from dslogs.analyzer.rules.registry import (
    KV_RULES,
    MEMORY_RULES,
    RULE_SPECS,
    SESSION_SCANS,
    SEVERITY_RANK,
    cpu_only_hosts,
)

SCHEMA = "dslogs.report/1"


CAPACITY_SCHEMA = "dslogs.capacity/1"
CAPACITY_RULES = ("concurrency_cliff", "oom_at_concurrency")


def capacity_model(metrics: dict, ingest: dict | None, window: dict | None, thresholds: dict,
                   grid: dict | None = None) -> dict:
    """The capacity model from ``capacity_per_level``, ``service_requests`` and ``time_span``: per
    process its in-flight levels, the knee, the SLO and OOM levels, the recommended limit and the
    simulated settings (``grid``: limits, users, max_new_tokens, num_beams; see capacity_block),
    with the capacity rules' findings."""
    findings, statuses = [], []
    for rid in CAPACITY_RULES:
        outcome = RULES[rid](metrics, ingest, thresholds)
        findings += outcome.findings
        statuses.append({"rule": rid, "status": "fired" if outcome.findings else outcome.status,
                         "reason": outcome.reason})
    span = _one(metrics, "time_span")
    _, columns = SERIES["capacity"]
    block = capacity_block(metrics, thresholds, grid)
    busiest = max(block, key=lambda c: c.get("requests") or 0, default={})
    return clean({
        "schema": CAPACITY_SCHEMA,
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "dslogs_version": __version__,
        "window": {"since": (window or {}).get("since"), "until": (window or {}).get("until"),
                   "first_event": span.get("first_event"), "last_event": span.get("last_event")},
        "capacity": block,
        "findings": findings,
        "what_if": busiest.get("what_if") or [],
        "max_users": busiest.get("max_users") or [],
        "rules": statuses,
        "series": {"capacity": [{k: r.get(k) for k in columns} for r in metrics["capacity_per_level"]]},
        "thresholds": thresholds,
    })


def with_details(model: dict, detail_rows: list[dict], thresholds: dict) -> dict:
    """The model with its drill-down (``detail_rows``: the requests of the sessions
    ``detail_session_ids`` names) and each finding's evidence read from it."""
    model["session_details"] = group_session_details(detail_rows)
    named_readings(model)
    # report.detail_requests per session at most: a session cut so says how many it has
    totals = {s["session_id"]: s.get("requests") for s in [*model["slowest_sessions"], *model["sessions"]]}
    cut = {sid: totals[sid] for sid, rows in model["session_details"].items()
           if (totals.get(sid) or 0) > len(rows)}
    if cut:
        model["session_details_truncated"] = True
        model["session_details_total"] = cut
    # each finding's sessions with the evidence that pinned it (memory kept per request; the
    # causes present in the affected requests, and a fix naming only those)
    evidence.attach(model["findings"], model["session_details"], thresholds)
    # the rest was made clean by build_report_from_metrics (one pass over 3,000 session rows
    # and their judged figures less; group_session_details cleans its rows)
    model["findings"] = clean(model["findings"])
    # the drill-down's requests tell which of a finding's requests missed the SLO
    model["lead"] = clean(lead(model))
    model["checked"] = checked(model)
    return model


# The per-session charts' series, each with the rules whose named sessions it must hold, the
# drill-down's field giving the time of its reading and the reading's fields (the first one is
# what the chart draws: a request without it adds no row).
NAMED_READINGS = {
    "memory_timeline": (MEMORY_RULES, "memory_ts", ("reserved_mb", "allocated_mb")),
    "kv_growth": (KV_RULES, "kv_ts", ("kv_seq_len", "kv_cache_size_mb")),
}


def named_readings(model: dict) -> None:
    """Add to each per-session chart's series (NAMED_READINGS) the readings of each session a
    finding of its rules names that the series' query left out: the query keeps
    report.timeline_sessions sessions, picked by their own readings before any finding was made (a
    host-RAM leaker or an OOM session may not be among them). The readings come from the session's
    drill-down, one per request (what session_requests.sql reads), placed at its turn and at the
    time the reading was taken, as the query's rows are."""
    series = model.get("series")
    if not isinstance(series, dict):
        return
    details = model.get("session_details") or {}
    for name, (rules, ts_field, fields) in NAMED_READINGS.items():
        if name not in series:
            continue
        drawn = {r.get("session_id") for r in series[name]}
        named = [sid for f in model.get("findings") or [] if f.get("rule") in rules for sid in f.get("session_ids") or []]
        for sid in dict.fromkeys(named):
            if sid in drawn:
                continue
            series[name] += [
                {"ts": r.get(ts_field), "session_id": sid, "request_id": r.get("request_id"),
                 "turn_index": r.get("turn_index"), **{f: r.get(f) for f in fields}}
                for r in details.get(sid) or [] if r.get(ts_field) and r.get(fields[0]) is not None]


def build_report_from_metrics(metrics: dict, ingest: dict, window: dict, thresholds: dict | None = None) -> dict:
    """The model from metric tables (``compute_metrics`` or another engine's equivalent)."""
    thresholds = thresholds or defaults()
    # once for the memory_leak rule and the checklist's reserved_band row (0.1-0.2 s at 1.57 M
    # events); the verdicts skip CPU-only hosts themselves, so the rule's GPU view gives the same
    leak = memory_leak_verdicts(metrics, thresholds)
    # once for rss_growth and the sessions table, which shows what it judged of every session
    rss = rss_credits(metrics, thresholds)
    findings, rule_status = evaluate_rules(metrics, ingest, thresholds, leak, rss)
    speak_stack(findings, process_stacks(metrics))
    rules_unavailable(rule_status, (ingest or {}).get("formats"))
    span = _one(metrics, "time_span")
    params = _one(metrics, "_params")
    by_session: dict[str, list[str]] = {}
    for f in findings:
        if f["scope"] == "session":
            for sid in f["session_ids"]:
                by_session.setdefault(sid, []).append(f["rule"])
    cpu_hosts = cpu_only_hosts(metrics)
    host_names = {r.get("host") for r in metrics.get("hosts_summary", [])}
    no_gpu = bool(host_names) and host_names <= cpu_hosts
    sessions = _sessions_block(metrics, by_session, findings, thresholds, leak, rss)
    sessions_total = len(metrics.get("session_summary", []))
    checklist = build_checklist(metrics, thresholds, leak, (ingest or {}).get("formats"), findings, rule_status,
                                no_gpu)  # fmt: skip
    model = {
        "schema": SCHEMA,
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "dslogs_version": __version__,
        "window": {
            "since": (window or {}).get("since"),
            "until": (window or {}).get("until"),
            "first_event": span.get("first_event"),
            "last_event": span.get("last_event"),
            # when requests ran (first start to last end): traffic may fill only part of the logs' span
            "first_request": _one(metrics, "goodput").get("first_request"),
            "last_request": _one(metrics, "goodput").get("last_request"),
        },
        "ingest": ingest_block(ingest),
        "hosts": [
            {k: r.get(k) for k in ("host", "events", "sessions", "requests", "first_ts", "last_ts")}
            for r in metrics.get("hosts_summary", [])
        ],
        # hosts whose requests ran on a CPU device with nothing GPU-ish seen (rules.cpu_only_hosts);
        # no_gpu: all of them, so GPU tables, charts and checks do not apply
        "cpu_hosts": sorted(h or "" for h in cpu_hosts),
        "no_gpu": no_gpu,
        "checklist": checklist,
        "stages": [
            {k: r.get(k) for k in ("stage", "count", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")}
            for r in metrics.get("stage_percentiles", [])
        ],
        "requests": _requests_block(metrics, thresholds),
        "sessions": sessions,
        "sessions_total": sessions_total,
        # the list holds every flagged session and at most report.max_sessions others
        "sessions_truncated": len(sessions) < sessions_total,
        "findings": findings,
        "notes": build_notes(metrics, thresholds, cpu_hosts, no_gpu) + source_notes(ingest),
        "rules": rule_status,
        "errors": [
            {k: r.get(k) for k in ("error_type", "count", "first_ts", "last_ts", "sample_msg", "sessions", "failed_stage")}
            for r in metrics.get("errors_by_type", [])
        ],
        # list(): a large metric table is a read-only metrics.Rows; the model holds plain lists
        "slowest_sessions": list(metrics.get("slowest_sessions", [])),
        "slow_requests": slow_requests(metrics, _requests_e2e_p50(metrics), thresholds),
        "gpus": list(metrics.get("gpu_per_host", [])),
        "processes": _processes_block(metrics, findings),
        "capacity": capacity_block(metrics, thresholds, leak=leak),
        "series_bucket": params.get("bucket", "hour"),
        "series": _series_block(metrics),
        "session_details": group_session_details(metrics.get("session_requests", [])),
        "thresholds": thresholds,
    }
    if (ingest or {}).get("server_metrics"):
        from dslogs.analyzer.ingest import gauge_rows

        model["server_metrics"] = list(ingest["server_metrics"])
        model["series"]["server_gauges"] = gauge_rows(model["server_metrics"])
    model["notes"] += contradictions(model)
    model["lead"] = lead(model)
    model["checked"] = checked(model)
    return clean(model)


def _requests_e2e_p50(metrics: dict) -> float | None:
    return next((r.get("p50") for r in metrics.get("request_latency_percentiles", []) if r.get("metric") == "e2e_ms"),
                None)


# -- model parts -------------------------------------------------------------------------------


def process_stacks(metrics: dict) -> dict:
    """(host, pid) -> the stack that served the process (gradio, vllm), where the logs say: the
    capacity section's setting and the fix texts speak of it."""
    return {(r.get("host"), r.get("pid")): r.get("stack") for r in metrics.get("service_requests") or []
            if r.get("stack")}


def speak_stack(findings: list[dict], stacks: dict) -> None:
    """Each finding's fix in the words of the stack that served its processes (all of them
    where the finding names none)."""
    for f in findings:
        if not f.get("fix"):
            continue
        hosts = {h for h in f.get("hosts") or [] if h is not None}
        mine = {s for (h, _), s in stacks.items() if not hosts or h in hosts}
        f["fix"] = fix_for_stack(f["fix"], mine)


def _leak_by_process(leak: dict | None) -> dict[tuple, float]:
    """(host, pid) -> the MiB memory_leak's verdicts pin in that process: its flagged sessions'
    and its own process finding's."""
    out: dict[tuple, float] = {}
    if not leak:
        return out
    for v in list(leak["sessions"].values()) + list(leak["processes"]):
        if v.get("flagged", True) and v.get("rise_mb"):
            key = (v.get("host"), v.get("pid"))
            out[key] = out.get(key, 0.0) + v["rise_mb"]
    return out


def capacity_block(metrics: dict, thresholds: dict, grid: dict | None = None, leak: dict | None = None) -> list[dict]:
    """Per process: its in-flight levels, the capacity model's verdicts (rules/capacity_curve) and
    the settings simulated from its fitted service model (model/whatif); ``leak`` (memory_leak's
    verdicts) gives the MiB a leak pinned in the process, which the memory fit's words name."""
    keep = ("host", "pid", "requests", "top_level", "knee", "slo_level", "slo_over", "slo_unmet", "oom_level",
            "mb_per_request",
            "base_mb", "fit_r2", "gpu_total_mb", "recommendation", "needs", "levels")
    sample = metrics.get("service_requests") or []
    leaked = _leak_by_process(leak)
    out = []
    for c in capacity_curves(metrics, thresholds, process_stacks(metrics)):
        row = {k: c.get(k) for k in keep}
        if leaked.get((c.get("host"), c.get("pid"))):
            row["leak_mb"] = leaked[(c.get("host"), c.get("pid"))]
        mine = [r for r in sample if (r.get("host"), r.get("pid")) == (c.get("host"), c.get("pid"))]
        if c.get("levels") and mine:
            row.update(whatif.process_what_if(c, mine, thresholds, grid))
        out.append(row)
    return out


def _one(metrics: dict, name: str) -> dict:
    rows = metrics.get(name) or []
    return rows[0] if rows else {}


def ingest_block(ingest: dict | None) -> dict:
    ingest = dict(ingest or {})
    out = {
        "files": int(ingest.pop("files", 0) or 0),
        "events": int(ingest.pop("events", 0) or 0),
        "bad_lines": int(ingest.pop("bad_lines", 0) or 0),
        "skipped_files": int(ingest.pop("skipped_files", 0) or 0),
        "bad_line_samples": list(ingest.pop("bad_line_samples", []) or []),
        "formats": dict(ingest.pop("formats", {}) or {}),
    }
    if len(out["bad_line_samples"]) < out["bad_lines"]:
        # samples of the bad lines (a few per file), not all of them
        out.update(bad_line_samples_truncated=True, bad_line_samples_total=out["bad_lines"])
    servers = ingest.pop("server_metrics", None)
    if servers:
        out["snapshots"] = sum(int(s.get("snapshots") or 0) for s in servers)
    out.update(ingest)  # anything else ingest reports (bytes, cache state, ...)
    return out


def _pcts(row: dict | None) -> dict:
    row = row or {}
    return {k: row.get(k) for k in ("count", "p50", "p90", "p95", "p99", "max")}


def errors_note(errors: int | None, retried: int | None, what: str = "") -> str | None:
    """What a count of failed requests leaves out: the requests whose error the app caught and
    retried (status ok, the user got an answer). Beside the error events (one per attempt that
    raised) or an OOM finding, a bare failed count reads as a second count of the same errors."""
    if not retried:
        return None
    return f"{errors or 0:,} failed · {retried:,} {what}retried and answered"


def _requests_block(metrics: dict, thresholds: dict) -> dict:
    g = _one(metrics, "goodput")
    lat = {r["metric"]: r for r in metrics.get("request_latency_percentiles", [])}
    ratio = _one(metrics, "prefill_decode_ratio")
    reasoning = _one(metrics, "reasoning_share")
    return {
        "count": g.get("requests", 0),
        "ok": g.get("ok", 0),
        "errors": g.get("errors", 0),
        "retried": g.get("retried", 0),
        "errors_note": errors_note(g.get("errors", 0), g.get("retried", 0)),
        "ttft_ms": _pcts(lat.get("ttft_ms")),
        "tpot_ms": _pcts(lat.get("tpot_ms")),
        "e2e_ms": _pcts(lat.get("e2e_ms")),
        "tokens_per_s": _pcts(lat.get("tokens_per_s")),
        "ttfa_ms": _pcts(lat.get("ttfa_ms")),
        "tpot_is_upper_bound": bool((lat.get("tpot_ms") or {}).get("upper_bound_count")),
        "goodput": g.get("goodput"),
        "slo_missed": g.get("slo_missed"),
        "slo": {"ttft_ms": thresholds["slo"]["ttft_ms"], "tpot_ms": thresholds["slo"]["tpot_ms"]},
        "prefill_decode_ratio_p50": ratio.get("p50"),
        "prefill_decode_ratio_p90": ratio.get("p90"),
        "prefill_share_of_compute": _share(ratio.get("prefill_ms_total"), ratio.get("decode_ms_total")),
        "reasoning_share_p50": reasoning.get("share_p50"),
        "reasoning_share_p90": reasoning.get("share_p90"),
        "reasoning_requests": reasoning.get("reasoning_requests"),
    }


def _share(part, other):
    if part is None or other is None or part + other == 0:
        return None
    return part / (part + other)


SESSION_KEYS = (
    "session_id", "host", "requests", "errors", "first_ts", "last_ts", "duration_min",
    "reserved_slope_mb_per_min", "reserved_r2", "ghost_max_mb", "gpu_wait_pct_p50", "gpu_util_pct_p50",
    "tpot_p50_ms", "ttft_p50_ms", "e2e_p50_ms", "prefill_p50_ms", "max_kv_seq_len", "max_output_len",
    "source_format",
)  # fmt: skip


# Per-session rules judged by columns of one per-session table each (rules.registry.SESSION_SCANS:
# the table and which rows they judge): rule -> the columns their verdict compares with thresholds,
# under the names its finding's details give them. A session's ``judged`` holds those the row does
# not already show under that name (SESSION_KEYS: gpu_wait_pct_p50, tpot_p50_ms...).
JUDGED_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_wait": ("gpu_wait_pct_p50",), "cpu_bound": ("gpu_util_pct_p50", "tpot_p50_ms"),
    "slow_decode": ("tpot_p50_ms",), "beam_search": ("num_beams_max",),
    "high_max_tokens": ("max_new_tokens_max",), "long_output": ("output_len_max",),
}  # fmt: skip


def _judged_by_scans(metrics: dict, thresholds: dict, wanted: set) -> dict[str, dict]:
    """session -> {rule: the columns it judged} for the rules of JUDGED_COLUMNS and the sessions
    in ``wanted``, each table read once; a GPU rule judges no CPU-only host's session."""
    cpu = cpu_only_hosts(metrics)
    by_table: dict[str, list[tuple]] = {}
    for rid, cols in JUDGED_COLUMNS.items():
        table, has, _fires = SESSION_SCANS[rid](thresholds)
        by_table.setdefault(table, []).append((rid, has, cols, RULE_SPECS[rid].gpu))
    out: dict[str, dict] = {}
    for table, scans in by_table.items():
        for r in metrics.get(table, []):
            if r.get("session_id") not in wanted:
                continue
            for rid, has, cols, gpu in scans:
                shown = {k: r.get(k) for k in cols if k not in SESSION_KEYS}
                if shown and has(r) and not (gpu and r.get("host") in cpu):
                    out.setdefault(r["session_id"], {})[rid] = shown
    return out


# a per-minute slope fitted to readings spanning less than this says little: a 17 s session's
# +192 MiB reads as +3,625 MiB/min; such sessions show their rise in MiB only, everywhere
MIN_SLOPE_MINUTES = 1.0


def slope_ok(duration_min: float | None) -> bool:
    """Whether a session's per-minute memory slope is worth showing: its readings span a minute."""
    return duration_min is None or duration_min >= MIN_SLOPE_MINUTES


def _processes_block(metrics: dict, findings: list[dict]) -> list[dict]:
    """Each process's RSS readings, with whether its slope is shown and what the sessions
    rss_growth names kept of it on their own requests (the finding's credited figures, summed
    per process), so the process's rise and the sessions' credits read as one account."""
    kept: dict[tuple, tuple[int, float]] = {}
    for f in findings:
        if f.get("rule") == "rss_growth" and f.get("scope") == "session":
            for v in ((f.get("evidence") or {}).get("details") or {}).get("sessions") or []:
                n, mb = kept.get((v.get("host"), v.get("pid")), (0, 0.0))
                kept[(v.get("host"), v.get("pid"))] = (n + 1, mb + (v.get("rss_kept_mb") or 0.0))
    rows = []
    for r in metrics.get("rss_per_process", []):
        row = dict(r, slope_ok=slope_ok(r.get("minutes")))
        n, mb = kept.get((r.get("host"), r.get("pid")), (0, 0.0))
        if n:
            row.update(sessions_kept=n, sessions_kept_mb=mb)
        rows.append(row)
    return rows


def _sessions_block(metrics: dict, by_session: dict, findings: list[dict], thresholds: dict,
                    leak: dict | None = None, rss=None) -> list[dict]:
    """Every flagged session, then the others in time order, up to report.max_sessions. Each row
    has the readings (``reserved_rise_mb``: last − first reserved snapshot, the slope) and, in
    ``judged``, the figure each per-session memory rule judged of it (memory_leak: what
    attribution credited its requests with, per request and in all; rss_growth: the same of host
    RAM), under the names its finding gives them, flagged or not."""
    leak = memory_leak_verdicts(metrics, thresholds) if leak is None else leak
    rss = rss_credits(metrics, thresholds) if rss is None else rss
    worst = {}
    for f in findings:
        for sid in f["session_ids"]:
            rank = SEVERITY_RANK[f["severity"]]
            worst[sid] = min(rank, worst.get(sid, rank))
    cap = int(thresholds["report"]["max_sessions"])
    # Rows only for the sessions listed: every flagged one and at most `cap` others (tens of
    # thousands of sessions otherwise each got a row only to be cut).
    picked, others = [], 0
    for r in metrics.get("session_summary", []):
        if r["session_id"] in by_session:
            picked.append(r)
        elif others < cap:
            picked.append(r)
            others += 1
    wanted = {r["session_id"] for r in picked}
    # the process's reserved readings over the session (last − first snapshot), beside what
    # memory_leak judged of the session itself
    snaps = {r["session_id"]: r for r in metrics.get("memory_per_session", []) if r["session_id"] in wanted}
    # verdicts given as a plain dict (another engine, a stand-in) say nothing of healthy sessions
    leak_judged = getattr(leak["sessions"], "judgement", lambda sid, snap: None)
    scanned = _judged_by_scans(metrics, thresholds, wanted)
    ooms = {r["session_id"]: oom_count(r) for r in metrics.get("oom_per_session", [])
            if r.get("session_id") in wanted}
    cpu = cpu_only_hosts(metrics)
    rows = []
    for r in picked:
        sid = r["session_id"]
        row = {k: r.get(k) for k in SESSION_KEYS}
        snap = snaps.get(sid)
        has_both = snap is not None and snap.get("reserved_last_mb") is not None
        row["reserved_rise_mb"] = snapshot_rise(snap, 0, frozenset()) if has_both else None
        row["slope_ok"] = slope_ok(row.get("duration_min"))
        # a session's OOMs where none of its requests failed: each was retried (its own retried
        # count is not in the sessions table)
        row["errors_note"] = errors_note(0, ooms.get(sid), "OOM ") if not row.get("errors") else None
        judged = {"memory_leak": leak_judged(sid, snap), "rss_growth": rss_judgement(rss, sid, thresholds),
                  "ghost_memory": ({k: snap.get(k) for k in ("ghost_p50_mb", "ghost_share_p50")}
                                   if snap is not None and snap.get("ghost_p50_mb") is not None
                                   and snap.get("host") not in cpu else None),
                  "oom": {"ooms": ooms[sid]} if sid in ooms else None,
                  **scanned.get(sid, {})}
        row["judged"] = {rule: judged[rule] for rule in RULE_IDS if judged.get(rule) is not None}
        row["findings"] = sorted(set(by_session.get(sid, [])), key=RULE_IDS.index)
        rows.append(row)
    flagged = [r for r in rows if r["findings"]]
    flagged.sort(key=lambda r: (worst.get(r["session_id"], 9), r.get("first_ts") or "", r["session_id"]))
    others = [r for r in rows if not r["findings"]]
    return (flagged + others)[: max(cap, len(flagged))]


# model["series"] key -> (metric table, the columns the model keeps): the aggregated rows charts
# draw, each declared by its query's header (``-- series <key>: <columns>``, metrics.query_series),
# so a charted metric is its .sql file; charts.CHARTS names the series each chart reads.
def _declared_series() -> dict[str, tuple[str, tuple[str, ...]]]:
    series: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name in METRIC_QUERIES:
        if (declared := query_series(name)) is not None:
            key, columns = declared
            if key in series:
                raise ValueError(f"series {key!r} declared by {series[key][0]}.sql and {name}.sql")
            series[key] = (name, columns)
    return series


SERIES: dict[str, tuple[str, tuple[str, ...]]] = _declared_series()
# Series the model builds from what ingest read beside the events (no metric query): the servers'
# Prometheus gauges (ingest.prometheus.gauge_rows), key -> columns.
INGEST_SERIES: dict[str, tuple[str, ...]] = {"server_gauges": ("ts", "server", "gauge", "metric", "value")}
# Metric tables the model reads itself, besides the rules' inputs (rules.RULE_SPECS) and SERIES.
REPORT_INPUTS: tuple[str, ...] = (
    "time_span", "hosts_summary", "stage_percentiles", "request_latency_percentiles", "goodput",
    "prefill_decode_ratio", "reasoning_share", "memory_per_session", "session_summary", "errors_by_type",
    "slowest_sessions", "slowest_requests", "gpu_per_host", "rss_per_process", "future_events", "session_id_coverage",
    "prefill_by_input_class", "short_prompt_e2e", "gpu_util_while_busy", "gpu_util_per_host_requests",
    "oom_per_session", "kv_cache_per_session", "host_devices",
    # the capacity section's what-if: the sample its service model is fitted from
    "service_requests",
    # what the per-session rules judged of each session in the sessions table (JUDGED_COLUMNS)
    "gpu_wait_per_session", "decode_per_session", "generate_params_per_session",
)  # fmt: skip


def _series_block(metrics: dict) -> dict:
    return {key: [{k: r.get(k) for k in columns} for r in metrics.get(name, [])]
            for key, (name, columns) in SERIES.items()}  # fmt: skip


def detail_session_ids(model: dict, thresholds: dict) -> list[str]:
    """Sessions that get a request drill-down: flagged ones first, then the slowest."""
    cap = int(thresholds["report"]["detail_sessions"])
    ids: list[str] = []
    for s in model.get("sessions", []):
        if s.get("findings") and s["session_id"] not in ids:
            ids.append(s["session_id"])
    for s in model.get("slowest_sessions", []):
        if s.get("session_id") is not None and s["session_id"] not in ids:
            ids.append(s["session_id"])
    return ids[:cap]


def group_session_details(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        sid = r.get("session_id")
        if sid is not None:
            out.setdefault(sid, []).append(clean({k: v for k, v in r.items() if k != "session_id"}))
    return out


# -- notes: what the reader must know to trust the numbers ----------------------------------------


def build_notes(metrics: dict, t: dict, cpu_hosts: set | None = None, no_gpu: bool = False) -> list[dict]:
    """Warnings about the input itself, also printed on stderr: a reader must know what the numbers stand on."""
    notes = []
    if cpu_hosts:
        names = ", ".join(sorted(h or "(no host field)" for h in cpu_hosts)[:5])
        notes.append({
            "id": "no_gpu",
            "level": "note",
            "message": (f"no GPU: the model ran on the CPU (device cpu) on {names}; GPU checks, tables and charts "
                        "are not applicable" if no_gpu else
                        f"no GPU on {len(cpu_hosts)} host(s) ({names}; device cpu): GPU rules and checks judge "
                        "the other hosts only"),
        })
    fut = _one(metrics, "future_events")
    if (fut.get("future_events") or 0) > 0:
        notes.append({
            "id": "future_timestamps",
            "message": f"{fut['future_events']:,} of {fut.get('naive_events') or 0:,} events with naive (offset-less) "
                       f"timestamps lie more than {t['report']['future_margin_min']} min in the future (last "
                       f"{fut.get('naive_last_ts')}): the logs were probably written in another time zone; "
                       "read them with --tz <zone>, e.g. --tz Asia/Shanghai",
        })
    cov = _one(metrics, "session_id_coverage")
    total, missing = cov.get("requests") or 0, cov.get("without_session") or 0
    if total and missing / total > t["report"]["unknown_session_share"]:
        notes.append({
            "id": "no_session_ids",
            "message": f"{missing:,} of {total:,} requests carry no usable session id (null, empty or \"unknown\"): "
                       "per-session rules see them as one session or none; pass session_id to log_event "
                       "(Streamlit: st.session_state[\"session_id\"])",
        })
    return notes


def source_notes(ingest: dict | None) -> list[dict]:
    """What the sources themselves tell the reader: token counts an instrumentor estimated."""
    from dslogs.analyzer.ingest import ESTIMATED_TOKENS

    notes = []
    for name, why in ESTIMATED_TOKENS.items():
        n = int(((ingest or {}).get("formats") or {}).get(name) or 0)
        if n:
            notes.append({
                "id": "estimated_tokens",
                "message": f"token counts read from {name} spans ({n:,} events) are estimates: {why}; "
                           "tokens/s and token-length figures built on them are approximate",
            })  # fmt: skip
    return notes


# -- health checklist (article 003 §5.2-5.4 as data checks, registered in analyzer/rules/checklist.py) --


def build_checklist(metrics: dict, t: dict, leak: dict | None = None, formats: dict | None = None,
                    findings: list[dict] = (), rule_status: list[dict] = (), no_gpu: bool = False) -> list[dict]:
    """The checklist rows (rules.evaluate_checks); ``leak``: memory_leak_verdicts when the caller
    has them, ``findings``/``rule_status``: the rules' outcomes a FAIL row names or explains."""
    leak = memory_leak_verdicts(metrics, t) if leak is None else leak
    return evaluate_checks(metrics, t, leak=leak, formats=formats, findings=findings, rule_status=rule_status,
                           no_gpu=no_gpu)  # fmt: skip


# -- JSON ----------------------------------------------------------------------------------------


def report_to_json(model: dict) -> str:
    """The model as JSON text: insertion order kept (stable across runs), no NaN."""
    return clean_json(model) + "\n"


def has_findings_at(model: dict, level: str) -> bool:
    """True when a finding at ``level`` ('warning' or 'critical') or above exists."""
    if level not in ("warning", "critical"):
        raise UsageError(f"unknown --fail-on level {level!r}; valid: warning, critical")
    limit = SEVERITY_RANK[level]
    return any(SEVERITY_RANK.get(f.get("severity"), 99) <= limit for f in model.get("findings", []))


__all__ = [
    "SCHEMA", "build_report_from_metrics", "with_details", "capacity_model",
    "build_checklist", "build_notes", "report_to_json", "load_report_json", "has_findings_at",
]
