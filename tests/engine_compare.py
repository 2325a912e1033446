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
