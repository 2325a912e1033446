"""``dslogs analyze --format md``: a readable Markdown summary of a report model.

Sections: header (window, ingest), the ranked lines and what was checked (the model's lead and
checked, as the HTML page opens), health checklist, findings by severity (with the seed's fix),
rule status, stage latency table, request latency, top sessions. Everything comes from the
model; log-derived strings are escaped for Markdown tables (``|``, newlines, backticks).
"""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core import textsafe
from dslogs.analyzer.core.time import span_between
from dslogs.analyzer.model.lead import LEAD_SLO_SHARE, severity_counts
from dslogs.analyzer.render.deploys import baseline_text
from dslogs.analyzer.render.glossary import counted_of, oom_line
from dslogs.analyzer.rules.registry import SEVERITIES, unit_for

_STATUS_MARK = {"PASS": "PASS", "FAIL": "**FAIL**", "NO DATA": "NO DATA", "N/A (source)": "N/A (source)",
                "N/A": "not applicable (no GPU)"}


def _text(text) -> str:
    """dslogs' own text (labels, messages, fixes) on one line, safe in a table cell."""
    if text is None:
        return "—"
    # Our text may quote the logs' words (a checklist note's <think>): no tag, no control char.
    s = textsafe.visible(str(text)).replace("&", "&amp;").replace("<", "&lt;")
    return " ".join(s.replace("|", "\\|").split())


def _esc(text) -> str:
    """A log-derived value (session id, host, error message): no Markdown or HTML survives."""
    if text is None:
        return "—"
    # Control characters as escapes, then Markdown/HTML specials (dslogs.analyzer.core.textsafe).
    return " ".join(textsafe.markdown(str(text)).split())


def _num(value, digits: int = 1) -> str:
    if isinstance(value, (str, bool)):
        return _esc(value)
    # Whole from 100 only: a Markdown table keeps "2.0" beside "2.5" in a column.
    return fmt.number(value, digits, whole_from=100)


EVIDENCE_SESSIONS = 3  # sessions whose requests a memory finding lists
FLAGGED_SESSIONS = 20  # rows of the flagged-sessions table


def _kept_line(e: dict) -> str:
    """A session's requests in a memory finding's evidence, and what they add up to."""
    line = ", ".join(f"turn {_num(r.get('turn_index'))} {_num(r.get('kept_mb'))} MiB"
                     + (f" credited {_num(r['credited_mb'])}" if r.get("credited_mb") is not None
                        else " not counted" if "credited_mb" in r else "")
                     + (f" ({_num(r['inflight'])} in flight)" if r.get("inflight") is not None else "")
                     for r in e.get("requests") or [])
    if e.get("verdict_mb") is not None:
        line += f"; in all {_num(e.get('credited_mb'))} MiB"
        line += "".join(f" + {_num(x.get('credited_mb'))} MiB ({_text(x.get('why'))})" for x in e.get("left_out") or [])
        line += f" = the verdict's {_num(e['verdict_mb'])} MiB"
    return line


def _judged(s: dict, rule: str) -> str:
    """What a per-session memory rule judged of a session (sessions[].judged)."""
    j = (s.get("judged") or {}).get(rule)
    if not j:
        return "—"
    v = j.get("rss_kept_mb") if rule == "rss_growth" else j.get("rise_mb")
    if v is not None and v < 0:  # the glossary's "below zero" says why
        return _judged_figure(s, j, rule) + " (released more than kept: not a leak)"
    return _judged_figure(s, j, rule)


def _judged_figure(s: dict, j: dict, rule: str) -> str:
    if rule == "rss_growth":
        return f"{_num(j.get('rss_kept_mb'))} ({_num(j.get('rss_kept_per_request_mb'))} × {_num(j.get('requests_counted'))}{counted_of(s, j)})"
    if j.get("basis") == "request deltas":
        return f"{_num(j.get('rise_mb'))} ({_num(j.get('leak_per_request_mb'))} × {_num(j.get('requests_counted'))}{counted_of(s, j)})"
    return f"{_num(j.get('rise_mb'))} (reserved over turns)"


def _count(n, word: str) -> str:
    """`1 host`, `3 hosts`; a missing count reads as 0."""
    n = n or 0
    return f"{_num(n)} {word}" + ("" if n == 1 else "s")


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def capacity_markdown(capacity: list[dict]) -> list[str]:
    """The capacity section (000 §1.3): per process, the recommendation and its levels."""
    out = ["## Capacity (requests in flight, 000 §1.3)", ""]
    if not capacity:
        return out + ["No request with a start and an end: no in-flight levels.", ""]
    for c in capacity:
        name = _esc(c.get("host") or "unnamed host") + (f"/{c.get('pid')}" if c.get("pid") is not None else "")
        out += [f"### {name}", ""]
        rec = c.get("recommendation")
        out += [f"**{_text(rec['text'])}**" if rec else f"No recommendation: {_text(c.get('needs') or 'no limit found')}.", ""]
        seen = lambda v: _num(v) if v is not None else "not seen"  # noqa: E731
        slo = "missed at every level" if c.get("slo_unmet") else (
            f"crossed at {_num(c['slo_level'])}" if c.get("slo_level") is not None else "met at every level")
        out += [f"knee {seen(c.get('knee'))}; SLO {slo}; OOM likely from: {_text(oom_line(c))}.", ""]
        rows = [[_num(lv.get("level")) + ("*" if lv.get("sparse") else ""), _num(lv.get("requests")),
                 _num(lv.get("time_s")), _num(lv.get("ttft_p95_ms")), _num(lv.get("tpot_p50_ms")),
                 _num(lv.get("tpot_p95_ms")), _num(lv.get("e2e_p95_ms")), _num(lv.get("queue_p95_ms")),
                 _num(lv.get("tokens_per_s")), _num(lv.get("reserved_peak_mb")), _num(lv.get("gpu_util_pct")),
                 _num(lv.get("oom_requests"))] for lv in c.get("levels") or []]
        out += _table(["level", "requests", "time s", "TTFT p95", "TPOT p50", "TPOT p95", "e2e p95", "queue p95",
                       "tokens/s", "peak reserved MiB", "GPU util %", "OOMs"], rows) + [""]
        if any(lv.get("sparse") for lv in c.get("levels") or []):
            out += ["\\* sparse level: too few requests to judge (left out of the knee and the SLO check).", ""]
        out += what_if_markdown(c)
    return out


def _share(v) -> str:
    return "—" if v is None else f"{v * 100:.0f} %"


def what_if_markdown(c: dict) -> list[str]:
    """A process's simulated settings (model/whatif): capacity in users, the setting, the cells."""
    svc = c.get("service") or {}
    if not svc:
        return []
    out = ["#### What if: other limits and user counts (simulated)", ""]
    if svc.get("needs"):
        return out + [f"No prediction: {_text(svc['needs'])}.", ""]
    if c.get("users_text"):
        out += [f"**Capacity in users: {_text(c['users_text'])}.**", ""]
    if c.get("setting_code"):
        out += ["```python", str(c["setting_code"]), "```", ""]
    rows = [[_num(w.get("limit")), _num(w.get("users")), _num(w.get("e2e_p50_ms")), _num(w.get("e2e_p95_ms")),
             _num(w.get("ttft_p95_ms")), _num(w.get("queue_p95_ms")), _num(w.get("tokens_per_s")),
             _num(w.get("requests_per_s")), _share(w.get("slo_share")),
             _share(w.get("oom_risk")) if w.get("oom_risk") is not None else "no limit known"]
            for w in c.get("what_if") or []]
    out += _table(["limit", "users", "e2e p50 ms", "e2e p95 ms", "TTFT p95 ms", "queue p95 ms", "tokens/s",
                   "requests/s", "within SLO", "OOM risk"], rows) + [""]
    most = " · ".join(f"{m['limit']} → {m['users']}" for m in c.get("max_users") or [])
    out += [f"Most users within the SLO per limit: {most}. Fitted from {_num(svc.get('requests'))} requests over "
            f"in-flight levels {', '.join(str(x) for x in svc.get('levels_fitted') or [])}. "
            f"Assumes {_text(svc.get('assumes'))}."]
    out += [f"Not covered by the logs: {_text(n)}." for n in c.get("what_if_notes") or []]
    return out + [""]


def render_capacity_markdown(model: dict) -> str:
    """``dslogs capacity --format md``."""
    w = model.get("window") or {}
    out = ["# dslogs capacity", "", f"Logs from {_text(w.get('first_event'))} to {_text(w.get('last_event'))}.", ""]
    for note in model.get("notes") or []:
        out += [f"> **Note:** {_text(fmt.note_message(note))}", ""]
    for f in model.get("findings") or []:
        out += [f"- **{_text(f.get('rule'))}** ({_text(f.get('severity'))}): {_esc(f.get('message'))}",
                f"  - fix: {_text(f.get('fix'))}"]
    if model.get("findings"):
        out.append("")
    out += capacity_markdown(model.get("capacity") or [])
    return "\n".join(out).rstrip() + "\n"


def _lead(model: dict) -> list[str]:
    """The ranked lines and what was checked and found not to be the problem, as the HTML report's
    first screen shows them: the same model fields, in the same order."""
    lines, checked = model.get("lead") or [], model.get("checked") or []
    if not (lines or checked):
        return []
    out = ["## What is wrong, for whom, what to change", ""]
    if lines:
        out += [f"Ranked by user impact: requests failed, then requests over the SLO (from {fmt.share(LEAD_SLO_SHARE)} "
                "of requests), then severity, then the share of requests touched.", ""]
    for x in lines:
        out.append(f"{_num(x.get('rank'))}. **{_text(x.get('severity'))}** `{_text(x.get('rule'))}`: "
                   f"{_esc(x.get('problem'))}")
        impact = f"   - impact: {_text(x.get('impact'))}"
        if x.get("session_ids"):
            impact += "; sessions " + ", ".join(_esc(sid) for sid in x["session_ids"])
            if x.get("more_sessions"):
                impact += f" +{_num(x['more_sessions'])} more"
        out.append(impact)
        out.append(f"   - figure: {_text(x.get('figure'))}")
        if x.get("change"):
            out.append(f"   - change: {_text(x.get('change'))}")
    if lines:
        out.append("")
    if checked:
        out += ["**Checked, not the problem:**", ""]
        out += [f"- {_esc(c.get('message'))}" for c in checked] + [""]
    return out


def render_markdown(model: dict) -> str:
    w = model.get("window") or {}
    ing = model.get("ingest") or {}
    req = model.get("requests") or {}
    out = ["# dslogs diagnosis report", ""]
    data = span_between(w.get("first_event"), w.get("last_event"))
    span = f", {data} of data" if data else ""
    ran = span_between(w.get("first_request"), w.get("last_request"))
    traffic = (f" Requests ran from {_text(w['first_request'])} to {_text(w['last_request'])} ({ran}"
               + (f" of the {data}" if data and data != ran else "") + ")." if ran else "")
    out.append(
        f"Logs from {_text(w.get('first_event'))} to {_text(w.get('last_event'))}{span}"
        f" (window {_text(w.get('since') or 'start')} – {_text(w.get('until') or 'end')}): "
        f"{_count(ing.get('files'), 'file')}, {_count(ing.get('events'), 'event')}, "
        f"{_count(ing.get('bad_lines'), 'bad line')}, {_count(req.get('count'), 'request')} "
        f"({_text(req['errors_note']) if req.get('errors_note') else _count(req.get('errors'), 'error')}) in "
        f"{_count(model.get('sessions_total', len(model.get('sessions') or [])), 'session')} "
        f"on {_count(len(model.get('hosts') or []), 'host')}.{traffic}"
    )
    out.append("")

    findings = model.get("findings") or []
    out += _lead(model)
    counts = severity_counts(model)
    extra = [x for x in model.get("lead") or [] if x.get("finding") is None]
    line = "**Ranked lines:** " + ", ".join(f"{counts[s]} {s}" for s in SEVERITIES)
    if extra:
        said = ", ".join(f"the {_text(x.get('severity'))} {_text(x.get('rule'))} line" for x in extra)
        line += f" (of them, {said} {'is' if len(extra) == 1 else 'are'} from the request timings, not a rule's finding)"
    out += [line, ""]
    for n in model.get("notes") or []:
        out.append(f"> **Note:** {_esc(fmt.note_message(n))}")
        out.append("")

    out += ["## Health checklist (article 003 §5.2–5.4)", ""]
    rows = []
    for c in model.get("checklist") or []:
        rows.append([
            _text(c.get("label")), _STATUS_MARK.get(c.get("status"), _text(c.get("status"))),
            f"{_num(c.get('value'))} {_text(c.get('unit'))}" if c.get("value") is not None else "—",
            _text(c.get("source")),
        ])
    out += _table(["check", "status", "measured", "source"], rows, "llrl") + [""]
    notes = [c for c in model.get("checklist") or [] if c.get("note") or c.get("findings") or c.get("no_finding")]
    for c in notes:
        said = [_text(c["note"])] if c.get("note") else []
        if c.get("findings"):
            said.append("finding: " + ", ".join(f"`{_text(r)}`" for r in c["findings"]) + " (see Findings)")
        elif c.get("no_finding"):
            said.append("no finding: " + _text(c["no_finding"]))
        out.append(f"- {_text(c['label'])}: " + "; ".join(said))
    if notes:
        out.append("")

    out += ["## Findings", ""]
    if not findings:
        out += ["No rule fired.", ""]
    for sev in SEVERITIES:
        group = [f for f in findings if f.get("severity") == sev]
        if not group:
            continue
        out += [f"### {sev.capitalize()} ({len(group)})", ""]
        for f in group:
            where = ""
            if f.get("session_ids"):
                shown = ", ".join(_esc(s) for s in f["session_ids"][:5])
                more = (f.get("session_count") or len(f["session_ids"])) - min(5, len(f["session_ids"]))
                where = f" — sessions {shown}" + (f" and {more} more" if more > 0 else "")
            elif f.get("hosts"):
                where = " — " + ", ".join(_esc(h) for h in f["hosts"])
            out.append(f"- **{_text(f.get('rule'))}** ({_text(f.get('scope'))}): {_esc(f.get('message'))}{where}")
            out.append(
                f"  - value {_num(f.get('value'))} {_text(unit_for(f.get('value'), f.get('unit')))}, "
                f"threshold {_num(f.get('threshold'))} {_text(unit_for(f.get('threshold'), f.get('unit')))}"
                f" (source {_text(f.get('source'))})"
            )
            ev = f.get("evidence") or {}
            if ev.get("factors"):
                out.append("  - causes in the affected requests: " + "; ".join(
                    f"{_text(x.get('factor'))} {'**present**' if x.get('present') else 'absent'} ({_text(x.get('seen'))})"
                    for x in ev["factors"]))
            shown = (ev.get("requests") or [])[:EVIDENCE_SESSIONS]
            for e in shown:
                out.append(f"  - kept by {_esc(e.get('session_id'))} ({_text(e.get('basis'))}): {_kept_line(e)}")
            total = f.get("session_count") or len(f.get("session_ids") or [])
            if shown and total > len(shown):
                out.append(f"  - requests of {len(shown)} of {_count(total, 'session')} shown: the JSON report lists "
                           "the others the drill-down holds")
            if ev.get("doc"):
                out.append(f"  - how sessions are told apart: {_text(ev['doc'])}")
            out.append(f"  - fix: {_text(f.get('fix'))}")
        out.append("")

    rules = model.get("rules") or []
    if rules:
        out += ["## Rules", ""]
        by_status: dict[str, list[str]] = {}
        for r in rules:
            by_status.setdefault(r.get("status"), []).append(r.get("rule"))
        for status in ("fired", "pass", "no_data"):
            if by_status.get(status):
                out.append(f"- {status}: " + ", ".join(_text(r) for r in by_status[status]))
        out.append("")

    out += ["## Stage latency (ms)", ""]
    rows = [
        [_esc(s.get("stage")), _num(s.get("count")), _num(s.get("p50_ms")), _num(s.get("p90_ms")),
         _num(s.get("p95_ms")), _num(s.get("p99_ms")), _num(s.get("max_ms"))]
        for s in model.get("stages") or []
    ]
    out += (_table(["stage", "count", "p50", "p90", "p95", "p99", "max"], rows) if rows else ["No timed stages."]) + [""]

    out += ["## Requests", ""]
    rows = []
    for key, label in (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms/token)"), ("e2e_ms", "end-to-end (ms)"),
                       ("tokens_per_s", "tokens/s"), ("ttfa_ms", "TTFA (ms)")):
        p = req.get(key) or {}
        if p.get("count"):
            rows.append([label, _num(p.get("count")), _num(p.get("p50")), _num(p.get("p90")), _num(p.get("p95")),
                         _num(p.get("p99")), _num(p.get("max"))])
    out += (_table(["metric", "count", "p50", "p90", "p95", "p99", "max"], rows) if rows else ["No request metrics."])
    out.append("")
    slo = req.get("slo") or {}
    goodput = req.get("goodput")
    extra = [
        f"goodput {_num(100 * goodput)} % (ttft ≤ {_num(slo.get('ttft_ms'))} ms, tpot ≤ {_num(slo.get('tpot_ms'))} ms)"
        if goodput is not None else "goodput: no data",
    ]
    if req.get("prefill_decode_ratio_p50") is not None:
        extra.append(f"prefill/decode ratio p50 {_num(req['prefill_decode_ratio_p50'], 3)}")
    if req.get("reasoning_share_p50") is not None:
        extra.append(f"reasoning share p50 {_num(100 * req['reasoning_share_p50'])} %")
    if req.get("tpot_is_upper_bound"):
        extra.append("TPOT from legacy logs is an upper bound (inference_ms / output_len)")
    out += ["; ".join(extra) + ".", ""]

    out += capacity_markdown(model.get("capacity") or [])
    out += _deploys(model.get("deploys") or [])

    flagged = [s for s in model.get("sessions") or [] if s.get("findings")]
    sessions = flagged[:FLAGGED_SESSIONS]
    if sessions:
        out += ["## Flagged sessions", ""]
        if len(flagged) > len(sessions):
            out += [f"{len(sessions)} of {len(flagged)} flagged sessions; the JSON report lists them all.", ""]
        rows = [
            [_esc(s.get('session_id')), _esc(s.get("host")), _num(s.get("requests")),
             _num(s.get("tpot_p50_ms")), _num(s.get("e2e_p50_ms")),
             _num(s.get("reserved_slope_mb_per_min")) if s.get("slope_ok", True) else "< 1 min",
             _num(s.get("reserved_rise_mb")), _judged(s, "memory_leak"), _judged(s, "rss_growth"),
             _text(", ".join(s.get("findings") or []))]
            for s in sessions
        ]
        out += _table(["session", "host", "requests", "tpot p50", "e2e p50", "reserved MiB/min",
                       "reserved rise MiB (readings)", "memory_leak judged MiB", "rss_growth judged MiB", "findings"],
                      rows, "llrrrrrrrl") + [""]
        out += ["Readings are the process's; judged is what the rule compared with its threshold: the MiB credited "
                "to the session's own requests (per request × requests), or reserved over its turns.", ""]
    slow = (model.get("slowest_sessions") or [])[:10]
    if slow:
        out += ["## Slowest sessions", ""]
        rows = [
            [_esc(s.get('session_id')), _esc(s.get("host")), _num(s.get("requests")), _num(s.get("e2e_p50_ms")),
             _num(s.get("e2e_max_ms")), _num(s.get("ttft_p50_ms")), _num(s.get("tpot_p50_ms"))]
            for s in slow
        ]
        out += _table(["session", "host", "requests", "e2e p50", "e2e max", "ttft p50", "tpot p50"], rows, "llrrrrr") + [""]
    errors = model.get("errors") or []
    if errors:
        out += ["## Errors", ""]
        rows = [[_esc(e.get("error_type")), _num(e.get("count")), _num(e.get("sessions")), _text(e.get("first_ts")),
                 _text(e.get("last_ts")), _esc((e.get("sample_msg") or "")[:120])] for e in errors]
        out += _table(["type", "events", "sessions", "first", "last", "sample"], rows, "lrrlll") + [""]
    out += _server_metrics(model.get("server_metrics") or [])
    from dslogs.analyzer.render.glossary import GLOSSARY

    out += ["## Glossary", ""] + [f"- **{_text(w)}**: {_text(m)}" for w, m in GLOSSARY.items()] + [""]
    return "\n".join(out).rstrip() + "\n"


def _deploys(deploys: list[dict]) -> list[str]:
    """One line per deploy the timelines mark, with its verdict against the deploy before."""
    if not deploys:
        return []
    out = ["## Deploys", ""]
    for d in deploys:
        label = f" ({_esc(d['label'])})" if d.get("label") else ""
        why = "; ".join(_text(r) for r in [*(d.get("reasons") or [])[:3], baseline_text(d)] if r)
        out.append(f"- {_esc(d['id'])}{label}, first event {_text(d.get('first_event') or '—')}: "
                   f"{'first deploy' if d['verdict'] == 'first' else d['verdict']}{f' ({why})' if why else ''}")
    return out + ["", "Each deploy against the one before it, as `dslogs deploys` judges it.", ""]


def _bucket(b) -> str:
    if not b:
        return "—"
    return f"{_num(b[0], 3)}–{'+Inf' if b[1] is None else _num(b[1], 3)}"


def _server_metrics(servers: list[dict]) -> list[str]:
    """The servers' Prometheus snapshots: windowed histogram percentiles (with the bucket each
    lies in), counter rates, gauges."""
    if not servers:
        return []
    out = ["## Server metrics (Prometheus snapshots)", ""]
    for sv in servers:
        line = (f"**{_esc(sv.get('server'))}**: {_count(sv.get('snapshots'), 'snapshot')}, {_text(sv.get('first'))} → "
                f"{_text(sv.get('last'))} ({_num(sv.get('seconds'))} s)")  # fmt: skip
        if sv.get("restarts"):
            line += f"; {_count(sv['restarts'], 'restart')} (counters count from zero after it)"
        if sv.get("note"):
            line += f"; {_text(sv['note'])}"
        out += [line, ""]
        if sv.get("histograms"):
            out += ["Percentiles from the buckets' counts in the window; each lies in the bucket shown.", ""]
            rows = [[_esc(h.get("metric")), _num(h.get("count")), _num(h.get("mean"), 3),
                     *[x for q in ("p50", "p90", "p99")
                       for x in (_num(h.get(q), 3), "since start" if h.get("quantiles") else _bucket(h.get(f"{q}_bucket")))]]
                    for h in sv["histograms"]]  # fmt: skip
            out += _table(["histogram", "count", "mean", "p50", "p50 bucket", "p90", "p90 bucket", "p99", "p99 bucket"],
                          rows, "lrrrlrlrl") + [""]  # fmt: skip
        if sv.get("counters"):
            rows = [[_esc(c.get("metric")), _esc(c.get("labels") or ""), _num(c.get("increase")), _num(c.get("per_s"), 3)]
                    for c in sv["counters"]]  # fmt: skip
            out += _table(["counter", "labels", "increase", "per s"], rows, "llrr") + [""]
        if sv.get("gauges"):
            rows = [[_esc(g.get("metric")), _esc(g.get("labels") or ""), _num(g.get("last"), 3), _num(g.get("max"), 3)]
                    for g in sv["gauges"]]  # fmt: skip
            out += _table(["gauge", "labels", "last", "max"], rows, "llrr") + [""]
    return out
