"""Small simulator runs shared by test_simulate.py and test_schema.py, and an independent reading of
the rules' thresholds (docs/rules.md) to check that each scenario shows its fault (and healthy
traffic none).

The checker below is deliberately naive Python over the raw lines: it shares no code with the
simulator or the analyzer, so a simulator bug cannot hide behind the same mistake twice.
"""

from __future__ import annotations

import atexit
import gzip
import json
import shutil
import statistics
import tempfile
from collections import defaultdict
from datetime import datetime
from functools import cache
from pathlib import Path

from dslogs.analyzer.simulate import SCENARIOS, simulate

SEED = 11
_ROOT = Path(tempfile.mkdtemp(prefix="dslogs-sim-tests-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)

V1_SCENARIOS = list(SCENARIOS)
LEGACY_SCENARIOS = [n for n, s in SCENARIOS.items() if "legacy" in s.formats]
HOST_SCOPES = ("host", "process")


@cache
def run(scenario: str, fmt: str = "v1") -> tuple[Path, dict]:
    """One scenario, 3 hours of traffic crossing local midnight (so a closed day is gzipped)."""
    spec = SCENARIOS[scenario]
    hosts = 2 if spec.scope in HOST_SCOPES else 1
    out = _ROOT / f"{scenario}-{fmt}"
    simulate(
        out,
        [scenario],
        seed=SEED,
        fmt=fmt,
        hosts=hosts,
        events=4000 * hosts,
        start="2026-11-23T21:30",
        hours=3.0,
        # Small files rotate; the 78 MB debug burst keeps the default size (fewer files).
        max_bytes=(10 << 20) if scenario == "log_volume" else 512 << 10,
    )
    return out, json.loads((out / "truth.json").read_text(encoding="utf-8"))


def lines(root: Path, truth: dict):
    """(file, line number, raw bytes) for every line of every file truth.json lists."""
    for rel in truth["files"]:
        data = (root / rel).read_bytes()
        if rel.endswith(".gz"):
            data = gzip.decompress(data)
        parts = data.split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        for i, raw in enumerate(parts, 1):
            yield rel, i, raw


def events(root: Path, truth: dict):
    """Parsed events, skipping the lines truth.json lists as deliberately bad."""
    bad = {(b["file"], b["line"]) for b in truth["bad_lines"]}
    for rel, i, raw in lines(root, truth):
        if (rel, i) not in bad:
            e = json.loads(raw.decode("utf-8"))
            e["_file"], e["_bytes"] = rel, len(raw) + 1
            yield e


def _when(e: dict) -> float:
    return datetime.fromisoformat(e.get("ts") or e["timestamp"]).timestamp()


def _slope_r2(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    if not sxx:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy / (sxx * syy) if syy else 0.0)


OOM_TYPES = {"OutOfMemoryError", "OOMError"}


def evaluate(root: Path, truth: dict) -> tuple[dict[str, set[str]], dict]:
    """Which §6 rules fire (rule -> session ids / hosts / {"*"}), and the global p50s."""
    med = statistics.median
    sess: dict = defaultdict(lambda: defaultdict(list))
    hosts: dict = defaultdict(lambda: defaultdict(list))
    glob: dict = defaultdict(list)
    for e in events(root, truth):
        st, sid, h = e["stage"], e.get("session_id"), e.get("host") or "-"
        hosts[h]["minute_bytes"].append((int(_when(e) // 60), e["_bytes"]))
        d = sess[sid]
        if st == "gpu_memory":
            alloc = e["allocated_mb"] if "allocated_mb" in e else e["kv_cache_size_mb"]
            d["mem"].append((_when(e) / 60, e["reserved_mb"], alloc, e.get("num_ooms", 0)))
        elif st == "error":
            d["err"].append(e["error_type"])
        elif st in ("decode", "inference"):
            d["gw"].append(e["gpu_wait_pct"])
            d["util"].append(e["gpu_util_pct"])
            d["out"].append(e["output_len"])
            if st == "decode":
                d["tpot"].append(e["duration_ms"] / (e["output_len"] - 1))
                d["beams"].append(e["params"]["num_beams"])
                d["max_new"].append(e["params"]["max_new_tokens"])
            else:  # legacy: an upper bound, prefill included
                d["tpot"].append(e["duration_ms"] / e["output_len"])
        elif st == "kv_cache":
            d["kv"].append(e["kv_seq_len"])
            d["kv_mb"].append(e["kv_cache_size_mb"])
        elif st == "tokenize":
            glob["tokenize"].append(e["duration_ms"])
        elif st == "prefill":
            glob["prefill_short" if e["input_len"] < 1200 else "prefill_long"].append(e["duration_ms"])
        elif st == "format" and e["duration_ms"] != -1:
            glob["format"].append(e["duration_ms"])
        elif st == "request":
            glob["ttft"].append(e["ttft_ms"])
        elif st == "queue":
            glob["queue"].append(e["duration_ms"])
        elif st == "gpu_sample":
            hosts[h]["gpu"].append((_when(e), e["gpu_util_pct"], e["gpu_mem_used_mb"], e["gpu_mem_total_mb"]))
        elif st == "process_sample":
            hosts[h]["rss"].append((_when(e) / 60, e["rss_mb"]))
        elif st == "collector":
            hosts[h]["dropped"].append(e["dropped"])
    fired: dict[str, set[str]] = defaultdict(set)
    for sid, d in sess.items():
        if sid is None:
            continue
        mem = d["mem"]
        if len(mem) >= 2:
            slope, _ = _slope_r2([m[0] for m in mem], [m[1] for m in mem])
            if slope > 50 and max(m[1] for m in mem) - min(m[1] for m in mem) > 200:
                fired["memory_leak"].add(sid)
        if any(r - a > 1024 and r - a > 0.5 * r for _, r, a, _ in mem):
            fired["ghost_memory"].add(sid)
        if any(t in OOM_TYPES for t in d["err"]) or (mem and max(m[3] for m in mem) > min(m[3] for m in mem)):
            fired["oom"].add(sid)
        if d["gw"] and med(d["gw"]) > 60:
            fired["gpu_wait"].add(sid)
        if d["tpot"] and med(d["tpot"]) > 130:
            fired["slow_decode"].add(sid)
            if med(d["util"]) < 20:
                fired["cpu_bound"].add(sid)
        if d["kv"] and (max(d["kv"]) > 2048 or max(d["kv_mb"]) > 8192):
            fired["kv_cache_bloat"].add(sid)
        if d["beams"] and max(d["beams"]) > 1:
            fired["beam_search"].add(sid)
        if d["max_new"] and max(d["max_new"]) >= 4096:
            fired["high_max_tokens"].add(sid)
        if d["out"] and max(d["out"]) > 3000:
            fired["long_output"].add(sid)
    p50 = {k: med(v) for k, v in glob.items()}
    for rule, key, limit in (
        ("slow_tokenize", "tokenize", 100),
        ("slow_prefill", "prefill_short", 900),
        ("slow_prefill", "prefill_long", 2500),
        ("slow_ttft", "ttft", 1000),
        ("slow_format", "format", 30),
    ):
        if p50.get(key, 0) > limit:
            fired[rule].add("*")
    # The queue's tail: an overload lasts part of the time (linear p95, as numpy's default).
    if len(glob["queue"]) >= 2 and statistics.quantiles(glob["queue"], n=20, method="inclusive")[18] > 1000:
        fired["queue_wait"].add("*")
    for h, d in hosts.items():
        gpu = d["gpu"]
        if gpu and max(u for _, u, _, _ in gpu) < 65:
            fired["low_gpu_util"].add(h)
        if any(u < 20 and m > 0.9 * t for _, u, m, t in gpu):
            fired["gpu_starved"].add(h)
        for a, b in zip(gpu, gpu[1:], strict=False):
            dt = b[0] - a[0]
            if 0 < dt <= 1.5 and a[1] > 80 and b[1] > 80 and abs(b[2] - a[2]) / dt > 2000:
                fired["memory_thrash"].add(h)
                break
        rss = d["rss"]
        if len(rss) > 10:
            slope, r2 = _slope_r2([x for x, _ in rss], [y for _, y in rss])
            if max(y for _, y in rss) - min(y for _, y in rss) > 100 and slope > 0 and r2 >= 0.8:
                fired["rss_growth"].add(h)
        per_minute: dict[int, int] = defaultdict(int)
        for minute, n in d["minute_bytes"]:
            per_minute[minute] += n
        if per_minute and max(per_minute.values()) > 60e6:
            fired["log_volume"].add(h)
        if d["dropped"] and max(d["dropped"]) > 0:
            fired["collector_drops"].add(h)
    return fired, p50
