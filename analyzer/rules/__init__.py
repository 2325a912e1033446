"""Diagnosis rules: one function per rule id, over the metric tables only.

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

import re
from collections.abc import Callable
from importlib import import_module

from dslogs.analyzer.core import thresholds as _thresholds
from dslogs.analyzer.rules.registry import (
    CHECK_SPECS,
    RULE_SPECS,
    SEVERITY_RANK,
    HostsLeftOut,
    cpu_only_hosts,
    not_available,
    not_carried,
    scan_together,
)

# One module per area; importing one registers its rules. Rules are evaluated, and findings and
# the model's rule rows listed, in registration order: this order. The checklist's rows come
# last: each names rules registered before it.
AREAS = ("memory", "decode", "params", "latency", "hosts", "collector", "capacity", "checklist")
for _area in AREAS:
    import_module(f"{__name__}.{_area}")

# Derived from the registrations above (@rule), in registration order (the order findings and docs/rules.md list them in).
RULES: dict[str, Callable] = {rid: spec.fn for rid, spec in RULE_SPECS.items()}
RULE_IDS: tuple[str, ...] = tuple(RULE_SPECS)
# rule id -> (default severity, seed source, fix)
RULE_INFO: dict[str, tuple[str, str, str]] = {rid: (s.severity, s.source, s.fix) for rid, s in RULE_SPECS.items()}
# Rules that judge the GPU: hosts without one (cpu_only_hosts) get no verdict from them.
GPU_RULES: tuple[str, ...] = tuple(rid for rid, spec in RULE_SPECS.items() if spec.gpu)
# The tables GPU rules read lose the rows of CPU-only hosts; host_devices, which says which hosts
# those are, stays whole.
_GPU_TABLES = tuple(dict.fromkeys(t for s in RULE_SPECS.values() if s.gpu for t in s.inputs if t != "host_devices"))


def without_cpu_hosts(m: dict) -> dict:
    """The metric tables with the rows of CPU-only hosts left out of the GPU tables."""
    cpu = cpu_only_hosts(m)
    if not cpu:
        return m
    out = dict(m)
    for name in _GPU_TABLES:
        out[name] = HostsLeftOut(m.get(name, []), cpu)
    return out


def evaluate_rules(
    metrics: dict, ingest: dict, thresholds: dict, leak: dict | None = None, rss=None
) -> tuple[list[dict], list[dict]]:
    """Run every rule: (findings sorted by severity then rule order, one status row per rule).
    ``leak``: memory_leak_verdicts(metrics, thresholds) when the caller has them (the report's
    checklist reads them too), ``rss``: hosts.rss_credits(metrics, thresholds) (the sessions
    table reads them too), so they are computed once."""
    findings: list[dict] = []
    statuses: list[dict] = []
    cpu_hosts = cpu_only_hosts(metrics)
    cpu = sorted(h or "the unnamed host" for h in cpu_hosts)
    gpu_metrics = without_cpu_hosts(metrics)
    # each per-session table that several rules filter, read once for all of them
    scans = scan_together(metrics, thresholds, RULES, cpu_hosts)
    for rule_id, fn in RULES.items():
        extra = (leak,) if rule_id == "memory_leak" and leak is not None else ()
        if rule_id == "rss_growth" and rss is not None:
            extra = (rss,)
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
    _host_ram_note(statuses)
    order = {r: i for i, r in enumerate(RULE_IDS)}
    findings.sort(key=lambda f: (SEVERITY_RANK[f["severity"]], order[f["rule"]]))
    return findings, statuses


def _host_ram_note(statuses: list[dict]) -> None:
    """memory_leak judges GPU memory only: without GPU readings it has no data while host RAM
    readings were judged, by rss_growth, whose row says so beside it."""
    by_rule = {r["rule"]: r for r in statuses}
    leak, rss = by_rule.get("memory_leak"), by_rule.get("rss_growth")
    if leak and rss and leak["status"] == "no_data" and rss["status"] != "no_data":
        leak["reason"] += f"; host RAM (RSS) is judged by rss_growth ({rss['status']})"


# -- the health checklist ----------------------------------------------------------------------

PASS, FAIL, NO_DATA, NOT_APPLICABLE = "PASS", "FAIL", "NO DATA", "N/A"
CHECK_IDS: tuple[str, ...] = tuple(CHECK_SPECS)


def rules_unavailable(rule_status: list[dict], formats: dict | None) -> None:
    """A rule with no data whose input the run's source formats do not carry says so."""
    for r in rule_status:
        spec = RULE_SPECS.get(r.get("rule"))
        if r.get("status") == "no_data" and spec is not None and not_carried(formats, spec.needs):
            r["reason"] = not_available(formats)[1]


def _threshold(t: dict, key: str | float):
    if isinstance(key, str):
        table, name = key.split(".")
        return t[table][name]
    return key


def _citation(key: str) -> str:
    """The seed section a threshold's source cites first ("003 §5.2: ..." -> "003 §5.2")."""
    table, name = key.split(".")
    source = _thresholds.SOURCES[table][name]
    m = re.match(r"\d{3} §[\d.]+", source)
    return m.group(0) if m else source


def evaluate_checks(
    metrics: dict,
    thresholds: dict,
    *,
    leak: dict,
    formats: dict | None = None,
    findings: list[dict] = (),
    rule_status: list[dict] = (),
    no_gpu: bool = False,
) -> list[dict]:
    """The checklist rows (registration order): PASS, FAIL or NO DATA with the measured value; "N/A"
    where no host has a GPU (a GPU check), NOT_AVAILABLE where the source does not carry the input.
    A FAIL names the rules among the check's whose findings explain it (``findings``), or says why
    none did (``no_finding``). ``leak``: memory_leak_verdicts, computed once for the rule and the
    reserved_band row."""
    fired = {f["rule"] for f in findings}
    status_of = {r["rule"]: r for r in rule_status}
    ctx = {"leak": leak, "formats": formats}
    rows = []
    for spec in CHECK_SPECS.values():
        # a GPU check leaves CPU-only hosts out itself, as its rule does (the leak verdicts skip them)
        measured = spec.fn(metrics, thresholds, ctx)
        threshold = _threshold(thresholds, spec.threshold)
        value = measured.value
        if value is None:
            status = NO_DATA
        else:
            fails = spec.fails(value, threshold) if measured.fails is None else measured.fails
            status = FAIL if fails else PASS
        row = {"id": spec.id, "label": measured.label, "status": status, "value": value, "threshold": threshold,
               "unit": spec.unit, "source": _citation(spec.cite)}  # fmt: skip
        if measured.note:
            row["note"] = measured.note
        row.update(measured.extra)
        if value is None and not_carried(formats, spec.needs):
            row["status"], row["note"] = not_available(formats)
        if no_gpu and spec.gpu:
            row.update(status=NOT_APPLICABLE, value=None, note="not applicable (no GPU)")
        if row["status"] == FAIL:
            if explained := [r for r in spec.rules if r in fired]:
                row["findings"] = explained
            else:
                row["no_finding"] = measured.no_finding or _why_no_finding(spec.rules, status_of)
        rows.append(row)
    return rows


def _why_no_finding(rules: tuple[str, ...], status_of: dict) -> str:
    """What the check's rules said instead of firing."""
    said = [f"{r} {status_of[r]['status']} ({status_of[r]['reason']})" for r in rules if r in status_of]
    return "; ".join(said) or "no rule judges this check"
