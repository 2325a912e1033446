"""Hand-made log lines for the ingest tests: v1 (collector/schema.py) and the legacy seed format
(article 003 §2.2: no v, naive local timestamp, duration_ms -1, one inference stage, allocated
memory in kv_cache_size_mb). Written independently of the simulator."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta
from pathlib import Path


def v1(ts: str, stage: str, sid: str | None = "s1", rid: str | None = "r1", **fields) -> dict:
    return {"v": 1, "ts": ts, "stage": stage, "session_id": sid, "request_id": rid, "host": "h1", "pid": 42, **fields}


def v1_request(sid: str, rid: str, t0: datetime, *, with_request_event: bool = True, offset: str = "+00:00",
               out: int = 101, reasoning: int = 30) -> list[dict]:
    """One v1 request: input, tokenize 20, queue 5, prefill 300, decode 2000 (101 tokens), format 3."""

    def at(ms: float) -> str:
        return (t0 + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") + offset

    params = {"num_beams": 1, "max_new_tokens": 512, "temperature": 0.6, "top_p": 0.95, "do_sample": True}
    lines = [
        v1(at(0), "input", sid, rid, input_len=80),
        v1(at(20), "tokenize", sid, rid, duration_ms=20.0, input_len=40),
        v1(at(25), "queue", sid, rid, duration_ms=5.0),
        v1(at(325), "prefill", sid, rid, duration_ms=300.0, input_len=40, kv_seq_len=40),
        v1(at(2325), "decode", sid, rid, duration_ms=2000.0, output_len=out, reasoning_len=reasoning,
           cpu_time_ms=900.0, gpu_wait_pct=55.0, gpu_util_pct=70.0, params=params),
        v1(at(2328), "format", sid, rid, duration_ms=3.0),
    ]
    if with_request_event:
        lines.append(v1(at(2329), "request", sid, rid, duration_ms=2329.0, ttft_ms=320.0, input_len=40,
                        output_len=out, reasoning_len=reasoning, ttfa_ms=900.0, status="ok", finish_reason="stop"))
    return lines


def legacy(ts: str, stage: str, sid: str = "L1", duration_ms: float = -1, **fields) -> dict:
    """A line as article 003's log_event writes it (key order too)."""
    return {"session_id": sid, "timestamp": ts, "stage": stage, "duration_ms": duration_ms, **fields}


def legacy_turn(sid: str, t0: datetime, reserved: float, allocated: float) -> list[dict]:
    def at(ms: float) -> str:
        return (t0 + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")

    return [
        legacy(at(0), "input", sid, input_len=12),
        legacy(at(15), "tokenize", sid, 15.0, input_len=9),
        legacy(at(4015), "inference", sid, 4000.0, output_len=100, cpu_time_ms=1000.0, gpu_wait_pct=75.0,
               gpu_util_pct=30.0),
        legacy(at(4020), "format", sid),
        legacy(at(4021), "gpu_memory", sid, kv_cache_size_mb=allocated, reserved_mb=reserved),
    ]


def dumps(obj: dict, legacy_style: bool = False) -> str:
    if legacy_style:
        return json.dumps(obj, ensure_ascii=False)  # the article's json.dumps defaults: ", " and ": "
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def write_lines(path: Path, lines: list, *, legacy_style: bool = False, gz: bool = False) -> Path:
    """Write dicts as JSON lines (bytes and str are written as they are, for damage)."""
    parts: list[bytes] = []
    for item in lines:
        if isinstance(item, bytes):
            parts.append(item)
        elif isinstance(item, str):
            parts.append(item.encode("utf-8"))
        else:
            parts.append(dumps(item, legacy_style).encode("utf-8") + b"\n")
    data = b"".join(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_requests(root: Path, n: int, sessions: int | None = None) -> Path:
    """A day file in ``root`` of ``n`` v1 requests a minute apart from 2026-11-23 10:00 UTC, in
    ``sessions`` sessions taken in turn (one session per request when None)."""
    lines = []
    for i in range(n):
        sid = f"s{i % sessions}" if sessions else f"s{i}"
        lines += v1_request(sid, f"r{i}", datetime(2026, 11, 23, 10, i))
    return write_lines(root / "ds15b_20261123.jsonl", lines)
