"""Before and after: the diff model ``dslogs.diff/1`` (docs/diff.md).

A side is a log set (paths or globs, optionally a time window) or a report model saved with
``analyze --format json``. From logs a side has the report model *and* the request-level values
(one value per request for every stage and for TTFT, TPOT, e2e), so each percentile change gets a
95 % interval and each distribution a rank test; from a saved model only its percentiles are
known, and the diff says so (no significance, no mix adjustment).

A change is a *regression* only when it is significant, larger than the threshold and not
explained by the request mix: before's values are re-weighted to after's mix of input lengths
(and output lengths, for the stages that scale with them) and the percentile of that re-weighted
distribution is what "after" would show if only the mix had changed. The change splits into a
mix part (before → expected) and a service part (expected → after); only the service part can
make a regression. Too few requests (under ``MIN_COUNT``, or too few in a percentile's tail)
never make one.

The weekly report is a diff of two windows (``analyzer.model.weekly`` calls ``diff_sides``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from analyzer.core import format as fmt
from analyzer.core.errors import UsageError
from analyzer.core.severity import severity_rank

SCHEMA = "dslogs.diff/1"
REGRESSION_PCT = 20.0
MIN_COUNT = 30  # requests per side below which no percentile gets a verdict
TAIL_COUNT = 5  # a percentile q needs n·(1 − q) ≥ this many values above it on each side
MAX_VALUES = 200_000  # request rows read per side (a reservoir sample beyond it)
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
VALUE_COLUMNS = [m[0] for m in STAGE_METRICS + REQUEST_METRICS] + [
    "input_len", "output_len", "reasoning_share", "num_beams", "max_new_tokens", "is_error", "start_ts"]  # fmt: skip


# -- sides ------------------------------------------------------------------------------------


@dataclass
class Side:
    label: str
    model: dict
    source: str  # "logs" or "report"
    values: dict | None = None  # column -> numpy array (NaN for NULL), one entry per request
    sampled: bool = False
    paths: list[str] = field(default_factory=list)


def parse_range(text: str | None, option: str) -> tuple[str | None, str | None]:
    """`A..B`, `A..` or `..B` (forms of --since/--until) -> (since, until)."""
    if text is None:
        return None, None
    if ".." not in text:
        raise UsageError(f"{option} {text!r}: expected START..END (either may be empty), e.g. 2026-11-20..2026-11-27")
    since, until = (part.strip() or None for part in text.split("..", 1))
    return since, until


def request_values(con) -> tuple[dict, bool]:
    """Request-level columns as numpy arrays (a repeatable reservoir sample above MAX_VALUES)."""
    import numpy as np

    total = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
    cols = ", ".join(f"epoch(start_ts) AS {c}" if c == "start_ts" else
                     f"CAST({c} AS DOUBLE) AS {c}" for c in VALUE_COLUMNS)  # fmt: skip
    sql = f"SELECT {cols} FROM requests"
    sampled = total > MAX_VALUES
    if sampled:
        sql += f" USING SAMPLE reservoir({MAX_VALUES} ROWS) REPEATABLE (7)"
    columns = con.execute(sql).fetchnumpy()  # NULL -> masked -> NaN, no Python loop per value
    arrays = {c: np.ma.filled(np.ma.asarray(columns[c]).astype(float), np.nan) for c in VALUE_COLUMNS}
    return arrays, sampled


# -- statistics (numpy only) -------------------------------------------------------------------


def _finite(a):
    import numpy as np

    return a[np.isfinite(a)]


def quantile_ci(sorted_vals, q: float) -> tuple[float, float, float] | None:
    """Linear-interpolated quantile and its distribution-free 95 % interval: the order statistics
    at ranks n·q ± 1.96·sqrt(n·q·(1−q)) (binomial, normal approximation)."""
    import numpy as np

    n = len(sorted_vals)
    if n == 0:
        return None
    value = float(np.quantile(sorted_vals, q))
    half = Z95 * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half) - 1))
    hi = int(min(n - 1, math.ceil(n * q + half)))
    return value, float(sorted_vals[lo]), float(sorted_vals[hi])


def weighted_quantile(sorted_vals, weights, q: float) -> float | None:
    import numpy as np

    total = float(weights.sum())
    if total <= 0:
        return None
    cum = np.cumsum(weights) - 0.5 * weights
    return float(np.interp(q * total, cum, sorted_vals))


def mann_whitney(a, b) -> dict | None:
    """Two-sided Mann-Whitney U test (normal approximation, tie-corrected) and the probability
    that a value after exceeds one before (common-language effect size)."""
    import numpy as np

    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return None
    both = np.concatenate([a, b])
    uniq, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    avg_rank = first_rank + (counts - 1) / 2.0
    ranks = avg_rank[inverse]
    r2 = float(ranks[n1:].sum())
    u2 = r2 - n2 * (n2 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie = float((counts**3 - counts).sum())
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


def _edges(pooled, bins: int):
    import numpy as np

    pooled = _finite(pooled)
    if len(pooled) == 0:
        return np.array([])
    return np.unique(np.quantile(pooled, [i / bins for i in range(1, bins)]))


def strata(before: dict, after: dict, kind: str):
    """Stratum id per request on each side: input-length deciles (pooled over both sides), times
    output-length quartiles for kind "io"; a missing length is its own stratum."""
    import numpy as np

    def ids(vals: dict, column: str, edges):
        v = vals[column]
        out = np.searchsorted(edges, v, side="right").astype(int)
        out[~np.isfinite(v)] = len(edges) + 1
        return out

    e_in = _edges(np.concatenate([before["input_len"], after["input_len"]]), INPUT_BINS)
    sb, sa = ids(before, "input_len", e_in), ids(after, "input_len", e_in)
    if kind == "io":
        e_out = _edges(np.concatenate([before["output_len"], after["output_len"]]), OUTPUT_BINS)
        k = len(e_out) + 2
        sb = sb * k + ids(before, "output_len", e_out)
        sa = sa * k + ids(after, "output_len", e_out)
    return sb, sa


def mix_weights(sb, sa):
    """Weights for before's values that give them after's stratum mix; the share of after's
    requests in strata before never saw (their mix cannot be re-weighted)."""
    import numpy as np

    nb, na = len(sb), len(sa)
    cb = np.bincount(sb, minlength=max(sb.max(initial=0), sa.max(initial=0)) + 1).astype(float)
    ca = np.bincount(sa, minlength=len(cb)).astype(float)
    cb = np.pad(cb, (0, max(0, len(ca) - len(cb))))
    seen = cb > 0
    uncovered = float(ca[~seen].sum() / na) if na else 0.0
    per_stratum = np.zeros_like(cb)
    per_stratum[seen] = (ca[seen] / max(na, 1)) / (cb[seen] / max(nb, 1))
    return per_stratum[sb], uncovered


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


def compare_metric(spec, kind: str, before: Side, after: Side, limit: float) -> dict | None:
    name, label, unit, rise_is_bad, strata_kind = spec
    row = {"metric": name, "label": label, "kind": kind, "unit": unit, "rise_is_bad": rise_is_bad}
    if before.values is not None and after.values is not None:
        return _compare_values(row, before.values, after.values, strata_kind, limit)
    mb, ma = _model_pcts(before.model, name, kind), _model_pcts(after.model, name, kind)
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


def _compare_values(row: dict, before: dict, after: dict, strata_kind: str, limit: float) -> dict | None:
    import numpy as np

    name = row["metric"]
    rise_is_bad = row["rise_is_bad"]
    vb_all, va_all = before[name], after[name]
    keep_b, keep_a = np.isfinite(vb_all), np.isfinite(va_all)
    vb, va = vb_all[keep_b], va_all[keep_a]
    if len(vb) == 0 and len(va) == 0:
        return None
    row.update(count_before=int(len(vb)), count_after=int(len(va)), significance=True,
               rank_test=mann_whitney(vb, va))
    weights = None
    uncovered = None
    if len(vb) and len(va):
        sb, sa = strata(before, after, strata_kind)
        w, uncovered = mix_weights(sb[keep_b], sa[keep_a])
        order = np.argsort(vb, kind="stable")
        weights = w[order]
    sb_sorted, sa_sorted = np.sort(vb), np.sort(va)
    n_eff = float(weights.sum() ** 2 / (weights**2).sum()) if weights is not None and (weights**2).sum() > 0 else 0.0
    row["mix_uncovered_share"] = _r(uncovered, 4)
    for q, qv in QUANTILES:
        cb, ca = quantile_ci(sb_sorted, qv), quantile_ci(sa_sorted, qv)
        cell = {"before": _r(cb[0]) if cb else None, "after": _r(ca[0]) if ca else None,
                "change_pct": None, "ci_pct": None, "significant": None,
                "expected_after": None, "mix_pct": None, "service_pct": None, "verdict": "n/a"}
        row[q] = cell
        if not cb or not ca:
            continue
        b, a = cb[0], ca[0]
        cell["change_pct"] = change_pct(a, b)
        few = min(len(vb), len(va)) < min_count(qv)
        se_b, se_a = (cb[2] - cb[1]) / (2 * Z95), (ca[2] - ca[1]) / (2 * Z95)
        se = math.sqrt(se_a**2 + se_b**2)
        if b:
            cell["ci_pct"] = [_r((a - b - Z95 * se) / abs(b) * 100, 1), _r((a - b + Z95 * se) / abs(b) * 100, 1)]
        total_sig = abs(a - b) > Z_VERDICT * se and not _negligible(row, a - b)
        expected = weighted_quantile(sb_sorted, weights, qv) if weights is not None else None
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


def _dist(values, name: str) -> dict:
    import numpy as np

    v = _finite(values[name])
    if not len(v):
        return {"count": 0, "p50": None, "p95": None, "mean": None}
    return {"count": int(len(v)), "p50": _r(np.quantile(v, 0.5)), "p95": _r(np.quantile(v, 0.95)), "mean": _r(v.mean())}


def _shares(values, name: str, top: int = 5) -> list[dict]:
    import numpy as np

    v = _finite(values[name])
    if not len(v):
        return []
    uniq, counts = np.unique(v, return_counts=True)
    order = np.argsort(-counts)[:top]
    return [{"value": _r(uniq[i]), "share": _r(counts[i] / len(v), 4)} for i in order]


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
        test = mann_whitney(_finite(before.values[name]), _finite(after.values[name]))
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
    from analyzer import __version__

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
    stages = [r for spec in stage_specs if (r := compare_metric(spec, "stage", before, after, limit))]
    requests = [r for spec in REQUEST_METRICS if (r := compare_metric(spec, "request", before, after, limit))]
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
            notes.append(f"{s.label}: more than {MAX_VALUES:,} requests; significance uses a repeatable sample of them.")
    regressions = [f"{r['label']} {q}" for r in stages + requests for q, _ in QUANTILES if (r.get(q) or {}).get("verdict") == "regression"]
    regressions += [r["label"] for r in rates if r["verdict"] == "regression"]
    model = {
        "schema": SCHEMA,
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "dslogs_version": __version__,
        "regression_threshold_pct": limit,
        "significance": significance,
        "method": {"percentile_ci": "distribution-free 95 % interval from order statistics on each side",
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
    from analyzer.model.report import clean

    return clean(model)


def has_regression(model: dict) -> bool:
    return bool(model.get("regressions"))


def diff_to_json(model: dict) -> str:
    import json

    return json.dumps(model, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
