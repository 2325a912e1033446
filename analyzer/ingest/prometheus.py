"""Prometheus text snapshots of a serving engine's ``/metrics`` (``curl -s host:8000/metrics >
metrics-$(date +%s).prom``, or a node_exporter textfile): vLLM (``vllm:*``), SGLang
(``sglang:*``), TGI (``tgi_*``) and llama.cpp (``llamacpp:*``) names.

A snapshot is a cumulative state; two or more of one server give a window. Over it:

- histograms: the windowed delta of each bucket (summed over the label sets of a family, the
  ``le`` bound apart), then percentiles from the buckets as Prometheus' ``histogram_quantile``
  computes them (linear inside the bucket the rank falls in); each percentile is stated with its
  bucket, the resolution the server's bucket layout gives;
- counters: the windowed delta per label set (model and engine labels summed) and its rate;
- gauges (requests waiting and running, KV-cache usage): a series, one point per snapshot.

A counter that goes down between two snapshots, or a ``_created`` stamp that moves, is a restart:
that step counts from zero (Prometheus' own rule for ``rate``).

Snapshots are grouped by server: the folder and the file name with its digits taken out
(``metrics-1733300000.prom`` and ``metrics-1733300060.prom`` are one server). A snapshot's time
is the unix time in its name (10 digits, or 13 in ms), else the samples' own timestamps, else the
file's modification time.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

PREFIXES = ("vllm:", "sglang:", "tgi_", "llamacpp:")
# Gauges the report charts: queue depth, running batch, KV-cache use, by engine.
QUEUE_GAUGES = {
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                "llamacpp:requests_processing"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),
}  # fmt: skip
QUANTILES = (0.5, 0.9, 0.99)
# Labels that name the server's own process rather than what was measured: summed over.
_SERVER_LABELS = {"model_name", "engine", "model", "instance", "job", "pid"}

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_NAME_TIME = re.compile(r"(?<!\d)(\d{13}|\d{10})(?!\d)")


def looks_like(head: bytes) -> bool:
    """True when the first bytes are Prometheus text with a server's metric names."""
    text = head[:SNIFF].decode("utf-8", "replace")
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = re.match(r"#\s*(?:HELP|TYPE)\s+(\S+)", line)
        name = m.group(1) if m else (_SAMPLE.match(line).group("name") if _SAMPLE.match(line) else None)
        if name is None:
            if line.startswith("#"):
                continue
            return False
        if name.startswith(PREFIXES):
            return True
    return False


SNIFF = 64 << 10


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


@dataclass
class Snapshot:
    display: str
    t: float  # unix seconds
    types: dict[str, str] = field(default_factory=dict)  # family -> counter | gauge | histogram | ...
    values: dict[tuple[str, tuple], float] = field(default_factory=dict)  # (sample name, labels) -> value
    bad_lines: list[tuple[int, str]] = field(default_factory=list)


def parse(text: str, display: str, t: float | None) -> Snapshot:
    """One snapshot: samples of the known servers' families, by name and label set."""
    snap = Snapshot(display, t or 0.0)
    stamps: list[int] = []
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                snap.types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        if m is None:
            snap.bad_lines.append((no, "not a Prometheus sample line"))
            continue
        name = m.group("name")
        if not name.startswith(PREFIXES):
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            snap.bad_lines.append((no, f"value {m.group('value')[:40]!r} is not a number"))
            continue
        labels = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(m.group("labels") or "")))
        snap.values[(name, labels)] = value
        if m.group("ts"):
            stamps.append(int(m.group("ts")))
    if t is None and stamps:
        snap.t = max(stamps) / 1000.0
    return snap


def snapshot_time(path: Path) -> float | None:
    m = _NAME_TIME.search(path.name)
    if m:
        v = int(m.group(1))
        return v / 1000.0 if len(m.group(1)) == 13 else float(v)
    return None


def read_snapshot(path: Path, display: str) -> Snapshot:
    import gzip

    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    snap = parse(raw.decode("utf-8", "replace"), display, snapshot_time(path))
    if not snap.t:
        snap.t = os.stat(path).st_mtime
    return snap


def server_key(display: str) -> str:
    folder, _, name = display.replace("\\", "/").rpartition("/")
    stem = re.sub(r"\d+", "", name.removesuffix(".gz").removesuffix(".prom")).strip("-_.") or "metrics"
    return f"{folder}/{stem}" if folder else stem


def _family(name: str, types: dict[str, str]) -> tuple[str, str, str]:
    """(family, kind, part) of a sample name: part is bucket/count/sum/created/total or ""."""
    for suffix in ("_bucket", "_count", "_sum", "_created", "_total"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            kind = types.get(base) or types.get(name)
            if kind:
                return base, kind, suffix[1:]
    return name, types.get(name, "untyped"), ""


def _delta(series: list[float | None], resets: list[bool]) -> float:
    """A counter's increase over consecutive values; after a restart the step counts from zero."""
    total = 0.0
    prev = None
    for i, v in enumerate(series):
        if v is None:
            continue
        if prev is not None:
            total += v if (v < prev or resets[i]) else v - prev
        elif i > 0:
            total += v  # a series first seen after the first snapshot started from zero
        prev = v
    return total


def quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float | None, float, float]:
    """``histogram_quantile``: (value, bucket low, bucket high) from (le, cumulative count) pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None, math.nan, math.nan
    total = buckets[-1][1]
    rank = q * total
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if math.isinf(le):
                # above the highest finite bound: Prometheus answers that bound
                return lo, lo, le
            if cum == below:
                return le, lo, le
            return lo + (le - lo) * (rank - below) / (cum - below), lo, le
        lo, below = le, cum
    return lo, lo, math.inf


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _label_text(labels: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in labels if k not in _SERVER_LABELS and k != "le")


def server_metrics(snaps: list[Snapshot]) -> dict:
    """The windowed figures of one server's snapshots (sorted by time here)."""
    snaps = sorted(snaps, key=lambda s: s.t)
    types: dict[str, str] = {}
    for s in snaps:
        types.update(s.types)
    names = sorted({key for s in snaps for key in s.values})
    # A restart between two snapshots: a _created stamp that moves, or any cumulative value
    # (counter, histogram bucket, count or sum) that goes down; every series counts that step
    # from zero, so a histogram's buckets stay consistent with each other.
    cumulative = []
    for key in names:
        fam, kind, part = _family(key[0], types)
        if (kind == "counter" and part in ("total", "")) or (kind == "histogram" and part in ("bucket", "count", "sum")):
            cumulative.append(key)
    restarts = [False] * len(snaps)
    for i in range(1, len(snaps)):
        a, b = snaps[i - 1].values, snaps[i].values
        moved = any(b[k] != a[k] for k in b if k[0].endswith("_created") and k in a)
        dropped = any(k in a and k in b and b[k] < a[k] for k in cumulative)
        restarts[i] = moved or dropped
    hist: dict[str, dict[float, float]] = {}
    hist_count: dict[str, float] = {}
    hist_sum: dict[str, float] = {}
    counters: dict[tuple[str, str], float] = {}
    gauges: dict[tuple[str, str], list[float | None]] = {}
    for key in names:
        name, labels = key
        fam, kind, part = _family(name, types)
        series = [s.values.get(key) for s in snaps]
        if kind == "histogram" and part in ("bucket", "count", "sum"):
            d = _delta(series, restarts)
            if part == "bucket":
                try:
                    bound = float(dict(labels).get("le", "nan"))
                except ValueError:
                    bound = math.nan
                if not math.isnan(bound):
                    bucket = hist.setdefault(fam, {})
                    bucket[bound] = bucket.get(bound, 0.0) + d
            elif part == "count":
                hist_count[fam] = hist_count.get(fam, 0.0) + d
            else:
                hist_sum[fam] = hist_sum.get(fam, 0.0) + d
        elif kind == "counter" and part in ("total", ""):
            k = (fam, _label_text(labels))
            counters[k] = counters.get(k, 0.0) + _delta(series, restarts)
        elif kind == "gauge" and part == "":
            k = (fam, _label_text(labels))
            acc = gauges.setdefault(k, [None] * len(snaps))
            for i, v in enumerate(series):
                if v is not None:
                    acc[i] = (acc[i] or 0.0) + v
    seconds = snaps[-1].t - snaps[0].t if len(snaps) > 1 else 0.0
    histograms = []
    for fam, buckets in sorted(hist.items()):
        count = hist_count.get(fam, max(buckets.values(), default=0.0))
        row = {"metric": fam, "count": round(count), "mean": None}
        if count > 0 and fam in hist_sum:
            row["mean"] = hist_sum[fam] / count
        pairs = list(buckets.items())
        for q in QUANTILES:
            value, lo, hi = quantile(q, pairs) if count > 0 else (None, math.nan, math.nan)
            label = f"p{int(q * 100)}"
            row[label] = value
            row[f"{label}_bucket"] = None if value is None else [lo, None if math.isinf(hi) else hi]
        histograms.append(row)
    rates = [
        {"metric": fam, "labels": labels, "increase": inc, "per_s": inc / seconds if seconds > 0 else None}
        for (fam, labels), inc in sorted(counters.items())
    ]
    series = [
        {"metric": fam, "labels": labels, "points": [[_iso(s.t), v] for s, v in zip(snaps, vals, strict=True)],
         "last": next((v for v in reversed(vals) if v is not None), None),
         "max": max((v for v in vals if v is not None), default=None)}
        for (fam, labels), vals in sorted(gauges.items())
    ]  # fmt: skip
    return {
        "snapshots": len(snaps),
        "first": _iso(snaps[0].t),
        "last": _iso(snaps[-1].t),
        "seconds": seconds,
        "restarts": sum(restarts),
        "histograms": histograms if len(snaps) > 1 else [],
        "counters": rates if len(snaps) > 1 else [],
        "gauges": series,
    }


def read_servers(files: list[tuple[Path, str]], lo: datetime | None = None,
                 hi: datetime | None = None) -> tuple[list[dict], list[tuple[str, int, str]]]:  # fmt: skip
    """Server metrics of the snapshot files ``(path, display)`` taken in [lo, hi), and their bad
    lines ``(display, line, reason)``."""
    groups: dict[str, list[Snapshot]] = {}
    bad: list[tuple[str, int, str]] = []
    for path, display in files:
        snap = read_snapshot(path, display)
        if (lo is not None and snap.t < lo.timestamp()) or (hi is not None and snap.t >= hi.timestamp()):
            continue
        bad.extend((display, no, reason) for no, reason in snap.bad_lines)
        groups.setdefault(server_key(display), []).append(snap)
    out = []
    for key, snaps in sorted(groups.items()):
        row = {"server": key, **server_metrics(snaps)}
        if row["snapshots"] < 2:
            row["note"] = "one snapshot: no window (rates and percentiles need two or more)"
        out.append(row)
    return out, bad


def gauge_rows(servers: list[dict]) -> list[dict]:
    """The charted gauges (QUEUE_GAUGES) of ``read_servers``' servers as rows: ts, server,
    gauge (waiting, running, kv_cache_usage), metric, value."""
    which = {name: gauge for gauge, names in QUEUE_GAUGES.items() for name in names}
    rows = []
    for server in servers:
        for g in server.get("gauges") or []:
            if g["metric"] in which and not g.get("labels"):
                rows += [{"ts": ts, "server": server["server"], "gauge": which[g["metric"]], "metric": g["metric"],
                          "value": v} for ts, v in g["points"]]  # fmt: skip
    return rows
