"""Comparing two engines' (or two sources') results: JSON-like values, numbers within 1e-6
relative (or an absolute step), and the report model without its volatile parts."""

from __future__ import annotations

import math

INGEST_KEYS = ("files", "events", "bad_lines", "skipped_files", "formats", "bytes")
REL = 1e-6


def _close(a, b, abs_tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=REL, abs_tol=abs_tol)
    return a == b


# The model rounds numbers to 3 decimals: values 1e-12 apart may round one step apart.
ROUNDED = 0.001 + 1e-9

# Trends and averages computed from integer sums (tests/test_exact_aggregates.py): no split of
# the rows between threads, tasks or engines changes a bit of them.
EXACT_COLUMNS = {
    "sessions": (
        "reserved_slope_mb_per_min",
        "reserved_r2",
        "allocated_slope_mb_per_min",
        "rss_slope_mb_per_min",
    ),
    "memory_per_session": (
        "reserved_slope_mb_per_min",
        "reserved_r2",
        "allocated_slope_mb_per_min",
        "allocated_r2",
    ),
    "rss_per_process": ("rss_slope_mb_per_min", "rss_r2"),
    "prefill_growth_per_session": ("prefill_slope_ms_per_turn", "prefill_r2"),
    "gpu_per_host": ("util_avg", "sampled_s", "starved_s"),
    "gpu_timeline": ("util_avg",),
    "prefill_decode_ratio": ("prefill_ms_total", "decode_ms_total"),
}


def assert_exact(a: dict[str, list[dict]], b: dict[str, list[dict]], what: str) -> None:
    """EXACT_COLUMNS equal to the bit in the tables both hold (rows in the tables' own order)."""
    for table, cols in EXACT_COLUMNS.items():
        if table in a and table in b:
            rows_a = [[r.get(c) for c in cols] for r in a[table]]
            rows_b = [[r.get(c) for c in cols] for r in b[table]]
            assert rows_a == rows_b, f"{what}: {table} {cols} not bit-identical"


def differences(a, b, path: str = "", abs_tol: float = 1e-9) -> list[str]:
    """Where two JSON-like values differ (numbers within REL, or abs_tol)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: only in {'duckdb' if key in a else 'spark'}")
            else:
                out.extend(differences(a[key], b[key], f"{path}.{key}", abs_tol))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(differences(x, y, f"{path}[{i}]", abs_tol))
        return out
    return [] if _close(a, b, abs_tol) else [f"{path}: duckdb {a!r} != spark {b!r}"]


def assert_same(a, b, what: str, abs_tol: float = 1e-9) -> None:
    diff = differences(a, b, abs_tol=abs_tol)
    assert not diff, f"{what} differ in {len(diff)} places:\n" + "\n".join(diff[:25])


def comparable_model(model: dict) -> dict:
    out = {k: v for k, v in model.items() if k != "generated_at"}
    ingest = model["ingest"]
    out["ingest"] = {k: ingest.get(k) for k in INGEST_KEYS}
    out["ingest"]["bad_line_samples"] = [(s["file"], s["line"]) for s in ingest.get("bad_line_samples", [])]
    return out
