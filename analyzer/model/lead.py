"""What an on-call reader needs first: the problems ranked by their users, and why the slowest
requests were slow.

``slow_requests``: each of the slowest requests (``queries/slowest_requests.sql``) with its time
split into queue wait, tokenize, prefill, decode and the rest, what it shared with other requests
in flight, and the reasons read from those figures (``why``).

``lead``: one line per problem, ranked by user impact: the requests and sessions it touched (out
of the window's), failed or over the SLO, since when and for how long, the one figure that shows
it and the change to make (the first sentence of its finding's fix). Every line links to the
finding (or section) that holds its evidence.
"""

from __future__ import annotations

import re
from datetime import datetime

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core.severity import SEVERITIES
from dslogs.analyzer.core.time import human_duration, parse_iso
from dslogs.analyzer.rules.registry import RULE_SPECS, SEVERITY_RANK

# a part of a request's time names a reason from this share of its end-to-end time
MAIN_SHARE = 0.25
# a request is called slow beside the median from this many times it
SLOW_TIMES = 2.0
LEAD_SESSIONS = 4  # session ids a lead line names before "+N more"
SLOW_SHOWN = 10  # the slowest requests the page lists (the model keeps more)
# requests over the SLO rank a line from this share of the window's requests: one slow request
# in a hundred does not go before a critical finding
LEAD_SLO_SHARE = 0.05

PARTS = ("queue_ms", "tokenize_ms", "prefill_ms", "decode_ms", "other_ms")
PART_LABEL = {"queue_ms": "queue wait", "tokenize_ms": "tokenize", "prefill_ms": "prefill", "decode_ms": "decode",
              "other_ms": "rest (handler time outside the measured stages)"}


def _ms(v) -> str:
    if v is None:
        return fmt.MISSING
    if v < 1000:
        return f"{fmt.prose(v)} ms"
    return f"{fmt.prose(v / 1000.0, 2 if v < 10_000 else 1)} s" if v < 60_000 else fmt.duration(v / 1000.0)


def _rest_dominates(rest_ms: float, share: str, format_ms: float | None) -> str:
    """The why of a request whose largest part is none of its measured stages: neither the model
    nor the queue, but the handler's own code between them."""
    text = (f"mostly rest: {_ms(rest_ms)} ({share}) of handler time outside the measured stages "
            f"(queue wait, tokenize, prefill, decode)")
    if format_ms is not None:
        text += f", of which format took {_ms(format_ms)}"
    return text + ": the app's own code between the stages, not the model"


def explain_request(r: dict, median_ms: float | None, beams_threshold: float) -> dict:
    """One slow request with its parts and the reasons its figures give."""
    e2e = r.get("e2e_ms") or 0.0
    decode = r.get("decode_ms") if r.get("decode_ms") is not None else r.get("inference_ms")
    parts = {"queue_ms": r.get("queue_ms"), "tokenize_ms": r.get("tokenize_ms"), "prefill_ms": r.get("prefill_ms"),
             "decode_ms": decode}
    known = sum(v for v in parts.values() if v is not None)
    parts["other_ms"] = max(e2e - known, 0.0) if e2e else None
    why: list[str] = []
    if r.get("status") == "error":
        why.append(f"failed ({r.get('error_type') or 'error'})")
    for key in sorted(PARTS, key=lambda k: -(parts.get(k) or 0)):
        v = parts.get(key)
        if not e2e or v is None or v < MAIN_SHARE * e2e:
            continue
        share = fmt.share(v / e2e)
        if key == "decode_ms":
            out = r.get("output_len")
            text = f"decode {_ms(v)} ({share})"
            if out:
                text += f" for {fmt.prose(out)} tokens"
                if r.get("tpot_ms") is not None:
                    text += f", {fmt.prose(r['tpot_ms'])} ms per token"
            if (r.get("num_beams") or 1) > beams_threshold:
                text += f", with num_beams={fmt.prose(r['num_beams'])} (each step runs every beam)"
            why.append(text)
        elif key == "queue_ms":
            why.append(f"waited {_ms(v)} ({share}) in the queue before its handler ran")
        elif key == "prefill_ms":
            text = f"prefill {_ms(v)} ({share})"
            if r.get("input_len"):
                text += f" for {fmt.prose(r['input_len'])} input tokens"
            why.append(text)
        elif key == "other_ms" and v >= max(p or 0.0 for p in parts.values()):
            why.append(_rest_dominates(v, share, r.get("format_ms")))
        else:
            why.append(f"{PART_LABEL[key]} {_ms(v)} ({share})")
    if (r.get("num_beams") or 1) > beams_threshold and not any("num_beams" in w for w in why):
        why.append(f"num_beams={fmt.prose(r['num_beams'])}")
    shared = r.get("shared_ms") or 0.0
    if e2e and shared >= MAIN_SHARE * e2e:
        why.append(f"ran alongside {fmt.prose(r.get('others_avg'), 1)} other requests on average (queued or "
                   f"running; at least one for {fmt.share(shared / e2e)} of its time)")
    if not why:
        why.append("no single part stands out")
    out = {k: r.get(k) for k in ("request_id", "session_id", "host", "pid", "turn_index", "start_ts", "e2e_ms",
                                 "ttft_ms", "tpot_ms", "input_len", "output_len", "max_new_tokens", "num_beams",
                                 "status", "error_type", "shared_ms", "others_avg")}
    out.update(parts)
    if median_ms:
        out["times_median"] = e2e / median_ms
    out["why"] = why
    return out


def slow_requests(metrics: dict, median_ms: float | None, thresholds: dict) -> list[dict]:
    """The slowest requests, each explained (``explain_request``)."""
    beams = thresholds["beam_search"]["num_beams"]
    return [explain_request(r, median_ms, beams) for r in metrics.get("slowest_requests", [])]


# -- the lead ----------------------------------------------------------------------------------


def _first_sentence(text: str | None) -> str | None:
    if not text:
        return None
    cut = text.find(". ")
    return text if cut < 0 else text[: cut + 1]


def _over_slo(row: dict, slo: dict) -> bool:
    ttft, tpot = row.get("ttft_ms"), row.get("tpot_ms")
    return bool((ttft is not None and slo.get("ttft_ms") is not None and ttft > slo["ttft_ms"])
                or (tpot is not None and slo.get("tpot_ms") is not None and tpot > slo["tpot_ms"]))


# report sections of rules that judge no request's time: memory held, the collector, the logs
_TIMELESS = frozenset({"memory", "collector", "header"})


def _judges_time(rule: str) -> bool:
    spec = RULE_SPECS.get(rule)
    return spec is None or not set(spec.sections) <= _TIMELESS


def _span(first: str | None, last: str | None) -> tuple[str | None, str | None, float | None]:
    if not first or not last:
        return first, last, None
    try:
        a, b = parse_iso(first), parse_iso(last)
    except ValueError:
        return first, last, None
    return first, last, max((b - a).total_seconds(), 0.0) / 60.0


def _figure(f: dict) -> str:
    """The one figure that shows a finding: its value against its threshold."""
    if f.get("value") is None:
        return f.get("message") or ""
    unit = f" {f['unit']}" if f.get("unit") else ""
    text = f"{fmt.prose(f['value'])}{unit}"
    # a threshold of 0 or 1 (any OOM, any beam) says nothing the value does not
    if f.get("threshold") is not None and f["threshold"] not in (0, 1):
        # a value equal to its threshold fired, so the rule counts reaching it: say so
        op = "≥ " if f["value"] == f["threshold"] else ""
        text += f" (threshold {op}{fmt.prose(f['threshold'])}{unit}{', reaching it counts' if op else ''})"
    return text


def lead(model: dict) -> list[dict]:
    """The problems ranked by user impact: requests failed first, then over the SLO, then the
    requests and sessions touched, then severity."""
    total_requests = (model.get("requests") or {}).get("count") or 0
    total_sessions = model.get("sessions_total") or 0
    slo = (model.get("requests") or {}).get("slo") or {}
    sessions = {s["session_id"]: s for s in model.get("sessions") or []}
    details = model.get("session_details") or {}
    hosts = {h.get("host"): h for h in model.get("hosts") or []}
    lines = []
    for i, f in enumerate(model.get("findings") or [], 1):
        sids = list(f.get("session_ids") or [])
        failed = over = failed_sessions = retried = 0
        failed_ids: frozenset = frozenset()
        retried_ids: frozenset = frozenset()
        if sids:
            rows = [sessions[s] for s in sids if s in sessions]
            reqs = sum(r.get("requests") or 0 for r in rows)
            failed = sum(r.get("errors") or 0 for r in rows)
            failed_sessions = sum(1 for r in rows if r.get("errors"))
            # the failed requests themselves (a session's count where its requests are not listed),
            # so two lines over the same failures say so rather than add up
            failed_ids = frozenset(
                (s, r.get("request_id")) for s in sids for r in details.get(s, []) if r.get("status") == "error"
            ) or frozenset((r["session_id"], "errors") for r in rows if r.get("errors"))
            # answered after an error the app caught and retried: beside the failed count, so the
            # error events (one per attempt) and the failed requests read as two counts
            retried_ids = frozenset((s, r.get("request_id")) for s in sids for r in details.get(s, [])
                                    if r.get("status") != "error" and r.get("error_type"))
            retried = len(retried_ids)
            # a request over the SLO is the finding's only where its rule can slow one: host or
            # GPU memory held does not make its sessions' requests wait in the queue
            if _judges_time(f["rule"]):
                for s in sids:
                    over += sum(1 for r in details.get(s, []) if r.get("status") != "error" and _over_slo(r, slo))
            first = min((r["first_ts"] for r in rows if r.get("first_ts")), default=None)
            last = max((r["last_ts"] for r in rows if r.get("last_ts")), default=None)
            n_sessions = len(sids)
        else:
            # a host or process finding touches every request its hosts served
            hs = [hosts[h] for h in f.get("hosts") or [] if h in hosts] or list(hosts.values())
            reqs = sum(h.get("requests") or 0 for h in hs)
            n_sessions = sum(h.get("sessions") or 0 for h in hs)
            first = min((h["first_ts"] for h in hs if h.get("first_ts")), default=None)
            last = max((h["last_ts"] for h in hs if h.get("last_ts")), default=None)
        since, until, minutes = _span(first, last)
        lines.append({
            "rule": f["rule"], "severity": f["severity"], "scope": f.get("scope"), "finding": i,
            "problem": f.get("message"),
            "requests": reqs, "request_share": reqs / total_requests if total_requests else None,
            "failed_requests": failed, "failed_sessions": failed_sessions, "retried_requests": retried,
            "slo_missed_requests": over,
            "_failed_ids": failed_ids, "_retried_ids": retried_ids,
            "sessions": n_sessions, "session_share": n_sessions / total_sessions if total_sessions else None,
            "session_ids": sids[:LEAD_SESSIONS], "more_sessions": max(len(sids) - LEAD_SESSIONS, 0),
            "since": since, "until": until, "minutes": minutes,
            "figure": _figure(f), "change": _first_sentence(f.get("fix")),
        })
    slow = _slow_line(model, total_requests, total_sessions)
    if slow is not None:
        lines.append(slow)
    lines.sort(key=lambda x: (-(x["failed_requests"] or 0), -_ranked_over(x, total_requests),
                              SEVERITY_RANK.get(x["severity"], 9), -(x["request_share"] or 0), x["finding"] or 0))
    for rank, x in enumerate(lines, 1):
        x["rank"] = rank
        mine = x.pop("_failed_ids", frozenset())
        same = next((y for y in lines[: rank - 1] if mine and mine <= y.get("_ids", frozenset())), None)
        x["_ids"] = mine
        # the retried requests an earlier line already counts: named, not added ("4 more")
        again = x.pop("_retried_ids", frozenset())
        x["_retried_same"] = next((y["rank"] for y in lines[: rank - 1]
                                   if again and again <= y.get("_retried", frozenset())), None)
        x["_retried"] = again
        x["same_failures_as"] = same["rank"] if same else None
        x["impact"] = impact_text(x, total_requests, total_sessions, same)
    for x in lines:
        x.pop("_ids", None)
        x.pop("_retried", None)
        x.pop("_retried_same", None)
        x.pop("_listed", None)
    return lines


def severity_counts(model: dict) -> dict[str, int]:
    """The severity badges' counts: the ranked lines' (one per finding, and the slow line), so the
    badges and the lead count the same lines. A model without a lead (saved before it had one)
    counts its findings."""
    lines = model.get("lead")
    if lines is None:
        lines = model.get("findings") or []
    return {s: sum(1 for x in lines if x.get("severity") == s) for s in SEVERITIES}


def _slow_line(model: dict, total_requests: int, total_sessions: int) -> dict | None:
    """A line for the requests over the SLO, when some are, explained by the slowest of them."""
    req = model.get("requests") or {}
    missed = req.get("slo_missed") or 0
    slow = model.get("slow_requests") or []
    if not total_requests or missed <= 0 or not slow:
        return None
    slo = req.get("slo") or {}
    # the sessions of the requests over the SLO (the slowest listed and the drill-down's), not of
    # every slow one listed
    top = next((r for r in slow if r.get("status") != "error" and _over_slo(r, slo)), slow[0])
    listed = [(r.get("session_id"), r) for r in slow]
    listed += [(sid, r) for sid, rows in (model.get("session_details") or {}).items() for r in rows]
    found = {(sid, r.get("request_id")): r.get("start_ts") for sid, r in listed
             if r.get("status") != "error" and _over_slo(r, slo)}
    over = found or {(r.get("session_id"), r.get("request_id")): r.get("start_ts") for r in slow}
    sids = sorted({sid for sid, _ in over if sid})
    first = min((ts for ts in over.values() if ts), default=None)
    last = max((ts for ts in over.values() if ts), default=None)
    since, until, minutes = _span(first, last)
    return {
        "rule": "slow_requests", "severity": "warning" if missed >= LEAD_SLO_SHARE * total_requests else "info",
        "scope": "request", "finding": None, "section": "slow",
        "problem": f"requests over the SLO ({_slo_text(slo)})",
        "requests": missed, "request_share": missed / total_requests, "failed_requests": 0, "failed_sessions": 0,
        "slo_missed_requests": missed, "sessions": len(sids),
        # the sessions are those of the requests over the SLO the model lists, when not all are
        "_listed": len(over) if len(over) < missed else None,
        "session_share": len(sids) / total_sessions if total_sessions else None,
        "session_ids": sids[:LEAD_SESSIONS], "more_sessions": max(len(sids) - LEAD_SESSIONS, 0),
        "since": since, "until": until, "minutes": minutes,
        "figure": f"slowest over the SLO {_ms(top.get('e2e_ms'))}: {'; '.join(top.get('why') or [])}",
        "change": "See why each of the slowest requests was slow (queue wait, prefill, decode, beams, output "
                  "length) in the slow-requests section, and change what dominates.",
    }


def _ranked_over(x: dict, total_requests: int) -> int:
    over = x["slo_missed_requests"] or 0
    return over if total_requests and over >= LEAD_SLO_SHARE * total_requests else 0


def _slo_text(slo: dict) -> str:
    return f"TTFT ≤ {fmt.prose(slo.get('ttft_ms'))} ms, TPOT ≤ {fmt.prose(slo.get('tpot_ms'))} ms per token"


def checked(model: dict) -> list[dict]:
    """What an on-call reader asks about ("slow at times", users waiting in the queue) where the
    data shows it absent or secondary, each with its figure: without them a reader takes the
    largest part of the slowest requests for the cause of a complaint no request confirms."""
    req = model.get("requests") or {}
    n = req.get("count") or 0
    slow = model.get("slow_requests") or []
    if not n or not slow:
        return []
    slo = req.get("slo") or {}
    missed = req.get("slo_missed") or 0
    fired = {f.get("rule") for f in model.get("findings") or []}
    out = []
    top = slow[0]
    if not missed:
        med = (req.get("e2e_ms") or {}).get("p50")
        text = (f"Slow requests: none over the SLO ({_slo_text(slo)}), 0 of {fmt.prose(n)} requests; the "
                f"slowest took {_ms(top.get('e2e_ms'))}")
        if med:
            text += f" ({fmt.prose((top.get('e2e_ms') or 0) / med, 1)}× the median {_ms(med)})"
        text += ": by the SLO nothing is slow"
        failed = req.get("errors") or 0
        if failed and req.get("goodput") is not None:
            # goodput counts a failed request as one that missed the SLO; "slow" counts completed ones
            text += (f" (the {fmt.prose(failed)} failed {'request is' if failed == 1 else 'requests are'} not slow but "
                     f"count against goodput, {fmt.share(req['goodput'])})")
        out.append({"id": "slow_requests", "level": "checked",
                    "message": text
                    + ("; the lines above are what to change." if model.get("findings") else ".")})
    queue = next((s for s in model.get("stages") or [] if s.get("stage") == "queue"), None)
    th = ((model.get("thresholds") or {}).get("queue_wait") or {}).get("p95_ms")
    if queue and queue.get("p95_ms") is not None and th is not None and "queue_wait" not in fired:
        shown = slow[:SLOW_SHOWN]
        largest = [r for r in shown if r.get("queue_ms") is not None
                   and r["queue_ms"] >= max((r.get(k) or 0.0) for k in PARTS)]
        text = f"Queue wait: p95 {_ms(queue['p95_ms'])}, under its {_ms(th)} threshold"
        if not missed:
            text += ", so users waiting in the queue are secondary"
            if largest:
                text += (f": it is the largest part of {len(largest)} of the {len(shown)} slowest requests, yet "
                         "none of them is over the SLO: not a cause to act on"
                         + (" before the problems above" if model.get("findings") else ""))
        else:
            over = [r for r in largest if r.get("status") != "error" and _over_slo(r, slo)]
            text += ": most requests wait little"
            if over:
                which = ("the 1 request" if missed == 1 else f"{len(over)} of the {fmt.prose(missed)} requests")
                text += (f"; the queue is the largest part of {which} over the SLO (the longest wait "
                         f"{_ms(max(r['queue_ms'] for r in over))})")
        out.append({"id": "queue_wait", "level": "checked", "message": text + "."})
    return out


def impact_text(x: dict, total_requests: int, total_sessions: int, same: dict | None = None) -> str:
    """"5 of 80 requests failed, all in 1 of its 2 sessions, ..., for 3 min from 10:02"; a line
    whose failed requests an earlier line already counts names that line instead of adding them."""
    bits = []
    if x["failed_requests"]:
        n, k = x["failed_requests"], x.get("failed_sessions") or 0
        where = f", all in {k} session{'s' if k != 1 else ''}" if k and k < (x.get("sessions") or 0) else ""
        if same is not None:
            bits.append(f"the same {n} failed request{'s' if n != 1 else ''} as line {same['rank']} "
                        f"({same['rule']}), not {n} more{where}")
        else:
            bits.append(f"{n} of {total_requests} requests failed{where}")
    if x.get("retried_requests"):
        r, again = x["retried_requests"], x.get("_retried_same")
        if again is not None:
            bits.append(f"the same {r} request{'s' if r != 1 else ''} answered after a caught error and retry "
                        f"as line {again}")
        else:
            bits.append(f"{r} {'more' if x['failed_requests'] else f'of {total_requests}'} "
                        f"request{'s' if r != 1 else ''} answered after the app caught an error and retried")
    if x["slo_missed_requests"]:
        bits.append(f"{x['slo_missed_requests']} of {total_requests} over the SLO")
    if not bits:
        bits.append(f"{x['requests']} of {total_requests} requests ({fmt.share(x['request_share'])}) at risk")
    k = x.get("failed_sessions") or 0
    if x["failed_requests"] and k and k < (x.get("sessions") or 0):
        # the failures sit in fewer sessions than the finding names: both counts, told apart
        text = "; ".join(bits) + f"; the finding names {x['sessions']} of {total_sessions} sessions"
    elif x.get("_listed"):
        text = "; ".join(bits) + f", the {x['_listed']} slowest of them in {x['sessions']} of {total_sessions} sessions"
    else:
        text = "; ".join(bits) + f", in {x['sessions']} of {total_sessions} sessions"
    if x.get("minutes") is not None:
        try:
            # a span under a minute starts at a second: to the minute it would say almost nothing
            at = datetime.fromisoformat(x["since"]).strftime("%Y-%m-%d %H:%M" if x["minutes"] >= 1 else "%Y-%m-%d %H:%M:%S")
        except (TypeError, ValueError):
            at = None
        # one moment (a single request) has no duration to give
        text += f", for {human_duration(x['minutes'] * 60)}" if x["minutes"] else ""
        if at:
            text += f" from {at}" if x["minutes"] else f", at {at}"
    return text


# -- contradictions ------------------------------------------------------------------------------

# the logs are said to cover the window asked when they span at least this share of it
WINDOW_COVERED = 0.1
# logs spanning less than this cannot show growth over hours or "slow at times": the report says so
SHORT_WINDOW_S = 300.0


def contradictions(model: dict) -> list[dict]:
    """Notes for what the data says twice, differently: errors naming CUDA where every request ran
    on the CPU; a window asked for far longer than the logs in it span."""
    notes = []
    if model.get("no_gpu"):
        cuda = [e for e in model.get("errors") or []
                if "cuda" in f"{e.get('error_type') or ''} {e.get('sample_msg') or ''}".lower()]
        if cuda:
            n = sum(e.get("count") or 0 for e in cuda)
            kinds = ", ".join(sorted({str(e.get("error_type")) for e in cuda}))
            notes.append({"id": "cuda_on_cpu", "level": "warning", "message": (
                f"{n} error{'s' if n != 1 else ''} ({kinds}) name CUDA, yet every request ran on the CPU (device cpu) "
                "and no GPU was seen: the message does not come from this model's device (a simulated or "
                "re-raised error, another process on a GPU, or device fields logged wrong); check where it is "
                "raised before acting on GPU advice")})
    notes += _message_notes(model)
    w = model.get("window") or {}
    try:
        since = parse_iso(w["since"]) if w.get("since") else None
        until = parse_iso(w["until"]) if w.get("until") else parse_iso(model["generated_at"])
        first = parse_iso(w["first_event"]) if w.get("first_event") else None
        last = parse_iso(w["last_event"]) if w.get("last_event") else None
    except (KeyError, TypeError, ValueError):
        return notes
    if first is not None and last is not None and (last - first).total_seconds() < SHORT_WINDOW_S:
        held = human_duration((last - first).total_seconds())
        notes.insert(0, {"id": "short_window", "level": "note", "message": (
            f"the logs span {held}: memory that grows over hours, or "
            f"requests that are slow at times over a day, cannot be judged from {held}; the findings are what "
            "these requests show, and a longer run (an hour or more) says whether they hold")})
    if since is not None and until is not None and first is not None and last is not None:
        asked = (until - since).total_seconds()
        held = (last - first).total_seconds()
        if asked > 0 and held < WINDOW_COVERED * asked:
            notes.append({"id": "window_vs_data", "level": "note", "message": (
                f"the window asked spans {human_duration(asked)}, the logs in it only {human_duration(held)} "
                f"({w['first_event']} to {w['last_event']}): every figure and rate covers that span, not the "
                "window")})
    return notes


# what a CUDA out-of-memory message says of the device, in GiB
# (PyTorch before 2.1: "14.75 GiB total capacity; 13.10 GiB already allocated"; since: "a total
# capacity of 23.68 GiB ... 20.1 GiB is allocated by PyTorch")
_OOM_TOTAL = re.compile(r"([0-9.]+) GiB total capacity|total capacity of ([0-9.]+) GiB")
_OOM_ALLOCATED = re.compile(r"([0-9.]+) GiB already allocated|([0-9.]+) GiB is allocated by PyTorch")
_SIMULATED = re.compile(r"\[simulated[^\]]*\]", re.I)
# a message's GPU total differs from the logged one beyond this share; its "already allocated"
# is beyond the readings from this many times the highest (readings come before and after a
# request, so a spike inside generate that failed is between them)
TOTAL_TOLERANCE = 0.05
ALLOCATED_TIMES = 2.0


def _gib(pattern: re.Pattern, text: str) -> str | None:
    m = pattern.search(text)
    return next((g for g in m.groups() if g), None) if m else None


def _failed_or_retried(n: int, failed: int, retried: int | None = None) -> str:
    """What the ``n`` errors did to their requests, as the report counts them: failed (the user
    got an error) or caught and retried (the request is ok, the error its first attempt's:
    requests.retried; a model saved without it, the errors the failed requests leave)."""
    failed = min(n, failed)
    retried = n - failed if retried is None else retried
    if not failed:
        return (f"No request failed: the app caught {'it' if n == 1 else 'each'} and retried, so the request "
                "shows status ok with the error of its first attempt and the user got a slower answer, not an "
                "error; the attempts are real (fix what the oom finding names)")
    if not retried:
        return (f"The {'request' if n == 1 else f'{n} requests'} still failed as the report counts them, so the "
                "failures are real (fix what the oom finding names)")
    return (f"{failed} of the requests failed and {retried} were caught and retried (status ok, the error their "
            "first attempt's): both are real (fix what the oom finding names)")


def _message_notes(model: dict) -> list[dict]:
    """Error messages that say something the readings contradict: one marked simulated (raised by
    the app or a test harness, not the device), or a GPU total / allocation that is not this
    run's (the readings the report judges memory by)."""
    notes = []
    errors = [e for e in model.get("errors") or [] if e.get("sample_msg")]
    sim = [e for e in errors if _SIMULATED.search(e["sample_msg"])]
    if sim:
        n = sum(e.get("count") or 0 for e in sim)
        tag = _SIMULATED.search(sim[0]["sample_msg"]).group()
        notes.append({"id": "simulated_error", "level": "warning", "message": (
            f"{n} error event{'s' if n != 1 else ''} ({', '.join(sorted({str(e.get('error_type')) for e in sim}))}) "
            f"{'carries' if n == 1 else 'carry'} “{tag}” in {'its' if n == 1 else 'their'} message: the app (or a test harness) raised them itself, not the device. "
            + _failed_or_retried(n, (model.get("requests") or {}).get("errors") or 0,
                                 (model.get("requests") or {}).get("retried"))
            + "; what the message says of the device (its sizes) is not a reading")})
    totals = [g["mem_total_mb"] for g in model.get("gpus") or [] if g.get("mem_total_mb")]
    totals += [c["gpu_total_mb"] for c in model.get("capacity") or [] if c.get("gpu_total_mb")]
    peak = max((lv["reserved_peak_mb"] for c in model.get("capacity") or [] for lv in c.get("levels") or []
                if lv.get("reserved_peak_mb") is not None), default=None)
    for e in errors:
        total = _gib(_OOM_TOTAL, e["sample_msg"])
        alloc = _gib(_OOM_ALLOCATED, e["sample_msg"])
        what = e.get("error_type") or "error"
        if total and totals:
            logged = max(totals)
            if abs(float(total) * 1024 - logged) > TOTAL_TOLERANCE * logged:
                notes.append({"id": "oom_message_vs_readings", "level": "warning", "message": (
                    f"the {what} message says the GPU has {total} GiB in total, the logged readings "
                    f"{fmt.prose(logged)} MiB: the message comes from another device than the one logged")})
                break
        elif total:
            text = f"the {what} message says the GPU has {total} GiB in total"
            if alloc:
                text += f" and {alloc} GiB already allocated"
            text += "; the logs carry no GPU total"
            if peak is not None:
                text += (f", and their readings (before and after each request) show at most {fmt.prose(peak)} MiB "
                         "reserved")
                if alloc and float(alloc) * 1024 > ALLOCATED_TIMES * peak:
                    text += ": the message's sizes are not in the readings (a spike inside generate, or not a reading at all)"
            notes.append({"id": "oom_message_vs_readings", "level": "note",
                          "message": text + "; the report's memory figures are the readings"})
            break
    return notes
