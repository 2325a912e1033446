"""Deploys: when the service changed, what changed, and whether it got slower (``dslogs.deploys/1``).

A deploy starts where the service starts with what it runs with:

- the collector's ``deploy`` lines (collector/deploy.py): one instance per ``deploy_id`` (a tracer
  start), its ``config`` merged over its lines (the model's keys come with the first generate);
- OTLP spans whose resource names a ``service.version``: one instance per host and version;
- neither: one instance per process (host, pid), from its first event ("process starts").

Instances are taken in start order; one joins the deploy before it when it runs with the same
label and config: the workers of one release, and a restart with nothing changed (the same code,
config and model is the same deploy; the restart is listed among the deploy's ``processes``). A
start that changes something is a new deploy, and so is a rollback. Without records nothing says
what a process runs with, so process starts are one deploy: a regression among them is found as a
change point, not called a deploy. A deploy's window runs from its start to the next deploy's
start, so the windows partition the logs; deploys are numbered d1, d2, ... over the whole log set
(``deploy_id``), whatever window a command looks at.

Each deploy is compared with the one before it by ``model.diff.diff_sides`` (the same
percentiles, significance, mix adjustment and "too few" as ``dslogs diff``); its verdict:
``regression`` (a latency percentile slower for the same requests, the error rate up, or a new
memory finding), ``improvement``, ``steady`` or ``too few``.

Without any record, ``change_point`` looks for the one minute where the per-minute medians of
the request latencies shift most; the windows before and after it are diffed the same way, and a
regression there is reported with whether a process started near it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dslogs.analyzer.model.diff import MIN_COUNT, QUANTILES

SCHEMA = "dslogs.deploys/1"
# keys of a deploy line's config that say why it was written, not what the service runs with
NOT_COMPARED = frozenset({"trigger"})
# a process start this close to a change point is named as its cause
NEAR_S = 120.0
MIN_SEGMENT_MINUTES = 5
MEMORY_RULES = frozenset({"memory_leak", "rss_growth"})
CHANGE_POINT_METRICS = ("tpot_ms", "ttft_ms", "e2e_ms")

DEPLOY_SQL = """
SELECT deploy_id, min(ts) AS start, max(host) AS host, max(pid) AS pid,
       list(label ORDER BY ts) FILTER (WHERE label IS NOT NULL) AS labels,
       list(config ORDER BY ts) FILTER (WHERE config IS NOT NULL) AS configs
FROM {events} WHERE stage = 'deploy' AND deploy_id IS NOT NULL
GROUP BY deploy_id ORDER BY start, deploy_id
"""
LABEL_SQL = """
SELECT host, label, min(ts) AS start, arg_min(config, ts) FILTER (WHERE config IS NOT NULL) AS config FROM {events}
WHERE label IS NOT NULL AND stage <> 'deploy'
GROUP BY host, label ORDER BY start, host
"""
PROCESS_SQL = """
SELECT host, pid, min(ts) AS start FROM {events}
WHERE pid IS NOT NULL GROUP BY host, pid ORDER BY start, host, pid
"""
EXTENT_SQL = "SELECT min(ts), max(ts) FROM events"
MINUTE_SQL = """
SELECT date_trunc('minute', end_ts) AS minute, median({metric}) AS v, count(*) AS n
FROM requests WHERE {metric} IS NOT NULL AND end_ts IS NOT NULL GROUP BY 1 ORDER BY 1
"""


@dataclass
class Instance:
    """One start: a tracer, an OTLP service version on a host, or a process."""

    key: str
    start: datetime
    host: str | None = None
    pid: int | None = None
    label: str | None = None
    config: dict = field(default_factory=dict)


def _config(texts) -> dict:
    out: dict = {}
    for text in texts or []:
        try:
            obj = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(obj, dict):
            out.update(obj)
    return out


def read_instances(con, events: str = "events") -> tuple[str, list[Instance]]:
    """(source, instances): the deploy records, else OTLP service versions, else process starts,
    of the view ``events`` names (a LogSet's ``whole_events``: the whole log set)."""
    rows = con.execute(DEPLOY_SQL.format(events=events)).fetchall()
    if rows:
        return "records", [Instance(key=r[0], start=r[1], host=r[2], pid=r[3], label=(r[4] or [None])[0],
                                    config=_config(r[5])) for r in rows]
    rows = con.execute(LABEL_SQL.format(events=events)).fetchall()
    if rows:
        return "otlp", [Instance(key=f"{r[0] or ''}@{r[1]}", start=r[2], host=r[0], label=r[1],
                                 config=_config([r[3]]) or {"service.version": r[1]}) for r in rows]
    rows = con.execute(PROCESS_SQL.format(events=events)).fetchall()
    return "processes", [Instance(key=f"{r[0] or ''}:{r[1]}", start=r[2], host=r[0], pid=r[1]) for r in rows]


def _fingerprint(i: Instance) -> tuple:
    return (i.label, tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in i.config.items() if k not in NOT_COMPARED)))


def group_deploys(insts: list[Instance]) -> list[list[Instance]]:
    """Instances in start order, grouped: a start joins the deploy before it when it runs with
    the same label and config (another worker, or a restart: nothing changed)."""
    deploys: list[list[Instance]] = []
    for i in sorted(insts, key=lambda x: (x.start, x.key)):
        cur = deploys[-1] if deploys else None
        if cur and _fingerprint(cur[0]) == _fingerprint(i):
            cur.append(i)
        else:
            deploys.append([i])
    return deploys


def deploy_id(n: int) -> str:
    """The id of the n-th deploy (from 0) of the whole log set, as every command shows it."""
    return f"d{n + 1}"


def starts_within(groups: list[list[Instance]], since: datetime | None, until: datetime | None) -> bool:
    """Whether a deploy other than the log set's first (``groups``, all of them) starts in
    [since, until) (None: open-ended): the window holds a deploy to judge against the one before it.
    Without a window: whether there are two deploys or more."""
    return any((since is None or g[0].start >= since) and (until is None or g[0].start < until) for g in groups[1:])


def may_start_within(con) -> bool:
    """Whether the window's logs open on ``con`` hold a deploy record or an OTLP service version:
    a deploy that starts in the window has its first one there, so without one none does (a
    query on the window, no analysis); with one, the whole log set tells whether it starts a deploy."""
    source, insts = read_instances(con)
    return source != "processes" and bool(insts)


def changes(before: dict, after: dict) -> list[dict]:
    """What changed between two deploys' configs, key by key (a key only one side has included)."""
    keys = sorted((set(before) | set(after)) - NOT_COMPARED)
    return [{"key": k, "before": before.get(k), "after": after.get(k)} for k in keys if before.get(k) != after.get(k)]


def merged_config(group: list[Instance]) -> dict:
    out: dict = {}
    for i in group:
        out.update(i.config)
    return out


def verdict(diff: dict | None) -> tuple[str, list[str]]:
    """A deploy's verdict from the diff against the deploy before it, and the reasons."""
    if diff is None:
        return "first", []
    counts = [(diff.get(s) or {}).get("requests") or 0 for s in ("before", "after")]
    reasons = list(diff.get("regressions") or [])
    new_memory = [f["rule"] for f in (diff.get("findings") or {}).get("new") or [] if f.get("rule") in MEMORY_RULES]
    reasons += [f"new {rule} finding" for rule in new_memory]
    if min(counts) < MIN_COUNT:
        return "too few", [f"{min(counts)} requests on one side (a verdict needs {MIN_COUNT})"]
    if reasons:
        return "regression", reasons
    improved = [f"{r['label']} {q}" for r in (diff.get("stages") or []) + (diff.get("request_metrics") or [])
                for q, _ in QUANTILES if (r.get(q) or {}).get("verdict") == "improved"]
    improved += [r["label"] for r in diff.get("rates") or [] if r.get("verdict") == "improved"]
    if improved:
        return "improvement", improved
    return "steady", []


def metric_changes(diff: dict | None) -> list[dict]:
    """The diff's percentile and rate changes that carry a verdict other than steady / n/a."""
    if diff is None:
        return []
    out = []
    for r in (diff.get("stages") or []) + (diff.get("request_metrics") or []):
        for q, _ in QUANTILES:
            c = r.get(q) or {}
            if c.get("verdict") in ("regression", "improved", "mix"):
                out.append({"metric": r["metric"], "label": r["label"], "quantile": q, "unit": r.get("unit"),
                            "before": c.get("before"), "after": c.get("after"), "change_pct": c.get("change_pct"),
                            "expected_after": c.get("expected_after"), "service_pct": c.get("service_pct"),
                            "mix_pct": c.get("mix_pct"), "verdict": c["verdict"]})
    for r in diff.get("rates") or []:
        if r.get("verdict") in ("regression", "improved"):
            out.append({"metric": r["metric"], "label": r["label"], "quantile": None, "unit": "share",
                        "before": r.get("before"), "after": r.get("after"), "change_pct": r.get("change_pts"),
                        "expected_after": None, "service_pct": None, "mix_pct": None, "verdict": r["verdict"]})
    return out


# -- change points (no records) -------------------------------------------------------------------


def best_split(values: list[float], min_len: int = MIN_SEGMENT_MINUTES) -> tuple[int, float] | None:
    """The index where a rise in the level of ``values`` (their logs) is most likely: the split
    maximising the rise of the mean in units of the pooled within-run deviation, times
    sqrt(k(n-k)/n) (the CUSUM statistic of one mean shift); None when the series is too short."""
    x = [math.log(v) for v in values if v and v > 0]
    n = len(x)
    if n < 2 * min_len:
        return None
    pre = [0.0]
    pre2 = [0.0]
    for v in x:
        pre.append(pre[-1] + v)
        pre2.append(pre2[-1] + v * v)
    best = None
    for k in range(min_len, n - min_len + 1):
        sa, sb = pre[k], pre[n] - pre[k]
        ma, mb = sa / k, sb / (n - k)
        within = (pre2[k] - k * ma * ma) + (pre2[n] - pre2[k] - (n - k) * mb * mb)
        sd = math.sqrt(max(within, 0.0) / max(n - 2, 1)) or 1e-9
        t = (mb - ma) / sd * math.sqrt(k * (n - k) / n)
        if best is None or t > best[1]:
            best = (k, t)
    return best


def minute_series(con, metric: str) -> list[tuple[datetime, float, int]]:
    return [(r[0], float(r[1]), int(r[2])) for r in con.execute(MINUTE_SQL.format(metric=metric)).fetchall()]


def candidate_change(con) -> dict | None:
    """The minute where a request latency's per-minute median rose most (largest t), if any."""
    best = None
    for metric in CHANGE_POINT_METRICS:
        try:
            series = minute_series(con, metric)
        except Exception:  # noqa: BLE001 - a log set without that column: no candidate from it
            continue
        got = best_split([v for _, v, _ in series])
        if got is None:
            continue
        k, t = got
        if best is None or t > best["t"]:
            best = {"metric": metric, "at": series[k][0], "t": t, "minutes": len(series)}
    return best


def near_start(at: datetime, insts: list[Instance], within_s: float = NEAR_S) -> Instance | None:
    near = [i for i in insts if abs((i.start - at).total_seconds()) <= within_s]
    return min(near, key=lambda i: abs((i.start - at).total_seconds())) if near else None


def window_bounds(starts: list[datetime]) -> list[tuple[datetime | None, datetime | None]]:
    """Each deploy's window: from its start (the first: from the beginning) to the next start."""
    out = []
    for n, s in enumerate(starts):
        lo = None if n == 0 else s
        hi = starts[n + 1] if n + 1 < len(starts) else None
        out.append((lo, hi))
    return out


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def minute_after(t: datetime) -> datetime:
    return t + timedelta(minutes=1)
