"""Diagnosis accuracy on the simulator's scenarios: recall and precision per scenario.

For each scenario of ``dslogs.analyzer.simulate.SCENARIOS`` (in v1 and, where the scenario can be
written that way, in the legacy format of article 003) and of
``dslogs.analyzer.simulate.concurrent.CONCURRENT_SCENARIOS`` (one process serving overlapping sessions,
CPU-only hosts, OOM fallbacks, seed-format turn spacing), simulate into a temporary folder with a
fixed seed, run ``analyze_logs`` on it, and compare the findings with ``truth.json``:

- recall: share of the injected sessions / hosts (or the one global / ingest fault) that the
  scenario's rule flagged;
- precision: share of flagged items that truth.json allows. Flagged items are every session or
  host named by a warning or critical finding of any rule, and global findings; an item is
  allowed for a rule when it was injected with that rule's fault (or with a fault whose
  ``also_fires`` lists the rule: it fires by construction on the same sessions, on the fault's
  hosts, or over the whole run when the rule is a global one such as a p95 over every request);
- capacity scenarios (concurrency_cliff, oom_at_concurrency): the capacity section's knee and
  recommended limit against truth.json's knee and safe level, within one level.

Usage: ``python bench/accuracy.py [--seed N] [--hosts N] [--hours H] [--format v1|legacy|both]
[SCENARIO ...]``; prints a table and exits 1 when any row is below 100 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dslogs.analyzer.simulate import SCENARIOS, simulate  # noqa: E402
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent  # noqa: E402
from dslogs.analyzer.usecases.analyze import analyze_logs  # noqa: E402

FLAG_SEVERITIES = ("warning", "critical")


@dataclass
class Score:
    scenario: str
    fmt: str
    expected: set = field(default_factory=set)
    flagged_by_rule: set = field(default_factory=set)
    false_positives: list = field(default_factory=list)
    status: str = ""
    seconds: float = 0.0
    # capacity scenarios: (found, planted) knee and safe level; ok within one level
    capacity: dict = field(default_factory=dict)

    @property
    def recall(self) -> float:
        if not self.expected:
            return 1.0
        return len(self.expected & self.flagged_by_rule) / len(self.expected)

    @property
    def precision(self) -> float:
        true_pos = len(self.expected & self.flagged_by_rule)
        flagged = true_pos + len(self.false_positives)
        return 1.0 if flagged == 0 else true_pos / flagged

    @property
    def capacity_ok(self) -> bool:
        return all(found is not None and abs(found - planted) <= 1 for found, planted in self.capacity.values())

    @property
    def ok(self) -> bool:
        return self.recall == 1.0 and self.precision == 1.0 and self.capacity_ok


def _items(scope: str | None, rule: str, sessions, hosts) -> set:
    if scope == "session":
        return {("session", x) for x in sessions or []}
    if scope in ("host", "process"):
        return {("host", x) for x in hosts or []}
    return {(scope, rule)}  # global, ingest: the fault is the whole run / the files


def allowed_items(truth: dict) -> dict[str, set]:
    """rule -> the items truth.json says it may flag (its own injected items, and those of the
    scenarios that list it in also_fires)."""
    allowed: dict[str, set] = {}
    for name, spec in (truth.get("scenarios") or {}).items():
        rule = spec.get("rule") or (None if name == "healthy" else name)
        if not rule:
            continue
        items = _items(spec.get("scope"), rule, spec.get("sessions"), spec.get("hosts"))
        allowed.setdefault(rule, set()).update(items)
        for sid in ((spec.get("details") or {}).get("capacity") or {}).get("oom_sessions") or []:
            allowed.setdefault("oom", set()).add(("session", sid))
        for also in spec.get("also_fires") or []:
            allowed.setdefault(also, set()).update(
                i for i in items if i[0] in ("session", "host")
            )
            # the rule's own scope may differ from the fault's: a host rule over the fault's
            # hosts, a global rule over the run
            allowed[also].update(("host", h) for h in spec.get("hosts") or [])
            allowed[also].add(("global", also))
            if spec.get("scope") == "ingest":
                allowed[also].add(("ingest", also))
    return allowed


def score(model: dict, truth: dict, scenario: str) -> Score:
    """Compare a report model with truth.json for one injected scenario (or healthy).

    Recall is about ``scenario``'s rule; a false positive is any item that any warning or critical
    finding (or a finding of an injected rule) names without truth.json allowing it for that rule,
    so in a multi-fault run every stray finding counts against every scenario.
    """
    result = Score(scenario, truth.get("format", "v1"))
    spec = (truth.get("scenarios") or {}).get(scenario) or {}
    rule = spec.get("rule")
    allowed = allowed_items(truth)
    if rule:
        result.expected = _items(spec.get("scope"), rule, spec.get("sessions"), spec.get("hosts"))
    statuses = {r["rule"]: r["status"] for r in model.get("rules") or []}
    result.status = statuses.get(rule, "") if rule else ""
    for f in model.get("findings") or []:
        frule = f["rule"]
        if f.get("severity") not in FLAG_SEVERITIES and frule not in allowed:
            continue
        items = _items(f.get("scope"), frule, f.get("session_ids"), f.get("hosts"))
        if frule == rule:
            result.flagged_by_rule |= items
        result.false_positives += [(frule, i) for i in sorted(items - allowed.get(frule, set()))]
    planted = (spec.get("details") or {}).get("capacity")
    if planted and planted.get("recommendation"):
        found = (model.get("capacity") or [{}])[0]
        result.capacity = {"knee": (found.get("knee"), planted["knee"]),
                           "safe level": ((found.get("recommendation") or {}).get("limit"), planted["safe_level"])}
    return result


def run_scenario(scenario: str, fmt: str, seed: int, hosts: int, hours: float | None, workdir: Path) -> Score:
    out = workdir / f"{scenario}-{fmt}"
    t0 = time.perf_counter()
    if scenario in CONCURRENT_SCENARIOS:
        simulate_concurrent(out, scenario, seed=seed)
    else:
        simulate(out, scenarios=[scenario], seed=seed, fmt=fmt, hosts=hosts, hours=hours)
    truth = json.loads((out / "truth.json").read_text(encoding="utf-8"))
    model = analyze_logs([str(out)], use_cache=False)
    result = score(model, truth, scenario)
    result.seconds = time.perf_counter() - t0
    return result


def cases(names: list[str] | None, formats: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for name in names or [*SCENARIOS, *CONCURRENT_SCENARIOS]:
        if name in CONCURRENT_SCENARIOS:
            if CONCURRENT_SCENARIOS[name].fmt in formats:
                out.append((name, CONCURRENT_SCENARIOS[name].fmt))
            continue
        for fmt in formats:
            if fmt in SCENARIOS[name].formats:
                out.append((name, fmt))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--hours", type=float, default=None, help="simulate this many hours instead of a day")
    ap.add_argument("--format", choices=("v1", "legacy", "both"), default="both")
    args = ap.parse_args(argv)
    formats = ("v1", "legacy") if args.format == "both" else (args.format,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dslogs-accuracy-") as tmp:
        for name, fmt in cases(args.scenarios, formats):
            rows.append(run_scenario(name, fmt, args.seed, args.hosts, args.hours, Path(tmp)))
            r = rows[-1]
            print(f"{r.scenario:16} {r.fmt:6} recall {r.recall:7.1%}  precision {r.precision:7.1%}  "
                  f"items {len(r.expected):4}  rule {r.status or '-':8} {r.seconds:5.1f} s", flush=True)
            for what, (found, planted) in r.capacity.items():
                print(f"    {what}: found {found}, planted {planted}")
            for fp in r.false_positives[:5]:
                print(f"    false positive: {fp}")
            missed = sorted(r.expected - r.flagged_by_rule)[:5]
            for m in missed:
                print(f"    missed: {m}")
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} scenario runs at 100 % recall and precision "
          "(capacity scenarios: knee and safe level within one level)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
