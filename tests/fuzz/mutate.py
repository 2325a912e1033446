"""Seeded mutators for the fuzz suite: byte damage, one bad value per field, hostile strings."""

from __future__ import annotations

import gzip
import json
import random
from datetime import datetime, timedelta

from dslogs.analyzer.ingest.columns import RAW_COLUMNS
from tests.ingest_lines import legacy_turn, v1, v1_request

BYTE_MUTATIONS = ("flip", "truncate", "insert", "delete", "duplicate", "splice_lines", "crlf", "gzip")

# Values of the wrong kind for a field, or of the right kind that a reader may get wrong.
BAD_VALUES = [
    "x", "", " 5 ", "1.5", "1e3", "+5", "0x10", "NaN", "inf", "-inf", "9223372036854775808", 1.5, -1, 0,
    1e19, 10**30, True, False, [], [1], {}, {"a": 1}, "2026-W48-1", "20261123T100000", "2026-11-23x10:00",
    "2026-11-23T24:00:00Z", "yesterday", 2026, "\u202e\x1b[2J", "a" * 300, None,
]  # fmt: skip

HOSTILE = [
    '</script><script>window.__pwned=1</script>',
    '<img src=x id=pwned onerror="window.__pwned=1">',
    '"><svg id=pwned onload="window.__pwned=1">',
    "javascript:window.__pwned=1",
    "{{7*7}}${7*7}<%= 7*7 %>",
    "**bold** _em_ [link](http://example.com) `code` | pipe <think>hidden</think>",
    "=cmd|' /C calc'!A0", "@SUM(1+1)", "+1+1", "-2+3", "\tx",
    "\x1b[2J\x1b[H\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b]0;title\x07", "abc\u202edcba\u2066x\u2069", "\x00nul\x7f\x9b31m",
    "--cache=/tmp/evil", "'; DROP TABLE events; --", "\U0001f600 中文 é", "\u2028\u2029\ufeff",
    "a" * 2000, "</noscript></style></title></textarea><b id=pwned>x</b>",
]  # fmt: skip

STRING_FIELDS = ["session_id", "request_id", "host", "stage", "status", "finish_reason", "error_type",
                 "error_msg", "failed_stage"]


def base_events(seed: int = 0) -> list[dict]:
    """A small, valid day: v1 requests with memory samples and an error, plus a legacy turn."""
    t0 = datetime(2026, 11, 23, 10, 0, 0)
    events: list[dict] = []
    for i in range(3):
        events += v1_request(f"s{i}", f"r{i}", t0 + timedelta(minutes=i))
        for k in range(3):
            events.append(v1((t0 + timedelta(minutes=i, seconds=10 + k)).isoformat() + "+00:00", "gpu_memory",
                             f"s{i}", f"r{i}", allocated_mb=1000.0 + k, reserved_mb=2000.0 + 100 * k))
    events.append(v1((t0 + timedelta(minutes=5)).isoformat() + "+00:00", "error", "s1", "r1",
                     error_type="OutOfMemoryError", error_msg="CUDA out of memory", failed_stage="decode"))
    events += legacy_turn("L1", t0 + timedelta(minutes=6), 10.0, 5.0)
    return events


def encode(events: list[dict]) -> bytes:
    return b"".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
                    for e in events)


def byte_mutation(data: bytes, kind: str, rng: random.Random) -> tuple[bytes, bool]:
    """(damaged bytes, gzipped)."""
    n = len(data)
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(n)
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out), False
    if kind == "truncate":
        return data[: rng.randrange(1, n)], False
    if kind == "insert":
        i = rng.randrange(n)
        junk = rng.choice([b"\x00", b"\r", b"\n", b"{", b'"', b"\xff\xfe", b"\xe4\xb8", b"\n\n  \n", b"\x1b[2J",
                           bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))])
        return data[:i] + junk + data[i:], False
    if kind == "delete":
        i = rng.randrange(n)
        return data[:i] + data[i + rng.randint(1, 40):], False
    if kind == "duplicate":
        i = rng.randrange(n)
        j = min(n, i + rng.randint(1, 200))
        k = rng.randrange(n)
        return data[:k] + data[i:j] + data[k:], False
    if kind == "splice_lines":
        lines = data.split(b"\n")
        a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[a] = lines[a][: len(lines[a]) // 2] + lines[b][len(lines[b]) // 2:]
        return b"\n".join(lines), False
    if kind == "crlf":
        lines = data.split(b"\n")
        out = [ln + (b"\r" if rng.random() < 0.5 and ln else b"") for ln in lines]
        i = rng.randrange(len(out))
        out[i] = out[i][: max(1, len(out[i]) // 3)]
        return b"\n".join(out), False
    if kind == "gzip":
        blob = bytearray(gzip.compress(data))
        how = rng.choice(["flip", "truncate", "tail"])
        if how == "flip":
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(blob))
                blob[i] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            blob = blob[: rng.randrange(1, len(blob))]
        else:
            blob = blob[:-rng.randint(1, 8)]
        return bytes(blob), True
    raise ValueError(kind)


def field_cases() -> list[tuple[str, object]]:
    """(field, bad value): every read field (and params' keys) with several wrong values."""
    fields = [k for k in RAW_COLUMNS if k != "params"] + [f"params.{k}" for k in
                                                          ("num_beams", "max_new_tokens", "temperature", "top_p", "do_sample")]
    fields.append("params")
    return [(f, v) for f in fields for v in BAD_VALUES]


def with_bad_value(events: list[dict], field_name: str, value, rng: random.Random) -> tuple[list[dict], int]:
    """A copy of ``events`` with ``field_name`` of one event (1-based index returned) set to
    ``value``."""
    events = [dict(e) for e in events]
    i = rng.randrange(len(events))
    e = events[i]
    if field_name.startswith("params."):
        e["params"] = dict(e.get("params") or {}, **{field_name.split(".", 1)[1]: value})
    else:
        e[field_name] = value
    return events, i + 1
