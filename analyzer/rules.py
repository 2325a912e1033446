"""Diagnosis rules (DESIGN.md §6): one function per rule id, over the metric tables only.

Each rule function takes ``(metrics, ingest, thresholds)`` and returns a ``RuleOutcome``:
``status`` is ``fired``, ``pass`` or ``no_data`` (its inputs are missing, e.g. legacy logs have
no prefill, params or samplers: never reported as a pass), with the findings it fired.

A finding (docs/internals.md "Report model") says what is wrong, where (session ids or hosts),
by how much (value against threshold, with unit), what to do (the seed's fix, in English, with
its section) and where the report shows it (evidence section / chart / details). Session-scoped
rules give one finding per rule listing every affected session, so a healthy session never
appears in one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from analyzer.thresholds import DEFAULTS

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
MAX_FINDING_SESSIONS = 200  # ids listed in one finding; session_count has the full number
MAX_DETAIL_ROWS = 50

# -- the registry ------------------------------------------------------------------------------
# Each rule is registered once, by the @rule decorator on its function: what it is (id, default
# severity, seed source, fix), what it reads (metric tables = queries/<name>.sql, and its
# threshold table thresholds.DEFAULTS[id]) and where its findings point (report sections and
# chart ids). RULES, RULE_IDS, RULE_INFO and GPU_RULES below derive from it; tests/test_registry.py
# checks the declarations against what the rules really read and emit, the chart and section
# registries (charts.CHARTS, render_html.SECTIONS) and docs/rules.md. The order of registration
# is DESIGN.md §6's order (findings and the model's rule rows follow it).


@dataclass(frozen=True)
class RuleSpec:
    id: str
    fn: Callable
    severity: str  # default; a finding may raise it (slow_format above its critical threshold)
    source: str  # seed sections, as the finding cites them
    fix: str  # what to do, paraphrasing the seed articles
    inputs: tuple[str, ...]  # metric tables read (queries/<name>.sql)
    sections: tuple[str, ...]  # report sections its findings point to (render_html.SECTIONS)
    charts: tuple[str, ...] = ()  # chart ids its findings point to (charts.CHARTS)
    gpu: bool = False  # judges the GPU: CPU-only hosts get no verdict from it (issue 12)


RULE_SPECS: dict[str, RuleSpec] = {}


def rule(
    rule_id: str,
    *,
    severity: str,
    source: str,
    fix: str,
    inputs: tuple[str, ...],
    sections: tuple[str, ...],
    charts: tuple[str, ...] = (),
    gpu: bool = False,
) -> Callable[[Callable], Callable]:
    """Register ``fn(metrics, ingest, thresholds) -> RuleOutcome`` as rule ``rule_id``."""

    def register(fn: Callable) -> Callable:
        # A mistake here fails at import, not as a silently missing rule or threshold.
        if rule_id in RULE_SPECS:
            raise ValueError(f"rule {rule_id!r} registered twice")
        if severity not in SEVERITIES:
            raise ValueError(f"rule {rule_id!r}: severity {severity!r} is not one of {SEVERITIES}")
        if rule_id not in DEFAULTS:
            raise ValueError(f"rule {rule_id!r} has no threshold table in analyzer/thresholds.py")
        if not sections:
            raise ValueError(f"rule {rule_id!r} names no report section for its findings")
        RULE_SPECS[rule_id] = RuleSpec(rule_id, fn, severity, source, fix, tuple(inputs), tuple(sections),
                                       tuple(charts), gpu)  # fmt: skip
        return fn

    return register


@dataclass
class RuleOutcome:
    rule: str
    status: str  # fired | pass | no_data
    reason: str = ""
    findings: list[dict] = field(default_factory=list)


def _fmt(x, digits: int = 1) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


# Units that count things: one of them reads in the singular ("threshold 1 OOM").
COUNT_UNITS = frozenset({"OOMs", "beams", "events", "lines", "tokens"})


def unit_for(value, unit: str | None) -> str:
    """A finding's unit as it reads next to ``value``."""
    if not unit:
        return ""
    return unit[:-1] if unit in COUNT_UNITS and value == 1 else unit


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def finding(
    rule: str,
    *,
    scope: str,
    value,
    threshold,
    unit: str,
    message: str,
    section: str,
    chart: str | None = None,
    details: dict | None = None,
    session_ids: list[str] | None = None,
    hosts: list[str] | None = None,
    severity: str | None = None,
) -> dict:
    default_severity, source, fix = RULE_INFO[rule]
    # the first MAX_FINDING_SESSIONS in the rule's order (worst first), listed sorted by id
    ids = list(dict.fromkeys(s for s in (session_ids or []) if s is not None))
    return {
        "rule": rule,
        "severity": severity or default_severity,
        "scope": scope,
        "session_ids": sorted(ids[:MAX_FINDING_SESSIONS]),
        "session_count": len(ids),
        "hosts": sorted({h for h in (hosts or []) if h is not None}),
        "value": value,
        "threshold": threshold,
        "unit": unit,
        "message": message,
        "fix": fix,
        "source": source,
        "evidence": {"section": section, "chart": chart, "details": details or {}},
    }


def _scan(rows: Iterable[dict], fires: Callable[[dict], bool]) -> tuple[int, list[dict]]:
    """(rows read, the rows that fire), reading ``rows`` once: a per-session table of 400 k+
    sessions is read as a stream and only the hits are kept (issue 16 item 4)."""
    checked, hit = 0, []
    for r in rows:
        checked += 1
        if fires(r):
            hit.append(r)
    return checked, hit


# Session rules that filter one per-session table and fire on each row alone: rule id ->
# (thresholds -> (table, has its inputs, fires)). Each rule scans its table itself (``_scanned``);
# evaluate_rules reads such a table once for all of its rules (``scan_together``): a table kept in
# DuckDB (rows.LazyRows, 100 k+ sessions) is converted to row dicts on every read, so three rules
# reading generate_params_per_session cost three conversions (issue 16 items 3 and 4).
SESSION_SCANS: dict[str, Callable[[dict], tuple[str, Callable[[dict], bool], Callable[[dict], bool]]]] = {}


def _session_scan(rule_id: str):
    def register(fn):
        SESSION_SCANS[rule_id] = fn
        return fn

    return register


def _scanned(rule_id: str, m: dict, t: dict, scanned: tuple[int, list[dict]] | None):
    """(rows read, the rows that fire) of ``rule_id``'s scan: given by evaluate_rules, else read."""
    table, has, fires = SESSION_SCANS[rule_id](t)
    if scanned is None:
        scanned = _scan((r for r in m.get(table, []) if has(r)), fires)
    return fires, scanned


def scan_together(m: dict, t: dict, rule_ids: Iterable[str], left_out: set | frozenset = frozenset()
                  ) -> dict[str, tuple[int, list[dict]]]:  # fmt: skip
    """``_scan`` of each rule of SESSION_SCANS among ``rule_ids``, each table read once for all of
    them; a GPU rule's scan skips the rows of the hosts in ``left_out`` (as ``without_cpu_hosts``)."""
    by_table: dict[str, list[tuple]] = {}
    for rid in rule_ids:
        if rid in SESSION_SCANS:
            table, has, fires = SESSION_SCANS[rid](t)
            by_table.setdefault(table, []).append((rid, has, fires, RULE_SPECS[rid].gpu and bool(left_out), [0], []))
    out: dict[str, tuple[int, list[dict]]] = {}
    for table, scans in by_table.items():
        for r in m.get(table, []):
            for _rid, has, fires, gpu, checked, hit in scans:
                if gpu and r.get("host") in left_out:
                    continue
                if has(r):
                    checked[0] += 1
                    if fires(r):
                        hit.append(r)
        out.update({rid: (checked[0], hit) for rid, _h, _f, _g, checked, hit in scans})
    return out


def _session_rule(
    rule: str,
    rows: Iterable[dict],
    fires: Callable[[dict], bool],
    value_of: Callable[[dict], float],
    *,
    threshold,
    unit: str,
    describe: Callable[[int, float], str],
    section: str,
    chart: str | None,
    detail_keys: tuple[str, ...],
    no_data_reason: str,
    scanned: tuple[int, list[dict]] | None = None,
) -> RuleOutcome:
    """Common shape of a session rule: evaluate every row that has the inputs, fire once.

    ``rows`` is read once (a generator is fine); ``scanned`` gives ``_scan``'s result instead."""
    checked, hit = scanned if scanned is not None else _scan(rows, fires)
    if not checked:
        return RuleOutcome(rule, "no_data", no_data_reason)
    if not hit:
        return RuleOutcome(rule, "pass", f"{_plural(checked, 'session')} checked")
    hit.sort(key=lambda r: (-(value_of(r) or 0), r["session_id"]))
    worst = value_of(hit[0])
    details = {
        "sessions": [
            {"session_id": r["session_id"], "host": r.get("host"), **{k: r.get(k) for k in detail_keys}}
            for r in hit[:MAX_DETAIL_ROWS]
        ],
        "checked_sessions": checked,
    }
    f = finding(
        rule,
        scope="session",
        value=worst,
        threshold=threshold,
        unit=unit,
        message=describe(len(hit), worst),
        section=section,
        chart=chart,
        details=details,
        session_ids=[r["session_id"] for r in hit],
        hosts=[r.get("host") for r in hit],
    )
    return RuleOutcome(rule, "fired", _plural(len(hit), "session"), [f])


def _host_findings(rule, hit, *, value_key, threshold, unit, message_of, section, chart, detail_keys, scope="host"):
    findings = []
    for r in hit:
        findings.append(
            finding(
                rule,
                scope=scope,
                value=r.get(value_key),
                threshold=threshold,
                unit=unit,
                message=message_of(r),
                section=section,
                chart=chart,
                details={k: r.get(k) for k in detail_keys},
                hosts=[r.get("host")],
            )
        )
    return findings


# -- memory ------------------------------------------------------------------------------------


def attribute_deltas(rows: Iterable[dict], key: str, sweeps: int = 40) -> dict[str, tuple[float, int]]:
    """session -> (memory its requests keep per request, requests) from per-request deltas.

    torch and RSS are per process: a request's before/after delta holds its own leak plus the leaks
    of the other requests of its process that ended while it ran (``ended_during``). Model each
    delta as the sum of those requests' per-session leak rates, plus the working memory (KV cache,
    activations) of requests that started during it and still run (+) or ran at its start and
    ended during it (-), one mean size per process (``transient_coef``), and fit all by least
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
    for r in rows:
        delta = r.get(key)
        sid = r.get("session_id")
        if delta is None or sid is None:
            continue
        k = len(deltas)
        deltas.append(float(delta))
        own[sid] = own.get(sid, 0) + 1
        coef = {sid: 1}
        for other in r.get("ended_during") or []:
            coef[other] = coef.get(other, 0) + 1
        if r.get("transient_coef"):
            coef[("transient", r.get("host"), r.get("pid"))] = r["transient_coef"]
        for u, c in coef.items():
            j = number.get(u)
            if j is None:
                j = number[u] = len(eqs_of)
                eqs_of.append([])
                coefs_of.append([])
            eqs_of[j].append(k)
            coefs_of[j].append(c)
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
    return {sid: (rate[number[sid]], n) for sid, n in own.items()}


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
    times each, what counting the sessions active at once needs (issue 16 item 4)."""

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


def cpu_only_hosts(m: dict) -> set:
    """Hosts whose requests ran on a CPU device and that show nothing GPU-ish (issue 12)."""
    return {
        r["host"] for r in m.get("host_devices", [])
        if (r.get("cpu_device_events") or 0) > 0 and not r.get("gpu_device_events")
        and not r.get("gpu_samples") and not r.get("gpu_memory_readings")
    }


class _Verdict:
    """One session's memory_leak verdict, read and written as the dict it was (``v["rise_mb"]``,
    ``v.get("pid")``, ``v["flagged"] = False``; a key never set reads as missing) in slots: one
    per session of the window, 400 k+ at 20 M events, a fifth of a dict's memory (issue 16 item 4)."""

    __slots__ = ("session_id", "host", "pid", "basis", "rise_mb", "leak_per_request_mb", "requests",
                 "reserved_first_mb", "reserved_last_mb", "reserved_slope_mb_per_min", "samples", "minutes",
                 "first_ts", "last_ts", "flagged", "process_scoped")  # fmt: skip

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
    and a running maximum, not an object: 436 k sessions at 20 M events (issue 16 item 4)."""

    __slots__ = ("kept", "checked", "max_rise")

    def __init__(self):
        self.kept: dict[str, _Verdict] = {}
        self.checked = 0
        self.max_rise: float | None = None

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


def largest_rise(sessions) -> float | None:
    """The largest movement among memory_leak's verdicts (SessionVerdicts, or a dict of verdicts)."""
    if isinstance(sessions, SessionVerdicts):
        return sessions.max_rise
    return max((v["rise_mb"] for v in sessions.values()), default=None)


def memory_leak_verdicts(m: dict, t: dict) -> dict:
    """Per-session reserved/allocated movement and the memory_leak verdict, shared by the rule and
    the checklist's reserved_band row so that they agree on every session.

    Sessions whose requests carry before/after deltas: the memory their own requests keep
    (``attribute_deltas``), times their requests. Others (older logs, the seed format): the turn
    check of 003 §5.3, reserved_mb at the last turn minus the first, whatever the time between
    turns. A session flags when that exceeds rise_mb. Snapshot verdicts that would name most of the
    sessions active at the same time in one process become that process's finding; so does growth
    of a process's reserved memory that flagged sessions do not explain.

    ``{"sessions": SessionVerdicts, "processes": [finding details]}``: the flagged sessions' verdicts,
    the count and the largest movement of all.
    """
    th = t["memory_leak"]
    min_samples, leak_th, rise_th = th["min_samples"], th["leak_per_request_mb"], th["rise_mb"]
    cpu = cpu_only_hosts(m)
    # a view read twice at most, not a copy (one row per request: kept in DuckDB when large, issue 16 item 4)
    deltas = _HostsLeftOut(m.get("request_memory_deltas", []), cpu)
    rates = attribute_deltas(deltas, "gpu_delta_mb")
    sessions = SessionVerdicts()
    kept = sessions.kept
    for sid, (rate, n) in rates.items():
        if n < min_samples:
            continue
        rise = rate * n
        sessions.judged(rise)
        if rate > leak_th and rise > rise_th:
            kept[sid] = _Verdict(session_id=sid, basis="request deltas", leak_per_request_mb=rate, requests=n,
                                 rise_mb=rise, flagged=True)
    # the flagged sessions' host and pid from their last row (one more pass only if there are some)
    if kept:
        for r in deltas:
            v = kept.get(r["session_id"])
            if v is not None:
                v.update(host=r.get("host"), pid=r.get("pid"))
    by_delta = list(kept.values())
    # read once as a stream (the table may hold 400 k+ sessions, issue 16 item 4); a session judged
    # by its snapshots keeps its two times in its process's group, a verdict only when flagged
    by_proc: dict[tuple, _Group] = {}
    for r in m.get("memory_per_session", []):
        if (r.get("host") in cpu or r["session_id"] in rates or (r.get("samples") or 0) < min_samples
                or r.get("reserved_first_mb") is None):
            continue
        rise = (r.get("reserved_last_mb") or 0) - r["reserved_first_mb"]
        sessions.judged(rise)
        pkey = (r.get("host"), r.get("pid"))
        g = by_proc.get(pkey)
        if g is None:
            g = by_proc[pkey] = _Group()
        first, last = r.get("first_ts"), r.get("last_ts")
        if rise > rise_th:
            sid = r["session_id"]
            v = kept[sid] = _Verdict(
                session_id=sid, host=r.get("host"), pid=r.get("pid"), basis="reserved_mb over turns",
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
        if growing and rise > th["rise_mb"] and rest > th["rise_mb"] and rest > 0.5 * rise:
            processes.append({"host": p.get("host"), "pid": p.get("pid"), "sessions": p.get("sessions"),
                              "inflight_max": p.get("inflight_max"),
                              "rise_mb": p["reserved_last_mb"] - (p.get("reserved_first_mb") or p["reserved_settled_mb"]),
                              "settled_rise_mb": rise, "unexplained_mb": rest,
                              "minutes": p.get("minutes"), "first_ts": p.get("first_ts"), "last_ts": p.get("last_ts"),
                              "basis": "request before/after"})
    return {"sessions": sessions, "processes": processes}


def _mib(x: float) -> str:
    return f"{x / 1024:.1f} GiB" if abs(x) >= 1024 else f"{_fmt(x)} MiB"


@rule(
    "memory_leak",
    severity="critical",
    source="000 §5 table; 003 §4.1, §5.3",
    fix=(
        "Reserved GPU memory only goes up: free what generate returns as soon as it is decoded "
        "(`del outputs`, then `torch.cuda.empty_cache()`), never keep GPU tensors in "
        "st.session_state or st.cache_resource (003 §4.1), and pass past_key_values to "
        "generate() explicitly so the KV cache is shared, not rebuilt (000 §5)."
    ),
    inputs=("memory_per_session", "request_memory_deltas", "memory_per_process", "host_devices"),
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
                           f"no session has {th['min_samples']}+ gpu_memory snapshots or memory deltas{why}")
    findings = []
    hit = sorted((v for v in sessions.values() if v["flagged"]), key=lambda v: (-v["rise_mb"], v["session_id"]))
    if hit:
        by_delta = [v for v in hit if v["basis"] == "request deltas"]
        parts = []
        if by_delta:
            parts.append(f"requests keep up to {_fmt(max(v['leak_per_request_mb'] for v in by_delta))} MiB of GPU "
                         f"memory each (other requests' leaks subtracted) in {_plural(len(by_delta), 'session')}")
        if len(by_delta) < len(hit):
            parts.append(f"reserved_mb rises up to {_fmt(max(v['rise_mb'] for v in hit if v['basis'] != 'request deltas'))} "
                         f"MiB over consecutive turns in {_plural(len(hit) - len(by_delta), 'session')}")
        findings.append(finding(
            "memory_leak", scope="session", value=hit[0]["rise_mb"], threshold=th["rise_mb"], unit="MiB",
            message="; ".join(parts) + f" (more than {_fmt(th['rise_mb'])} MiB per session, 003 §5.3)",
            section="memory", chart="memory_timeline",
            details={"sessions": [{k: v.get(k) for k in ("session_id", "host", "pid", "basis", "rise_mb",
                                                          "leak_per_request_mb", "requests", "reserved_first_mb",
                                                          "reserved_last_mb", "reserved_slope_mb_per_min",
                                                          "samples", "minutes") if v.get(k) is not None}
                                  for v in hit[:MAX_DETAIL_ROWS]],
                     "checked_sessions": len(sessions)},
            session_ids=[v["session_id"] for v in hit], hosts=[v.get("host") for v in hit],
        ))
    for p in processes:
        if p["basis"] == "request before/after":
            msg = (f"process {_proc_name((p['host'], p['pid']))}: reserved +{_mib(p['rise_mb'])} over "
                   f"{_fmt(p.get('minutes') or 0, 0)} min across {_plural(p.get('sessions') or 0, 'session')} "
                   f"(up to {p.get('inflight_max') or 1} requests at once); no session stands out")
        else:
            msg = (f"process {_proc_name((p['host'], p['pid']))}: reserved_mb rises up to {_mib(p['rise_mb'])} in "
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
                f"median reserved − allocated (cache held by PyTorch) up to {_fmt(v)} MiB, over "
                f"{_fmt(100 * th['ghost_share'])} % of reserved, in {_plural(n, 'session')}"
            ),
            section="memory", chart="memory_timeline",
            detail_keys=("ghost_p50_mb", "ghost_share_p50", "ghost_max_mb", "reserved_max_mb", "allocated_max_mb"),
            no_data_reason="",
        ).findings
    host_hit = [r for r in hosts if fires(r)]
    findings += _host_findings(
        "ghost_memory", host_hit, value_key="ghost_p50_mb", threshold=th["ghost_mb"], unit="MiB",
        message_of=lambda r: f"{r['host'] or 'the unnamed host'}: median reserved − allocated is {_fmt(r['ghost_p50_mb'])} MiB "
                             f"({_fmt(100 * r['ghost_share_p50'])} % of reserved)",
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
        "Catch torch.cuda.OutOfMemoryError around generate and log it; generate with "
        "num_beams=1 and a bounded max_new_tokens, fall back to greedy (do_sample=False) on OOM, "
        "and trim the dialogue history (003 §3.2, §4.3)."
    ),
    inputs=("oom_per_session", "goodput", "memory_per_session", "memory_per_host", "generate_params_per_session"),
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
            cause = (f"; OOM with num_beams={_fmt(beams)}, then greedy fallback, in "
                     f"{_plural(len(fallback), 'session')}")
        findings.append(finding(
            "oom", scope="session", value=total, threshold=th["min_events"], unit="OOMs",
            message=f"{_plural(total, 'OOM')} in {_plural(len(in_sessions), 'session')} ({most}{how}){cause}",
            section="errors", chart="errors_timeline",
            details={"sessions": [{**{k: r.get(k) for k in ("session_id", "host")}, "ooms": r["ooms"],
                                   **{k: r.get(k) for k in ("oom_errors", "num_ooms_rise", "first_ts", "error_type")}}
                                  for r in in_sessions[:MAX_DETAIL_ROWS]],
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


# -- decode / GPU per session ----------------------------------------------------------------


@_session_scan("gpu_wait")
def _gpu_wait_scan(t):
    th = t["gpu_wait"]["gpu_wait_pct"]
    return ("gpu_wait_per_session", lambda r: r.get("gpu_wait_pct_p50") is not None,
            lambda r: r["gpu_wait_pct_p50"] > th)  # fmt: skip


@rule(
    "gpu_wait",
    severity="warning",
    source="003 §4.2",
    fix=(
        "The CPU waits on the GPU for most of generate while the GPU is not busy: a data "
        "movement bottleneck. Move inputs to model.device once before generate, turn off "
        "pin_memory, tokenize on the CPU (return_tensors='np') and convert once with "
        "torch.tensor(...).to(device) (003 §4.2)."
    ),
    inputs=("gpu_wait_per_session",),
    sections=("gpu",),
    charts=("gpu_wait_hist",),
    gpu=True,
)
def rule_gpu_wait(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["gpu_wait"]["gpu_wait_pct"]
    fires, scanned = _scanned("gpu_wait", m, t, scanned)
    return _session_rule(
        "gpu_wait", (), fires, lambda r: r["gpu_wait_pct_p50"], scanned=scanned,
        threshold=th, unit="%",
        describe=lambda n, v: f"median gpu_wait_pct up to {_fmt(v)} % (CPU waiting on the GPU) in {_plural(n, 'session')}",
        section="gpu", chart="gpu_wait_hist",
        detail_keys=("gpu_wait_pct_p50", "gpu_wait_pct_p90", "count"),
        no_data_reason="no request measured gpu_wait_pct",
    )


@_session_scan("cpu_bound")
def _cpu_bound_scan(t):
    th = t["cpu_bound"]
    util, tpot = th["gpu_util_pct"], th["tpot_ms"]
    return ("decode_per_session",
            lambda r: r.get("gpu_util_pct_p50") is not None and r.get("tpot_p50_ms") is not None,
            lambda r: r["gpu_util_pct_p50"] < util and r["tpot_p50_ms"] > tpot)  # fmt: skip


@rule(
    "cpu_bound",
    severity="warning",
    source="003 §4.2; 000 §1.2",
    fix=(
        "GPU idle while decode is slow: the Python process is the bottleneck (GIL, HTTP/JSON "
        "work, heavy logging). Turn off DEBUG logging (logging.disable(logging.INFO)), reuse "
        "one tokenizer, keep pre/post-processing off the generate thread (000 §1.2, §5; "
        "003 §4.2)."
    ),
    inputs=("decode_per_session",),
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_cpu_bound(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["cpu_bound"]
    fires, scanned = _scanned("cpu_bound", m, t, scanned)
    return _session_rule(
        "cpu_bound", (), fires, lambda r: r["tpot_p50_ms"], scanned=scanned,
        threshold=th["tpot_ms"], unit="ms/token",
        describe=lambda n, v: (
            f"GPU under {_fmt(th['gpu_util_pct'])} % busy while decode takes up to {_fmt(v)} ms/token "
            f"in {_plural(n, 'session')}"
        ),
        section="gpu", chart="gpu_timeline",
        detail_keys=("gpu_util_pct_p50", "tpot_p50_ms", "requests"),
        no_data_reason="no request with both gpu_util_pct and tpot",
    )


@rule(
    "kv_cache_bloat",
    severity="warning",
    source="003 §4.3, §5.4",
    fix=(
        "The context keeps growing: keep use_cache=True, truncate the history to a sliding "
        "window (the last 8 turns, about 1500 tokens) and reuse the cache (reorder_cache) "
        "instead of rebuilding it every turn (003 §4.3)."
    ),
    inputs=("kv_cache_per_session", "prefill_growth_per_session"),
    sections=("kv", "prefill"),
    charts=("kv_growth", "prefill_by_turn"),
)
def rule_kv_cache_bloat(m, ingest, t) -> RuleOutcome:
    th = t["kv_cache_bloat"]
    # Each table read once as a stream, keeping the hits and the ids of sessions with a logged KV
    # length, not a dict of every session's row (400 k+ sessions). Both tables have one row per
    # session (their queries group by session_id).
    hit: list[dict] = []
    kv_ids: set[str] = set()
    kv_len_logged: set[str] = set()
    for r in m.get("kv_cache_per_session", []):
        sid = r["session_id"]
        kv_ids.add(sid)
        seq, size = r.get("kv_seq_len_max"), r.get("kv_cache_size_max_mb")
        if seq is not None:
            kv_len_logged.add(sid)
        if (seq is not None and seq > th["kv_seq_len"]) or (size is not None and size > th["kv_cache_size_mb"]):
            hit.append({"session_id": sid, "host": r.get("host"), "kv_seq_len_max": seq,
                        "kv_cache_size_max_mb": size, "why": "kv"})
    growth_only = 0  # sessions in the growth table and not in the KV table
    # Prefill growing with turns is the evidence when the KV length itself was not logged.
    for g in m.get("prefill_growth_per_session", []):
        sid = g["session_id"]
        growth_only += sid not in kv_ids
        if sid in kv_len_logged:
            continue
        first, last, r2 = g.get("prefill_first_ms"), g.get("prefill_last_ms"), g.get("prefill_r2")
        if (
            first and last and r2 is not None
            and (g.get("turns") or 0) >= th["prefill_growth_min_turns"]
            and last >= th["prefill_growth_ratio"] * first
            and last > th["prefill_growth_min_ms"]
            and (g.get("prefill_slope_ms_per_turn") or 0) > 0
            and r2 >= th["prefill_growth_min_r2"]
        ):
            hit.append({"session_id": sid, "host": g.get("host"), "prefill_first_ms": first,
                        "prefill_last_ms": last, "prefill_r2": r2, "turns": g.get("turns"), "why": "prefill"})
    checked = len(kv_ids) + growth_only
    if not checked:
        return RuleOutcome("kv_cache_bloat", "no_data", "no kv_seq_len, kv_cache_size_mb or prefill timing")
    if not hit:
        return RuleOutcome("kv_cache_bloat", "pass", f"{checked} sessions checked")
    hit.sort(key=lambda r: (-(r.get("kv_seq_len_max") or 0), r["session_id"]))
    n = len(hit)
    by_kv = [r for r in hit if r["why"] == "kv"]
    by_prefill = [r for r in hit if r["why"] == "prefill"]
    for r in by_prefill:
        r["prefill_growth_ratio"] = r["prefill_last_ms"] / r["prefill_first_ms"]
    parts = []
    if by_kv:
        longest = max((r.get("kv_seq_len_max") or 0) for r in by_kv)
        largest = max((r.get("kv_cache_size_max_mb") or 0) for r in by_kv)
        size = f", {_fmt(largest)} MiB" if largest > th["kv_cache_size_mb"] else ""
        parts.append(f"KV cache past {_fmt(th['kv_seq_len'])} tokens or {_fmt(th['kv_cache_size_mb'])} MiB "
                     f"(up to {_fmt(longest)} tokens{size}) in {_plural(len(by_kv), 'session')}")
    if by_prefill:
        ratio = max(r["prefill_growth_ratio"] for r in by_prefill)
        parts.append(f"prefill climbs with turns (last turn up to {_fmt(ratio)}× the first) in "
                     f"{_plural(len(by_prefill), 'session')} without kv_seq_len logged")
    # The card's value, chart and section follow the evidence: a logged KV length is drawn in
    # the KV growth chart; prefill growth alone shows only in the prefill-by-turn chart.
    if by_kv:
        value, threshold, unit, section, chart = longest or None, th["kv_seq_len"], "tokens", "kv", "kv_growth"
    else:
        value, threshold, unit = ratio, th["prefill_growth_ratio"], "× first-turn prefill"
        section, chart = "prefill", "prefill_by_turn"
    f = finding(
        "kv_cache_bloat", scope="session", value=value, threshold=threshold, unit=unit,
        message="; ".join(parts),
        section=section, chart=chart,
        details={"sessions": hit[:MAX_DETAIL_ROWS], "kv_cache_size_mb_threshold": th["kv_cache_size_mb"],
                 "checked_sessions": checked},
        session_ids=[r["session_id"] for r in hit], hosts=[r.get("host") for r in hit],
    )
    return RuleOutcome("kv_cache_bloat", "fired", _plural(n, "session"), [f])


@_session_scan("beam_search")
def _beam_search_scan(t):
    th = t["beam_search"]["num_beams"]
    return ("generate_params_per_session", lambda r: (r.get("num_beams_count") or 0) > 0,
            lambda r: r["num_beams_max"] > th)  # fmt: skip


@rule(
    "beam_search",
    severity="warning",
    source="003 §3.2",
    fix=(
        "Generate with num_beams=1 (sampling or greedy) for chat: beam search runs several "
        "branches, multiplies decode work and memory and caused OOM retries in 003 §3.2."
    ),
    inputs=("generate_params_per_session",),
    sections=("latency",),
)
def rule_beam_search(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["beam_search"]["num_beams"]
    table, has, _fires = SESSION_SCANS["beam_search"](t)

    def rows():
        return (r for r in m.get(table, []) if has(r))

    fires, scanned = _scanned("beam_search", m, t, scanned)
    outcome = _session_rule(
        "beam_search", (), fires, lambda r: r["num_beams_max"], scanned=scanned,
        threshold=th, unit="beams",
        describe=lambda n, v: f"generate runs beam search (num_beams = {_fmt(v)}) in {_plural(n, 'session')}",
        section="latency", chart=None,
        detail_keys=("num_beams_max", "beam_requests", "requests", "beam_failed_requests", "beam_fallback_requests"),
        no_data_reason="no request logged generate params (num_beams)",
    )
    # A failed attempt's params (error event) keep the cause visible behind a fallback (003 §3.2).
    for f in outcome.findings:
        flagged = set(f["session_ids"])
        fb = [r for r in rows() if r["session_id"] in flagged and (r.get("beam_fallback_requests") or 0) > 0]
        if fb:
            beams = max(r.get("failed_num_beams_max") or 0 for r in fb)
            f["message"] += (f"; OOM with num_beams={_fmt(beams)}, then greedy fallback in "
                             f"{_plural(sum(r['beam_fallback_requests'] for r in fb), 'request')} of "
                             f"{_plural(len(fb), 'session')}")
    return outcome


@_session_scan("high_max_tokens")
def _high_max_tokens_scan(t):
    th = t["high_max_tokens"]["max_new_tokens"]
    return ("generate_params_per_session", lambda r: (r.get("max_new_tokens_count") or 0) > 0,
            lambda r: r["max_new_tokens_max"] >= th)  # fmt: skip


@rule(
    "high_max_tokens",
    severity="warning",
    source="000 §2.2",
    fix=(
        "Lower max_new_tokens (the seed app uses 2048): a 4096+ limit lets one request run "
        "thousands of decode steps and hold the GPU (000 §2.2, §4.2)."
    ),
    inputs=("generate_params_per_session",),
    sections=("latency",),
)
def rule_high_max_tokens(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["high_max_tokens"]["max_new_tokens"]
    fires, scanned = _scanned("high_max_tokens", m, t, scanned)
    return _session_rule(
        "high_max_tokens", (), fires, lambda r: r["max_new_tokens_max"], scanned=scanned,
        threshold=th, unit="tokens",
        describe=lambda n, v: f"max_new_tokens set to {_fmt(v)} in {_plural(n, 'session')}",
        section="latency", chart=None, detail_keys=("max_new_tokens_max", "output_len_max"),
        no_data_reason="no request logged generate params (max_new_tokens)",
    )


@_session_scan("long_output")
def _long_output_scan(t):
    th = t["long_output"]["output_len"]
    return ("generate_params_per_session", lambda r: (r.get("output_len_count") or 0) > 0,
            lambda r: r["output_len_max"] > th)  # fmt: skip


@rule(
    "long_output",
    severity="warning",
    source="000 §4.2",
    fix=(
        "Answers of 3000+ tokens make post-processing exceed 100 ms and decode run long: limit "
        "max_tokens in the front end and max_new_tokens in generate (000 §4.2)."
    ),
    inputs=("generate_params_per_session",),
    sections=("latency",),
)
def rule_long_output(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["long_output"]["output_len"]
    fires, scanned = _scanned("long_output", m, t, scanned)
    return _session_rule(
        "long_output", (), fires, lambda r: r["output_len_max"], scanned=scanned,
        threshold=th, unit="tokens",
        describe=lambda n, v: f"outputs of up to {_fmt(v)} tokens in {_plural(n, 'session')}",
        section="latency", chart=None, detail_keys=("output_len_max", "max_new_tokens_max"),
        no_data_reason="no request logged output_len",
    )


# -- global latency ------------------------------------------------------------------------------


def _metric_row(m, table: str, metric: str, key: str = "metric") -> dict | None:
    return next((r for r in m.get(table, []) if r.get(key) == metric), None)


def _p50_rule(rule, row, threshold, *, what, section, chart, no_data_reason, severity=None) -> RuleOutcome:
    if not row or not row.get("count") or row.get("p50_ms", row.get("p50")) is None:
        return RuleOutcome(rule, "no_data", no_data_reason)
    p50 = row.get("p50_ms", row.get("p50"))
    if p50 <= threshold:
        return RuleOutcome(rule, "pass", f"p50 {_fmt(p50)} ms ≤ {_fmt(threshold)} ms over {row['count']}")
    f = finding(
        rule, scope="global", value=p50, threshold=threshold, unit="ms",
        message=f"{what} p50 is {_fmt(p50)} ms (> {_fmt(threshold)} ms) over {_plural(row['count'], 'measurement')}",
        section=section, chart=chart, details={k: v for k, v in row.items()}, severity=severity,
    )
    return RuleOutcome(rule, "fired", f"p50 {_fmt(p50)} ms", [f])


@rule(
    "slow_tokenize",
    severity="warning",
    source="003 §5.2; 000 §4.2",
    fix=(
        "Tokenizing should take < 100 ms (50 ms ideal): load the tokenizer once and reuse it, "
        "and check it does not add redundant special tokens (000 §4.2, §3.3)."
    ),
    inputs=("stage_percentiles",),
    sections=("latency",),
    charts=("stage_latency_by_hour",),
)
def rule_slow_tokenize(m, ingest, t) -> RuleOutcome:
    row = _metric_row(m, "stage_percentiles", "tokenize", key="stage")
    return _p50_rule("slow_tokenize", row, t["slow_tokenize"]["p50_ms"], what="tokenize",
                     section="latency", chart="stage_latency_by_hour", no_data_reason="no tokenize timing")


@rule(
    "slow_prefill",
    severity="warning",
    source="003 §5.2, §5.4",
    fix=(
        "Prefill cost follows the prompt length: truncate the history (last 8 turns, about "
        "1500 tokens, 003 §4.3), keep use_cache=True and put the inputs on the model's device "
        "before generate (003 §4.2)."
    ),
    inputs=("prefill_by_input_class",),
    sections=("prefill",),
    charts=("prefill_vs_input",),
)
def rule_slow_prefill(m, ingest, t) -> RuleOutcome:
    th = t["slow_prefill"]
    classes = {r["input_class"]: r for r in m.get("prefill_by_input_class", [])}
    if not classes:
        return RuleOutcome("slow_prefill", "no_data", "no prefill timing (legacy logs time only inference)")
    short = classes.get("short") or classes.get("unknown")
    outcomes = []
    if short:
        o = _p50_rule("slow_prefill", short, th["p50_ms"],
                      what=f"prefill of prompts < {th['long_input_tokens']} tokens",
                      section="prefill", chart="prefill_vs_input", no_data_reason="")
        outcomes.append(o)
    if classes.get("long"):
        o = _p50_rule("slow_prefill", classes["long"], th["long_p50_ms"],
                      what=f"prefill of prompts ≥ {th['long_input_tokens']} tokens",
                      section="prefill", chart="prefill_vs_input", no_data_reason="")
        outcomes.append(o)
    findings = [f for o in outcomes for f in o.findings]
    reasons = "; ".join(o.reason for o in outcomes if o.reason)
    return RuleOutcome("slow_prefill", "fired" if findings else "pass", reasons, findings)


@_session_scan("slow_decode")
def _slow_decode_scan(t):
    th = t["slow_decode"]["tpot_p50_ms"]
    return ("decode_per_session", lambda r: r.get("tpot_p50_ms") is not None, lambda r: r["tpot_p50_ms"] > th)


@rule(
    "slow_decode",
    severity="warning",
    source="003 §5.2",
    fix=(
        "Decode above 130 ms per token: check GPU utilisation (low means a CPU-GPU imbalance, "
        "003 §4.2), num_beams=1 (003 §3.2) and max_new_tokens; see the gpu_wait and cpu_bound "
        "findings for the cause."
    ),
    inputs=("decode_per_session", "request_latency_percentiles"),
    sections=("latency",),
    charts=("latency_hist",),
)
def rule_slow_decode(m, ingest, t, scanned=None) -> RuleOutcome:
    th = t["slow_decode"]["tpot_p50_ms"]
    fires, scanned = _scanned("slow_decode", m, t, scanned)
    outcome = _session_rule(
        "slow_decode", (), fires, lambda r: r["tpot_p50_ms"], scanned=scanned,
        threshold=th, unit="ms/token",
        describe=lambda n, v: f"median time per output token up to {_fmt(v)} ms in {_plural(n, 'session')}",
        section="latency", chart="latency_hist",
        detail_keys=("tpot_p50_ms", "tpot_max_ms", "gpu_util_pct_p50", "tpot_upper_bound_count"),
        no_data_reason="no request with a tpot (decode or inference timing and output_len)",
    )
    overall = _metric_row(m, "request_latency_percentiles", "tpot_ms")
    if overall and overall.get("p50") is not None and overall["p50"] > th:
        bound = " (upper bound: legacy inference_ms / output_len)" if overall.get("upper_bound_count") else ""
        outcome.findings.append(finding(
            "slow_decode", scope="global", value=overall["p50"], threshold=th, unit="ms/token",
            message=f"median time per output token is {_fmt(overall['p50'])} ms over all requests{bound}",
            section="latency", chart="latency_hist",
            details={k: overall.get(k) for k in ("count", "p50", "p90", "p99", "upper_bound_count")},
        ))
        session_part = outcome.reason + "; " if outcome.status == "fired" else ""
        outcome.reason = f"{session_part}global p50 {_fmt(overall['p50'])} ms"
        outcome.status = "fired"
    return outcome


@rule(
    "slow_ttft",
    severity="warning",
    source="003 §5.2",
    fix=(
        "Time to first token = tokenize + queue + prefill: see which slice dominates in the "
        "stage table. Queue: add workers (demo.launch(server_workers=4), 000 §4.1); prefill: "
        "truncate the history (003 §4.3); tokenize: reuse the tokenizer (000 §4.2)."
    ),
    inputs=("request_latency_percentiles",),
    sections=("latency",),
    charts=("latency_hist",),
)
def rule_slow_ttft(m, ingest, t) -> RuleOutcome:
    row = _metric_row(m, "request_latency_percentiles", "ttft_ms")
    return _p50_rule("slow_ttft", row, t["slow_ttft"]["p50_ms"], what="time to first token",
                     section="latency", chart="latency_hist",
                     no_data_reason="no ttft (needs prefill timing or request events)")


@rule(
    "slow_format",
    severity="warning",
    source="000 §4.2",
    fix=(
        "Post-processing should take < 30 ms; > 100 ms means the reply is too large (3000+ "
        "tokens): limit max_tokens in the front end and keep serialisation and think-chain "
        "parsing light (000 §4.2)."
    ),
    inputs=("stage_percentiles",),
    sections=("latency",),
    charts=("stage_latency_by_hour",),
)
def rule_slow_format(m, ingest, t) -> RuleOutcome:
    th = t["slow_format"]
    row = _metric_row(m, "stage_percentiles", "format", key="stage")
    p50 = row.get("p50_ms") if row else None
    severity = "critical" if p50 is not None and p50 > th["critical_p50_ms"] else None
    threshold = th["critical_p50_ms"] if severity else th["warning_p50_ms"]
    return _p50_rule("slow_format", row, threshold, what="format (post-processing)", section="latency",
                     chart="stage_latency_by_hour", severity=severity,
                     no_data_reason="no format timing (the seed logger writes duration_ms -1)")


# -- hosts -----------------------------------------------------------------------------------


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
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_low_gpu_util(m, ingest, t) -> RuleOutcome:
    th = t["low_gpu_util"]["peak_pct"]
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
    if not peaks:
        return RuleOutcome("low_gpu_util", "no_data", "no GPU utilisation measured while requests ran")
    hit = [p for p in peaks.values() if p["util_peak"] < th]
    if not hit:
        return RuleOutcome("low_gpu_util", "pass", f"{_plural(len(peaks), 'host')} checked")
    findings = _host_findings(
        "low_gpu_util", hit, value_key="util_peak", threshold=th, unit="%",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'}: GPU utilisation never exceeds {_fmt(r['util_peak'])} % "
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
            f"{r['host'] or 'the unnamed host'} GPU {r.get('gpu_index')}: {_fmt(100 * r['starved_share'])} % of the time "
            f"util < {_fmt(th['util_pct'])} % with memory > {_fmt(100 * th['mem_used_share'])} % used"
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
    sections=("gpu",),
    charts=("gpu_timeline",),
    gpu=True,
)
def rule_memory_thrash(m, ingest, t) -> RuleOutcome:
    th = t["memory_thrash"]
    rows = [r for r in m.get("gpu_memory_swing", []) if (r.get("pairs") or 0) > 0]
    if not rows:
        return RuleOutcome("memory_thrash", "no_data",
                           f"no consecutive gpu_sample pairs with memory used ≤ {_fmt(th['max_gap_s'])} s apart")
    hit = [r for r in rows if (r.get("thrash_pairs") or 0) >= th["min_pairs"]]
    if not hit:
        return RuleOutcome("memory_thrash", "pass", f"{_plural(len(rows), 'GPU')} checked")
    findings = _host_findings(
        "memory_thrash", hit, value_key="swing_max_busy_mb_per_s", threshold=th["swing_mb_per_s"], unit="MiB/s",
        message_of=lambda r: (
            f"{r['host'] or 'the unnamed host'} GPU {r.get('gpu_index')}: memory used swings up to {_fmt(r['swing_max_busy_mb_per_s'])} MiB/s "
            f"while util > {_fmt(th['util_pct'])} % ({_plural(r['thrash_pairs'], 'time')})"
        ),
        section="gpu", chart="gpu_timeline",
        detail_keys=("gpu_index", "thrash_pairs", "busy_pairs", "pairs", "swing_max_busy_mb_per_s", "interval_p50_s"),
    )
    return RuleOutcome("memory_thrash", "fired", _plural(len(hit), "GPU"), findings)


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
    sections=("memory",),
)
def rule_rss_growth(m, ingest, t) -> RuleOutcome:
    th = t["rss_growth"]
    rows = [{**r, "rise_mb": (r.get("rss_last_mb") or 0) - (r.get("rss_first_mb") or 0)}
            for r in m.get("rss_per_process", []) if (r.get("samples") or 0) >= th["min_samples"]]
    rates = attribute_deltas(m.get("request_memory_deltas", []), "rss_delta_mb")
    if not rows and not rates:
        return RuleOutcome("rss_growth", "no_data", f"no process with {th['min_samples']}+ process_sample events")
    leaking = {sid: (rate, n) for sid, (rate, n) in rates.items()
               if n >= th["min_samples"] and rate > th["leak_per_request_mb"] and rate * n > th["rise_mb"]}
    # host and pid of those sessions only, from their last row (the table has one row per request)
    host_of = {r["session_id"]: (r.get("host"), r.get("pid"))
               for r in (m.get("request_memory_deltas", []) if leaking else ()) if r["session_id"] in leaking}
    leaky = sorted(
        ({"session_id": sid, "host": host_of[sid][0], "pid": host_of[sid][1], "rss_kept_per_request_mb": rate,
          "requests": n, "rss_kept_mb": rate * n}
         for sid, (rate, n) in leaking.items()),
        key=lambda v: (-v["rss_kept_mb"], v["session_id"]),
    )  # fmt: skip
    findings = []
    if leaky:
        findings.append(finding(
            "rss_growth", scope="session", value=leaky[0]["rss_kept_mb"], threshold=th["rise_mb"], unit="MiB",
            message=(f"host memory (RSS) kept by their own requests: up to {_fmt(leaky[0]['rss_kept_mb'])} MiB "
                     f"({_fmt(leaky[0]['rss_kept_per_request_mb'])} MiB per request) in {_plural(len(leaky), 'session')}"),
            section="memory", chart=None, details={"sessions": leaky[:MAX_DETAIL_ROWS]},
            session_ids=[v["session_id"] for v in leaky], hosts=[v["host"] for v in leaky],
        ))
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
            f"{r['host'] or 'the unnamed host'} pid {r.get('pid')}: RSS rises {_fmt(r['rise_mb'])} MiB "
            f"({_fmt(r.get('rss_slope_mb_per_min'), 2)} MiB/min, R² {_fmt(r.get('rss_r2'), 2)}"
            + (f"; in steps, {_fmt(r.get('rss_held_rise_mb'))} MiB held" if r["shape"] == "steps" else "")
            + ("; no session stands out" if rates else "") + ")"
        ),
        section="memory", chart=None,
        detail_keys=("pid", "rss_first_mb", "rss_last_mb", "rss_slope_mb_per_min", "rss_r2", "rss_held_rise_mb",
                     "shape", "minutes", "samples"),
    )
    if not findings:
        return RuleOutcome("rss_growth", "pass", f"{_plural(len(rows), 'process')} checked")
    return RuleOutcome("rss_growth", "fired", f"{_plural(len(leaky), 'session')}, {_plural(len(hit), 'process')}",
                       findings)


@rule(
    "log_volume",
    severity="warning",
    source="000 §3.2, §5",
    fix=(
        "The service writes more than 1 MB/s of logs, which eats disk IOPS: disable DEBUG "
        "logging (logging.disable(logging.INFO)) and keep one structured line per stage "
        "(000 §3.2, §5; 003 §2.1)."
    ),
    inputs=("log_volume_peak_minute", "collector_write_rate"),
    sections=("collector",),
    charts=("log_volume",),
)
def rule_log_volume(m, ingest, t) -> RuleOutcome:
    th = t["log_volume"]["bytes_per_s"]
    # Line sizes from ingest measure every writer; the collector's byte counter is the fallback.
    rows = [{**r, "source": "line_bytes"} for r in m.get("log_volume_peak_minute", []) if r.get("peak_bytes") is not None]
    if not rows:
        rows = [{**r, "source": "collector bytes_written"} for r in m.get("collector_write_rate", [])
                if r.get("peak_bytes_per_s") is not None]
    if not rows:
        return RuleOutcome("log_volume", "no_data", "no line sizes from ingest and no collector byte counters")
    hit = [r for r in rows if r["peak_bytes_per_s"] > th]
    if not hit:
        return RuleOutcome("log_volume", "pass", f"{_plural(len(rows), 'host')} checked ({rows[0]['source']})")

    def when(r):
        return r.get("peak_minute") or r.get("peak_from")

    findings = _host_findings(
        "log_volume", hit, value_key="peak_bytes_per_s", threshold=th, unit="bytes/s",
        message_of=lambda r: (
            f"{r.get('host') or 'the unnamed host'} wrote {_fmt(r['peak_bytes_per_s'] / 1e6, 2)} MB/s of logs "
            f"at its peak ({when(r)})"
        ),
        section="collector", chart="log_volume",
        detail_keys=("peak_minute", "peak_from", "peak_bytes", "peak_events", "total_bytes", "source"),
    )
    return RuleOutcome("log_volume", "fired", _plural(len(hit), "host"), findings)


@rule(
    "collector_drops",
    severity="warning",
    source="—",
    fix=(
        "The collector's queue overflowed and events were dropped, so other metrics miss data: "
        "raise the collector's queue size or sample less often."
    ),
    inputs=("collector_health",),
    sections=("collector",),
)
def rule_collector_drops(m, ingest, t) -> RuleOutcome:
    th = t["collector_drops"]["dropped"]
    rows = m.get("collector_health", [])
    if not rows:
        return RuleOutcome("collector_drops", "no_data", "no collector health events")
    hit = [r for r in rows if (r.get("dropped") or 0) > th]
    if not hit:
        return RuleOutcome("collector_drops", "pass", f"{_plural(len(rows), 'host')} checked")
    findings = _host_findings(
        "collector_drops", hit, value_key="dropped", threshold=th, unit="events",
        message_of=lambda r: f"the collector on {r.get('host') or 'an unnamed host'} dropped {_fmt(r['dropped'])} events",
        section="collector", chart=None, detail_keys=("dropped", "written", "queued", "processes"),
    )
    return RuleOutcome("collector_drops", "fired", _plural(len(hit), "host"), findings)


@rule(
    "bad_lines",
    severity="info",
    source="—",
    fix=(
        "Malformed lines were skipped and counted (samples in the ingest summary): look for a "
        "writer that died mid-line or two writers interleaving; the logs were not modified."
    ),
    inputs=(),
    sections=("header",),
)
def rule_bad_lines(m, ingest, t) -> RuleOutcome:
    th = t["bad_lines"]["lines"]
    bad = int((ingest or {}).get("bad_lines") or 0)
    skipped = int((ingest or {}).get("skipped_files") or 0)
    if bad <= th:
        return RuleOutcome("bad_lines", "pass", "no malformed lines")
    f = finding(
        "bad_lines", scope="ingest", value=bad, threshold=th, unit="lines",
        message=f"{_plural(bad, 'malformed line')} skipped while reading the logs"
                + (f", and {_plural(skipped, 'file')} not read" if skipped else ""),
        section="header", chart=None,
        details={"samples": list((ingest or {}).get("bad_line_samples") or [])[:20], "skipped_files": skipped},
    )
    return RuleOutcome("bad_lines", "fired", _plural(bad, "line"), [f])


# Derived from the registrations above (@rule), in registration order = DESIGN.md §6 order.
RULES: dict[str, Callable] = {rid: spec.fn for rid, spec in RULE_SPECS.items()}
RULE_IDS: tuple[str, ...] = tuple(RULE_SPECS)
# rule id -> (default severity, seed source, fix)
RULE_INFO: dict[str, tuple[str, str, str]] = {rid: (s.severity, s.source, s.fix) for rid, s in RULE_SPECS.items()}
# Rules that judge the GPU: hosts without one (cpu_only_hosts) get no verdict from them (issue 12).
GPU_RULES: tuple[str, ...] = tuple(rid for rid, spec in RULE_SPECS.items() if spec.gpu)
# The tables GPU rules read lose the rows of CPU-only hosts; host_devices, which says which hosts
# those are, stays whole.
_GPU_TABLES = tuple(dict.fromkeys(t for s in RULE_SPECS.values() if s.gpu for t in s.inputs if t != "host_devices"))


class _HostsLeftOut(Sequence):
    """A metric table read without the rows of some hosts, filtered at each read rather than
    copied: a per-session table of 400 k+ sessions is not held twice (issue 16 item 4)."""

    def __init__(self, rows: Sequence[dict], hosts: set):
        self._rows, self._hosts = rows, hosts
        self._n: int | None = None

    def __iter__(self) -> Iterator[dict]:
        hosts = self._hosts
        return (r for r in self._rows if r.get("host") not in hosts)

    def __len__(self) -> int:
        if self._n is None:
            self._n = sum(1 for _ in self)
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice) or index < 0:
            return list(self)[index]
        for i, r in enumerate(self):
            if i == index:
                return r
        raise IndexError("table index out of range")


def without_cpu_hosts(m: dict) -> dict:
    """The metric tables with the rows of CPU-only hosts left out of the GPU tables."""
    cpu = cpu_only_hosts(m)
    if not cpu:
        return m
    out = dict(m)
    for name in _GPU_TABLES:
        out[name] = _HostsLeftOut(m.get(name, []), cpu)
    return out


def evaluate_rules(
    metrics: dict, ingest: dict, thresholds: dict, leak: dict | None = None
) -> tuple[list[dict], list[dict]]:
    """Run every rule: (findings sorted by severity then rule order, one status row per rule).
    ``leak``: memory_leak_verdicts(metrics, thresholds) when the caller has them (the report's
    checklist reads them too), so they are computed once."""
    findings: list[dict] = []
    statuses: list[dict] = []
    cpu_hosts = cpu_only_hosts(metrics)
    cpu = sorted(h or "the unnamed host" for h in cpu_hosts)
    gpu_metrics = without_cpu_hosts(metrics)
    # each per-session table that several rules filter, read once for all of them
    scans = scan_together(metrics, thresholds, RULES, cpu_hosts)
    for rule_id, fn in RULES.items():
        extra = (leak,) if rule_id == "memory_leak" and leak is not None else ()
        if rule_id in scans:
            extra = (scans.pop(rule_id),)
        outcome = fn(gpu_metrics if rule_id in GPU_RULES else metrics, ingest, thresholds, *extra)
        if cpu and rule_id in GPU_RULES and outcome.status == "no_data" and rule_id != "memory_leak":
            outcome.reason += f"; no GPU on {', '.join(cpu[:5])} (device cpu): no GPU verdict"
        status = "fired" if outcome.findings else outcome.status
        if status == "fired" and not outcome.findings:
            status = "pass"
        statuses.append({
            "rule": rule_id,
            "status": status,
            "reason": outcome.reason,
            "severity": max((f["severity"] for f in outcome.findings), key=lambda s: -SEVERITY_RANK[s])
            if outcome.findings else RULE_INFO[rule_id][0],
            "findings": len(outcome.findings),
            "source": RULE_INFO[rule_id][1],
        })
        findings.extend(outcome.findings)
    order = {r: i for i, r in enumerate(RULE_IDS)}
    findings.sort(key=lambda f: (SEVERITY_RANK[f["severity"]], order[f["rule"]]))
    return findings, statuses
