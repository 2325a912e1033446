"""Before and after: the diff model ``dslogs.diff/1`` (docs/diff.md).

A side is a log set (paths or globs, optionally a time window) or a report model saved with
``analyze --format json``. From logs a side has the report model *and* the values behind its
percentiles (every stage duration and every request's TTFT, TPOT, e2e, …, each with its request's
input and output length), so each percentile change gets a 95 % interval and each distribution a
rank test; from a saved model only its percentiles are known, and the diff says so (no
significance, no mix adjustment).

The p50/p95/p99 shown for a side are always its report model's (the report's SQL over every
value): a diff of two windows shows what ``analyze`` shows over each. Only the significance test,
the intervals and the mix read the values, and above ``MAX_VALUES`` values of a metric on a side
they read a repeatable sample (the method says so). Pure Python: the diff needs no numpy.

A change is a *regression* only when it is significant, larger than the threshold and not
explained by the request mix: before's values are re-weighted to after's mix of input lengths
(and output lengths, for the stages that scale with them) and the percentile of that re-weighted
distribution is what "after" would show if only the mix had changed. The change splits into a
mix part (before → expected) and a service part (expected → after); only the service part can
make a regression. Too few requests (under ``MIN_COUNT``, or too few in a percentile's tail)
never make one.

The weekly report is a diff of two windows (``dslogs.analyzer.model.weekly`` calls ``diff_sides``).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate, chain, islice, repeat
from operator import add, eq, mul, sub

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.severity import severity_rank

SCHEMA = "dslogs.diff/1"
REGRESSION_PCT = 20.0
MIN_COUNT = 30  # requests per side below which no percentile gets a verdict
TAIL_COUNT = 5  # a percentile q needs n·(1 − q) ≥ this many values above it on each side
# values of one metric on one side that the significance test reads; beyond it a repeatable
# sample (the requests with the smallest hash of their ids): a pure-Python test stays in seconds
MAX_VALUES = 200_000
Z95 = 1.959963984540054
# A verdict needs 99 %: a diff makes ~35 comparisons, and at 95 % one healthy day in a few
# showed a false regression (bench: 10 healthy seeds, day against day).
Z_VERDICT = 2.5758293035489
MIN_ABS_MS = 2.0  # a change smaller than this many ms is steady whatever its percentage
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
INPUT_BINS = 10  # pooled deciles of input_len
OUTPUT_BINS = 4  # pooled quartiles of output_len (stages that scale with the output)

# name, label, unit, rise is bad, mix strata ("in" = input length, "io" = input and output length)
STAGE_METRICS = [
    ("tokenize_ms", "tokenize", "ms", True, "in"),
    ("queue_ms", "queue", "ms", True, "in"),
    ("prefill_ms", "prefill", "ms", True, "in"),
    ("decode_ms", "decode", "ms", True, "io"),
    ("inference_ms", "inference", "ms", True, "io"),
    ("format_ms", "format", "ms", True, "io"),
]
REQUEST_METRICS = [
    ("ttft_ms", "TTFT", "ms", True, "in"),
    ("tpot_ms", "TPOT", "ms", True, "in"),
    ("e2e_ms", "end-to-end", "ms", True, "io"),
    ("ttfa_ms", "TTFA", "ms", True, "io"),
    ("tokens_per_s", "tokens/s", "tok/s", False, "io"),
]
# per request: what the mix compares and the strata are cut from
MIX_COLUMNS = ("input_len", "output_len", "reasoning_share", "num_beams", "max_new_tokens")
VALUE_COLUMNS = [m[0] for m in STAGE_METRICS + REQUEST_METRICS] + list(MIX_COLUMNS)
NAN = float("nan")


# -- sides ------------------------------------------------------------------------------------


@dataclass
class Values:
    """A side's values: per metric its values in ascending order, each with its request's input
    and output length (NaN: not known); per request the mix columns (NaN for NULL)."""

    metrics: dict[str, tuple[array, array, array]] = field(default_factory=dict)
    requests: dict[str, array] = field(default_factory=dict)

    @classmethod
    def from_requests(cls, columns: dict[str, Sequence[float | None]]) -> Values:
        """From per-request columns (``VALUE_COLUMNS``; None or NaN for a missing value): each
        metric's value of each request, with that request's lengths."""
        n = max((len(v) for v in columns.values()), default=0)
        cols = {c: [_num(x) for x in columns.get(c, [None] * n)] for c in VALUE_COLUMNS}
        inp, out = cols["input_len"], cols["output_len"]
        metrics = {}
        for name, *_ in STAGE_METRICS + REQUEST_METRICS:
            rows = sorted((v, inp[i], out[i]) for i, v in enumerate(cols[name]) if math.isfinite(v))
            v, i, o = _transposed(rows, 3)
            metrics[name] = (v, i, o)
        return cls(metrics, {c: array("d", cols[c]) for c in MIX_COLUMNS})


@dataclass
class Side:
    label: str
    model: dict
    source: str  # "logs" or "report"
    values: Values | None = None
    sampled: bool = False  # some metric's values are a sample (more than MAX_VALUES)
    paths: list[str] = field(default_factory=list)
    engine: str = "duckdb"  # the engine that built the model
    values_engine: str = "duckdb"  # the engine the values were read with


def parse_range(text: str | None, option: str) -> tuple[str | None, str | None]:
    """`A..B`, `A..` or `..B` (forms of --since/--until) -> (since, until)."""
    if text is None:
        return None, None
    if ".." not in text:
        raise UsageError(f"{option} {text!r}: expected START..END (either may be empty), e.g. 2026-11-20..2026-11-27")
    since, until = (part.strip() or None for part in text.split("..", 1))
    return since, until


def _num(x) -> float:
    return NAN if x is None else float(x)


# Each metric's values as the report's SQL reads them: a stage's durations are the events of that
# stage with a duration (queries/stage_percentiles.sql), each joined to its request's lengths; the
# request metrics are the requests view's columns (queries/request_latency_percentiles.sql). k
# picks the sample: a hash of the row's identity, so a run reads the same rows every time.
_STAGE_SQL = """
SELECT CAST(e.duration_ms AS DOUBLE) AS v, coalesce(CAST(r.input_len AS DOUBLE), 'NaN') AS input_len,
       coalesce(CAST(r.output_len AS DOUBLE), 'NaN') AS output_len, hash(e.session_id, e.request_id, e.ts, e.duration_ms) AS k
FROM events AS e
LEFT JOIN requests AS r ON e.session_id IS NOT DISTINCT FROM r.session_id AND e.request_id = r.request_id
WHERE e.stage = '{stage}' AND e.duration_ms IS NOT NULL
"""
_REQUEST_SQL = """
SELECT CAST({name} AS DOUBLE) AS v, coalesce(CAST(input_len AS DOUBLE), 'NaN') AS input_len,
       coalesce(CAST(output_len AS DOUBLE), 'NaN') AS output_len, hash(session_id, request_id) AS k
FROM requests WHERE {name} IS NOT NULL
"""


def _sample(con, sql: str, limit: int) -> tuple[str, bool]:
    """``sql`` (with a column k), cut to its ``limit`` rows of smallest k when it has more."""
    n = con.execute(f"SELECT count(*) FROM ({sql})").fetchall()[0][0]
    if n <= limit:
        return sql, False
    return f"SELECT * FROM ({sql}) ORDER BY k LIMIT {int(limit)}", True


def read_values(con, limit: int | None = None) -> tuple[Values, bool]:
    """A side's values from its open DuckDB connection (the views events and requests), and
    whether any metric's were sampled (more than ``limit``, default ``MAX_VALUES``)."""
    limit = MAX_VALUES if limit is None else limit
    sampled = False
    values = Values()
    specs = [(name, _STAGE_SQL.format(stage=name[:-3])) for name, *_ in STAGE_METRICS]
    specs += [(name, _REQUEST_SQL.format(name=name)) for name, *_ in REQUEST_METRICS]
    for name, sql in specs:
        sql, cut = _sample(con, sql, limit)
        sampled |= cut
        rows = con.execute(f"SELECT v, input_len, output_len FROM ({sql}) ORDER BY v, k").fetchall()
        v, i, o = _transposed(rows, 3)
        values.metrics[name] = (v, i, o)
    cols = ", ".join(f"coalesce(CAST({c} AS DOUBLE), 'NaN')" for c in MIX_COLUMNS)
    sql, cut = _sample(con, f"SELECT {cols}, hash(session_id, request_id) AS k FROM requests", limit)
    sampled |= cut
    rows = con.execute(f"SELECT * EXCLUDE (k) FROM ({sql})").fetchall()
    values.requests = dict(zip(MIX_COLUMNS, _transposed(rows, len(MIX_COLUMNS)), strict=True))
    return values, sampled


def _transposed(rows: list[tuple], width: int) -> tuple[array, ...]:
    """Rows of floats (NaN, never None) as one array per column."""
    if not rows:
        return tuple(array("d") for _ in range(width))
    return tuple(array("d", col) for col in zip(*rows, strict=True))


# -- statistics (pure Python) -------------------------------------------------------------------


def _finite(values: Iterable[float]) -> list[float]:
    return list(filter(math.isfinite, values))


def quantile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of ascending values (numpy's default; quantile_cont's rule)."""
    n = len(sorted_vals)
    h = (n - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    a, b, t = float(sorted_vals[lo]), float(sorted_vals[hi]), h - lo
    # numpy's lerp: from the nearer end, so that t = 1 gives b exactly
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def quantile_ci(sorted_vals: Sequence[float], q: float) -> tuple[float, float, float] | None:
    """Linear-interpolated quantile and its distribution-free 95 % interval: the order statistics
    at ranks n·q ± 1.96·sqrt(n·q·(1−q)) (binomial, normal approximation)."""
    n = len(sorted_vals)
    if n == 0:
        return None
    half = Z95 * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half) - 1))
    hi = int(min(n - 1, math.ceil(n * q + half)))
    return quantile(sorted_vals, q), float(sorted_vals[lo]), float(sorted_vals[hi])


def weighted_quantiles(sorted_vals: Sequence[float], weights: Sequence[float],
                       qs: Sequence[float]) -> list[float] | None:  # fmt: skip
    """The qs-quantiles of ascending values with weights: each value stands at the middle of its
    weight on the cumulative axis, linear in between (flat beyond the ends)."""
    total = math.fsum(weights)
    if total <= 0 or not len(sorted_vals):
        return None
    cum = list(map(sub, accumulate(weights), map(mul, weights, repeat(0.5))))
    out = []
    for q in qs:
        x = q * total
        j = bisect_right(cum, x) - 1
        if j < 0:
            out.append(float(sorted_vals[0]))
        elif j >= len(cum) - 1:
            out.append(float(sorted_vals[-1]))
        else:
            a, b = float(sorted_vals[j]), float(sorted_vals[j + 1])
            out.append(a + (b - a) * (x - cum[j]) / (cum[j + 1] - cum[j]))
    return out


def weighted_quantile(sorted_vals: Sequence[float], weights: Sequence[float], q: float) -> float | None:
    got = weighted_quantiles(sorted_vals, weights, [q])
    return got[0] if got else None


def mann_whitney(a: Iterable[float], b: Iterable[float]) -> dict | None:
    """Two-sided Mann-Whitney U test (normal approximation, tie-corrected) and the probability
    that a value after exceeds one before (common-language effect size)."""
    a, b = sorted(a), sorted(b)  # linear for values already in order
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return None
    # U_after: each after value counts the before values below it and half of those equal to
    # it, Σ (below + below-or-equal) / 2; bisect under map runs in C, and without ties one
    # count is both
    both = sorted(chain(a, b))  # two ascending runs: one merge
    tied = any(map(eq, both, islice(both, 1, None)))
    below = sum(map(bisect_left, repeat(a, n2), b))
    u2 = (below + sum(map(bisect_right, repeat(a, n2), b))) / 2.0 if tied else float(below)
    tie = sum(t**3 - t for t in Counter(both).values() if t > 1) if tied else 0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        p = 1.0
    else:
        z = (u2 - mu - math.copysign(0.5, u2 - mu)) / math.sqrt(var) if u2 != mu else 0.0
        p = math.erfc(abs(z) / math.sqrt(2))
    return {"p_value": _r(p, 6), "prob_after_greater": _r(u2 / (n1 * n2), 4), "n_before": n1, "n_after": n2}


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> float | None:
    if not n1 or not n2:
        return None
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = (k2 / n2 - k1 / n1) / se
    return math.erfc(abs(z) / math.sqrt(2))


def _r(v, digits: int = 3):
    if v is None:
        return None
    v = float(v)
    return round(v, digits) if math.isfinite(v) else None


def change_pct(after, before) -> float | None:
    if after is None or before is None or before == 0:
        return None
    return round((float(after) - float(before)) / abs(float(before)) * 100.0, 1)


def min_count(q: float) -> int:
    return max(MIN_COUNT, math.ceil(TAIL_COUNT / (1 - q)))


# -- strata: the mix ---------------------------------------------------------------------------


def _edges(pooled: Iterable[float], bins: int) -> list[float]:
    vals = sorted(_finite(pooled))
    if not vals:
        return []
    return sorted({quantile(vals, i / bins) for i in range(1, bins)})


def _stratum_ids(lengths: Sequence[float], edges: list[float]) -> list[int]:
    """The bin of each length among ``edges``; a missing length (NaN) is its own bin, past the
    last: against a closing +inf no comparison with NaN is true, so bisect ends beyond it."""
    bounds = [*edges, math.inf]
    return list(map(bisect_right, repeat(bounds, len(lengths)), lengths))


def mix_edges(before: Values, after: Values) -> tuple[list[float], list[float]]:
    """The strata's bounds: input-length deciles and output-length quartiles, pooled over both
    sides' requests."""
    e_in = _edges([*before.requests.get("input_len", ()), *after.requests.get("input_len", ())], INPUT_BINS)
    e_out = _edges([*before.requests.get("output_len", ()), *after.requests.get("output_len", ())], OUTPUT_BINS)
    return e_in, e_out


def strata(lengths: tuple[Sequence[float], Sequence[float]], edges: tuple[list[float], list[float]],
           kind: str) -> list[int]:  # fmt: skip
    """Stratum id of each value from its request's (input, output) lengths: the input-length
    decile, times the output-length quartile for kind "io"."""
    ids = _stratum_ids(lengths[0], edges[0])
    if kind != "io":
        return ids
    k = len(edges[1]) + 2
    return list(map(add, map(mul, ids, repeat(k)), _stratum_ids(lengths[1], edges[1])))


def mix_weights(sb: Sequence[int], sa: Sequence[int]) -> tuple[list[float], float]:
    """Weights for before's values that give them after's stratum mix; the share of after's
    requests in strata before never saw (their mix cannot be re-weighted)."""
    nb, na = len(sb), len(sa)
    cb, ca = Counter(sb), Counter(sa)
    uncovered = sum(c for s, c in ca.items() if s not in cb) / na if na else 0.0
    per = {s: (ca.get(s, 0) / max(na, 1)) / (c / max(nb, 1)) for s, c in cb.items()}
    return list(map(per.__getitem__, sb)), uncovered


# -- comparing ---------------------------------------------------------------------------------


def verdict_pct(pct, rise_is_bad: bool, limit: float) -> str:
    if pct is None:
        return "n/a"
    worse = pct > limit if rise_is_bad else pct < -limit
    better = pct < -limit if rise_is_bad else pct > limit
    return "regression" if worse else "improved" if better else "steady"


def _model_pcts(model: dict, name: str, kind: str) -> dict:
    """{count, p50, p95, p99} of a metric from a report model."""
    if kind == "stage":
        stage = name[:-3]
        row = next((s for s in model.get("stages") or [] if s.get("stage") == stage), None) or {}
        return {"count": row.get("count"), "p50": row.get("p50_ms"), "p95": row.get("p95_ms"), "p99": row.get("p99_ms")}
    row = (model.get("requests") or {}).get(name) or {}
    if not isinstance(row, dict):
        return {}
    count = row.get("count")
    if count is None and row.get("p50") is not None:
        count = (model.get("requests") or {}).get("count")
    return {"count": count, "p50": row.get("p50"), "p95": row.get("p95"), "p99": row.get("p99")}


def compare_metric(spec, kind: str, before: Side, after: Side, limit: float,
                   edges: tuple[list[float], list[float]] | None = None) -> dict | None:  # fmt: skip
    """One metric's p50/p95/p99 before and after; ``edges``: ``mix_edges`` of the sides (computed
    when not given)."""
    name, label, unit, rise_is_bad, strata_kind = spec
    row = {"metric": name, "label": label, "kind": kind, "unit": unit, "rise_is_bad": rise_is_bad}
    mb, ma = _model_pcts(before.model, name, kind), _model_pcts(after.model, name, kind)
    if before.values is not None and after.values is not None:
        edges = edges if edges is not None else mix_edges(before.values, after.values)
        return _compare_values(row, mb, ma, before.values, after.values, strata_kind, limit, edges)
    if not any(mb.get(q) is not None or ma.get(q) is not None for q, _ in QUANTILES):
        return None
    row.update(count_before=mb.get("count"), count_after=ma.get("count"), rank_test=None, significance=False)
    for q, qv in QUANTILES:
        b, a = mb.get(q), ma.get(q)
        pct = change_pct(a, b)
        few = any(c is not None and c < min_count(qv) for c in (mb.get("count"), ma.get("count")))
        verdict = "too few" if few and pct is not None else verdict_pct(pct, rise_is_bad, limit)
        row[q] = {"before": b, "after": a, "change_pct": pct, "ci_pct": None, "significant": None,
                  "expected_after": None, "mix_pct": None, "service_pct": None, "verdict": verdict}
    row["verdict"] = _overall(row)
    return row


def _compare_values(row: dict, mb: dict, ma: dict, before: Values, after: Values, strata_kind: str,
                    limit: float, edges: tuple[list[float], list[float]]) -> dict | None:  # fmt: skip
    """A metric with its values on both sides: the percentiles are the models' (the report's,
    over every value); the intervals, the rank test and the mix come from the values."""
    name = row["metric"]
    rise_is_bad = row["rise_is_bad"]
    empty = (array("d"), array("d"), array("d"))
    mb_vals, ma_vals = before.metrics.get(name) or empty, after.metrics.get(name) or empty
    vb, va = mb_vals[0], ma_vals[0]
    if len(vb) == 0 and len(va) == 0:
        return None
    nb = mb.get("count") if mb.get("count") is not None else len(vb)
    na = ma.get("count") if ma.get("count") is not None else len(va)
    row.update(count_before=int(nb), count_after=int(na), significance=True, rank_test=mann_whitney(vb, va))
    weights = None
    uncovered = None
    if len(vb) and len(va):
        sb, sa = strata(mb_vals[1:], edges, strata_kind), strata(ma_vals[1:], edges, strata_kind)
        weights, uncovered = mix_weights(sb, sa)
    sum_w2 = math.fsum(map(mul, weights, weights)) if weights is not None else 0.0
    n_eff = math.fsum(weights) ** 2 / sum_w2 if sum_w2 > 0 else 0.0
    row["mix_uncovered_share"] = _r(uncovered, 4)
    expected_q = weighted_quantiles(vb, weights, [qv for _, qv in QUANTILES]) if weights is not None else None
    for i, (q, qv) in enumerate(QUANTILES):
        b, a = mb.get(q), ma.get(q)
        cell = {"before": b, "after": a, "change_pct": None, "ci_pct": None, "significant": None,
                "expected_after": None, "mix_pct": None, "service_pct": None, "verdict": "n/a"}
        row[q] = cell
        cb, ca = quantile_ci(vb, qv), quantile_ci(va, qv)
        if b is None or a is None or not cb or not ca:
            continue
        cell["change_pct"] = change_pct(a, b)
        few = min(nb, na) < min_count(qv)
        se_b, se_a = (cb[2] - cb[1]) / (2 * Z95), (ca[2] - ca[1]) / (2 * Z95)
        se = math.sqrt(se_a**2 + se_b**2)
        if b:
            cell["ci_pct"] = [_r((a - b - Z95 * se) / abs(b) * 100, 1), _r((a - b + Z95 * se) / abs(b) * 100, 1)]
        total_sig = abs(a - b) > Z_VERDICT * se and not _negligible(row, a - b)
        expected = expected_q[i] if expected_q else None
        service_sig = None
        if expected is not None:
            cell["expected_after"] = _r(expected)
            cell["mix_pct"] = change_pct(expected, b)
            cell["service_pct"] = change_pct(a, expected)
            se_e = se_b * math.sqrt(len(vb) / n_eff) if n_eff > 0 else se_b
            service_sig = abs(a - expected) > Z_VERDICT * math.sqrt(se_a**2 + se_e**2) and not _negligible(row, a - expected)
        cell["significant"] = bool(total_sig)
        cell["service_significant"] = None if service_sig is None else bool(service_sig)
        if few:
            cell["verdict"] = "too few"
            continue
        total_v = verdict_pct(cell["change_pct"], rise_is_bad, limit) if total_sig else "steady"
        if expected is None:
            cell["verdict"] = total_v
            continue
        service_v = verdict_pct(cell["service_pct"], rise_is_bad, limit) if service_sig else "steady"
        if service_v == "regression":
            cell["verdict"] = "regression"
        elif total_v == "regression":
            cell["verdict"] = "mix"  # slower, but the same requests are not: the mix explains it
        elif service_v == "improved" or total_v == "improved":
            cell["verdict"] = "improved"
        else:
            cell["verdict"] = "steady"
    row["verdict"] = _overall(row)
    return row


def _negligible(row: dict, delta: float) -> bool:
    return row["unit"] == "ms" and abs(delta) < MIN_ABS_MS


def _overall(row: dict) -> str:
    verdicts = [row[q]["verdict"] for q, _ in QUANTILES if q in row]
    for v in ("regression", "mix", "improved", "steady", "too few"):
        if v in verdicts:
            return v
    return "n/a"


def _side_counts(side: Side) -> dict:
    req = side.model.get("requests") or {}
    count, errors = req.get("count") or 0, req.get("errors") or 0
    good = None
    if req.get("goodput") is not None and count:
        good = round(req["goodput"] * count)
    return {"requests": count, "errors": errors, "good": good, "goodput": req.get("goodput"),
            "error_rate": round(errors / count, 4) if count else None}


def compare_rates(before: Side, after: Side) -> list[dict]:
    cb, ca = _side_counts(before), _side_counts(after)
    rows = []
    for key, label, num, bad_if in (("error_rate", "error rate", "errors", "rise"), ("goodput", "goodput", "good", "drop")):
        b, a = cb[key], ca[key]
        p = None
        if cb[num] is not None and ca[num] is not None:
            p = two_proportions(cb[num], cb["requests"], ca[num], ca["requests"])
        pts = None if a is None or b is None else round((a - b) * 100, 2)
        significant = p is not None and p < 0.01  # 99 %, as the percentile verdicts
        few = min(cb["requests"], ca["requests"]) < MIN_COUNT
        verdict = "n/a" if pts is None else "too few" if few else "steady"
        if pts is not None and not few and significant and abs(pts) >= 1.0:
            worse = pts > 0 if bad_if == "rise" else pts < 0
            verdict = "regression" if worse else "improved"
        rows.append({"metric": key, "label": label, "before": b, "after": a, "change_pts": pts,
                     "count_before": cb["requests"], "count_after": ca["requests"],
                     "p_value": _r(p, 6), "significant": significant if p is not None else None, "verdict": verdict})
    return rows


def _dist(values: Values, name: str) -> dict:
    v = sorted(_finite(values.requests.get(name, ())))
    if not v:
        return {"count": 0, "p50": None, "p95": None, "mean": None}
    return {"count": len(v), "p50": _r(quantile(v, 0.5)), "p95": _r(quantile(v, 0.95)), "mean": _r(math.fsum(v) / len(v))}


def _shares(values: Values, name: str, top: int = 5) -> list[dict]:
    """The most frequent values and their shares (ties: the smaller value first)."""
    v = _finite(values.requests.get(name, ()))
    if not v:
        return []
    counts = sorted(Counter(v).items(), key=lambda item: (-item[1], item[0]))[:top]
    return [{"value": _r(value), "share": _r(count / len(v), 4)} for value, count in counts]


def compare_mix(before: Side, after: Side) -> dict:
    """What the requests asked for: the mix that can explain a latency change."""
    out: dict = {"available": before.values is not None and after.values is not None, "rows": [], "params": {}}
    if not out["available"]:
        rb, ra = before.model.get("requests") or {}, after.model.get("requests") or {}
        out["rows"].append({"metric": "reasoning_share", "label": "reasoning share p50",
                            "before": {"p50": rb.get("reasoning_share_p50")}, "after": {"p50": ra.get("reasoning_share_p50")},
                            "change_pct": change_pct(ra.get("reasoning_share_p50"), rb.get("reasoning_share_p50")),
                            "shifted": None, "rank_test": None})  # fmt: skip
        return out
    for name, label in (("input_len", "input tokens"), ("output_len", "output tokens"),
                        ("reasoning_share", "reasoning share")):
        db, da = _dist(before.values, name), _dist(after.values, name)
        test = mann_whitney(_finite(before.values.requests.get(name, ())), _finite(after.values.requests.get(name, ())))
        pct = change_pct(da["p50"], db["p50"])
        p95 = change_pct(da["p95"], db["p95"])
        shifted = bool(test and test["p_value"] < 0.01 and max(abs(pct or 0), abs(p95 or 0)) >= 10)
        out["rows"].append({"metric": name, "label": label, "before": db, "after": da, "change_pct": pct,
                            "p95_change_pct": p95, "shifted": shifted, "rank_test": test})
    for name in ("num_beams", "max_new_tokens"):
        sb, sa = _shares(before.values, name), _shares(after.values, name)
        out["params"][name] = {"before": sb, "after": sa, "changed": _shares_changed(sb, sa)}
    return out


def _shares_changed(before: list[dict], after: list[dict]) -> bool:
    if not before or not after:
        return False  # one side has no requests: nothing to compare
    b = {r["value"]: r["share"] for r in before}
    a = {r["value"]: r["share"] for r in after}
    return any(abs(a.get(k, 0) - b.get(k, 0)) >= 0.05 for k in set(a) | set(b))


# -- findings, memory, errors ---------------------------------------------------------------------

def finding_key(f: dict) -> tuple:
    # Session ids differ between periods, so a session-scoped finding is matched on its rule
    # alone; host- and process-scoped ones also on their hosts.
    hosts = tuple(sorted(f.get("hosts") or [])) if f.get("scope") in ("host", "process") else ()
    return (f.get("rule"), hosts)


def finding_summary(f: dict) -> dict:
    return {"rule": f.get("rule"), "severity": f.get("severity"), "scope": f.get("scope"),
            "hosts": f.get("hosts") or [], "sessions": f.get("session_count") or len(f.get("session_ids") or []),
            "value": f.get("value"), "threshold": f.get("threshold"), "unit": f.get("unit"),
            "message": f.get("message"), "fix": f.get("fix")}


def compare_findings(before: dict, after: dict) -> dict:
    now = {finding_key(f): f for f in after.get("findings") or []}
    prev = {finding_key(f): f for f in before.get("findings") or []}

    def listed(keys, source):
        return sorted((finding_summary(source[k]) for k in keys),
                      key=lambda f: (severity_rank(f["severity"]), str(f["rule"])))

    persisting = []
    for k in now.keys() & prev.keys():
        row = finding_summary(now[k])
        row["value_prev"] = prev[k].get("value")
        row["sessions_prev"] = prev[k].get("session_count") or len(prev[k].get("session_ids") or [])
        row["severity_prev"] = prev[k].get("severity")
        persisting.append(row)
    persisting.sort(key=lambda f: (severity_rank(f["severity"]), str(f["rule"])))
    return {"new": listed(now.keys() - prev.keys(), now), "resolved": listed(prev.keys() - now.keys(), prev),
            "persisting": persisting}


def _memory(model: dict) -> dict:
    slopes = [s["reserved_slope_mb_per_min"] for s in model.get("sessions") or []
              if s.get("reserved_slope_mb_per_min") is not None]
    slopes.sort()
    rss = [p.get("rss_slope_mb_per_min") for p in model.get("processes") or [] if p.get("rss_slope_mb_per_min") is not None]
    leaks = sum(1 for f in model.get("findings") or [] if f.get("rule") == "memory_leak")
    leak_sessions = sum((f.get("session_count") or len(f.get("session_ids") or []))
                        for f in model.get("findings") or [] if f.get("rule") == "memory_leak")
    return {
        "sessions_with_slope": len(slopes),
        "reserved_slope_p50": _r(slopes[len(slopes) // 2]) if slopes else None,
        "reserved_slope_max": _r(slopes[-1]) if slopes else None,
        "rss_slope_max": _r(max(rss)) if rss else None,
        "memory_leak_findings": leaks,
        "memory_leak_sessions": leak_sessions,
    }


def compare_memory(before: dict, after: dict) -> list[dict]:
    mb, ma = _memory(before), _memory(after)
    labels = (("reserved_slope_p50", "reserved slope p50 over sessions", "MiB/min"),
              ("reserved_slope_max", "reserved slope, steepest session", "MiB/min"),
              ("rss_slope_max", "RSS slope, steepest process", "MiB/min"),
              ("memory_leak_findings", "memory_leak findings (session or process)", ""),
              ("memory_leak_sessions", "sessions with a memory_leak finding", ""))
    return [{"metric": k, "label": label, "unit": unit, "before": mb[k], "after": ma[k],
             "change": None if mb[k] is None or ma[k] is None else _r(ma[k] - mb[k])} for k, label, unit in labels]


def compare_errors(before: dict, after: dict) -> list[dict]:
    b = {e.get("error_type"): e for e in before.get("errors") or []}
    a = {e.get("error_type"): e for e in after.get("errors") or []}
    rows = [{"error_type": k, "before": (b.get(k) or {}).get("count") or 0, "after": (a.get(k) or {}).get("count") or 0,
             "sample_msg": (a.get(k) or b.get(k) or {}).get("sample_msg")} for k in {**b, **a}]
    return sorted(rows, key=lambda r: (-r["after"], -r["before"], str(r["error_type"])))


def _side_summary(side: Side) -> dict:
    m = side.model
    ingest = m.get("ingest") or {}
    window = m.get("window") or {}
    req = m.get("requests") or {}
    return {"label": side.label, "source": side.source, "paths": side.paths,
            "since": window.get("since"), "until": window.get("until"),
            "first_event": window.get("first_event"), "last_event": window.get("last_event"),
            "has_data": bool(ingest.get("events")), "files": ingest.get("files", 0), "events": ingest.get("events", 0),
            "bad_lines": ingest.get("bad_lines", 0), "requests": req.get("count") or 0, "errors": req.get("errors") or 0,
            "sessions": m.get("sessions_total", len(m.get("sessions") or [])),
            "hosts": [h.get("host") for h in m.get("hosts") or []],
            "values_sampled": side.sampled}  # fmt: skip


def _chart_series(model: dict) -> dict:
    """The small aggregated series the diff page overlays (before and after)."""
    series = model.get("series") or {}
    return {k: list(series.get(k) or [])[:400] for k in ("latency_hist", "prefill_vs_input")}


def explain(rows: list[dict], mix: dict, limit: float) -> list[str]:
    """One sentence per notable change: regressions, and slowdowns the mix explains."""
    lines = []
    shifted = [r for r in mix.get("rows") or [] if r.get("shifted")]
    mix_words = ", ".join(f"{r['label']} p50 {fmt.signed_pct(r['change_pct'])} (p95 {fmt.signed_pct(r.get('p95_change_pct'))})" for r in shifted)
    changed_params = [f"{k} {_shares_text(v['before'])} → {_shares_text(v['after'])}"
                      for k, v in (mix.get("params") or {}).items() if v.get("changed")]
    for r in rows:
        for q, _ in QUANTILES:
            c = r.get(q) or {}
            if c.get("verdict") == "regression":
                extra = (f"; with the same mix it would be {fmt.signed_pct(c['mix_pct'])}, the service itself {fmt.signed_pct(c['service_pct'])}"
                         if c.get("service_pct") is not None else "; not tested for significance (saved report)"
                         if c.get("significant") is None else "")  # fmt: skip
                lines.append(f"REGRESSION {r['label']} {q} {fmt.compact(c['before'])} → {fmt.compact(c['after'])} {r['unit']} "
                             f"({fmt.signed_pct(c['change_pct'])}){extra}.")
            elif c.get("verdict") == "mix":
                lines.append(f"MIX {r['label']} {q} {fmt.compact(c['before'])} → {fmt.compact(c['after'])} {r['unit']} "
                             f"({fmt.signed_pct(c['change_pct'])}) is explained by the request mix: with before's service and "
                             f"after's mix it would be {fmt.signed_pct(c['mix_pct'])}; same requests {fmt.signed_pct(c['service_pct'])}"
                             + (f" ({mix_words})" if mix_words else "") + ".")
    for p in changed_params:
        lines.append(f"PARAMS {p}.")
    if mix_words and not any(line.startswith("MIX") for line in lines):
        lines.append(f"MIX the requests changed: {mix_words}.")
    return lines


def _shares_text(rows: list[dict]) -> str:
    return ", ".join(f"{fmt.compact(r['value'])}: {r['share'] * 100:.0f} %" for r in rows[:3]) or "—"


def compare_capacity(before: dict, after: dict) -> list[dict]:
    """The capacity curves of both sides, host by host (a restart changes the pid: the process
    with the most requests stands for its host), level by level: throughput, TPOT p95 and peak
    reserved memory, with each side's knee and recommended limit."""

    def by_host(model: dict) -> dict:
        out: dict = {}
        for c in model.get("capacity") or []:
            if not isinstance(c, dict):
                continue
            host = c.get("host")
            if host not in out or (c.get("requests") or 0) > (out[host].get("requests") or 0):
                out[host] = c
        return out

    b, a = by_host(before), by_host(after)
    if len(b) == 1 and len(a) == 1 and set(b) != set(a):
        # one service on each side under another host name (a move, a new box): compare them
        (hb, cb), (ha, ca) = next(iter(b.items())), next(iter(a.items()))
        pairs = [(f"{hb or 'unnamed host'} → {ha or 'unnamed host'}", cb, ca)]
    else:
        pairs = [(host, b.get(host) or {}, a.get(host) or {}) for host in sorted(set(b) | set(a), key=lambda h: h or "")]
    rows = []
    for host, cb, ca in pairs:
        sides = {"before": cb, "after": ca}
        levels = sorted({lv.get("level") for c in sides.values() for lv in c.get("levels") or []
                         if isinstance(lv, dict) and isinstance(lv.get("level"), int)})
        curve = []
        for level in levels:
            row = {"level": level}
            for side, c in sides.items():
                lv = next((x for x in c.get("levels") or [] if isinstance(x, dict) and x.get("level") == level), {})
                row[side] = {k: lv.get(k) for k in ("requests", "tokens_per_s", "tpot_p95_ms", "reserved_peak_mb")}
                row[side]["sparse"] = bool(lv.get("sparse"))
            curve.append(row)
        rows.append({"host": host, "levels": curve,
                     **{f"{side}_{k}": (c.get(k) if k != "limit" else (c.get("recommendation") or {}).get("limit"))
                        for side, c in sides.items() for k in ("knee", "limit", "mb_per_request")}})
    return rows


def diff_sides(before: Side, after: Side, limit: float = REGRESSION_PCT) -> dict:
    """The diff model of two sides."""
    from dslogs.analyzer import __version__

    if limit < 0:
        raise UsageError(f"--fail-on-regression {limit}: a percentage ≥ 0")
    stage_specs = list(STAGE_METRICS)
    if before.values is None or after.values is None:
        # From saved models every stage with timings is compared (the request-level values
        # cover only the stages above).
        known = {spec[1] for spec in stage_specs}
        for m in (after.model, before.model):
            for st in m.get("stages") or []:
                name = st.get("stage")
                if isinstance(name, str) and name not in known:
                    known.add(name)
                    stage_specs.append((f"{name}_ms", name, "ms", True, "in"))
    edges = mix_edges(before.values, after.values) if before.values is not None and after.values is not None else None
    stages = [r for spec in stage_specs if (r := compare_metric(spec, "stage", before, after, limit, edges))]
    requests = [r for spec in REQUEST_METRICS if (r := compare_metric(spec, "request", before, after, limit, edges))]
    rates = compare_rates(before, after)
    mix = compare_mix(before, after)
    significance = before.values is not None and after.values is not None
    notes = []
    if not significance:
        which = " and ".join(s.label for s in (before, after) if s.values is None)
        notes.append(f"{which} is a saved report: only its percentiles are known, so changes are not tested for "
                     "significance, the mix (input/output lengths, num_beams, max_new_tokens) is not compared and "
                     "latency is not adjusted for it; give the logs for that side to get them.")
    for s in (before, after):
        if not (s.model.get("ingest") or {}).get("events") and not (s.model.get("requests") or {}).get("count"):
            window = s.model.get("window") or {}
            notes.append(f"{s.label}: no events in {', '.join(s.paths) or 'its model'}"
                         f" between {window.get('since') or 'the start'} and {window.get('until') or 'the end'}; "
                         "nothing to compare on this side.")  # fmt: skip
        if s.sampled:
            notes.append(f"{s.label}: more than {MAX_VALUES:,} values of a metric; its percentiles are the report's "
                         f"over all of them, its significance test and mix use a repeatable sample of {MAX_VALUES:,}.")
        if s.values is not None and s.values_engine != s.engine:
            notes.append(f"{s.label}: the report model was computed with --engine {s.engine}; the values behind its "
                         f"significance test and mix were read with {s.values_engine} over the same logs and window.")
    regressions = [f"{r['label']} {q}" for r in stages + requests for q, _ in QUANTILES if (r.get(q) or {}).get("verdict") == "regression"]
    regressions += [r["label"] for r in rates if r["verdict"] == "regression"]
    model = {
        "schema": SCHEMA,
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "dslogs_version": __version__,
        "regression_threshold_pct": limit,
        "significance": significance,
        "method": {"percentiles": "each side's p50/p95/p99 are its report model's (the report's SQL over every value)",
                   "sample": f"above {MAX_VALUES:,} values of a metric on a side, its interval, rank test and mix use a "
                             f"repeatable sample of {MAX_VALUES:,} (the rows of smallest hash of their request's ids)",
                   "percentile_ci": "distribution-free 95 % interval from order statistics on each side",
                   "rank_test": "two-sided Mann-Whitney U (normal approximation, tie-corrected)",
                   "mix": "before re-weighted to after's mix of input-length deciles (× output-length quartiles for "
                          "stages that scale with the output)",
                   "verdict": "a change counts when it lies outside the 99 % interval, exceeds the threshold "
                              f"and is at least {MIN_ABS_MS:g} ms",
                   "min_count": MIN_COUNT, "tail_count": TAIL_COUNT},  # fmt: skip
        "before": _side_summary(before),
        "after": _side_summary(after),
        "stages": stages,
        "request_metrics": requests,
        "rates": rates,
        "mix": mix,
        "memory": compare_memory(before.model, after.model),
        "capacity": compare_capacity(before.model, after.model),
        "errors": compare_errors(before.model, after.model),
        "findings": compare_findings(before.model, after.model),
        "regressions": regressions,
        "notes": notes,
        "series": {"before": _chart_series(before.model), "after": _chart_series(after.model)},
    }
    model["summary"] = explain(stages + requests, mix, limit) + [
        f"REGRESSION {r['label']} {r['before'] * 100:.2f} % → {r['after'] * 100:.2f} % ({r['change_pts']:+.2f} pts, p {r['p_value']:.2g})."
        for r in rates if r["verdict"] == "regression"]  # fmt: skip
    from dslogs.analyzer.core.jsonable import clean

    return clean(model)


def has_regression(model: dict) -> bool:
    return bool(model.get("regressions"))


def diff_to_json(model: dict) -> str:
    import json

    return json.dumps(model, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
