"""Fault simulator: realistic, deterministic logs with known faults, and their truth.json.

``simulate(outdir, scenarios, days, seed, fmt, events, hosts, start)`` writes one folder per
host (``<outdir>/<host>/ds15b_YYYYMMDD[.N].jsonl[.gz]``; legacy with one host writes the
article's flat ``<outdir>/ds15b_YYYYMMDD.jsonl``) and ``<outdir>/truth.json``. Same arguments
give the same bytes: every random draw comes from ``random.Random`` seeded with a string made
of the seed, the scenarios, the format and the host, and nothing reads the clock.

``--events N`` scales the session arrival rate (count-only passes calibrate it, ±10 %); a host
still writes its idle samplers and heartbeats once a minute, so one host-day never has fewer
than ~4.3 k events (use ``hours=`` for smaller runs).

Hosts: ``gpu-01``, ``gpu-02``, ...; v1 hosts write UTC offsets ``+00:00`` except ``gpu-02`` at
``+08:00`` (to exercise time zones); legacy hosts write naive Asia/Shanghai (+08:00) local time,
like the article's readers. Files follow each writer's local day.
"""

from __future__ import annotations

import gc
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.outfile import out_folder
from dslogs.analyzer.core.time import wall_clock
from dslogs.analyzer.simulate.files import RotatingWriter
from dslogs.analyzer.simulate.legacy import LegacyHost
from dslogs.analyzer.simulate.scenarios import (
    GLOBAL,
    HOST,
    INGEST,
    PROCESS,
    SCENARIOS,
    SESSION,
    ScenarioSpec,
    assign_hosts,
    normalise,
    p50,
)
from dslogs.analyzer.simulate.traffic import MS_PER_HOUR, Host, Planner, Session
from dslogs.analyzer.simulate.v1 import V1Host
from dslogs_collector.schema import DEFAULT_MAX_BYTES, DEFAULT_PREFIX

__all__ = ["SCENARIOS", "ScenarioSpec", "simulate"]

DEFAULT_START = "2026-11-23"
LEGACY_OFFSET_MIN = 480  # Asia/Shanghai: the seed articles' readers
MAX_HOSTS = 99


def _parse_start(start: str | None) -> datetime:
    return wall_clock(start or DEFAULT_START, "--start", "an ISO date like 2026-11-23 (or 2026-11-23T09:30)")


def _hosts(
    n: int, fmt: str, start: datetime, span_ms: int, host_faults: dict[str, int], key: str, prefix: str = "gpu"
) -> list[Host]:
    hosts = []
    for i in range(n):
        offset = LEGACY_OFFSET_MIN if fmt == "legacy" else (480 if i == 1 else 0)
        utc_start = (start - timedelta(minutes=offset)).replace(tzinfo=UTC)
        start_ms = int(utc_start.timestamp() * 1000)
        rng = Random(f"{key}|host|{i}")
        faults = frozenset(name for name, h in host_faults.items() if h == i)
        hosts.append(
            Host(
                index=i,
                name=f"{prefix}-{i + 1:02d}",
                pid=rng.randint(1200, 64000),
                offset_min=offset,
                start_ms=start_ms,
                end_ms=start_ms + span_ms,
                faults=faults,
                reserved_mb=4160.0 + 20 * rng.randint(0, 4),
            )
        )
    return hosts


class _Run:
    """One pass over all hosts: count-only (calibration) or writing."""

    def __init__(self, key, fmt, hosts, names, scale, outdir=None, max_bytes=None, executor=None, change=None,
                 max_turns=None):  # fmt: skip
        self.key, self.fmt, self.hosts, self.names, self.scale = key, fmt, hosts, names, scale
        self.max_turns = max_turns  # cap on a healthy session's requests (None: the traffic model's)
        self.change = change  # (name, ms after each host's start) or None: analyzer/simulate/changes.py
        self.outdir, self.max_bytes, self.executor = outdir, max_bytes, executor
        self.session_faults = [n for n in names if SCENARIOS[n].scope == SESSION]
        self.global_faults = frozenset(n for n in names if SCENARIOS[n].scope == GLOBAL)
        self.sparse = frozenset(n for n in names if SCENARIOS[n].sparse)
        self.legacy = fmt == "legacy"

    def planner(self, host: Host) -> Planner:
        return Planner(
            Random(f"{self.key}|plan|{host.index}"), host, self.session_faults, self.global_faults,
            self.scale, self.sparse, legacy=self.legacy, max_turns=self.max_turns, specs=SCENARIOS,
        )  # fmt: skip

    def sessions(self, host: Host):
        sessions = self.planner(host).sessions()
        if self.change is None:
            return sessions
        from dslogs.analyzer.simulate.changes import apply_all

        return apply_all(sessions, self.change[0], host.start_ms + self.change[1])

    def profile(self) -> tuple[int, int, list[tuple[int, int]]]:
        """Count-only pass: (events, request events, [(seconds, busy seconds)] per host-hour)."""
        total = req = 0
        load: list[tuple[int, int]] = []
        cls = LegacyHost if self.legacy else V1Host
        for host in self.hosts:
            hw = cls(host, None, Random(f"{self.key}|samplers|{host.index}"))
            for s in self.sessions(host):
                hw.add_session(s)
            total += hw.finish()
            req += hw.request_events
            load += hw.hour_load
        return total, req, load

    def write(self, collect) -> tuple[int, list[str], list[dict], dict]:
        total = 0
        files: list[str] = []
        bad: list[dict] = []
        host_stats = {}
        cls = LegacyHost if self.legacy else V1Host
        flat = self.legacy and len(self.hosts) == 1
        for host in self.hosts:
            folder = self.outdir if flat else self.outdir / host.name
            writer = RotatingWriter(
                folder, DEFAULT_PREFIX, None if self.legacy else self.max_bytes, self.executor,
                self.outdir, gzip_closed=not self.legacy,
            )  # fmt: skip
            with_bad = "bad_lines" in self.names and host.index == 0
            hw = cls(host, writer, Random(f"{self.key}|samplers|{host.index}"), bad_lines=with_bad)
            for s in self.sessions(host):
                hw.add_session(s)
                collect(s)
            total += hw.finish()
            files += writer.finish()
            if with_bad:
                bad += hw.bad_plan.records
                empty_day = (datetime.fromtimestamp((host.start_ms + host.offset_min * 60_000) / 1000, tz=UTC)
                             - timedelta(days=1)).strftime("%Y%m%d")  # fmt: skip
                empty = folder / f"{DEFAULT_PREFIX}_{empty_day}.jsonl"
                empty.write_bytes(b"")
                rel = str(empty.relative_to(self.outdir))
                files.append(rel)
                bad.append({"file": rel, "line": 0, "kind": "empty_file"})
            stats = dict(hw.stats)
            if self.legacy:
                stats = {"out_of_order_pairs": hw.swaps}
            host_stats[host.name] = stats
        return total, files, bad, host_stats


def _predict(k: float, total: int, req: int, load: list[tuple[int, int]], legacy: bool) -> float:
    """Events at k times the profiled arrival rate.

    Request events scale linearly; a sampler second is busy with probability 1 - (1 - a)^k
    when a fraction a was busy (overlapping Poisson-like traffic), else it gets the idle
    once-a-minute tick.
    """
    if legacy:
        return req * k
    samplers_now = samplers_then = 0.0
    for n, busy in load:
        a = busy / n
        a_k = 1 - (1 - a) ** k
        samplers_now += 2 * (a * n + (1 - a) * n / 60)
        samplers_then += 2 * (a_k * n + (1 - a_k) * n / 60)
    return (total - req - samplers_now) + req * k + samplers_then


EXACT_CALIBRATION_MAX_EVENTS = 300_000  # above this, trust the model instead of re-counting


def _calibrate(key, fmt, hosts, names, target: int, max_turns=None) -> float:
    """Arrival-rate scale giving about ``target`` events.

    Count-only passes draw every request without writing; a load model extrapolates from the
    last pass, and passes repeat while they are cheap and the count is more than 3 % off.
    """
    scale = 1.0
    legacy = fmt == "legacy"

    def solve(total, req, load, goal) -> float:
        lo, hi = 1e-4, 1e4
        for _ in range(60):
            mid = (lo * hi) ** 0.5
            if _predict(mid, total, req, load, legacy) < goal:
                lo = mid
            else:
                hi = mid
        return (lo * hi) ** 0.5

    tried: dict[float, int] = {}

    def count(sc: float):
        total, req, load = _Run(key, fmt, hosts, names, sc, max_turns=max_turns).profile()
        tried[sc] = total
        return total, req, load

    for _ in range(6):
        total, req, load = count(scale)
        if abs(total / target - 1) < 0.03:
            return scale
        if req == 0:
            scale *= 4
            continue
        if target <= EXACT_CALIBRATION_MAX_EVENTS:
            scale *= solve(total, req, load, target)
        elif total >= EXACT_CALIBRATION_MAX_EVENTS / 2:
            # A pilot this big averages out session-to-session variance: extrapolate from it.
            return scale * solve(total, req, load, target)
        else:
            scale *= solve(total, req, load, EXACT_CALIBRATION_MAX_EVENTS)
    # Small runs: a few sessions more or less move the count by 10 %+ and every scale draws
    # other sessions, so the model overshoots; bisect between the closest scales below and
    # above the target and keep the closest count.
    for _ in range(12):
        best = min(tried, key=lambda sc: abs(tried[sc] - target))
        if abs(tried[best] / target - 1) < 0.03:
            break
        below = [sc for sc, n in tried.items() if n < target]
        above = [sc for sc, n in tried.items() if n > target]
        lo = max(below) if below else min(tried) / 2
        hi = min(above) if above else max(tried) * 2
        if hi <= lo:  # counts are not monotonic here: probe next to the best one
            lo, hi = best * 0.9, best * 1.1
        count((lo * hi) ** 0.5)
    best = min(tried, key=lambda sc: abs(tried[sc] - target))
    return best


def _prepare(outdir: Path) -> None:
    """Write into an empty folder, or over a previous simulate output (its truth.json lists it)."""
    out_folder(outdir, "OUTDIR")
    truth = outdir / "truth.json"
    if truth.is_file():
        try:
            old = json.loads(truth.read_text(encoding="utf-8"))["files"]
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{truth}: not a dslogs simulate truth file; refusing to overwrite {outdir}") from None
        root = outdir.resolve()
        for rel in old:
            p = (outdir / rel).resolve()
            if root in p.parents and p.is_file():
                p.unlink()
        truth.unlink()
        for d in sorted((p for p in outdir.rglob("*") if p.is_dir()), reverse=True):
            if not any(d.iterdir()):
                d.rmdir()
    if any(outdir.iterdir()):
        raise UsageError(f"{outdir}: folder is not empty (and holds no simulate truth.json); choose an empty folder")


def _change_plan(change, change_at, start_dt: datetime, span_ms: int):
    """(change name, ms after the start) or None; the change lies inside the run."""
    if change is None:
        return None
    from dslogs.analyzer.simulate.changes import check

    check(change)
    if change_at is None:
        return change, span_ms // 2
    at = wall_clock(change_at, "--change-at", "an ISO date-time like 2026-11-23T12:00")
    offset = int((at - start_dt).total_seconds() * 1000)
    if not 0 < offset < span_ms:
        raise UsageError(f"--change-at {change_at!r}: outside the simulated run")
    return change, offset


class _Truth:
    def __init__(self, names: list[str], legacy: bool):
        self.names = names
        self.legacy = legacy
        self.healthy: list[str] = []
        self.by_fault: dict[str, list[str]] = {n: [] for n in names}
        self.session_details: dict[str, dict[str, dict]] = {n: {} for n in names}
        self.session_hosts: dict[str, set[str]] = {n: set() for n in names}
        self.stage_values = {"tokenize_ms": [], "prefill_ms": [], "ttft_ms": [], "format_ms": [], "tpot_ms": []}
        self.queue_ms: list[float] = []  # queue_wait's evidence (not in truth.json's "p50")
        self.requests = 0

    def collect(self, s: Session) -> None:
        reqs = s.requests
        self.requests += len(reqs)
        sv = self.stage_values
        for r in reqs:
            sv["tokenize_ms"].append(r.tok_ms)
            sv["prefill_ms"].append(r.prefill_ms)
            sv["ttft_ms"].append(r.ttft)
            self.queue_ms.append(r.queue_ms)
            if r.status == "ok":
                sv["format_ms"].append(r.format_ms)
                if r.output_len > 1 and not r.error:
                    sv["tpot_ms"].append(r.decode_ms / (r.output_len - 1))
        if s.fault is None:
            self.healthy.append(s.sid)
            return
        self.by_fault[s.fault].append(s.sid)
        self.session_hosts[s.fault].add(s.host.name)
        self.session_details[s.fault][s.sid] = _session_detail(s, self.legacy)


def _session_detail(s: Session, legacy: bool) -> dict:
    d: dict = {"host": s.host.name, "requests": len(s.requests)}
    if detail := SCENARIOS[s.fault].session_detail:
        d.update(detail(s, legacy))
    return d


def simulate(
    outdir: Path,
    scenarios: list[str] | None = None,
    days: int = 1,
    seed: int = 0,
    fmt: str = "v1",
    events: int | None = None,
    hosts: int = 1,
    start: str | None = None,
    *,
    hours: float | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    host_prefix: str = "gpu",
    change: str | None = None,
    change_at: str | None = None,
    max_turns: int | None = None,
) -> dict:
    """Write simulated logs and truth.json into ``outdir``; return a summary.

    ``hours`` (Python API only) limits the run to that many hours from ``start`` instead of
    whole days; ``change`` (analyzer/simulate/changes.py) alters the service at ``change_at``
    (local wall-clock ISO time; default the middle of the run); ``max_turns`` (Python API only)
    caps a healthy session's requests (bench/ingest.py: many short sessions); ``max_bytes`` is the rotation size (tests use small values); hosts are named
    ``<host_prefix>-01``, ... (sample_logs/ gives each folder its own, so that analysing all
    folders at once does not merge different runs' hosts).
    """
    # Millions of short-lived tuples and no reference cycles: the cyclic GC would only rescan
    # them (it costs ~30 % of the run), so it is paused for the run.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(
            outdir, scenarios, days, seed, fmt, events, hosts, start, hours, max_bytes, host_prefix,
            change, change_at, max_turns,
        )
    finally:
        if was_enabled:
            gc.enable()


def _simulate(
    outdir, scenarios, days, seed, fmt, events, hosts, start, hours, max_bytes, host_prefix, change=None, change_at=None,
    max_turns=None,
) -> dict:
    t_begin = time.perf_counter()
    outdir = Path(outdir)
    names = normalise(list(scenarios or ["healthy"]), fmt)
    if days < 1:
        raise UsageError("--days must be at least 1")
    if not 1 <= hosts <= MAX_HOSTS:
        raise UsageError(f"--hosts must be between 1 and {MAX_HOSTS}")
    if events is not None and events < 1:
        raise UsageError("--events must be at least 1")
    if max_bytes < 4096:
        raise UsageError("max_bytes must be at least 4096")
    if hours is not None and hours <= 0:
        raise UsageError("hours must be positive")
    if max_turns is not None and max_turns < 1:
        raise UsageError("max_turns must be at least 1")
    start_dt = _parse_start(start)
    span_ms = int((hours if hours is not None else 24 * days) * MS_PER_HOUR)
    host_faults = assign_hosts(names, hosts)
    key = f"dslogs-sim|{seed}|{'+'.join(names)}|{fmt}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", host_prefix):
        raise UsageError(f"host prefix {host_prefix!r}: use letters, digits, '.', '_' or '-'")
    host_list = _hosts(hosts, fmt, start_dt, span_ms, host_faults, key, host_prefix)

    change_plan = _change_plan(change, change_at, start_dt, span_ms)
    if change_plan:
        key += f"|change={change}@{change_plan[1]}"
    if max_turns is not None:
        key += f"|max_turns={max_turns}"
    scale = _calibrate(key, fmt, host_list, names, events, max_turns) if events else 1.0
    _prepare(outdir)
    truth = _Truth(names, fmt == "legacy")
    with ThreadPoolExecutor(max_workers=1) as pool:
        run = _Run(key, fmt, host_list, names, scale, outdir, max_bytes, pool, change_plan, max_turns)
        total, files, bad, host_stats = run.write(truth.collect)
    files.sort()

    by_name = {h.name: h for h in host_list}
    scen_truth = {}
    for name in names:
        spec = SCENARIOS[name]
        entry: dict = {"rule": spec.rule, "scope": spec.scope, "sessions": [], "hosts": [], "details": {},
                       "also_fires": list(spec.also_fires), "description": spec.description}  # fmt: skip
        if spec.scope == SESSION:
            entry["sessions"] = sorted(truth.by_fault[name])
            entry["hosts"] = sorted(truth.session_hosts[name])
            entry["details"] = {"sessions": truth.session_details[name]}
        elif spec.scope in (HOST, PROCESS):
            h = host_list[host_faults[name]]
            entry["hosts"] = [h.name]
            entry["details"] = spec.host_detail(host_stats[h.name]) if spec.host_detail else {}
            if spec.scope == PROCESS:
                entry["details"]["pid"] = h.pid
        elif spec.scope == GLOBAL:
            entry["hosts"] = [h.name for h in host_list]
            entry["details"] = spec.run_detail(truth) if spec.run_detail else {"applies_to": "every request of the run"}
        elif spec.scope == INGEST:
            entry["hosts"] = [host_list[0].name]
            entry["details"] = {"bad_lines": len(bad)}
        scen_truth[name] = entry

    sv = truth.stage_values
    doc = {
        "seed": seed,
        "args": {"scenarios": list(scenarios or ["healthy"]), "days": days, "seed": seed, "format": fmt,
                 "events": events, "hosts": hosts, "start": start, "hours": hours, "max_bytes": max_bytes,
                 "host_prefix": host_prefix, **({"max_turns": max_turns} if max_turns else {})},  # fmt: skip
        "format": fmt,
        "start": start_dt.isoformat(),
        "scale": round(scale, 6),
        "scenarios": scen_truth,
        "healthy_sessions": sorted(truth.healthy),
        "bad_lines": bad,
        "files": files,
        "events": total,
        "requests": truth.requests,
        "sessions": len(truth.healthy) + sum(len(v) for v in truth.by_fault.values()),
        "hosts": [
            {
                "host": h.name,
                "pid": h.pid,
                "utc_offset": f"+{h.offset_min // 60:02d}:00",
                "naive_timestamps": fmt == "legacy",
                "faults": sorted(h.faults),
                "stats": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in host_stats[h.name].items()},
            }
            for h in by_name.values()
        ],
        "p50": {k: p50(v) for k, v in sv.items()},
    }
    if change_plan:
        from dslogs.analyzer.simulate.changes import truth_entry

        at = start_dt + timedelta(milliseconds=change_plan[1])
        doc["change"] = truth_entry(change, at.isoformat(), change_plan[1])
        doc["args"].update(change=change, change_at=change_at)
    (outdir / "truth.json").write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    seconds = time.perf_counter() - t_begin
    return {
        "events": total,
        "files": len(files),
        "bad_lines": len(bad),
        "requests": truth.requests,
        "sessions": doc["sessions"],
        "seconds": round(seconds, 3),
        "events_per_s": round(total / seconds) if seconds > 0 else None,
    }
