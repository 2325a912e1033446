"""The capacity model: from capacity_per_level's rows (one per process and in-flight level), the
knee where aggregate throughput stops rising, the level where p95 latency crosses the SLO, memory
per added request against the GPU's total, and the concurrency setting that keeps the process
below all three (000 §1.3).

It lives with the rules because the rules (concurrency_cliff, oom_at_concurrency, memory_leak's
leak-or-load) and the report's capacity section read the same curve: the rules layer is the
lowest that reads metric tables and the report model sits above it, so one definition serves
both and ``dslogs capacity``."""

from __future__ import annotations

import math

SETTING = "concurrency_limit (Gradio) / max_num_seqs (vLLM)"
# the setting's name where the logs say which stack served the process
SETTINGS = {"gradio": "concurrency_limit (Gradio)", "vllm": "max_num_seqs (vLLM)"}


# A memory fit looser than this is no memory per request to read or extrapolate: the bar the
# report's other growth fits meet (rss_growth min_r2, kv_cache_bloat prefill_growth_min_r2).
FIT_MIN_R2 = 0.8


def memory_fit_text(c: dict) -> str:
    """The capacity block's memory fit in words: how much reserved memory one more request in
    flight adds, or that the peak falls with more in flight or the fit is too loose to trust, and
    why where the model says (a leak in the process built memory up over the run, so levels the
    traffic reached late hold more of it whatever their requests in flight). "" without a fit."""
    from dslogs.analyzer.core import format as fmt

    mb, r2 = c.get("mb_per_request"), c.get("fit_r2")
    if mb is None:
        return ""
    fit = f"{fmt.table(mb)} MiB reserved per request in flight, fit R² {fmt.table(r2, 2)}"
    if mb > 0 and (r2 is None or r2 >= FIT_MIN_R2):
        return f"memory grows {fit}"
    text = (f"peak reserved falls as more requests are in flight ({fit})" if mb <= 0
            else f"a loose fit ({fit}, under R² {fmt.table(FIT_MIN_R2, 2)})")
    text += ": not a memory per request to trust"
    if c.get("leak_mb"):
        text += (f"; a leak (memory_leak, {fmt.table(c['leak_mb'])} MiB in this process) built memory up over "
                 "the run, so the levels the traffic reached late hold more of it whatever their requests in flight")
    return text


def _fit(points: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Least squares y = a + b x over ``points``: (a, b, r2); None under three distinct x (a
    line through two points always fits)."""
    n = len(points)
    if len({x for x, _ in points}) < 3:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    b = sxy / sxx
    a = my - b * mx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 1.0
    return a, b, r2


def memory_points(levels: list[dict], min_step_mb: float) -> list[tuple[float, float]]:
    """(level, peak reserved) for the memory fit. A level where requests ran out of memory and
    whose peak did not rise past the level below is left out: the requests that failed never got
    their memory, so its reading repeats the lower level's and would flatten the slope (and push
    the OOM level up). Every reading counts when too few would be left to fit."""
    pts = [(lv["level"], lv["reserved_peak_mb"], lv.get("oom_requests") or 0) for lv in levels
           if lv.get("reserved_peak_mb") is not None]
    kept, below = [], None
    for level, peak, ooms in pts:
        if not (ooms and below is not None and peak - below < min_step_mb):
            kept.append((level, peak))
        below = peak if below is None else max(below, peak)
    return kept if len(kept) >= 3 else [(level, peak) for level, peak, _ in pts]


def _proc(host, pid) -> str:
    name = host or "the unnamed host"
    return f"{name}/{pid}" if pid is not None else name


def group_levels(m: dict) -> list[list[dict]]:
    """capacity_per_level's rows grouped by process (host, pid), each sorted by level."""
    groups: dict[tuple, list[dict]] = {}
    for r in m.get("capacity_per_level", []):
        groups.setdefault((r.get("host"), r.get("pid")), []).append(r)
    return [sorted(rows, key=lambda r: r["level"]) for rows in groups.values()]


def knee_of(rows: list[dict], th: dict) -> tuple[list[dict], int | None]:
    """(the levels, each marked sparse or not; the knee) from one process's rows and the
    concurrency_cliff thresholds: the first measured level within knee_share of the best
    throughput, with a measured level above it (else throughput may still be rising past what
    the logs saw)."""
    levels = [{**r, "sparse": (r.get("requests") or 0) < th["min_level_requests"]}
              for r in sorted(rows, key=lambda r: r["level"])]
    dense = [lv for lv in levels if not lv["sparse"] and lv.get("tokens_per_s") is not None]
    if not dense:
        return levels, None
    # a knee read from two levels, or at the first measured level over sparse ones below it (whose
    # throughput nobody measured), is no knee: throughput may have peaked where the logs are thin
    if len(dense) < max(th["min_levels"], 2):
        return levels, None
    best = max(lv["tokens_per_s"] for lv in dense)
    knee = next(lv["level"] for lv in dense if lv["tokens_per_s"] >= (1 - th["knee_share"]) * best)
    if knee == dense[0]["level"] and any(lv["sparse"] for lv in levels if lv["level"] < knee):
        return levels, None
    return levels, knee if any(lv["level"] > knee for lv in dense) else None


def process_curve(rows: list[dict], t: dict, setting: str = SETTING) -> dict:
    """One process's curve and verdicts from its level rows (``setting``: the limit's name)."""
    th, slo = t["concurrency_cliff"], t["slo"]
    levels, knee = knee_of(rows, th)
    dense = [lv for lv in levels if not lv["sparse"] and lv.get("tokens_per_s") is not None]
    total = sum(lv.get("requests") or 0 for lv in levels)
    out: dict = {"host": rows[0].get("host") if rows else None, "pid": rows[0].get("pid") if rows else None,
                 "levels": levels, "requests": total, "knee": None, "slo_level": None, "oom_level": None,
                 "mb_per_request": None, "base_mb": None, "fit_r2": None,
                 "gpu_total_mb": max((lv.get("gpu_total_mb") or 0 for lv in levels), default=0) or None,
                 "recommendation": None, "needs": None, "top_level": max((lv["level"] for lv in levels), default=0)}
    out["knee"] = knee
    # the SLO: the first measured level whose p95 service TTFT or TPOT is over it
    for lv in dense:
        over = []
        if (lv.get("service_ttft_p95_ms") or 0) > slo["ttft_ms"]:
            over.append("ttft")
        if (lv.get("tpot_p95_ms") or 0) > slo["tpot_ms"]:
            over.append("tpot")
        if over:
            out["slo_level"], out["slo_over"] = lv["level"], over
            break
    # memory per added request: peak reserved against the level, over the levels whose reading
    # holds every request running there
    fit = _fit(memory_points(levels, th["min_mb_per_request"]))
    if fit is not None:
        a, b, r2 = fit
        out.update(base_mb=a, mb_per_request=b, fit_r2=r2)
        gpu = out["gpu_total_mb"]
        if gpu and b > th["min_mb_per_request"]:
            # the first level whose predicted peak passes oom_share of the GPU
            out["oom_level"] = max(1, math.floor((th["oom_share"] * gpu - a) / b) + 1)
    # the recommendation: below the knee, the SLO and the OOM level, with enough traffic to say
    # no measured level at all settles nothing, whatever min_levels says (0 included)
    need = max(th["min_levels"], 1)
    if len(dense) < need or total < th["min_requests"]:
        want_levels = max(need - len(dense), 0)
        out["needs"] = (f"{th['min_requests']}+ requests over {need}+ in-flight levels with "
                        f"{th['min_level_requests']}+ requests each; the logs hold {total} requests, "
                        f"{len(dense)} such level{'s' if len(dense) != 1 else ''}"
                        + (f" ({want_levels} more needed)" if want_levels else ""))
        return out
    # an SLO already missed at the lowest measured level is not a concurrency limit: no level meets it
    slo_limit = None
    if out["slo_level"] is not None:
        if out["slo_level"] > dense[0]["level"]:
            slo_limit = out["slo_level"] - 1
        else:
            out["slo_unmet"] = True
    limits = [x for x in (out["knee"], slo_limit, (out["oom_level"] - 1) if out["oom_level"] else None)
              if x is not None]
    if not limits:
        slo = ("the SLO is missed at every level, so it sets no limit" if out.get("slo_unmet")
               else "latency is within the SLO")
        out["needs"] = (f"no limit seen up to {dense[-1]['level']} requests in flight: throughput still rises, "
                        f"{slo} and memory has room; traffic at higher levels would show the knee")
        return out
    n = max(1, min(limits))
    out["recommendation"] = {"limit": n, "text": recommendation_text(n, out, t, setting)}
    return out


def _at(out: dict, level: int) -> dict | None:
    return next((lv for lv in out["levels"] if lv["level"] == level), None)


def recommendation_text(n: int, out: dict, t: dict, setting: str = SETTING) -> str:
    """"set concurrency_limit=N: at N+1 ..." with the numbers measured at N and N+1."""
    here, nxt = _at(out, n), _at(out, n + 1)
    parts = []
    if here and nxt:
        if here.get("tpot_p95_ms") is not None and nxt.get("tpot_p95_ms") is not None:
            parts.append(f"at {n + 1} TPOT p95 goes from {here['tpot_p95_ms']:.0f} to {nxt['tpot_p95_ms']:.0f} ms")
        if here.get("tokens_per_s") is not None and nxt.get("tokens_per_s") is not None:
            verb = "stops rising" if nxt["tokens_per_s"] < here["tokens_per_s"] * (1 + t["concurrency_cliff"]["knee_share"]) \
                else "still rises"
            parts.append(f"throughput {verb} ({here['tokens_per_s']:.0f} → {nxt['tokens_per_s']:.0f} tokens/s)")
        if nxt.get("sparse"):
            parts.append(f"level {n + 1} has only {nxt.get('requests')} requests")
    gpu = out.get("gpu_total_mb")
    if out.get("mb_per_request") is not None and gpu:
        at = out["base_mb"] + out["mb_per_request"] * (n + 1)
        parts.append(f"reserved memory at {n + 1} reaches {at / 1024:.1f} of {gpu / 1024:.1f} GiB "
                     f"({out['mb_per_request']:.0f} MiB per request in flight)")
    why = []
    if out.get("knee") == n:
        why.append("the throughput knee")
    if out.get("slo_level") == n + 1:
        why.append("the SLO")
    if out.get("oom_level") == n + 1:
        why.append("the OOM level")
    head = f"set {setting}={n} on {_proc(out['host'], out['pid'])}"
    return head + (f" ({', '.join(why)})" if why else "") + (": " + "; ".join(parts) if parts else "")


def capacity_curves(m: dict, t: dict, stacks: dict | None = None) -> list[dict]:
    """Every process's curve from the capacity_per_level table, in table order; ``stacks``:
    (host, pid) -> the stack that served it (gradio, vllm), for the setting's name."""
    stacks = stacks or {}
    return [process_curve(rows, t, SETTINGS.get(stacks.get((rows[0].get("host"), rows[0].get("pid"))) or "", SETTING))
            for rows in group_levels(m)]


def time_beyond(levels: list[dict], level: int) -> tuple[float, float]:
    """(seconds at levels above ``level``, seconds at any level) of one process."""
    total = sum(lv.get("time_s") or 0.0 for lv in levels)
    beyond = sum(lv.get("time_s") or 0.0 for lv in levels if lv["level"] > level)
    return beyond, total
