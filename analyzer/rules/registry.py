"""The rule framework: @rule registration, findings, outcomes, per-session scans."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from dslogs.analyzer.core import thresholds as _thresholds
from dslogs.analyzer.core.severity import SEVERITIES, SEVERITY_RANK  # noqa: F401  (the rules' names for them)

# -- the registry ------------------------------------------------------------------------------
# Each rule is registered once, by the @rule decorator on its function: what it is (id, default
# severity, seed source, fix), what it reads (metric tables = queries/<name>.sql) and where its
# findings point (report sections and chart ids); its numbers are the threshold table [id] of
# analyzer/core/thresholds.py. RULES, RULE_IDS, RULE_INFO and GPU_RULES below derive from it; tests/test_registry.py
# checks the declarations against what the rules really read and emit, the chart and section
# registries (charts.CHARTS, render_html.SECTIONS) and docs/rules.md. The order of registration
# is the order reports list rules in (findings and the model's rule rows follow it).


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
    gpu: bool = False  # judges the GPU: CPU-only hosts get no verdict from it
    needs: tuple[str, ...] = ()  # signals (SIGNALS) it needs that a source format may not carry


RULE_SPECS: dict[str, RuleSpec] = {}
# the rules whose findings are about a session's memory: the memory chart draws every session
# they name (model.report adds the readings of those its series left out)
MEMORY_RULES = ("memory_leak", "ghost_memory", "oom", "rss_growth")
# the KV chart's: a KV finding, or a memory one (the KV cache is part of that memory)
KV_RULES = ("kv_cache_bloat", *MEMORY_RULES)


def rule(
    rule_id: str,
    *,
    severity: str,
    source: str,
    fix: str,
    inputs: tuple[str, ...],
    sections: tuple[str, ...],
    needs: tuple[str, ...],
    charts: tuple[str, ...] = (),
    gpu: bool = False,
) -> Callable[[Callable], Callable]:
    """Register ``fn(metrics, ingest, thresholds) -> RuleOutcome`` as rule ``rule_id``; it judges
    by ``thresholds[rule_id]``, the table of that name in ``dslogs.analyzer.core.thresholds.TABLES``.
    ``needs`` (required, ``()`` for none) names the SIGNALS the rule cannot judge without: where
    no source format of a run carries one, its "no data" says so rather than blaming the logs."""

    def register(fn: Callable) -> Callable:
        # A mistake here fails at import, not as a silently missing rule or threshold.
        if rule_id in RULE_SPECS:
            raise ValueError(f"rule {rule_id!r} registered twice")
        if severity not in SEVERITIES:
            raise ValueError(f"rule {rule_id!r}: severity {severity!r} is not one of {SEVERITIES}")
        if not sections:
            raise ValueError(f"rule {rule_id!r} names no report section for its findings")
        _check_needs(f"rule {rule_id!r}", needs)
        if rule_id not in _thresholds.TABLES:
            raise ValueError(f"rule {rule_id!r} has no threshold table [{rule_id}] in analyzer/core/thresholds.py")
        RULE_SPECS[rule_id] = RuleSpec(rule_id, fn, severity, source, fix, tuple(inputs), tuple(sections),
                                       tuple(charts), gpu, tuple(needs))  # fmt: skip
        return fn

    return register


# What a rule or a check may need that a source format may not carry: a stage's timing, GPU
# memory readings, GPU utilisation, the KV cache's size, the reasoning block's length. Source
# formats name what they lack in these words (tests/test_checklist.py keeps the two agreeing).
SIGNALS = frozenset({"tokenize", "queue", "prefill", "format", "gpu_memory", "gpu_util", "kv_cache", "reasoning"})


def _check_needs(what: str, needs) -> None:
    if not isinstance(needs, tuple) or not all(isinstance(n, str) for n in needs):
        raise ValueError(f"{what}: needs must be a tuple of signal names, got {needs!r}")
    if unknown := sorted(set(needs) - SIGNALS):
        raise ValueError(f"{what}: needs {unknown}, not among the signals {sorted(SIGNALS)}")


def not_carried(formats: dict | None, needs) -> list[str]:
    """The ``needs`` that no source format the run read events in carries (none when it read no
    events)."""
    from dslogs.analyzer.ingest import unavailable

    return [n for n in needs if unavailable(formats, n)]


def not_available(formats: dict | None) -> tuple[str, str]:
    """(status, reason) of a check or rule whose input the run's source formats do not carry."""
    from dslogs.analyzer.ingest import NOT_AVAILABLE

    return NOT_AVAILABLE, "not available for this source (" + ", ".join(sorted(formats or {})) + ")"


@dataclass
class RuleOutcome:
    rule: str
    status: str  # fired | pass | no_data
    reason: str = ""
    findings: list[dict] = field(default_factory=list)


# -- the health checklist ---------------------------------------------------------------------
# Article 003's checklist (§5.2-5.4) as data checks, registered beside the rules by the @check
# decorator (rules/checklist.py, in the order the report lists them): each row measures one value
# and judges it against the threshold of the rule that judges the same thing (``threshold``, a
# "table.key" of the thresholds), citing the section that threshold cites. A FAIL row names the
# findings of its ``rules``, or says on the row why there is none (rules.evaluate_checks).


@dataclass(frozen=True)
class Measure:
    """What a check measured: its label (quoting the thresholds), its value (None: no data)."""

    label: str
    value: float | int | None
    note: str | None = None
    fails: bool | None = None  # the verdict, when it is a rule's rather than value against threshold
    extra: dict = field(default_factory=dict)  # fields the row adds after the note (reserved_band's sessions)
    no_finding: str | None = None  # why a FAIL comes with no finding of the check's rules, when the check knows


def above(value, threshold) -> bool:
    return value > threshold


def below(value, threshold) -> bool:
    return value < threshold


def at_least(value, threshold) -> bool:
    """A count threshold that counts once reached (the oom rule's min_events)."""
    return value >= threshold


@dataclass(frozen=True)
class CheckSpec:
    id: str
    fn: Callable  # (metrics, thresholds, context) -> Measure
    rules: tuple[str, ...]  # rules whose findings explain a FAIL; the first judges the same threshold
    threshold: str | float  # "table.key" of the thresholds, or a fixed number (no_oom's 0)
    cite: str  # "table.key" whose source the row cites
    unit: str
    needs: tuple[str, ...]  # SIGNALS the check cannot measure without
    fails: Callable[[object, object], bool]  # (value, threshold) -> FAIL, as the first rule fires

    @property
    def gpu(self) -> bool:
        """Judges the GPU (its rules do): not applicable where no host has one."""
        return bool(self.rules) and all(RULE_SPECS[r].gpu for r in self.rules)


CHECK_SPECS: dict[str, CheckSpec] = {}


def check(
    check_id: str,
    *,
    rules: tuple[str, ...],
    threshold: str | float,
    unit: str,
    needs: tuple[str, ...],
    fails: Callable[[object, object], bool] = above,
    cite: str | None = None,
) -> Callable[[Callable], Callable]:
    """Register ``fn(metrics, thresholds, context) -> Measure`` as checklist row ``check_id``."""

    def register(fn: Callable) -> Callable:
        if check_id in CHECK_SPECS:
            raise ValueError(f"check {check_id!r} registered twice")
        if unknown := [r for r in rules if r not in RULE_SPECS]:
            raise ValueError(f"check {check_id!r}: rules {unknown} are not registered (yet)")
        key = cite or threshold
        if not isinstance(key, str) or key.count(".") != 1:
            raise ValueError(f"check {check_id!r} cites no threshold key (table.key): {key!r}")
        _check_needs(f"check {check_id!r}", needs)
        CHECK_SPECS[check_id] = CheckSpec(check_id, fn, tuple(rules), threshold, key, unit, tuple(needs), fails)
        return fn

    return register


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
    spec = RULE_SPECS[rule]
    default_severity, source, fix = spec.severity, spec.source, spec.fix
    # every session, listed sorted by id (machine output holds no silent cut)
    ids = list(dict.fromkeys(s for s in (session_ids or []) if s is not None))
    return {
        "rule": rule,
        "severity": severity or default_severity,
        "scope": scope,
        "session_ids": sorted(ids),
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
    sessions is read as a stream and only the hits are kept."""
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
# reading generate_params_per_session cost three conversions.
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
            for r in hit
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


def cpu_only_hosts(m: dict) -> set:
    """Hosts whose requests ran on a CPU device and that show nothing GPU-ish."""
    return {
        r["host"] for r in m.get("host_devices", [])
        if (r.get("cpu_device_events") or 0) > 0 and not r.get("gpu_device_events")
        and not r.get("gpu_samples") and not r.get("gpu_memory_readings")
    }


class HostsLeftOut(Sequence):
    """A metric table read without the rows of some hosts, filtered at each read rather than
    copied: a per-session table of 400 k+ sessions is not held twice."""

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
