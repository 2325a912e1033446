"""Memory attribution: which requests (and so sessions) kept the memory a process gained.

attribute_deltas solves each process's memory deltas over requests that overlapped in time;
memory_leak_verdicts turns the solution into per-session and per-process verdicts."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator

from dslogs.analyzer.rules.registry import HostsLeftOut, cpu_only_hosts

# -- memory ------------------------------------------------------------------------------------


class Credits(dict):
    """session -> (memory its requests keep per request, requests judged): ``attribute_deltas``'
    answer, with what it credited each request (``per_request``), so that what a finding, its
    evidence and the sessions table show of a session is this one figure."""

    __slots__ = ("_kept", "_read", "_scale", "set_aside")

    def __init__(self, rates: dict, kept: dict[str, list[float]] | None = None,
                 scale: dict[str, float] | None = None, set_aside: list[dict] | None = None):
        super().__init__(rates)
        self._kept, self._scale = kept, scale or {}
        # drops of memory no request caused (``_drops``), left out of the fit, as the findings'
        # evidence gives them: {host, pid, mb, from_ts, to_ts (the readings either side), request_ids}
        self.set_aside = set_aside or []
        # requests with a delta per session: what "× requests" counts from, kept past release()
        self._read = {sid: len(xs) for sid, xs in kept.items()} if kept is not None else {}

    def read(self, sid: str) -> int | None:
        """The session's requests with a delta (a reading before and after); the counted ones
        are those from the first that kept. None where one rate solved every request."""
        return self._read.get(sid)

    def per_request(self, sid: str) -> list[float | None]:
        """What each of the session's requests with a delta was credited, in row order; None for
        a request before the one from which the session kept (``_since``): not counted. The
        counted ones add up to per request × requests."""
        rate, n = self[sid]
        if self._kept is None:
            # one rate per session solves the deltas: every request is credited that rate
            return [rate] * n
        xs = self._kept[sid]
        first = len(xs) - n
        scale = self._scale.get(sid, 1.0)
        return [None] * first + [x * scale for x in xs[first:]]

    def release(self) -> None:
        """Forget the per-request credits (one float per request of the window) once the sessions
        that need them have them; the per-session figures stay."""
        self._kept = None
        self._scale = {}


def kept_in_all(rate: float, n: int) -> float:
    """What a session's requests kept in all: the figure memory_leak and rss_growth judge."""
    return rate * n


def attribute_deltas(rows: Iterable[dict], key: str, sweeps: int = 40,
                     min_requests: int = 1) -> Credits:
    """session -> (memory its requests keep per request, requests) from per-request deltas.

    torch and RSS are per process: a request's before/after delta holds its own leak plus the leaks
    of the other requests of its process that ended while it ran (``ended_during``). Model each
    delta as the sum of those requests' per-session leak rates, plus the working memory (KV cache,
    activations) of requests that started during it and still run (+) or ran at its start and
    ended during it (-), one mean size per process for deltas and one for steps (``transient_coef``,
    ``step_transient_coef``), and fit all by least
    squares (coordinate descent: each sweep sets one unknown to its exact minimiser given the
    others).

    ``rows`` is read once. The equations are held by unknown, as plain lists indexed by number
    (each unknown's equations and its coefficient in each, every equation's delta and current
    prediction), not a dict of coefficients per request keyed by session id: the same floating
    operations in the same order as that layout (the same rates, bit for bit; tests/test_rules_cost.py
    keeps it as the reference), a fraction of its memory and about half its time.
    """
    number: dict = {}  # unknown (session id, or ("transient", host, pid)) -> its index
    eqs_of: list[list[int]] = []  # unknown -> its equations, in order
    coefs_of: list[list[int] | None] = []  # unknown -> its coefficient in each (None: all 1)
    deltas: list[float] = []  # equation -> the request's delta
    own: dict[str, int] = {}  # session -> its requests with a delta, in order of first request
    step_key = key.replace("_delta_", "_step_")
    groups: dict[tuple, list] = {}  # (host, pid, step group) -> [sum of steps, {session: requests}]
    stepped: list[tuple] = []  # (session, its step group or None: judged by its delta) per request, in row order
    any_step = False
    bound_key = key.replace("_delta_", "_kept_bound_")
    bounds: dict[tuple, float] = {}  # (host, pid) -> the most its process can have kept
    proc_of: dict[str, tuple] = {}  # session judged by steps -> its process
    spans: dict[int, tuple] = {}  # place in stepped -> (process, done_before, done_seq)
    seqs_of: dict[int, list] = {}  # step group (by id) -> [process, first done_seq, last done_seq, its places in stepped, its request ids]
    delta_spans: list[tuple] = []  # (equation, process, done_before, done_seq) per request judged by its delta

    def equation(value: float, coef: dict) -> None:
        k = len(deltas)
        deltas.append(value)
        for u, c in coef.items():
            j = number.get(u)
            if j is None:
                j = number[u] = len(eqs_of)
                eqs_of.append([])
                coefs_of.append([])
            eqs_of[j].append(k)
            coefs_of[j].append(c)

    for r in rows:
        delta = r.get(key)
        sid = r.get("session_id")
        if delta is None or sid is None:
            continue
        own[sid] = own.get(sid, 0) + 1
        step = r.get(step_key)
        if step is not None:
            g = groups.get((r.get("host"), r.get("pid"), r["step_group"]))
            if g is None:
                # The steps' working memory is its own unknown, not the one of the requests judged by
                # their delta in the same process (its first completion, a gap): on a real CUDA
                # process the first completion's delta holds the start-up (lazy CUDA libraries in
                # RSS, the working memory of every request in flight) and, fitted as one size with
                # the steps, it made that size several times the real one, which the steps then
                # handed to innocent sessions (tests/fixtures/cuda_e2e).
                unknown = ("step transient", r.get("host"), r.get("pid"))
                g = groups[(r.get("host"), r.get("pid"), r["step_group"])] = [0.0, {}, 0, unknown]
            g[0] += float(step)
            g[1][sid] = g[1].get(sid, 0) + 1
            g[2] += r.get("step_transient_coef") or 0
            stepped.append((sid, g))
            any_step = True
            proc = (r.get("host"), r.get("pid"))
            spans[len(stepped) - 1] = (proc, r.get("done_before"), r.get("done_seq"))
            seq = r.get("done_seq")
            at = seqs_of.get(id(g))
            if at is None:
                seqs_of[id(g)] = [proc, seq, seq, [len(stepped) - 1], [r.get("request_id")]]
            else:
                if seq is not None and at[1] is not None:
                    at[1], at[2] = min(at[1], seq), max(at[2], seq)
                else:
                    at[1] = at[2] = None  # a request without the sequence: the group is not placed
                at[3].append(len(stepped) - 1)
                at[4].append(r.get("request_id"))
            proc_of[sid] = proc
            if r.get(bound_key) is not None:
                bounds[proc] = float(r[bound_key])
            continue
        coef = {sid: 1}
        for other in r.get("ended_during") or []:
            coef[other] = coef.get(other, 0) + 1
        if r.get("transient_coef"):
            coef[("transient", r.get("host"), r.get("pid"))] = r["transient_coef"]
        if r.get("done_before") is not None and r.get("done_seq") is not None:
            delta_spans.append((len(deltas), (r.get("host"), r.get("pid")), r["done_before"], r["done_seq"]))
        equation(float(delta), coef)
        stepped.append((sid, None))
    # Steps between adjacent completions (exact sequence): a group's steps add up to the leaks of
    # its requests, whatever the order their leaks and readings took within it.
    working = _step_working_memory(groups.values())
    # A drop of the process's memory that no request caused (a garbage collection, another thread
    # freeing a buffer) is left out: its group's requests are credited like requests judged by
    # their delta, and the readings from it on are read as if it had not happened.
    drops = [] if isinstance(rows, Iterator) else _drops(groups, working, seqs_of, stepped, spans, rows, key)
    place_of = {k: i for k, _sid, _group, i in _placed(stepped)} if drops else {}
    skip = set()
    for d in drops:
        skip.add(d["group"])
        proc = d["process"]
        for k, p, before, seq in delta_spans:
            if p == proc and before < d["seq"] <= seq:
                deltas[k] += d["mb"]
        for i in seqs_of[d["group"]][3]:
            stepped[i] = (stepped[i][0], None)
            spans.pop(i, None)
    for g in groups.values():
        if id(g) not in skip:
            total, members, transient, unknown = g
            equation(total - transient * working.get(unknown, 0.0), members)
    # sum of c * c per unknown, added in its equations' order as each sweep did
    dens = []
    for j, cs in enumerate(coefs_of):
        den = 0.0
        for c in cs:
            den += c * c
        dens.append(den)
        if all(c == 1 for c in cs):
            coefs_of[j] = None  # 1 in every equation (most sessions): 1 * x is x, exactly
    rate = [0.0] * len(eqs_of)
    pred = [0.0] * len(deltas)
    for _ in range(sweeps):
        moved = 0.0
        for j, ks in enumerate(eqs_of):
            cs = coefs_of[j]
            old = rate[j]
            num = 0.0
            if cs is None:
                for k in ks:
                    num += deltas[k] - (pred[k] - old)
            else:
                for k, c in zip(ks, cs, strict=True):
                    num += c * (deltas[k] - (pred[k] - c * old))
            den = dens[j]
            new = num / den if den else 0.0
            step = new - old
            if step:
                if cs is None:
                    for k in ks:
                        pred[k] += step
                else:
                    for k, c in zip(ks, cs, strict=True):
                        pred[k] += c * step
                rate[j] = new
                moved = max(moved, abs(step))
        if moved < 0.01:
            break
    # (a session whose every request was in a drop's group has no unknown: it kept nothing seen)
    rates = {sid: rate[number[sid]] if sid in number else 0.0 for sid in own}
    if not any_step:
        return Credits({sid: (rates[sid], n) for sid, n in own.items()})
    transient = {u: rate[j] for u, j in number.items() if isinstance(u, tuple)} | working
    kept = _claimed(_per_request(rates, transient, stepped), rates, transient, stepped, min_requests)
    kept = _late_readings(kept, stepped, spans, min_requests)
    for d in drops:
        # A request of the drop's group is credited its session's typical keep where the session
        # keeps on its next request (its previous, for its last): a cache that fills from some turn
        # on keeps on every turn from then; else nothing. The drop is what the readings fell by
        # plus those credits: the group's steps add up to its requests' credits less the drop.
        for k in seqs_of[d["group"]][3]:
            sid, i = stepped[k][0], place_of[k]
            xs = kept[sid]
            others = xs[:i] + xs[i + 1:]
            typical = max(_typical(others, min_requests), 0.0) if others else 0.0
            near = xs[i + 1] if i + 1 < len(xs) else xs[i - 1] if i > 0 else 0.0
            xs[i] = typical if typical > 0 and near >= typical / 2 else 0.0
            d["mb"] += xs[i]
        if d["process"] in bounds:
            bounds[d["process"]] += d["mb"]
    if not isinstance(rows, Iterator):  # a one-shot iterator cannot be read again: the steps stand
        _refit_keepers(kept, _spans_by_session(stepped, spans), rows, key, min_requests, drops=drops)
    out = {}
    for sid in own:
        since = _since(kept[sid], min_requests)
        out[sid] = (sum(since) / len(since), len(since))
    scale: dict[str, float] = {}
    out = _within_bounds(out, proc_of, bounds, scale)
    set_aside = [{k: d[k] for k in ("host", "pid", "mb", "from_ts", "to_ts", "request_ids")} for d in drops]
    return Credits(out, kept, scale, set_aside)


DROP_MIN_MB = 1.0  # a fall of the readings below this is their noise, not a drop


def _drops(groups: dict, working: dict[tuple, float], seqs_of: dict[int, list], stepped: list[tuple],
           spans: dict[int, tuple], rows: Iterable[dict], key: str) -> list[dict]:
    """Drops of a process's kept memory that no request caused, each ``{"process", "host", "pid",
    "group" (its step group, by id), "seq" (the first completion read after it), "order" (where it
    lies among the readings, as ``_refit_process`` orders them), "mb", "from_ts" and "to_ts"
    (the times of the readings either side), "request_ids" (its group's)}``, in sequence order.

    A step group whose steps fall (less the working memory the requests starting and ending in it
    account for) by more than twice what the sessions in flight over it (its own included) can
    have kept before it (a request can release only what its session kept: a cache trimmed, that
    session keeps its fall), than the working memory one request holds at a reading (the steps'
    own, ``_step_working_memory``: 32 MiB released by a request on an exact GPU counter is its
    own), and than the fall one step in ten of the process shows (working memory that long requests
    hold and release: the service's own falls, many of them).
    Such a group is read again in the readings, from the earliest "before" reading of the requests
    in flight over it to the latest "after": the lowest reading after its first gap must lie below
    the lowest before it by a quarter of its fall (working memory released leaves that flat: the
    requests' "before" readings were taken before they allocated; a drop of what the process kept
    does not). Its size is the group's fall (``attribute_deltas`` adds what its requests are then
    credited), at the gap of the largest fall from one reading to the next. A garbage collection
    of an earlier app's objects in the middle of a run, 300 MiB, otherwise credited -300 to the
    request whose step held it (-260 to a keeper there), and cut the others by the process's bound."""
    candidates: dict[tuple, list] = {}
    by_proc: dict[tuple, list] = {}
    for g in groups.values():
        at = seqs_of.get(id(g))
        if at is not None and at[1] is not None:
            by_proc.setdefault(at[0], []).append((at[1], at[2], g))
    usual: dict[tuple, float] = {}  # process -> a fall one step group in ten shows, or more
    for proc, gs in by_proc.items():
        # the falls of this process's steps, largest first: a fall that many steps show (working
        # memory released, 200 MiB by every long request) is the service's own, not one drop
        falls = sorted((max(coef * working.get(unknown, 0.0) - total, 0.0) for _lo, _hi, (total, _m, coef, unknown)
                        in gs), reverse=True)
        floor = falls[len(falls) // 10] if falls else 0.0
        if any(-residual > 2 * max(floor, abs(work), DROP_MIN_MB) for residual, work in
               ((total - coef * working.get(unknown, 0.0), working.get(unknown, 0.0))
                for _lo, _hi, (total, _m, coef, unknown) in gs)):
            usual[proc] = floor  # some group falls that far: read this process's requests in flight
    if not usual:
        return []
    flights: dict[tuple, list[tuple]] = {proc: [] for proc in usual}  # process -> (done_seq, done_before, session)
    for k, (proc, before, seq) in spans.items():
        if before is not None and seq is not None and proc in flights:
            flights[proc].append((seq, before, stepped[k][0]))
    for proc in usual:
        fl = sorted(flights[proc], key=lambda f: f[0])
        seqs = [f[0] for f in fl]
        longest = max((seq - before for seq, before, _sid in fl), default=0)
        gs = sorted(by_proc[proc], key=lambda x: x[0])
        cum: dict[str, float] = {}  # session -> what its requests kept so far (a group's rise split by requests)
        for lo, hi, g in gs:
            total, members, coef, unknown = g
            work = working.get(unknown, 0.0)
            residual = total - coef * work
            count = sum(members.values())
            if residual >= -DROP_MIN_MB:
                for sid, c in members.items():
                    cum[sid] = max(cum.get(sid, 0.0) + residual * c / count, 0.0)
                continue
            big = -residual > 2 * max(usual[proc], abs(work), DROP_MIN_MB)
            # requests in flight over the group's gaps: completed at lo - 1 or later, started before hi
            # (a span is at most ``longest`` completions long)
            inflight = [] if not big else [
                f for f in fl[bisect.bisect_left(seqs, lo - 1):bisect.bisect_left(seqs, hi + longest + 1)]
                if f[1] < hi]
            releasable = sum(cum.get(sid, 0.0) for sid in {f[2] for f in inflight} | set(members))
            if inflight and -residual > 2 * releasable:
                first = min(f[1] for f in inflight)
                last = max(f[0] for f in inflight)
                candidates.setdefault(proc, []).append((lo, hi, g, residual, releasable, first, last))
            else:  # a cache trimmed (the sessions in flight gave it back), or the service's own fall
                for sid, c in members.items():
                    cum[sid] = max(cum.get(sid, 0.0) + residual * c / count, 0.0)
    if not candidates:
        return []
    col = key.replace("delta_", "")
    readings: dict[tuple, list[tuple]] = {proc: [] for proc in candidates}
    for r in rows:
        out = readings.get((r.get("host"), r.get("pid")))
        before, after = r.get(f"{col}_before"), r.get(f"{col}_after")
        if out is None or before is None or after is None or r.get("done_before") is None or r.get("done_seq") is None:
            continue
        out.append(((r["done_seq"], 0, ""), float(after), r.get("end_ts"), r["done_seq"]))
        out.append(((r["done_before"], 1, str(r.get("start_ts") or "")), float(before), r.get("start_ts"), None))
    drops = []
    for proc, cands in candidates.items():
        order = sorted(readings[proc], key=lambda x: x[0])
        keys = [x[0] for x in order]
        values = [x[1] for x in order]
        for lo, hi, g, residual, _releasable, first, last in cands:
            start = bisect.bisect_left(keys, (first, 1, ""))
            end = bisect.bisect_right(keys, (last, 0, ""))
            gap_lo = max(bisect.bisect_left(keys, (lo - 1, 0, "")) + 1, start + 1)
            gap_hi = min(bisect.bisect_right(keys, (hi, 0, "")), end)
            if gap_lo >= gap_hi:
                continue
            # how far the floor fell over the group's gaps (the lowest reading after the first of
            # them below the lowest before it), and the gap it fell at: the largest fall from one
            # reading to the next
            fall = min(values[start:gap_lo]) - min(values[gap_lo:end])
            if fall < max(-residual / 4, DROP_MIN_MB):
                continue
            where = max(range(gap_lo, gap_hi), key=lambda j: values[j - 1] - values[j])
            for j in range(where, len(values)):
                values[j] -= residual  # read on as if it had not happened (a later drop's window)
            seq = next(x[3] for x in order[where:] if x[3] is not None)
            drops.append({"process": proc, "host": proc[0], "pid": proc[1], "group": id(g), "seq": seq,
                          "order": keys[where], "mb": -residual, "from_ts": order[where - 1][2],
                          "to_ts": order[where][2], "request_ids": seqs_of[id(g)][4]})
    return drops


def _since(xs: list[float], min_requests: int) -> list[float]:
    """A session's requests from the first that kept at least half the most one of them kept (a
    cache that fills from some turn on keeps that much per request from then on), when that
    leaves ``min_requests`` to judge by; else all of them."""
    top = max(xs)
    first = next((i for i, x in enumerate(xs) if x >= top / 2), 0) if top > 0 else 0
    return xs[first:] if len(xs) - first >= min_requests else xs


def _typical(xs: list[float], min_requests: int) -> float:
    """What a session's requests keep per request: the median from the turn it started keeping."""
    since = sorted(_since(xs, min_requests))
    mid = len(since) // 2
    return since[mid] if len(since) % 2 else (since[mid - 1] + since[mid]) / 2


def _late_readings(kept: dict[str, list[float]], stepped: list[tuple], spans: dict[int, tuple],
                   min_requests: int) -> dict[str, list[float]]:
    """A keeper's memory read in another request's step, moved back to the keeper. A request keeps
    its memory somewhere between its "before" and "after" readings, so it is in the step of some
    completion of that span; under CPU load its own "after" reading can come many milliseconds
    (another completion) after it kept, too far for one step group, and its keep lands whole in
    the step of a request that completed in between (tests/test_attribution.py, a request whose
    own step holds one request's keep and whose session keeps nothing else). Taken from the
    strongest session down: a request whose step holds less than half its session's typical keep
    takes, from the steps of other sessions' requests that completed within its span, latest first,
    what those hold beyond their own sessions' typical keep, up to what it lacks. Requests judged by
    their delta then keep what their session's nearest request (the one before, else after) kept."""
    where: dict[tuple, list[tuple]] = {}  # (process, done_seq) -> [(session, its request's place)]
    spans_of: dict[str, list[tuple]] = {}  # session -> (its request's place, span) per stepped request, in order
    fill_of: dict[str, list[int]] = {}  # session -> places of its requests judged by their delta
    for k, sid, group, i in _placed(stepped):
        span = spans.get(k)
        if span is not None:
            spans_of.setdefault(sid, []).append((i, span))
            if span[2] is not None:
                where.setdefault((span[0], span[2]), []).append((sid, i))
        elif group is None:
            fill_of.setdefault(sid, []).append(i)
    # Only the sessions whose requests moved have a new typical keep: recomputing every session's
    # after each one made this pass quadratic in sessions (minutes at a few thousand).
    typical = {sid: max(_typical(xs, min_requests), 0.0) for sid, xs in kept.items()}
    for sid in sorted(kept, key=lambda s: (-typical[s], s)):
        want = typical[sid]
        if want <= 0:
            continue
        moved_from = set()
        for i, (proc, before, seq) in spans_of.get(sid, ()):
            if before is None or seq is None or kept[sid][i] >= want / 2:
                continue
            for at in range(seq - 1, before, -1):
                for other, j in where.get((proc, at), ()):
                    lack = want - kept[sid][i]
                    spare = kept[other][j] - typical[other]
                    if other == sid or lack <= 0 or spare <= 0:
                        continue
                    moved = min(lack, spare)
                    kept[other][j] -= moved
                    kept[sid][i] += moved
                    moved_from.add(other)
        if moved_from:
            for s in moved_from | {sid}:
                typical[s] = max(_typical(kept[s], min_requests), 0.0)
    for sid, steps in spans_of.items():
        if sid in fill_of:
            # the request next to it in the session's order (the one before, else the one after), not
            # the mean of its steps: a cache that fills from some turn on keeps nothing on the turns
            # before, and a first request filled with the mean of the later ones was credited a keep
            # it never made (a session credited 240 MiB for 160 kept; the process bound then cut
            # another keeper under the threshold)
            places = sorted(i for i, _span in steps)
            for i in fill_of[sid]:
                k = bisect.bisect_left(places, i)
                kept[sid][i] = kept[sid][places[k - 1] if k else places[0]]
    return kept


def _claimed(kept: dict[str, list[float]], rates: dict[str, float], transient: dict[tuple, float],
             stepped: list[tuple], min_requests: int) -> dict[str, list[float]]:
    """What each request kept, a step group's memory given to the sessions that can hold it, the
    strongest first: a session, in order of what the proportional split credits it, takes of each
    of its groups what the stronger sessions there leave, and leaves to the weaker ones no more
    than its own typical keep (the median of its requests' from the turn it started keeping). A
    group's readings cannot tell which of its requests kept what: split in proportion to rates, a
    session that completes next to a keeper had a share of the keeper's memory whenever the
    readings' noise (working memory allocated after a "before" reading, released before an
    "after") gave it a positive rate, and kept it round after round; on a loaded box it named
    innocent sessions. Two keepers in one group still split it: the excess over the stronger's
    typical keep is the weaker's."""
    order = sorted(kept, key=lambda s: (-sum(kept[s]), s))
    claimed: dict[int, float] = {}  # step group (by id) -> what stronger sessions took of it
    groups_of: dict[str, list] = {}
    for sid, group in stepped:
        groups_of.setdefault(sid, []).append(group)
    out: dict[str, list[float]] = {}
    first_of: dict[int, tuple[str, float]] = {}  # step group -> (the session that took it whole, its part)
    typicals: dict[str, float] = {}
    for sid in order:
        xs = []
        for group in groups_of[sid]:
            if group is None:
                xs.append(rates[sid])
                continue
            total, members, coef, unknown = group
            left = total - coef * transient.get(unknown, 0.0) - claimed.get(id(group), 0.0)
            xs.append(left / members[sid])
        out[sid] = xs
        since = sorted(_since(xs, min_requests))
        mid = len(since) // 2
        typical = typicals[sid] = max(since[mid] if len(since) % 2 else (since[mid - 1] + since[mid]) / 2, 0.0)
        seen = set()
        for group, x in zip(groups_of[sid], xs, strict=True):
            if group is not None and id(group) not in seen:
                seen.add(id(group))
                part = min(max(x, 0.0), typical)
                claimed[id(group)] = claimed.get(id(group), 0.0) + part * group[1][sid]
                if x > part:
                    first_of.setdefault(id(group), (sid, part))
    # A stronger session took the whole of a group and left the excess over its typical keep to the
    # weaker ones: where a weaker one holds that excess as a keep of its own (a typical keep of at
    # least half the stronger's), the group was credited twice over; the stronger keeps only what the
    # weaker left (two keepers in a group of 80 were credited 80 and 40, and the process bound then cut
    # a third keeper). A weaker session whose typical is less is the working memory the excess also
    # holds (allocated after a "before" reading), not a second keeper: the stronger keeps the group.
    for sid in order:
        for k, group in enumerate(groups_of[sid]):
            if group is None or (first := first_of.get(id(group))) is None or first[0] == sid:
                continue
            x = out[sid][k]
            strong, floor = first
            if x > 0 and typicals[sid] > 0 and typicals[sid] >= typicals[strong] / 2:
                for j, g in enumerate(groups_of[strong]):
                    if g is group:
                        out[strong][j] = max(out[strong][j] - x * group[1][sid] / group[1][strong], floor)
    return out


def credited_requests(rows: Iterable[dict], key: str, credits: Credits, verdicts: dict) -> None:
    """Give each verdict (``verdicts``: session -> a dict-like verdict) ``credited``: its
    session's requests with a delta, in row order, each ``{"request_id", "credited_mb"}`` as
    ``credits`` credited it (None: before the session started keeping, not counted). One pass
    over ``rows``, reading them as ``attribute_deltas`` did."""
    ids: dict[str, list] = {sid: [] for sid in verdicts}
    for r in rows:
        sid = r.get("session_id")
        if sid in ids and r.get(key) is not None:
            ids[sid].append(r.get("request_id"))
    for sid, v in verdicts.items():
        v["credited"] = [{"request_id": rid, "credited_mb": mb}
                         for rid, mb in zip(ids[sid], credits.per_request(sid), strict=True)]


def _step_working_memory(groups) -> dict[tuple, float]:
    """Per process, the working memory one request holds at a reading, from the steps alone: the
    median of step / coefficient over the groups whose coefficient is not 0. Most groups keep
    nothing, so each of those reads the working memory itself; the few that hold a leak are
    outliers the median ignores. Fitted jointly with the sessions' rates by least squares, a
    leak that shares groups with in-flight changes moved it (to twice the real size on a
    threaded CPU service) and that size, times the coefficients, was handed to innocent
    sessions."""
    ratios: dict[tuple, list[float]] = {}
    for total, _members, coef, unknown in groups:
        if coef:
            ratios.setdefault(unknown, []).append(total / coef)
    out = {}
    for unknown, xs in ratios.items():
        xs.sort()
        mid = len(xs) // 2
        out[unknown] = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return out


def _within_bounds(out: dict[str, tuple[float, int]], proc_of: dict[str, tuple],
                   bounds: dict[tuple, float], scale: dict[str, float]) -> dict[str, tuple[float, int]]:
    """The sessions of a process cannot have kept more, together, than the process did (its last
    reading minus its lowest): taken from the most kept down, a session keeps what is left of
    that. Steps hold the working memory of requests that allocate after others' readings and
    release before theirs (a large transient under concurrency moves a step by its whole size,
    up for one request and down for another); the bound holds none of it once released.
    ``scale``: each session cut so, what its requests' credits are multiplied by."""
    by_proc: dict[tuple, list[str]] = {}
    for sid, proc in proc_of.items():
        by_proc.setdefault(proc, []).append(sid)
    for proc, sids in by_proc.items():
        left = bounds.get(proc)
        if left is None:
            continue
        for sid in sorted(sids, key=lambda s: (-out[s][0] * out[s][1], s)):
            rate, n = out[sid]
            if rate <= 0:
                continue
            kept = min(rate * n, max(left, 0.0))
            left -= kept
            if kept != rate * n:
                scale[sid] = kept / (rate * n)
            out[sid] = (kept / n, n)
    return out


def _per_request(rates: dict[str, float], transient: dict[tuple, float], stepped: list[tuple],
                 rounds: int = 5) -> dict[str, list[float]]:
    """What each request kept, per session in row order: a group of one request kept its step
    (less the working memory the fit puts in it); a group of several shares that among its
    requests in proportion to their sessions' rates (equally when none is positive), the rates
    then set again from the shares (``rates`` is updated); a request judged by its delta kept its
    session's rate. A session that keeps memory only from some turn on keeps its real total: one
    rate per session fitted by least squares lets the turns that kept nothing and the groups it
    shares with another leaking session pull it down."""
    kept: dict[str, list[float]] = {}
    for _ in range(rounds):
        kept = {}
        for sid, group in stepped:
            if group is None:
                kept.setdefault(sid, []).append(rates[sid])
                continue
            total, members, coef, unknown = group
            weight = sum(max(rates[m], 0.0) * c for m, c in members.items())
            share = max(rates[sid], 0.0) / weight if weight > 0 else 1.0 / sum(members.values())
            kept.setdefault(sid, []).append((total - coef * transient.get(unknown, 0.0)) * share)
        new = {sid: sum(xs) / len(xs) for sid, xs in kept.items()}
        moved = max(abs(new[sid] - rates[sid]) for sid in new)
        rates.update(new)
        if moved < 0.01:
            break
    return kept


def _process_key(r: dict) -> tuple:
    return (r.get("host"), r.get("pid"))


def _proc_name(key: tuple) -> str:
    host, pid = key
    return f"{host or 'the unnamed host'}/{pid}" if pid is not None else (host or "the unnamed host")


def _overlap(a: dict, b: dict) -> bool:
    return bool(a.get("first_ts") and b.get("first_ts") and a["first_ts"] <= b["last_ts"] and b["first_ts"] <= a["last_ts"])


class _Group:
    """The sessions of one process that memory_leak judges by reserved_mb snapshots: the first and
    last times of each (in table order; None or "" when untimed), and the verdicts of the flagged
    ones with their places among them. Only a flagged session keeps a verdict: the others are two
    times each, what counting the sessions active at once needs."""

    __slots__ = ("firsts", "lasts", "flagged", "at")

    def __init__(self):
        self.firsts: list = []
        self.lasts: list = []
        self.flagged: list[_Verdict] = []
        self.at: list[int] = []


class _GroupOverlaps:
    """Sessions of one process active at the same time as each flagged one (itself included), by
    binary search over sorted first/last times: the pairwise scan was O(flagged x sessions), 20 M
    comparisons and most of a warm run at 15 k sessions. Same answers as ``_overlap`` pairwise (a
    group holding a session whose last time sorts before its first falls back to that scan).
    Flagged sessions are named by their number among ``g.flagged``, sessions by their place."""

    def __init__(self, g: _Group):
        self.g = g
        firsts, lasts = g.firsts, g.lasts
        self.naive = any(last < first for first, last in zip(firsts, lasts, strict=True) if first)
        self.firsts = sorted(first for first in firsts if first)
        self.lasts = sorted(last for first, last in zip(firsts, lasts, strict=True) if first)
        ftimed = [v for v in g.flagged if v.get("first_ts")]
        self.ffirsts = sorted(v["first_ts"] for v in ftimed)
        self.flasts = sorted(v["last_ts"] for v in ftimed)

    def _co(self, j: int) -> list[int]:
        """Places of the sessions that overlap the one at ``j`` (itself included): ``_overlap``."""
        firsts, lasts = self.g.firsts, self.g.lasts
        fj, lj = firsts[j], lasts[j]
        return [i for i, (fi, li) in enumerate(zip(firsts, lasts, strict=True))
                if i == j or bool(fi and fj and fi <= lj and fj <= li)]  # fmt: skip

    def count(self, n: int) -> int:
        """Sessions active at the same time as the ``n``-th flagged one."""
        v = self.g.flagged[n]
        if self.naive:
            return len(self._co(self.g.at[n]))
        if not v.get("first_ts"):
            return 1
        # u overlaps v iff u.first <= v.last and not u.last < v.first (u.last < v.first implies
        # u.first <= v.last, so the second set lies inside the first).
        return bisect.bisect_right(self.firsts, v["last_ts"]) - bisect.bisect_left(self.lasts, v["first_ts"])

    def flagged_count(self, n: int) -> int:
        v = self.g.flagged[n]
        if self.naive:
            flagged = set(self.g.at)
            return sum(1 for i in self._co(self.g.at[n]) if i in flagged)
        if not v.get("first_ts"):
            return 1 if v["flagged"] else 0
        return bisect.bisect_right(self.ffirsts, v["last_ts"]) - bisect.bisect_left(self.flasts, v["first_ts"])

    def active(self) -> set[int]:
        """Places of the sessions active at the same time as some flagged one (flagged ones included)."""
        if self.naive:
            return {i for j in self.g.at for i in self._co(j)}
        # Flagged intervals merged into disjoint closed blocks; a session meets the union iff it
        # meets a block (each block is one unbroken span: its parts chain by overlaps). A timed
        # flagged session meets its own block; an untimed one is there as itself.
        out = {i for v, i in zip(self.g.flagged, self.g.at, strict=True) if not v.get("first_ts")}
        blocks: list[list[str]] = []
        for v in sorted((v for v in self.g.flagged if v.get("first_ts")), key=lambda v: v["first_ts"]):
            if blocks and v["first_ts"] <= blocks[-1][1]:
                blocks[-1][1] = max(blocks[-1][1], v["last_ts"])
            else:
                blocks.append([v["first_ts"], v["last_ts"]])
        starts = [b[0] for b in blocks]
        for place, (first, last) in enumerate(zip(self.g.firsts, self.g.lasts, strict=True)):
            if not first:
                continue
            # the last block starting at or before u's end is the only one that can reach u
            i = bisect.bisect_right(starts, last) - 1
            if i >= 0 and blocks[i][1] >= first:
                out.add(place)
        return out


class _Overlaps(_GroupOverlaps):
    """``_GroupOverlaps`` over a group given as verdicts (``first_ts``, ``last_ts``, ``flagged``,
    ``session_id``) and its flagged ones, each asked about by itself."""

    def __init__(self, group: list[dict], flagged: list[dict]):
        g = _Group()
        g.firsts = [u.get("first_ts") for u in group]
        g.lasts = [u.get("last_ts") for u in group]
        place = {id(u): i for i, u in enumerate(group)}
        g.flagged, g.at = list(flagged), [place[id(v)] for v in flagged]
        super().__init__(g)
        self.group, self._number = group, {id(v): n for n, v in enumerate(flagged)}

    def count(self, v: dict) -> int:
        return super().count(self._number[id(v)])

    def flagged_count(self, v: dict) -> int:
        return super().flagged_count(self._number[id(v)])

    def active_ids(self) -> set:
        """Ids of the sessions active at the same time as some flagged one (flagged ones included)."""
        return {self.group[i]["session_id"] for i in self.active()}


class _Verdict:
    """One session's memory_leak verdict, read and written as the dict it was (``v["rise_mb"]``,
    ``v.get("pid")``, ``v["flagged"] = False``; a key never set reads as missing) in slots: one
    per session of the window, 400 k+ at 20 M events, a fifth of a dict's memory."""

    __slots__ = ("session_id", "host", "pid", "basis", "rise_mb", "leak_per_request_mb", "requests",
                 "requests_read", "reserved_first_mb", "reserved_last_mb", "reserved_slope_mb_per_min", "samples", "minutes",
                 "first_ts", "last_ts", "flagged", "process_scoped", "credited")  # fmt: skip

    def __init__(self, **values):
        for k, v in values.items():
            setattr(self, k, v)

    def get(self, key: str, default=None):
        return getattr(self, key, default)

    def __getitem__(self, key: str):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def __setitem__(self, key: str, value) -> None:
        setattr(self, key, value)

    def update(self, **values) -> None:
        for k, v in values.items():
            setattr(self, k, v)


class SessionVerdicts:
    """memory_leak's verdicts on the sessions of a window: ``len`` is how many sessions it judged;
    only the flagged ones (and those a process-scoped finding took over, ``process_scoped``) keep
    a ``_Verdict``, which ``values()``, ``[sid]`` and ``get`` read; ``max_rise`` is the largest
    movement of any session (the checklist's reserved_band value). A healthy session is a count
    and a running maximum, not an object: there are hundreds of thousands of sessions in big logs."""

    __slots__ = ("kept", "checked", "max_rise", "credits", "min_samples", "cpu")

    def __init__(self, credits: Credits | None = None, min_samples: int = 0, cpu: set | frozenset = frozenset()):
        self.kept: dict[str, _Verdict] = {}
        self.checked = 0
        self.max_rise: float | None = None
        # every session judged by its requests' deltas (per-session figures only), and what
        # a session judged by its snapshots needs: the sessions table shows each one's figure
        self.credits = credits if credits is not None else Credits({})
        self.min_samples, self.cpu = min_samples, cpu

    def judgement(self, sid: str, snapshots: dict | None = None) -> dict | None:
        """What memory_leak judged of one session, under the names its finding gives them
        (``basis``, ``rise_mb``, ``leak_per_request_mb``, ``requests_counted``), flagged or not; None
        when it judged nothing of it. ``snapshots``: the session's memory_per_session row."""
        c = self.credits.get(sid)
        if c is not None:
            rate, n = c
            if n < self.min_samples:
                return None
            return {"basis": DELTA_BASIS, "rise_mb": kept_in_all(rate, n), "leak_per_request_mb": rate,
                    "requests_counted": n, "requests_read": self.credits.read(sid)}
        rise = snapshot_rise(snapshots, self.min_samples, self.cpu) if snapshots is not None else None
        if rise is None:
            return None
        return {"basis": SNAPSHOT_BASIS, "rise_mb": rise, "samples": snapshots.get("samples")}

    def judged(self, rise: float) -> None:
        """One more session judged, of movement ``rise`` (max() over them in this order)."""
        if self.checked == 0 or rise > self.max_rise:
            self.max_rise = rise
        self.checked += 1

    def __len__(self) -> int:
        return self.checked

    def values(self):
        return self.kept.values()

    def __getitem__(self, sid: str) -> _Verdict:
        return self.kept[sid]

    def get(self, sid: str, default=None):
        return self.kept.get(sid, default)

    def __contains__(self, sid) -> bool:
        return sid in self.kept


DELTA_BASIS = "request deltas"
SNAPSHOT_BASIS = "reserved_mb over turns"


def snapshot_rise(r: dict, min_samples: int, cpu: set | frozenset) -> float | None:
    """A session's reserved_mb at its last turn minus its first (003 §5.3's turn check), the
    figure memory_leak judges of a session without before/after deltas; None when it has too few
    snapshots, none, or ran on a CPU-only host."""
    if r.get("host") in cpu or (r.get("samples") or 0) < min_samples or r.get("reserved_first_mb") is None:
        return None
    return (r.get("reserved_last_mb") or 0) - r["reserved_first_mb"]


def largest_rise(sessions) -> float | None:
    """The largest movement among memory_leak's verdicts (SessionVerdicts, or a dict of verdicts)."""
    if isinstance(sessions, SessionVerdicts):
        return sessions.max_rise
    return max((v["rise_mb"] for v in sessions.values()), default=None)


def _beyond_load(p: dict, th: dict) -> bool:
    """Leak or load (000 §1.3): is a process's reserved growth more than its requests in flight
    explain? At the in-flight levels seen in both halves of its run, the later half reserved more
    than the earlier half did at that level or any higher one (steady_rise_mb, memory_per_process);
    with no level in both halves (a ramp), growth under a higher peak of requests in flight is
    load. Without in-flight counts: not known, so the growth counts."""
    steady = p.get("steady_rise_mb")
    if steady is not None:
        return steady > th["rise_mb"] / 2
    first, second = p.get("inflight_max_first"), p.get("inflight_max_second")
    return first is None or second is None or second <= first


def memory_leak_verdicts(m: dict, t: dict) -> dict:
    """Per-session reserved/allocated movement and the memory_leak verdict, shared by the rule and
    the checklist's reserved_band row so that they agree on every session.

    Sessions whose requests carry before/after deltas: the memory their own requests keep
    (``attribute_deltas``), times their requests. Others (older logs, the seed format): the turn
    check of 003 §5.3, reserved_mb at the last turn minus the first, whatever the time between
    turns. A session flags when that exceeds rise_mb. Snapshot verdicts that would name most of the
    sessions active at the same time in one process become that process's finding; so does growth
    of a process's reserved memory that flagged sessions do not explain.

    ``{"sessions": SessionVerdicts, "processes": [finding details], "set_aside": [...]}``: the flagged
    sessions' verdicts, the count and the largest movement of all; the drops no request caused that
    the attribution left out (``Credits.set_aside``).
    """
    th = t["memory_leak"]
    min_samples, leak_th, rise_th = th["min_samples"], th["leak_per_request_mb"], th["rise_mb"]
    cpu = cpu_only_hosts(m)
    # a view read twice at most, not a copy (one row per request: kept in DuckDB when large)
    deltas = HostsLeftOut(m.get("request_memory_deltas", []), cpu)
    rates = attribute_deltas(deltas, "gpu_delta_mb", min_requests=min_samples)
    sessions = SessionVerdicts(rates, min_samples, cpu)
    kept = sessions.kept
    for sid, (rate, n) in rates.items():
        if n < min_samples:
            continue
        rise = kept_in_all(rate, n)
        sessions.judged(rise)
        if rate > leak_th and rise > rise_th:
            kept[sid] = _Verdict(session_id=sid, basis=DELTA_BASIS, leak_per_request_mb=rate, requests=n,
                                 requests_read=rates.read(sid), rise_mb=rise, flagged=True)
    # the flagged sessions' host and pid from their last row, and what each of their requests
    # was credited (one more pass only if there are some)
    if kept:
        credited_requests(deltas, "gpu_delta_mb", rates, kept)
        for r in deltas:
            v = kept.get(r["session_id"])
            if v is not None:
                v.update(host=r.get("host"), pid=r.get("pid"))
    rates.release()
    by_delta = list(kept.values())
    # read once as a stream (the table may hold hundreds of thousands of sessions); a session judged
    # by its snapshots keeps its two times in its process's group, a verdict only when flagged
    by_proc: dict[tuple, _Group] = {}
    for r in m.get("memory_per_session", []):
        if r["session_id"] in rates or (rise := snapshot_rise(r, min_samples, cpu)) is None:
            continue
        sessions.judged(rise)
        pkey = (r.get("host"), r.get("pid"))
        g = by_proc.get(pkey)
        if g is None:
            g = by_proc[pkey] = _Group()
        first, last = r.get("first_ts"), r.get("last_ts")
        if rise > rise_th:
            sid = r["session_id"]
            v = kept[sid] = _Verdict(
                session_id=sid, host=r.get("host"), pid=r.get("pid"), basis=SNAPSHOT_BASIS,
                rise_mb=rise, reserved_first_mb=r["reserved_first_mb"], reserved_last_mb=r.get("reserved_last_mb"),
                reserved_slope_mb_per_min=r.get("reserved_slope_mb_per_min"), samples=r.get("samples"),
                minutes=r.get("minutes"), first_ts=first, last_ts=last, flagged=True,
            )
            g.flagged.append(v)
            g.at.append(len(g.firsts))
        g.firsts.append(first)
        g.lasts.append(last)
    processes: list[dict] = []
    # Snapshot verdicts in one process: most of the sessions active at once flagged -> the process.
    for key, g in by_proc.items():
        flagged = g.flagged
        if len(flagged) < 3:
            continue  # fewer than 3 crowded ones, whatever the overlaps
        # For each flagged session, the sessions of its process active at the same time (itself
        # included) and the share of them flagged: near 1 when per-process reserved rose under all.
        co = _GroupOverlaps(g)
        counts = [co.count(n) for n in range(len(flagged))]
        crowded = [n for n, c in enumerate(counts) if c >= 3]
        if len(crowded) < 3:
            continue
        shares = sorted(co.flagged_count(n) / counts[n] for n in crowded)
        if shares[len(shares) // 2] > th["most_sessions_share"]:
            for v in flagged:
                v["flagged"] = False
                v["process_scoped"] = True
            active = len(co.active())
            first = min(flagged, key=lambda v: v.get("first_ts") or "")
            last = max(flagged, key=lambda v: v.get("last_ts") or "")
            processes.append({"host": key[0], "pid": key[1], "sessions": active, "flagged_sessions": len(flagged),
                              "rise_mb": max(v["rise_mb"] for v in flagged), "first_ts": first.get("first_ts"),
                              "last_ts": last.get("last_ts"), "basis": "reserved_mb snapshots"})
    del by_proc
    # Delta-measured processes: reserved growth that flagged sessions do not explain.
    explained: dict[tuple, float] = {}
    for v in by_delta:
        explained[_process_key(v)] = explained.get(_process_key(v), 0.0) + v["rise_mb"]
    for p in m.get("memory_per_process", []):
        if p.get("host") in cpu or p.get("reserved_settled_mb") is None or p.get("reserved_last_mb") is None:
            continue
        # From the end of the first quarter of its requests: the caching allocator's reserved
        # high-water steps up under the first peak of load once per process, not a leak.
        rise = p["reserved_last_mb"] - p["reserved_settled_mb"]
        rest = rise - explained.get(_process_key(p), 0.0)
        # and keeps growing in both halves of what follows: one more high-water step under a new
        # peak of load is the allocator caching, a leak goes on
        mid = p.get("reserved_mid_mb")
        growing = mid is not None and min(mid - p["reserved_settled_mb"], p["reserved_last_mb"] - mid) > th["rise_mb"] / 2
        if growing and not _beyond_load(p, th):
            continue  # memory that follows requests in flight: capacity (capacity_per_level), not a leak
        if growing and rise > th["rise_mb"] and rest > th["rise_mb"] and rest > 0.5 * rise:
            processes.append({"host": p.get("host"), "pid": p.get("pid"), "sessions": p.get("sessions"),
                              "inflight_max": p.get("inflight_max"),
                              "rise_mb": p["reserved_last_mb"] - (p.get("reserved_first_mb") or p["reserved_settled_mb"]),
                              "settled_rise_mb": rise, "unexplained_mb": rest,
                              "steady_rise_mb": p.get("steady_rise_mb"),
                              "minutes": p.get("minutes"), "first_ts": p.get("first_ts"), "last_ts": p.get("last_ts"),
                              "basis": "request before/after"})
    return {"sessions": sessions, "processes": processes, "set_aside": rates.set_aside}


def _refit_keepers(kept: dict[str, list[float]], spans_of: dict[str, list[tuple]], rows: Iterable[dict], key: str,
                   min_requests: int = 1, rounds: int = 50, drops: list[dict] = ()) -> None:
    """Keepers whose requests ran at the same time as others', credited again from their process's
    readings in order (``kept`` is updated in place; ``_refit_process``). Under load a keeper's
    memory is often read first by a neighbour's "after" reading, a few readings before its own: a
    step holds two keeps, the next none, and the steps cannot tell whose; split by the sessions'
    rates, the stronger took more round after round, and a keeper whose keeps were all read by
    others' readings was credited with nothing (four keepers at once on a 2-core box: 2 or 3 of 4
    named, up to twice their keep).

    Keepers: the sessions that keep at least a third of the strongest one's per request, two or
    more of them.
    ``spans_of``: session -> (its request's place, (process, done_before, done_seq)) per request
    judged by steps; ``rows`` are read again (only when some process has a keeper that ran beside
    another session), for the readings (``key``'s "before" and "after" columns) of those processes'
    requests; a process with a request without them keeps its steps' credits. The refit replaces
    the steps' credits only where they split some keep (``_split_keeps``) and it fits the readings
    far better than they do."""
    by_proc: dict[tuple, list[str]] = {}
    for sid, steps in spans_of.items():
        if steps:
            by_proc.setdefault(steps[0][1][0], []).append(sid)
    chosen: dict[tuple, tuple] = {}  # process -> (its keepers, their typical keep)
    for proc, sids in by_proc.items():
        typical = {sid: _mean_positive(kept[sid]) for sid in sids}
        top = max(typical.values(), default=0.0)
        if top <= 0:
            continue
        keepers = {sid for sid in sids if typical[sid] >= top / 3}
        if len(keepers) >= 2 and _ran_together(keepers, spans_of, sids):
            chosen[proc] = (keepers, typical)
    if not chosen:
        return
    col = key.replace("delta_", "")  # rss_delta_mb -> rss_mb_before / rss_mb_after; gpu_delta_mb -> gpu_mb_before / ..._after
    readings: dict[tuple, list[tuple]] = {proc: [] for proc in chosen}
    place: dict[str, int] = {}
    for r in rows:
        sid = r.get("session_id")
        if r.get(key) is None or sid is None:
            continue
        i = place[sid] = place.get(sid, -1) + 1
        reqs = readings.get((r.get("host"), r.get("pid")))
        if reqs is None:
            continue
        before, after = r.get(f"{col}_before"), r.get(f"{col}_after")
        if before is None or after is None or r.get("done_before") is None or r.get("done_seq") is None:
            chosen.pop((r.get("host"), r.get("pid")), None)  # an incomplete sequence: the steps stand
            continue
        reqs.append((r["done_before"], r["done_seq"], r.get("start_ts"), float(before), float(after), sid, i))
    for d in drops:  # the readings from a drop no request caused on, read as if it had not happened
        reqs = readings.get(d["process"])
        for n, (before_seq, seq, start, before, after, sid, i) in enumerate(reqs or ()):
            up_after = (seq, 0, "") >= d["order"]
            up_before = (before_seq, 1, str(start or "")) >= d["order"]
            if up_after or up_before:
                reqs[n] = (before_seq, seq, start, before + d["mb"] * up_before, after + d["mb"] * up_after, sid, i)
    for proc, (keepers, typical) in chosen.items():
        _refit_process(readings[proc], keepers, typical, kept, rounds, min_requests)


def _spans_by_session(stepped: list[tuple], spans: dict[int, tuple]) -> dict[str, list[tuple]]:
    """session -> (its request's place, (process, done_before, done_seq)) per request with a span."""
    out: dict[str, list[tuple]] = {}
    for k, sid, _group, i in _placed(stepped):
        span = spans.get(k)
        if span is not None:
            out.setdefault(sid, []).append((i, span))
    return out


def _placed(stepped: list[tuple]):
    """(index, session, step group, the request's place among its session's) per stepped request."""
    count: dict[str, int] = {}
    for k, (sid, group) in enumerate(stepped):
        i = count.get(sid, 0)
        count[sid] = i + 1
        yield k, sid, group, i


def _ran_together(keepers: set[str], spans_of: dict[str, list[tuple]], sids: Iterable[str]) -> bool:
    """Whether a keeper's request was in flight together with another session's (by the completion
    sequence: B's "after" came after A's "before", and B's "before" before A's "after")."""
    spans = sorted((before, seq, sid) for sid in sids for _i, (_p, before, seq) in spans_of[sid]
                   if before is not None and seq is not None)
    starts = [before for before, _seq, _sid in spans]
    # over the spans started before each place: the latest end, its session, and the latest end
    # of any other session (so a keeper's own requests never count as its company)
    ends1, sids1, ends2 = [], [], []
    e1, s1, e2 = -1, None, -1
    for _before, seq, sid in spans:
        if seq > e1:
            if sid != s1:
                e2 = e1
            e1, s1 = seq, sid
        elif sid != s1 and seq > e2:
            e2 = seq
        ends1.append(e1)
        sids1.append(s1)
        ends2.append(e2)
    for sid in keepers:
        for _i, (_p, before, seq) in spans_of[sid]:
            if before is None or seq is None:
                continue
            k = bisect.bisect_left(starts, seq) - 1
            if k >= 0 and (ends1[k] if sids1[k] != sid else ends2[k]) > before:
                return True
    return False


SPLIT = 1.5  # a keeper's request credited this many times another's: the steps split some keep


def _split_keeps(kept: dict[str, list[float]], keepers: set[str], min_requests: int) -> bool:
    """Whether the steps gave some keeper's request two keeps or none: among the keepers' requests
    from the turns they started keeping, one credited ``SPLIT`` times another, or nothing. (The
    refit also stands where it finds a keeper the steps credited under half its amount: two
    keepers credited two keeps on every request, two others none.)
    Where every keep was credited whole the steps stand, however well a refit fits: on exact
    readings (an allocator's counters) a keep's rise of the lower envelope is the keep less the
    working memory held from before it until after (448 MiB for 512 with two requests' 32 MiB
    always in flight), and two keepers among 16 sessions credited 512 on every request by the
    steps were refitted to 400-464 at under half the steps' placed error. In 22 recorded runs of
    four host-RAM keepers at once and 16 of four GPU keepers, the steps split keeps (a request
    credited 2 to 5 times another, or nothing) in every run where the refit changed credits; in
    14 of 16 real runs of two GPU keepers beside healthy sessions (the Gradio e2e app,
    tests/fixtures/cuda_e2e) they credited every keep whole (at most 1.06 times), and in the
    other 2 the refit failed the 3/4-5/4 check."""
    since = [x for sid in keepers for x in _since(kept[sid], min_requests)]
    low, high = min(since), max(since)
    return high > 0 and (low <= 0 or high >= SPLIT * low)


def _mean_positive(xs: list[float]) -> float:
    return max(sum(xs) / len(xs), 0.0) if xs else 0.0


NULL_MARGIN = 0.25  # of a keep squared: what placing it must gain over keeping nothing
READ_LATE = 0.02  # of a keep squared, per reading its gap lies before its request's "after"
FIT_GAIN = 0.5  # the refit stands where its placed error is below this share of the steps' amounts'


def _refit_process(reqs: list[tuple], keepers: set[str], typical: dict[str, float],
                   kept: dict[str, list[float]], rounds: int, min_requests: int = 1) -> None:
    """Every request's keep, in one process whose keepers ran at once: each is one jump of what the
    process kept (the lowest reading from then on), somewhere between its "before" and "after"
    readings, or nothing; each session keeps one amount per request that keeps. Fitted by least
    squares over every gap between readings (those where nothing was kept too): from each keep at
    its own "after" reading, each request in turn moves its keep to the gap (or to none) that fits
    best, then each session's amount is fitted to its keeps; until nothing moves."""
    order: list[tuple] = []  # (order key, value, request, is after)
    for i, (before_seq, seq, start, before, after, _sid, _place) in enumerate(reqs):
        order.append(((seq, 0, ""), after, i, True))
        order.append(((before_seq, 1, str(start or "")), before, i, False))
    order.sort(key=lambda r: r[0])
    n = len(order)
    env = [0.0] * n
    low = float("inf")
    for j in range(n - 1, -1, -1):
        low = min(low, order[j][1])
        env[j] = low
    opened, closed = [0] * len(reqs), [0] * len(reqs)
    for j, (_k, _v, i, is_after) in enumerate(order):
        if is_after:
            closed[i] = j
        else:
            opened[i] = j
    # gap j: from reading j - 1 to reading j; a request's keep lands in one of (opened, closed]
    rise = [0.0] + [env[j] - env[j - 1] for j in range(1, n)]
    # Free: the keepers, and the sessions whose requests mostly saw the process keep half the
    # strongest keeper's keep across their own span (a keeper the steps credited with little reads
    # its own keeps there). Every other session keeps its credits, each read at its own "after".
    top = max(typical[sid] for sid in keepers)
    seen: dict[str, list[float]] = {}
    for i, r in enumerate(reqs):
        seen.setdefault(r[5], []).append(env[closed[i]] - env[opened[i]])
    free = keepers | {sid for sid, xs in seen.items() if sorted(xs)[len(xs) // 2] >= top / 2}
    pred = [0.0] * n
    sessions: dict[str, list[int]] = {}
    for i, r in enumerate(reqs):
        if r[5] in free:
            sessions.setdefault(r[5], []).append(i)
        elif r[5] in kept:
            pred[closed[i]] += kept[r[5]][r[6]]
    at = list(closed)  # the gap each request's keep is in; -1: it kept nothing
    # keepers start at what the steps credited them, the others at what their spans typically saw
    rate = {sid: typical[sid] if sid in keepers else min(sorted(seen[sid])[len(seen[sid]) // 2], top)
            for sid in sessions}
    for sid, ids in sessions.items():
        for i in ids:
            pred[at[i]] += rate[sid]

    def fit_rates() -> None:
        for sid, ids in sessions.items():
            old = rate[sid]
            num = den = 0.0
            for i in ids:
                if at[i] >= 0:
                    num += rise[at[i]] - (pred[at[i]] - old)
                    den += 1
            new = max(num / den, 0.0) if den else 0.0
            for i in ids:
                if at[i] >= 0:
                    pred[at[i]] += new - old
            rate[sid] = new

    for _ in range(rounds):
        fit_rates()
        moved = 0
        keeping: set[str] = set()  # sessions one of whose requests kept, in this pass
        for i, r in enumerate(reqs):
            if r[5] not in rate:
                continue
            x = rate[r[5]]
            if at[i] >= 0:
                pred[at[i]] -= x
            # Nothing kept, unless a gap's unexplained rise holds at least 5/8 of the keep (a session
            # that keeps a little everywhere would soak up the keepers' rises); but a session keeps
            # from some request on, on every one after it (a cache that fills from some turn).
            best = float("inf") if r[5] in keeping else -NULL_MARGIN * x * x
            where = -1
            for j in range(opened[i] + 1, closed[i] + 1):
                # the change in the squared error were the keep there, plus a little per reading
                # between there and its own "after" (a keep is most often read by its own request)
                change = (rise[j] - pred[j] - x) ** 2 - (rise[j] - pred[j]) ** 2 + READ_LATE * x * x * (closed[i] - j)
                if change < best - 1e-9:
                    best, where = change, j
            if where != at[i]:
                moved += 1
            at[i] = where
            if where >= 0:
                pred[where] += x
                keeping.add(r[5])
        if not moved:
            break
    fit_rates()
    # One jump per keep must account for about what the steps credited these sessions (within a
    # quarter): where the readings are noisy enough that a keep rises over many gaps it accounts
    # for less, where a rise is nobody's keep (CUDA's lazy start-up in the first completion's
    # readings) for more; then the steps stand.
    before = sum(max(v, 0.0) for sid in rate for v in kept[sid])
    after = sum(rate[r[5]] for i, r in enumerate(reqs) if r[5] in rate and at[i] >= 0)
    if not 0.75 * before <= after <= 1.25 * before:
        return
    # Kept only where its amounts explain the readings far better than the steps' amounts do, both
    # placed by one search (``_placed_error``), and only for the sessions that keep by either (the
    # others keep their steps' credits). With many healthy sessions in flight beside two keepers,
    # the search above hands parts of the keepers' rises, and the start-up's, to healthy sessions;
    # the keepers it leaves are then credited less than they kept (a real Gradio run: 25 and 22 MiB
    # per request for 40, one below the threshold), while the steps had each keep whole: their
    # amounts fit better. Where keepers ran together the steps give one 80 and another 0, which
    # no placement of one jump per request fits: in 22 recorded runs of four keepers at once, the
    # refit's error was under a fifth of theirs wherever their credits differed (1/50 for
    # tests/fixtures/gradio_host_overlap2), and with two keepers beside healthy sessions 0.95 to
    # 2.6 times theirs.
    steps = {sid: _mean_positive(_since(kept[sid], min_requests)) for sid in sessions}
    top_refit = max(rate.values(), default=0.0)
    chosen = {sid for sid in sessions if sid in keepers or rate[sid] >= top_refit / 3}
    base = [0.0] * n
    for i, r in enumerate(reqs):
        if r[5] not in sessions and r[5] in kept:
            base[closed[i]] += kept[r[5]][r[6]]
    if not (_split_keeps(kept, keepers, min_requests) or any(steps[sid] < rate[sid] / 2 for sid in chosen)):
        return
    mixed = {sid: rate[sid] if sid in chosen else steps[sid] for sid in sessions}
    if (_placed_error(mixed, reqs, sessions, opened, closed, rise, base)
            >= FIT_GAIN * _placed_error(steps, reqs, sessions, opened, closed, rise, base)):
        return
    for i, r in enumerate(reqs):
        if r[5] in chosen:
            kept[r[5]][r[6]] = rate[r[5]] if at[i] >= 0 else 0.0


def _placed_error(rate: dict[str, float], reqs: list[tuple], sessions: dict[str, list[int]], opened: list[int],
                  closed: list[int], rise: list[float], base: list[float], rounds: int = 10) -> float:
    """The squared error over a process's gaps of one amount per session (``rate``), each of its
    requests keeping it at the one gap of its span where it fits best, or nothing where no gap
    is better for it; ``base``: what the other sessions' requests put in each gap.

    Placed first gap by gap in reading order, a rise going to the requests open over it whose span
    ends first (as long as each lowers the error), so that a request with a short span is not
    left without the rise that only it could have kept; then each request in turn moves to a
    strictly better gap (or to none) until none moves."""
    n = len(rise)
    pred = list(base)
    at: dict[int, int] = {}
    starting: dict[int, list[int]] = {}
    for sid, ids in sessions.items():
        if rate[sid] > 0:
            for i in ids:
                at[i] = -1
                starting.setdefault(opened[i] + 1, []).append(i)
    waiting: list[tuple[int, int]] = []
    for j in range(n):
        for i in starting.get(j, ()):
            heapq.heappush(waiting, (closed[i], i))
        left = []
        while waiting:
            end, i = heapq.heappop(waiting)
            if end < j:
                continue  # its span is over: it kept nothing
            x = rate[reqs[i][5]]
            if (rise[j] - pred[j] - x) ** 2 < (rise[j] - pred[j]) ** 2:
                at[i] = j
                pred[j] += x
            else:
                left.append((end, i))
        for item in left:
            heapq.heappush(waiting, item)
    for _ in range(rounds):
        moved = 0
        for i in at:
            x = rate[reqs[i][5]]
            where, best = at[i], 0.0  # the change in the error were it there; nothing: none
            if where >= 0:
                pred[where] -= x
                best = (rise[where] - pred[where] - x) ** 2 - (rise[where] - pred[where]) ** 2
                if best > 1e-9:
                    where, best = -1, 0.0
            for j in range(opened[i] + 1, closed[i] + 1):
                change = (rise[j] - pred[j] - x) ** 2 - (rise[j] - pred[j]) ** 2
                if change < best - 1e-9:
                    best, where = change, j
            moved += where != at[i]
            at[i] = where
            if where >= 0:
                pred[where] += x
        if not moved:
            break
    return sum((r - p) ** 2 for r, p in zip(rise, pred, strict=True))
