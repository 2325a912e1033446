"""Prometheus text snapshots of a serving engine's ``/metrics`` (``curl -s host:8000/metrics >
metrics-$(date +%s).prom``, or a node_exporter textfile): vLLM (``vllm:*``), SGLang
(``sglang:*``), TGI (``tgi_*``) and llama.cpp (``llamacpp:*``) names.

A snapshot is a cumulative state; two or more of one server give a window. Each sample is read
by its family's ``# TYPE`` line, not by its name's suffix (TGI's ``tgi_request_count`` is a
counter; a ``_count`` is a histogram's or a summary's only when its family says so). Over the
window:

- histograms: the windowed delta of each bucket (summed over the label sets of a family, the
  ``le`` bound apart), then percentiles from the buckets as Prometheus' ``histogram_quantile``
  computes them (linear inside the bucket the rank falls in); each percentile is stated with its
  bucket, the resolution the server's bucket layout gives;
- summaries: the windowed count and mean from ``_count`` and ``_sum``; their quantiles are the
  server's own since it started (a summary cannot be windowed), from the last snapshot;
- counters: the windowed delta per label set (model and engine labels summed) and its rate;
- gauges (requests waiting and running, KV-cache usage): a series, one point per snapshot.

A restart between two snapshots: ``process_start_time_seconds`` that moves (where the server
exposes it, it alone decides), a ``_created`` stamp that moves, or cumulative values that go down
while none goes up. That step counts from zero (Prometheus' own rule for ``rate``). A counter that
goes down while others go up is no restart: it is not a counter at all (llama.cpp's
``n_busy_slots_per_decode`` is an average exposed with TYPE counter), and it is shown as a gauge.
No increase is ever negative.

Numbers are read as the exposition format writes them: ``NaN``, ``+Inf`` and ``-Inf`` are legal;
in a gauge or a summary quantile they mean "no value" and are left out, in a counter, a bucket, a
``_sum`` or a ``_count`` (and a negative value there) they are a bad line. A sample timestamp
(ms since 1970) outside years 1970-9999 is a bad line and is not used. A snapshot is read as a
stream, plain or gzip, and at most ``MAX_TEXT`` bytes of text (64 MiB; a vLLM ``/metrics`` is
about 100 KB); past that, or when its gzip stream is damaged or cut short, the snapshot is left
out with one line naming the file.

Servers are told apart by the file's folder and name with its time taken out (``metrics-<unix
time>.prom``, a date and time) and the other digits kept, so ``vllm-node01-1733300000.prom`` and
``vllm-node02-1733300000.prom`` are two servers, and by the labels that name a server process
(``instance``, ``job``, ``model_name``, ``engine``: one file may hold several). ``group`` in
``read_servers`` changes that: ``file`` (name only, labels summed), ``labels`` (labels only, every
file one stream), ``one`` (every snapshot one server); ``dslogs analyze --prom-servers``. A snapshot's time is the unix time in its
name (10 digits, or 13 in ms), else the samples' own timestamps, else the file's modification
time.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dslogs.analyzer.core.selection import PROM_SERVERS

PREFIXES = ("vllm:", "sglang:", "tgi_", "llamacpp:")
# The server process's start (prometheus_client's process collector): a restart where it moves.
START_TIME = "process_start_time_seconds"
# Gauges the report charts: queue depth, running batch, KV-cache use, by engine.
QUEUE_GAUGES = {
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                "llamacpp:requests_processing"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),
}  # fmt: skip
QUANTILES = (0.5, 0.9, 0.99)
# Labels that name the server process rather than what was measured: they tell servers apart
# (GROUP_LABELS), and every one of them is summed over within a server.
GROUP_LABELS = ("instance", "job", "model_name", "engine")
_SERVER_LABELS = {*GROUP_LABELS, "model", "pid"}
GROUPS = PROM_SERVERS
# The most text one snapshot may hold, inflated: far above any server's /metrics, far below what
# a hostile .prom.gz (a few KB inflating to GBs) would ask of memory.
MAX_TEXT = 64 << 20
MAX_LINE = 1 << 20
_CHUNK = 1 << 20
# A sample timestamp in ms: years 1970 to 9999.
_MAX_MS = 253_402_300_799_999

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>\S+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_NAME_TIME = re.compile(r"(?<!\d)(\d{13}|\d{10})(?!\d)")
# A date and time in a file name (2026-11-24T09-12-00.000, 20261124_091200): the snapshot's time,
# not the server's name.
_NAME_DATE = re.compile(r"(?<!\d)\d{4}-?\d{2}-?\d{2}(?:[T_ .-]?\d{2}[:.-]?\d{2}(?:[:.-]?\d{2}(?:\.\d+)?)?)?(?!\d)")


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


class Unreadable(Exception):
    """A snapshot file that cannot be read whole (damaged gzip, too large): one line naming why."""


def _kept(name: str) -> bool:
    return name.startswith(PREFIXES) or name == START_TIME


def parse(text: str | Iterator[tuple[int, bytes | None]], display: str, t: float | None,
          snap: Snapshot | None = None) -> Snapshot:  # fmt: skip
    """One snapshot: samples of the known servers' families, by name and label set. ``text``: the
    whole text, or ``(line number, line)`` pairs (None: a line too long to keep)."""
    snap = snap or Snapshot(display, t or 0.0)
    stamps: list[int] = []
    lines = enumerate(text.splitlines(), 1) if isinstance(text, str) else text
    where: dict[tuple[str, tuple], int] = {}
    for no, raw in lines:
        if raw is None:
            snap.bad_lines.append((no, f"line longer than {MAX_LINE >> 20} MiB"))
            continue
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
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
        if not _kept(name):
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            snap.bad_lines.append((no, f"value {m.group('value')[:40]!r} is not a number"))
            continue
        labels = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(m.group("labels") or "")))
        snap.values[(name, labels)] = value
        where[(name, labels)] = no
        ts = m.group("ts")
        if ts:
            ms = int(ts) if re.fullmatch(r"-?\d{1,16}", ts) else None
            if ms is None or not 0 <= ms <= _MAX_MS:
                snap.bad_lines.append((no, f"timestamp {ts[:24]!r} is not a time in ms since 1970"))
            else:
                stamps.append(ms)
    # NaN and infinities: "no value" in a gauge or a summary's quantile; in what adds up (and
    # below zero there) a bad value, never a statistic.
    for key, value in list(snap.values.items()):
        if math.isfinite(value) and (value >= 0 or not _cumulative(key[0], snap.types)):
            continue
        del snap.values[key]
        if _cumulative(key[0], snap.types):
            what = "negative" if math.isfinite(value) else repr(value)
            snap.bad_lines.append((where[key], f"{key[0][:60]}: {what} in a cumulative value"))
    snap.bad_lines.sort()
    if t is None and stamps:
        snap.t = max(stamps) / 1000.0
    return snap


def snapshot_time(path: Path) -> float | None:
    m = _NAME_TIME.search(path.name)
    if m:
        v = int(m.group(1))
        return v / 1000.0 if len(m.group(1)) == 13 else float(v)
    return None


def _lines(stream, bound: int) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of a byte stream read in chunks, at most ``bound`` bytes in all
    (Unreadable past it); a line over MAX_LINE is skipped, given as None. Blank runs cost no
    Python work per line (a .prom.gz of newlines inflates a thousandfold)."""
    total = no = 0
    rest = b""
    skipping = False  # inside a line over MAX_LINE, until its newline
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > bound:
            raise Unreadable(f"its text passes {bound >> 20} MiB (the most one snapshot may hold)")
        if skipping:
            cut = chunk.find(b"\n")
            if cut < 0:
                continue
            chunk, skipping = chunk[cut + 1 :], False
            no += 1
        data = rest + chunk
        if not data.strip():
            no += data.count(b"\n")
            rest = b"" if data.endswith(b"\n") or not data else data[data.rfind(b"\n") + 1 :]
            continue
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            no += 1
            if line.strip():
                yield no, line
        if len(rest) > MAX_LINE:
            yield no + 1, None
            rest, skipping = b"", True
    if rest.strip() and not skipping:
        yield no + 1, rest


def read_snapshot(path: Path, display: str, bound: int = MAX_TEXT) -> Snapshot:
    """One snapshot file, plain or gzip, streamed; Unreadable when its gzip stream is damaged or
    cut short or its text passes ``bound`` bytes."""
    snap = Snapshot(display, 0.0)
    t = snapshot_time(path)
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
            parse(_lines(stream, bound), display, t, snap)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise Unreadable(f"damaged gzip stream ({str(exc)[:80] or type(exc).__name__})") from None
    except OSError as exc:
        raise Unreadable(f"cannot be read ({exc.strerror or exc})") from None
    snap.t = t or snap.t or os.stat(path).st_mtime
    return snap


def server_key(display: str) -> str:
    """The server a snapshot file is of: its folder and name less the time in it (a unix time,
    a date and time); the rest, host and replica numbers included, is kept."""
    folder, _, name = display.replace("\\", "/").rpartition("/")
    stem = name.removesuffix(".gz").removesuffix(".prom")
    stem = _NAME_DATE.sub("", _NAME_TIME.sub("", stem))
    stem = re.sub(r"[-_.]{2,}", "-", stem).strip("-_.") or "metrics"
    return f"{folder}/{stem}" if folder else stem


def _family(name: str, types: dict[str, str]) -> tuple[str, str, str]:
    """(family, kind, part) of a sample name by its family's TYPE line: part is bucket, count,
    sum, created, total, quantile (a summary's own samples) or ""."""
    if name.endswith("_created"):
        # prometheus_client gives each ``_created`` a TYPE gauge line of its own: still a stamp
        base = name[: -len("_created")]
        kind = types.get(base) or types.get(base + "_total")
        if kind in ("counter", "histogram", "summary"):
            return base, kind, "created"
    kind = types.get(name)
    if kind is not None:
        if kind == "counter":
            return name.removesuffix("_total"), kind, "total" if name.endswith("_total") else ""
        return name, kind, "quantile" if kind == "summary" else ""
    for suffix in ("_bucket", "_count", "_sum", "_created", "_total"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            kind = types.get(base)
            if kind:
                return base, kind, suffix[1:]
    return name, "untyped", ""


def _cumulative(name: str, types: dict[str, str]) -> bool:
    """A value that only rises while the process lives: a counter, a histogram's buckets, a
    histogram's or a summary's count and sum."""
    _, kind, part = _family(name, types)
    return ((kind == "counter" and part in ("total", "")) or (kind == "histogram" and part in ("bucket", "count", "sum"))
            or (kind == "summary" and part in ("count", "sum")))  # fmt: skip


def _delta(series: list[float | None], resets: list[bool]) -> float:
    """A cumulative value's increase over consecutive values; after a restart the step counts from
    zero; a fall that is no restart adds nothing (an increase is never negative)."""
    total = 0.0
    prev = None
    for i, v in enumerate(series):
        if v is None:
            continue
        if prev is not None:
            total += v if resets[i] else max(v - prev, 0.0)
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


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _label_text(labels: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in labels if k not in _SERVER_LABELS and k != "le")


def _restarts(snaps: list[Snapshot], cumulative: list, types: dict[str, str]) -> tuple[list[bool], set]:
    """Which steps are restarts, and the series TYPEd counter that fall while the process runs."""
    restarts = [False] * len(snaps)
    falling: set = set()
    for i in range(1, len(snaps)):
        a, b = snaps[i - 1].values, snaps[i].values
        started = [k for k in b if k[0] == START_TIME and k in a]
        dropped = [k for k in cumulative if k in a and k in b and b[k] < a[k]]
        if started:
            # the process's own start time, where exposed, says it alone
            restarts[i] = any(b[k] != a[k] for k in started)
        else:
            moved = any(b[k] != a[k] for k in b if k[0].endswith("_created") and k in a)
            rose = any(k in a and k in b and b[k] > a[k] for k in cumulative)
            restarts[i] = moved or (bool(dropped) and not rose)
        if not restarts[i]:
            falling.update(k for k in dropped if _family(k[0], types)[1] == "counter")
    return restarts, falling


def server_metrics(snaps: list[Snapshot]) -> dict:
    """The windowed figures of one server's snapshots (sorted by time here)."""
    snaps = sorted(snaps, key=lambda s: s.t)
    types: dict[str, str] = {}
    for s in snaps:
        types.update(s.types)
    names = sorted({key for s in snaps for key in s.values})
    cumulative = [key for key in names if _cumulative(key[0], types)]
    restarts, falling = _restarts(snaps, cumulative, types)
    hist: dict[str, dict[float, float]] = {}
    hist_count: dict[str, float] = {}
    hist_sum: dict[str, float] = {}
    summaries: dict[str, dict] = {}
    counters: dict[tuple[str, str], float] = {}
    gauges: dict[tuple[str, str], list[float | None]] = {}
    not_counters: set[tuple[str, str]] = set()
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
        elif kind == "summary" and part in ("count", "sum", "quantile"):
            row = summaries.setdefault(fam, {"count": 0.0, "sum": 0.0, "q": {}})
            if part == "quantile":
                q = dict(labels).get("quantile")
                last = snaps[-1].values.get(key)
                if q is not None and last is not None:
                    row["q"][q] = last  # one label set's: a summary's quantiles do not add up
            else:
                row[part] += _delta(series, restarts)
        elif kind == "counter" and part in ("total", "") and key not in falling:
            k = (fam, _label_text(labels))
            counters[k] = counters.get(k, 0.0) + _delta(series, restarts)
        elif ((kind == "gauge" and part == "") or key in falling) and name != START_TIME:
            k = (fam, _label_text(labels))
            if key in falling:
                not_counters.add(k)
            acc = gauges.setdefault(k, [None] * len(snaps))
            for i, v in enumerate(series):
                if v is not None:
                    acc[i] = (acc[i] or 0.0) + v
    counters = {k: v for k, v in counters.items() if k not in not_counters}
    seconds = snaps[-1].t - snaps[0].t if len(snaps) > 1 else 0.0
    histograms = []
    for fam, buckets in sorted(hist.items()):
        count = hist_count.get(fam, max(buckets.values(), default=0.0))
        row = {"metric": fam, "count": round(count), "sum": _finite(hist_sum.get(fam)), "mean": None}
        if count > 0 and fam in hist_sum:
            row["mean"] = _finite(hist_sum[fam] / count)
        pairs = list(buckets.items())
        for q in QUANTILES:
            value, lo, hi = quantile(q, pairs) if count > 0 else (None, math.nan, math.nan)
            label = f"p{int(q * 100)}"
            row[label] = value
            row[f"{label}_bucket"] = None if value is None else [lo, None if math.isinf(hi) else hi]
        histograms.append(row)
    for fam, s in sorted(summaries.items()):
        row = {"metric": fam, "count": round(s["count"]), "sum": _finite(s["sum"]), "mean": _finite(s["sum"] / s["count"]) if s["count"] else None,
               "quantiles": "the server's own since it started (a summary's quantiles cannot be windowed)"}  # fmt: skip
        for q in QUANTILES:
            row[f"p{int(q * 100)}"] = next((_finite(v) for k, v in s["q"].items() if _same(k, q)), None)
            row[f"p{int(q * 100)}_bucket"] = None
        histograms.append(row)
    rates = [
        {"metric": fam, "labels": labels, "increase": _finite(inc),
         "per_s": _finite(inc / seconds) if seconds > 0 else None}
        for (fam, labels), inc in sorted(counters.items())
    ]  # fmt: skip
    series = []
    for (fam, labels), vals in sorted(gauges.items()):
        row = {"metric": fam, "labels": labels, "points": [[_iso(s.t), v] for s, v in zip(snaps, vals, strict=True)],
               "last": next((v for v in reversed(vals) if v is not None), None),
               "max": max((v for v in vals if v is not None), default=None)}  # fmt: skip
        if (fam, labels) in not_counters:
            row["note"] = "TYPE counter, but it falls while the other counters rise: read as a gauge"
        series.append(row)
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


def _same(text: str, q: float) -> bool:
    try:
        return abs(float(text) - q) < 1e-9
    except ValueError:
        return False


def _split(snap: Snapshot, group: str) -> dict[tuple, Snapshot]:
    """A snapshot's samples by the server labels they carry (GROUP_LABELS). A server is a fullest
    label set (one no other set contains); a sample with fewer of them (vLLM's
    ``cache_config_info`` has ``engine`` but no ``model_name``; a process's start time has none)
    belongs to every server whose labels include its own."""
    if group in ("file", "one"):
        return {(): snap}
    by_who: dict[tuple, dict] = {}
    for key, value in snap.values.items():
        who = tuple((k, v) for k, v in key[1] if k in GROUP_LABELS)
        by_who.setdefault(who, {})[key] = value
    fullest = [w for w in by_who if not any(set(w) < set(o) for o in by_who)]
    if fullest == [()]:
        return {(): snap}
    parts = {w: Snapshot(snap.display, snap.t, snap.types) for w in fullest}
    for who, values in by_who.items():
        for w in fullest:
            if set(who) <= set(w):
                parts[w].values.update(values)
    return parts


def read_servers(files: list[tuple[Path, str]], lo: datetime | None = None, hi: datetime | None = None,
                 group: str = "auto") -> tuple[list[dict], list[tuple[str, int, str]]]:  # fmt: skip
    """Server metrics of the snapshot files ``(path, display)`` taken in [lo, hi), and their bad
    lines ``(display, line, reason)``; a file left out whole is one with line 0. ``group``: how
    snapshots are told apart into servers (GROUPS; the module's docstring)."""
    groups: dict[tuple, list[Snapshot]] = {}
    bad: list[tuple[str, int, str]] = []
    for path, display in files:
        try:
            snap = read_snapshot(path, display)
        except Unreadable as exc:
            bad.append((display, 0, f"snapshot left out: {exc}"))
            continue
        if (lo is not None and snap.t < lo.timestamp()) or (hi is not None and snap.t >= hi.timestamp()):
            continue
        bad.extend((display, no, reason) for no, reason in snap.bad_lines)
        base = "" if group in ("labels", "one") else server_key(display)
        for who, part in _split(snap, group).items():
            groups.setdefault((base, who), []).append(part)
    out = []
    shared_base: dict[str, int] = {}
    for base, _ in groups:
        shared_base[base] = shared_base.get(base, 0) + 1
    for (base, who), snaps in sorted(groups.items()):
        # a file of one server is named by the file alone; its labels name it among others
        labels = [f"{k}={v}" for k, v in who] if shared_base[base] > 1 or not base else []
        name = " ".join([base] * bool(base) + labels) or "all snapshots"
        row = {"server": name, **server_metrics(snaps)}
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
