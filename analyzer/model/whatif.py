"""What if: a service model fitted from the logs, and a discrete-event simulation of settings the
service never ran with (docs/capacity.md, "What if").

The model (``fit_service``), per process, from the capacity curve (rules/capacity_curve) and the
``service_requests`` sample:

- the users: think time between a reply and the session's next turn, turns per session;
- the request mix: each request's own work as it would run alone (its service TTFT and decode
  time divided by the slowdown at the level it started at), output length, beams, max_new_tokens;
- service time against requests in flight: a request's rate at level k is the level's aggregate
  output rate over k (the per-level rate fit of capacity_per_level), interpolated between measured
  levels and held flat past the highest (the box is saturated there: more requests share it);
- memory per request in flight and the OOM level (the capacity curve's fit).

It assumes HF ``generate`` without continuous batching: the requests in flight share the device
the way the logs show, each at the level's rate. A server with continuous batching (vLLM) is only
covered through the per-level rates its own spans give; its scheduler (preemption, chunked
prefill) is not modelled.

The simulation (``simulate``): closed-loop users (a request, the reply, a think time, the next
request) in front of a concurrency limit with a FIFO queue; while k requests run each advances its
remaining work at the level-k speed. Deterministic for a seed; plain Python, no numpy."""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left

SEED = 2026
# simulated requests per cell (the first WARMUP are left out: the users start together)
SIM_REQUESTS, WARMUP = 1200, 120
# the most users max_users searches; the share of requests within the SLO that keeps it
MAX_USERS, SLO_SHARE = 512, 0.95
# the mix carried in the model: this many requests, spread over the sample by their work
MIX_SIZE, THINK_SIZE = 200, 50
# handovers of a slot to a waiting request the logs must show before the simulation adds one
MIN_HANDOFFS = 10
# a think time longer than this is a user who left and came back: not a think time
MAX_THINK_MS = 600_000.0
ASSUMES = ("HF generate without continuous batching: the requests in flight share the device at the "
           "per-level rate the logs show; a server with continuous batching (vLLM) is covered only "
           "through the rates its spans give, not its scheduler")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _spread(items: list, n: int) -> list:
    """``n`` items evenly spread over a sorted list (all of them when it has fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def request_rates(sample: list[dict], min_requests: int) -> dict[int, float]:
    """Output tokens/s of k requests at once, from the requests' own handler times: per request its
    handler time per output token and its mean requests in flight (``mean_level``), rounded; per
    level with ``min_requests``, k over the median time per token. {} under three such levels."""
    by: dict[int, list[float]] = {}
    for r in sample:
        lvl, n = r.get("mean_level"), r.get("output_len") or 0
        if r.get("is_error") or lvl is None or n <= 0 or r.get("decode_ms") is None:
            continue
        ms = (r.get("service_ttft_ms") or 0.0) + r["decode_ms"]
        if ms > 0:
            by.setdefault(max(1, round(lvl)), []).append(ms / n)
    per = {k: _pct(v, 0.5) for k, v in by.items() if len(v) >= min_requests}
    return {k: k * 1000.0 / ms for k, ms in sorted(per.items()) if ms} if len(per) >= 3 else {}


def rates(levels: list[dict]) -> dict[int, float]:
    """Aggregate output tokens/s per measured level (sparse ones left out while 3 dense remain)."""
    have = [lv for lv in levels if (lv.get("tokens_per_s") or 0) > 0 and lv.get("level")]
    dense = [lv for lv in have if not lv.get("sparse")]
    return {lv["level"]: lv["tokens_per_s"] for lv in (dense if len(dense) >= 3 else have)}


def aggregate_rate(agg: dict[int, float], k: float, xs: list[int] | None = None) -> float:
    """The fitted aggregate rate at ``k`` in flight: measured, interpolated between measured
    levels, proportional below the lowest (each request at the lowest level's rate), flat past
    the highest (a saturated box shares its rate). ``xs``: the levels sorted, if at hand."""
    xs = xs or sorted(agg)
    if k in agg:
        return agg[k]
    if k < xs[0]:
        return agg[xs[0]] * k / xs[0]
    if k > xs[-1]:
        return agg[xs[-1]]
    i = bisect_left(xs, k)
    a, b = xs[i - 1], xs[i]
    return agg[a] + (agg[b] - agg[a]) * (k - a) / (b - a)


def speed(agg: dict[int, float], k: float) -> float:
    """A request's speed at ``k`` in flight, relative to running alone (1.0)."""
    return aggregate_rate(agg, k) / k / aggregate_rate(agg, 1)


def _speed_of(agg: dict[int, float]):
    """``speed`` for many k over one ``agg``: the levels sorted and the rate alone computed once."""
    xs = sorted(agg)
    alone = aggregate_rate(agg, 1, xs)
    return lambda k: aggregate_rate(agg, k, xs) / k / alone


def _not_counted(sample: list[dict], ok: list[dict]) -> str:
    """Why the completed requests are fewer than the curve's (which counts every request): the
    failed ones, and those without decode timing or output length."""
    failed = sum(1 for r in sample if r.get("is_error"))
    other = len(sample) - len(ok) - failed
    parts = ([f"{failed} failed"] if failed else []) + ([f"{other} without decode timing"] if other > 0 else [])
    return f" (of {len(sample)}: {' and '.join(parts)} not counted)" if parts else ""


def fit_service(curve: dict, sample: list[dict], thresholds: dict) -> dict:
    """The service model of one process: its curve's verdicts and levels, plus its sample's
    requests (those of the same host and pid). ``needs`` says what traffic is missing when the
    logs cannot support a prediction (then nothing is predicted)."""
    th = thresholds["concurrency_cliff"]
    # the curve's per-level rate fit (decode output over the time at each level); the requests'
    # own times at the level they ran at on average where the curve has no rates. (On a loaded
    # CPU box the per-request buckets swung 2x between neighbouring levels; the fit did not.)
    agg = rates(curve.get("levels") or []) or request_rates(sample, th["min_level_requests"])
    dense = [lv for lv in curve.get("levels") or [] if not lv.get("sparse") and lv.get("tokens_per_s")]
    ok = [r for r in sample if not r.get("is_error") and r.get("decode_ms") is not None and r.get("output_len")]
    out: dict = {"requests": len(ok), "levels_fitted": sorted(agg), "assumes": ASSUMES,
                 "stack": next((r.get("stack") for r in sample if r.get("stack")), None),
                 "gpu": any(r.get("gpu") for r in sample)}
    if len(dense) < th["min_levels"] or len(ok) < th["min_requests"]:
        todo = []
        if len(ok) < th["min_requests"]:
            todo.append(f"{th['min_requests'] - len(ok)} more completed requests")
        if len(dense) < th["min_levels"]:
            todo.append(f"traffic from at least {th['min_levels']} users at once for a while "
                        f"({th['min_levels'] - len(dense)} more level{'s' if th['min_levels'] - len(dense) != 1 else ''})")
        out["needs"] = (f"a prediction needs {th['min_requests']}+ completed requests over {th['min_levels']}+ "
                        f"in-flight levels with {th['min_level_requests']}+ requests each; the logs hold "
                        f"{len(ok)} completed requests{_not_counted(sample, ok)} and {len(dense)} such "
                        f"level{'s' if len(dense) != 1 else ''}: "
                        + " and ".join(todo) + " would settle it")
        return out
    weights = [(lv["level"], lv.get("requests") or 0) for lv in curve["levels"]]
    typical = max(1, round(sum(k * n for k, n in weights) / max(1, sum(n for _, n in weights))))
    mix = []
    speed_at = _speed_of(agg)
    for r in ok:
        k = r.get("mean_level") or r.get("inflight") or typical
        s = speed_at(max(1.0, float(k)))
        mix.append((round((r.get("service_ttft_ms") or 0.0) * s, 3), round(r["decode_ms"] * s, 3),
                    int(r["output_len"]), int(r.get("num_beams") or 1), r.get("max_new_tokens")))
    mix.sort(key=lambda m: (m[0] + m[1], m))
    thinks = sorted(r["think_ms"] for r in sample if r.get("think_ms") is not None and r["think_ms"] <= MAX_THINK_MS)
    turns: dict = {}
    for r in sample:
        turns[r.get("session_id")] = turns.get(r.get("session_id"), 0) + 1
    handoffs = [r["handoff_ms"] for r in ok if r.get("handoff_ms") is not None]
    beam = [m for m in mix if m[3] > 1]
    greedy = [m[1] / m[2] for m in mix if m[3] == 1 and m[2] > 0]
    out.update({
        "levels_seen": len(dense), "top_level": curve.get("top_level"),
        "sessions": len(turns), "turns_per_session": round(sum(turns.values()) / max(1, len(turns)), 2),
        "think_p50_ms": _pct(thinks, 0.5), "think_p95_ms": _pct(thinks, 0.95),
        "output_p50": _pct([m[2] for m in mix], 0.5), "output_p95": _pct([m[2] for m in mix], 0.95),
        "beam_share": round(len(beam) / len(mix), 4),
        # a greedy token's work alone (ms): what a beam request's tokens cost with num_beams=1
        "greedy_token_ms": _pct(greedy, 0.5),
        "rate_per_level": {str(k): round(v, 3) for k, v in sorted(agg.items())},
        # from a request's end to the start of the one that waited for its slot (median; 0 unseen)
        "handoff_ms": round(_pct(handoffs, 0.5), 1) if len(handoffs) >= MIN_HANDOFFS else 0.0,
        "mb_per_request": curve.get("mb_per_request"), "oom_level": curve.get("oom_level"),
        "mix": [list(m) for m in _spread(mix, MIX_SIZE)],
        "think_ms": [round(x, 1) for x in _spread(thinks, THINK_SIZE)],
    })
    return out


def _requests(service: dict, max_new_tokens: int | None, num_beams: int | None) -> list[tuple[float, float, int]]:
    """The mix as (prefill ms alone, decode ms alone, output tokens) under the what-if options."""
    greedy = service.get("greedy_token_ms")
    out = []
    for pre, dec, n, beams, _mnt in service["mix"]:
        per = dec / n
        if num_beams == 1 and beams > 1:
            # a beam request's tokens at a greedy token's cost; without greedy requests in the logs,
            # its beams are assumed to cost in proportion to their number
            per = greedy if greedy else per / beams
        if max_new_tokens is not None and n > max_new_tokens:
            n = max_new_tokens
        out.append((pre, per * n, n))
    return out


def simulate(service: dict, limit: int, users: int, *, max_new_tokens: int | None = None,
             num_beams: int | None = None, slo: dict | None = None, seed: int = SEED,
             n_requests: int = SIM_REQUESTS) -> dict:
    """One cell: ``users`` closed-loop users in front of ``limit`` slots. The ``what_if`` keys."""
    rng = random.Random(f"{seed}:{limit}:{users}:{max_new_tokens}:{num_beams}")
    mix = _requests(service, max_new_tokens, num_beams)
    thinks = service.get("think_ms") or [0.0]
    agg = {int(k): v for k, v in service["rate_per_level"].items()}
    oom_level = service.get("oom_level")
    slo = slo or {}
    arrivals: list[tuple[float, int]] = []  # (time, user)
    for u in range(users):
        heapq.heappush(arrivals, (rng.choice(thinks) * rng.random(), u))
    queue: list[tuple[float, int, tuple]] = []  # FIFO: (arrival, user, request)
    running: list[list] = []  # [arrival, start, prefill left, decode left, first token or None, tokens, user]
    # a slot handed from a request that ended to the next one waiting: its start time and that one
    handoff = service.get("handoff_ms") or 0.0
    pending: list[tuple[float, int, tuple[float, int, tuple]]] = []
    done: list[tuple] = []
    now, oom_time, t0 = 0.0, 0.0, None
    qhead, seq = 0, 0
    speed_at = _speed_of(agg)
    speeds = [0.0]  # speed at k in flight by k, each computed once (the same float every event)
    while len(done) < n_requests:
        k = len(running)
        while len(speeds) <= k:
            speeds.append(speed_at(len(speeds)))
        v = speeds[k]
        # the next event: an arrival, a handed-over slot's start, or a running request's first token or end
        t_next, which = (arrivals[0][0], -1) if arrivals else (math.inf, -1)
        if pending and pending[0][0] < t_next:
            t_next, which = pending[0][0], -2
        for i, r in enumerate(running):
            left = r[2] if r[4] is None else r[3]
            t = now + left / v
            if t < t_next:
                t_next, which = t, i
        dt = t_next - now
        if t0 is not None and oom_level and k >= oom_level:
            oom_time += dt
        step = dt * v
        for r in running:
            work = step
            if r[4] is None:
                used = r[2] if r[2] < work else work  # min(work, r[2]), without the call
                r[2] -= used
                work -= used
            left = r[3] - work
            r[3] = left if left > 0.0 else 0.0  # max(0.0, left), without the call
        now = t_next
        if which == -1:
            _, u = heapq.heappop(arrivals)
            queue.append((now, u, rng.choice(mix)))
        elif which == -2:
            _, _, (arr, u, (pre, dec, n)) = heapq.heappop(pending)
            running.append([arr, now, pre, dec, None if pre > 0 else now, n, u])
        else:
            r = running[which]
            if r[4] is None:  # its prefill ends: the first token
                r[2], r[4] = 0.0, now
            else:  # its decode ends (set, not subtracted: no float crumbs left to run)
                r[3] = 0.0
            if r[3] <= 1e-9:
                running.pop(which)
                done.append((r[0], r[1], r[4], now, r[5]))
                if len(done) == WARMUP:
                    t0 = now
                heapq.heappush(arrivals, (now + rng.choice(thinks), r[6]))
                if handoff and qhead < len(queue):
                    # the framework hands the freed slot to the next waiting request: not at once
                    seq += 1
                    heapq.heappush(pending, (now + handoff, seq, queue[qhead]))
                    qhead += 1
        while qhead < len(queue) and len(running) + len(pending) < limit:
            arr, u, (pre, dec, n) = queue[qhead]
            qhead += 1
            running.append([arr, now, pre, dec, None if pre > 0 else now, n, u])
    kept = done[WARMUP:]
    span_ms = max(now - (t0 or 0.0), 1e-9)
    e2e = [end - arr for arr, _, _, end, _ in kept]
    ttft = [ft - arr for arr, _, ft, _, _ in kept]
    queue_ms = [st - arr for arr, st, _, _, _ in kept]
    tpot = [(end - ft) / (n - 1) if n > 1 else 0.0 for _, _, ft, end, n in kept]
    ttft_slo, tpot_slo = slo.get("ttft_ms", math.inf), slo.get("tpot_ms", math.inf)
    within = sum(1 for a, b in zip(ttft, tpot, strict=True) if a <= ttft_slo and b <= tpot_slo)
    return {
        "limit": limit, "users": users,
        # whole ms, whole-percent shares: a simulation's own noise is larger than any finer digit
        "e2e_p50_ms": round(_pct(e2e, 0.5)), "e2e_p95_ms": round(_pct(e2e, 0.95)),
        "ttft_p95_ms": round(_pct(ttft, 0.95)), "queue_p95_ms": round(_pct(queue_ms, 0.95)),
        "tokens_per_s": round(sum(n for *_, n in kept) / span_ms * 1000, 1),
        "requests_per_s": round(len(kept) / span_ms * 1000, 2),
        "slo_share": round(within / len(kept), 2),
        # the share of the time the simulated service ran at or past the OOM level
        "oom_risk": round(oom_time / span_ms, 2) if oom_level else None,
    }


def max_users(service: dict, limit: int, slo: dict, cap: int = MAX_USERS, **options) -> int:
    """The most users whose requests stay within the SLO (``SLO_SHARE`` of them, and as little time
    past the OOM level) at ``limit``: 0
    when one user alone misses it, ``cap`` when the search never saw it missed."""
    def holds(u: int) -> bool:
        cell = simulate(service, limit, u, slo=slo, n_requests=SIM_REQUESTS // 2, **options)
        # time past the OOM level fails requests: it counts against the SLO too
        return cell["slo_share"] >= SLO_SHARE and (cell["oom_risk"] or 0.0) <= 1 - SLO_SHARE

    if not holds(1):
        return 0
    lo, hi = 1, 2
    while hi <= cap and holds(hi):
        lo, hi = hi, hi * 2
    if hi > cap:
        return cap if holds(cap) else _bisect(holds, lo, cap)
    return _bisect(holds, lo, hi)


def _bisect(holds, lo: int, hi: int) -> int:
    """The largest u in [lo, hi) that holds, given holds(lo) and not holds(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo


def predicted_knee(service: dict, levels: int, knee_share: float) -> int | None:
    """The knee the simulation predicts: the throughput of ``limit`` users that never think (the
    box held at each limit) against the limit, read as the capacity curve reads its own."""
    from dslogs.analyzer.rules.capacity_curve import knee_of

    steps = [{"level": n, "requests": 10**6,
              "tokens_per_s": simulate({**service, "think_ms": [0.0]}, n, n, n_requests=400)["tokens_per_s"]}
             for n in range(1, levels + 1)]
    return knee_of(steps, {"knee_share": knee_share, "min_level_requests": 0, "min_levels": 0})[1]


def trust(service: dict, limit: int) -> str | None:
    """Why a cell's prediction is an extrapolation, or None when the logs cover it."""
    top = max((int(k) for k in service.get("rate_per_level") or {}), default=0)
    if limit > top:
        return (f"limit {limit} is past the highest level the logs measured ({top}): the rate there is "
                f"assumed flat (the box saturated), not seen")
    return None


def what_if(service: dict, limits: list[int], users: list[int], slo: dict, *, max_new_tokens: int | None = None,
            num_beams: int | None = None) -> dict:
    """The what-if block: one cell per (limit, users), ``max_users`` per limit, and the notes on
    cells the logs do not cover."""
    opts = {"max_new_tokens": max_new_tokens, "num_beams": num_beams}
    cells = [simulate(service, lim, u, slo=slo, **opts) for lim in limits for u in users]
    most = [{"limit": lim, "users": max_users(service, lim, slo, **opts)} for lim in limits]
    notes = [n for lim in limits if (n := trust(service, lim))]
    return {"what_if": cells, "max_users": most, "notes": notes,
            "options": {k: v for k, v in opts.items() if v is not None}}


def setting_code(stack: str | None, limit: int, users: int | None) -> str:
    """The limit as code for the stack the logs came from. Gradio's queue takes the users past
    the limit (a closed loop has at most users - limit waiting): a bound there turns a user past
    the capacity into a "queue full" answer instead of everyone's slow one."""
    wait = max(users - limit, 1) if users else None
    gradio = (f"demo.queue(default_concurrency_limit={limit}" + (f", max_size={wait}" if wait else "") + ")"
              f"  # or gr.ChatInterface(fn, concurrency_limit={limit})")
    vllm = f"vllm serve MODEL --max-num-seqs {limit}"
    streamlit = (f"@st.cache_resource\ndef slots():\n    return threading.Semaphore({limit})\n"
                 f"with slots():  # around generate: Streamlit runs every session's script at once\n"
                 f"    reply = generate(prompt)")
    if stack == "gradio":
        return gradio
    if stack == "vllm":
        return vllm
    return f"# Gradio\n{gradio}\n# vLLM\n{vllm}\n# Streamlit\n{streamlit}"


def default_grid(curve: dict, most_at_rec: int | None) -> tuple[list[int], list[int]]:
    """The settings the report simulates without a grid: one request at a time, the recommended
    limit and the highest level seen; the users the recommendation holds, and twice that."""
    rec = (curve.get("recommendation") or {}).get("limit") or curve.get("knee") or curve.get("top_level") or 1
    limits = sorted({1, int(rec), int(curve.get("top_level") or rec)})
    u = max(most_at_rec or int(rec), 1)
    return limits, sorted({u, 2 * u})


def process_what_if(curve: dict, sample: list[dict], thresholds: dict, grid: dict | None = None) -> dict:
    """One process's service model and its simulated settings, as its capacity entry's fields.
    ``grid``: limits and users (defaults: ``default_grid``), max_new_tokens, num_beams."""
    service = fit_service(curve, sample, thresholds)
    out: dict = {"service": service}
    if service.get("needs"):
        return out
    slo = thresholds["slo"]
    grid = dict(grid or {})
    opts = {"max_new_tokens": grid.get("max_new_tokens"), "num_beams": grid.get("num_beams")}
    rec = (curve.get("recommendation") or {}).get("limit")
    at_rec = max_users(service, rec, slo, **opts) if rec else None
    limits, users = default_grid(curve, at_rec)
    block = what_if(service, grid.get("limits") or limits, grid.get("users") or users, slo, **opts)
    out.update(what_if=block["what_if"], max_users=block["max_users"], what_if_notes=block["notes"])
    if rec:
        out["users_at_slo"] = at_rec
        out["setting_code"] = setting_code(service.get("stack"), rec, at_rec)
        out["users_text"] = users_text(service, rec, at_rec, slo)
    return out


def users_text(service: dict, limit: int, users: int, slo: dict) -> str:
    """The capacity in users, in words: the setting, the users it holds, the SLO, the users' habits."""
    name = {"gradio": "concurrency_limit", "vllm": "max_num_seqs"}.get(service.get("stack") or "", "a limit")
    think = service.get("think_p50_ms")
    habits = (f"{service.get('turns_per_session')} turns per session, think time p50 {think / 1000:.1f} s"
              if think is not None else "no think time seen (users send again at once)")
    held = (f"{users}+ users (the most the simulation tried)" if users >= MAX_USERS
            else f"{users} user{'s' if users != 1 else ''} at once" if users else "no user")
    return (f"with {name}={limit} the service holds {held} within the SLO (TTFT ≤ {slo['ttft_ms']:.0f} ms "
            f"with the queue wait, TPOT ≤ {slo['tpot_ms']:.0f} ms, for {SLO_SHARE:.0%} of requests), "
            f"for users as the logs show them: {habits}")
