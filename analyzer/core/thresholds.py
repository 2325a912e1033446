"""Rule thresholds: defaults from the seed articles, overridable from a TOML file.

The file mirrors ``DEFAULTS``: one table per rule id, declared with the rule (plus ``[slo]``,
``[checklist]`` and ``[report]``, declared here), e.g.::

    [memory_leak]
    slope_mb_per_min = 30

    [slo]
    ttft_ms = 800

A key that is not in ``DEFAULTS`` is a ``UsageError`` naming the key and the file (a typo must
not silently keep the default). Values must have the default's type (ints are accepted for
floats). Each default cites the section of the seed article it comes from (docs/sources.md);
the few that are ours (no seed gives a number) say so.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from analyzer.core.errors import UsageError

# Weekly report: a side whose events span less than this share of its week's hours gets no
# regression verdict. Ours (no seed gives one): an LLM service's load follows the hour and the
# weekday, so a part of a week set against a whole one compares a part of that cycle (8 busy
# hours against 168 read as +19,050 % errors); half a week holds every hour of the day at least
# three times. The other condition, 30 requests a side, is the diff's MIN_COUNT.
WEEK_MIN_COVERAGE = 0.5

# Table -> key -> (default, source). Seeds: 000 = system resource monitoring guide, 003 = JSONL
# logger / latency slices / health-check list. A rule's table is declared with the rule
# (``@rule(..., thresholds={...})`` in analyzer/rules/), which calls ``register``; the tables
# below serve no single rule. The metric SQL binds every key as ``$<table>_<key>``, so a query
# run on a partial registry would fail or, worse, a user's TOML naming a rule's key would be
# refused: ``defaults`` and ``load_thresholds`` refuse to answer until ``analyzer.rules`` has
# registered every rule and called ``seal`` (core sits below the rules and cannot import them).
_CORE: dict[str, dict[str, tuple[object, str]]] = {
    "slo": {
        "ttft_ms": (1000.0, "ours: the goodput SLO"),
        "tpot_ms": (130.0, "003 §5.2 (decode < 130 ms per token): the goodput SLO"),
    },
    "checklist": {
        "short_input_tokens": (200, "ours: a 'simple question' like 1+1等于几 (003 §5.2)"),
        "short_e2e_ms": (1200.0, "003 §5.2: end-to-end < 1.2 s"),
        "short_answer_tokens": (16, "ours: the short answer 003 §5.2's 1.2 s budget holds; a longer "
                                    "reply counts its first this many tokens"),
        "reserved_band_mb": (200.0, "003 §5.3: reserved_mb within ±200 MB"),
    },
    "report": {
        "max_sessions": (1000, "ours: sessions listed in the model (flagged ones always)"),
        "detail_sessions": (50, "ours: sessions with a request drill-down"),
        "detail_requests": (100, "ours: requests per drill-down session"),
        "timeline_sessions": (12, "ours: sessions in the memory / KV timelines"),
        "timeline_points": (120, "ours: points per session in those timelines"),
        "slowest_sessions": (20, "ours: rows in the slowest-sessions table"),
        "future_margin_min": (60, "ours: naive timestamps this far after now mean a time-zone mix-up"),
        "unknown_session_share": (0.5, "ours: above this share of requests without a session id, say so"),
    },
}

_RULE_TABLES: dict[str, dict[str, tuple[object, str]]] = {}
_sealed = False


def register(table: str, spec: dict[str, tuple[object, str]]) -> None:
    """Declare ``table``'s keys as ``{key: (default, source)}``; a mistake fails at import."""
    if _sealed:
        raise RuntimeError(f"threshold table [{table}] registered after analyzer.rules finished registering")
    if table in _RULE_TABLES or table in _CORE:
        raise ValueError(f"threshold table [{table}] registered twice")
    if not spec:
        raise ValueError(f"threshold table [{table}] has no keys")
    for key, entry in spec.items():
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str) and entry[1]
                and isinstance(entry[0], int | float) and not isinstance(entry[0], bool)):
            raise ValueError(f"threshold {table}.{key} must be (default number, source text), got {entry!r}")
    _RULE_TABLES[table] = dict(spec)


def seal() -> None:
    """Every rule has registered: the tables are complete (called by ``analyzer.rules``)."""
    global _sealed
    _sealed = True


def _spec() -> dict[str, dict[str, tuple[object, str]]]:
    if not _sealed:
        raise RuntimeError(
            "the threshold tables are incomplete until analyzer.rules is imported (its rules declare "
            "them): import defaults/load_thresholds from analyzer.rules"
        )
    # rule tables in registration order, then the shared ones (the order reports list them in)
    return {**_RULE_TABLES, **_CORE}


def __getattr__(name: str):
    # DEFAULTS / SOURCES read like the constants they were, and only once the registry is whole.
    if name == "DEFAULTS":
        return {table: {key: value for key, (value, _src) in keys.items()} for table, keys in _spec().items()}
    if name == "SOURCES":
        return {table: {key: src for key, (_value, src) in keys.items()} for table, keys in _spec().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def defaults() -> dict[str, dict[str, object]]:
    """A fresh copy of the default thresholds (every table: see ``_spec``)."""
    return {table: {key: value for key, (value, _src) in keys.items()} for table, keys in _spec().items()}


def _check_type(path: Path, dotted: str, value: object, default: object) -> object:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise UsageError(
            f"{path}: threshold {dotted} must be {type(default).__name__}, got {value!r}"
        )
    _check_range(path, dotted, value)
    return value


def _check_range(path: Path, dotted: str, value: object) -> None:
    """Every threshold is a finite amount, count or share, never negative (``-inf`` would
    silently turn a rule off, ``nan`` compares false both ways); shares and R² lie in [0, 1],
    percentages in [0, 100]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    key = dotted.rsplit(".", 1)[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{path}: threshold {dotted} must be a finite number, got {value!r}")
    if value < 0:
        raise UsageError(f"{path}: threshold {dotted} must not be negative, got {value!r}")
    if (key.endswith("_share") or key.endswith("r2")) and value > 1:
        raise UsageError(f"{path}: threshold {dotted} is a share between 0 and 1, got {value!r}")
    if key.endswith("_pct") and value > 100:
        raise UsageError(f"{path}: threshold {dotted} is a percentage between 0 and 100, got {value!r}")


def load_thresholds(path: Path | str | None) -> dict[str, dict[str, object]]:
    """Defaults overridden by the TOML file at ``path`` (None: the defaults)."""
    result = defaults()
    if path is None:
        return result
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: thresholds file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read thresholds file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    for table, keys in data.items():
        if table not in result:
            raise UsageError(
                f"{path}: unknown threshold key {table!r} (valid tables: {', '.join(result)})"
            )
        if not isinstance(keys, dict):
            raise UsageError(f"{path}: {table!r} must be a table ([{table}]), got {keys!r}")
        for key, value in keys.items():
            dotted = f"{table}.{key}"
            if key not in result[table]:
                raise UsageError(
                    f"{path}: unknown threshold key {dotted!r} "
                    f"(valid in [{table}]: {', '.join(result[table])})"
                )
            result[table][key] = _check_type(path, dotted, value, result[table][key])
    return result
