"""The health checklist: article 003's checks (§5.2-5.4) as rows registered beside the rules.

Each ``@check`` measures one value and judges it against the threshold its rule judges (the same
"table.key"), citing the section that threshold cites; the rows are listed in the order they are
registered here. ``rules.evaluate_checks`` turns them into the model's rows, a FAIL naming the
findings of the check's rules or saying why there is none.
"""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.attribution import largest_rise
from dslogs.analyzer.rules.hosts import host_gpu_peaks
from dslogs.analyzer.rules.latency import _metric_row
from dslogs.analyzer.rules.memory import oom_count
from dslogs.analyzer.rules.registry import (
    Measure,
    at_least,
    below,
    check,
    cpu_only_hosts,
    not_carried,
)


def _p50(row: dict | None, key: str = "p50_ms"):
    return row.get(key) if row and row.get("count") else None


def _stage(m: dict, stage: str) -> dict | None:
    return _metric_row(m, "stage_percentiles", stage, key="stage")


def _latency(m: dict, metric: str) -> dict | None:
    return _metric_row(m, "request_latency_percentiles", metric)


def _prefill_class(m: dict, cls: str) -> dict | None:
    classes = {r["input_class"]: r for r in m.get("prefill_by_input_class", [])}
    if cls == "short":
        # as slow_prefill reads it: logs without input lengths have one "unknown" class
        return classes.get("short") or classes.get("unknown")
    return classes.get(cls)


@check("tokenize_p50", rules=("slow_tokenize",), threshold="slow_tokenize.p50_ms", unit="ms", needs=("tokenize",))
def _tokenize(m, t, ctx) -> Measure:
    return Measure(f"tokenize p50 < {t['slow_tokenize']['p50_ms']:g} ms", _p50(_stage(m, "tokenize")))


@check("prefill_p50", rules=("slow_prefill",), threshold="slow_prefill.p50_ms", unit="ms", needs=("prefill",))
def _prefill(m, t, ctx) -> Measure:
    th = t["slow_prefill"]
    return Measure(f"prefill p50 < {th['p50_ms']:g} ms (input < {th['long_input_tokens']} tokens)",
                   _p50(_prefill_class(m, "short")))


@check("tpot_p50", rules=("slow_decode",), threshold="slow_decode.tpot_p50_ms", unit="ms", needs=())
def _tpot(m, t, ctx) -> Measure:
    return Measure(f"TPOT p50 < {t['slow_decode']['tpot_p50_ms']:g} ms", _p50(_latency(m, "tpot_ms"), "p50"))


@check("short_prompt_e2e_p50", rules=("slow_tokenize", "queue_wait", "slow_prefill", "slow_ttft", "slow_decode"),
       threshold="checklist.short_e2e_ms", unit="ms", needs=())  # fmt: skip
def _short_prompt_e2e(m, t, ctx) -> Measure:
    c = t["checklist"]
    row = next(iter(m.get("short_prompt_e2e") or []), {})
    answer = c["short_answer_tokens"]
    # a source that never carries the reasoning block (vLLM, GenAI spans) has no share to quote
    share = ("reasoning share not available for this source" if not_carried(ctx["formats"], ("reasoning",))
             else f"median reasoning share {row.get('reasoning_share_p50') or 0:.0%}")
    cut, whole = row.get("cut_count") or 0, row.get("whole_long_count") or 0
    notes = []
    if cut:
        notes.append(f"{cut:,} of {row.get('count'):,} replies were longer than {answer} tokens ({share}) and count "
                     f"their first {answer} only: the article's budget is for a short answer (docs/sources.md#003-5-2)")
    if whole:
        notes.append(f"{whole:,} of {row.get('count'):,} replies were longer than {answer} tokens and count whole: "
                     "their logs time no decode step to cut them at")
    # No rule judges the end-to-end time itself: its steps each have their own. When none of
    # them fired, the row gives the steps' p50s (the stage table's, over all requests) and what
    # the first answer tokens cost at the TPOT p50, or says that whole replies are counted.
    why = ("no rule judges end-to-end time, and none of its steps' rules fired (slow_tokenize, queue_wait, "
           "slow_prefill, slow_ttft, slow_decode)")  # fmt: skip
    steps = [f"{stage} {fmt.prose(v)} ms" for stage in ("tokenize", "queue", "prefill")
             if (v := _p50(_stage(m, stage))) is not None]  # fmt: skip
    tpot = _p50(_latency(m, "tpot_ms"), "p50")
    if whole:
        why += f"; the value counts {whole:,} long replies whole (see the note)"
    elif steps or tpot is not None:
        if tpot is not None:
            steps.append(f"TPOT {fmt.prose(tpot)} ms, so {answer} answer tokens take {fmt.prose(answer * tpot)} ms "
                         f"of the {fmt.prose(c['short_e2e_ms'])} ms")
        why += ": p50 " + ", ".join(steps)
    label = (f"end-to-end p50 < {c['short_e2e_ms'] / 1000:g} s for prompts < {c['short_input_tokens']} tokens "
             f"(answer ≤ {answer} tokens)")
    return Measure(label, _p50(row), note="; ".join(notes) or None, no_finding=why)


@check("ttft_p50", rules=("slow_ttft",), threshold="slow_ttft.p50_ms", unit="ms", needs=())
def _ttft(m, t, ctx) -> Measure:
    return Measure(f"TTFT p50 < {t['slow_ttft']['p50_ms']:g} ms", _p50(_latency(m, "ttft_ms"), "p50"))


@check("format_p50", rules=("slow_format",), threshold="slow_format.warning_p50_ms", unit="ms", needs=("format",))
def _format(m, t, ctx) -> Measure:
    return Measure(f"format p50 < {t['slow_format']['warning_p50_ms']:g} ms", _p50(_stage(m, "format")))


@check("reserved_band", rules=("memory_leak",), threshold="memory_leak.rise_mb", unit="MiB", needs=("gpu_memory",))
def _reserved_band(m, t, ctx) -> Measure:
    # ±200 MiB (003 §5.3): each session's own movement as memory_leak measures it (its requests'
    # deltas, or reserved_mb from its first turn to its last), so the row and the rule agree on
    # every session; growth pinned on a process fails the row without naming sessions.
    leak = ctx["leak"]
    flagged = sorted(v["session_id"] for v in leak["sessions"].values() if v["flagged"])
    # the largest movement of any session, kept by the verdicts as they are made (the healthy
    # sessions keep no verdict: 400 k+ at 20 M events)
    deviation = largest_rise(leak["sessions"])
    # judged by the requests' deltas, the figure is what the rule judged, not the readings' rise the
    # Sessions table shows beside it (which holds other requests' memory, up and down): said here
    by_deltas = bool(getattr(leak["sessions"], "credits", None))
    note = None if deviation is None or not by_deltas else (
        "measured: the most any session's own requests kept (credited MiB in all, the Sessions table's "
        "memory_leak judged), not the rise of its readings, which holds other requests' memory too"
        + ("; no session's requests kept any" if deviation <= 0 else ""))
    if leak["processes"]:
        # the row shows the growth that fails it: a process's, when no session's movement is outside
        deviation = max([deviation or 0.0, *(p.get("settled_rise_mb") or p["rise_mb"] for p in leak["processes"])])
        note = (f"reserved memory grew in {len(leak['processes'])} process(es) serving sessions at the same "
                "time; torch reports it per process, so it is not pinned on sessions (see memory_leak)")
    return Measure(f"reserved_mb within ±{t['memory_leak']['rise_mb']:g} MiB in every session", deviation, note=note,
                   fails=bool(flagged or leak["processes"]), extra={"sessions": flagged})


@check("gpu_util_peak", rules=("low_gpu_util",), threshold="low_gpu_util.peak_pct", unit="%", needs=("gpu_util",),
       fails=below)  # fmt: skip
def _gpu_util_peak(m, t, ctx) -> Measure:
    # the hosts low_gpu_util judges: not the CPU-only ones
    cpu = cpu_only_hosts(m)
    peaks = [p["util_peak"] for host, p in host_gpu_peaks(m).items() if host not in cpu]
    return Measure(f"GPU util peak > {t['low_gpu_util']['peak_pct']:g} % on every host", min(peaks) if peaks else None)


# the oom rule's own threshold, reached or passed (the finding card's "threshold 1 OOM")
@check("no_oom", rules=("oom", "oom_at_concurrency"), threshold="oom.min_events", unit="OOMs", needs=(),
       fails=at_least)  # fmt: skip
def _no_oom(m, t, ctx) -> Measure:
    ooms = m.get("oom_per_session", [])
    has_requests = (next(iter(m.get("goodput") or []), {}).get("requests") or 0) > 0
    return Measure("no OOMError / CUDA out of memory",
                   sum(oom_count(r) for r in ooms) if has_requests or ooms else None)


@check("long_prefill_p50", rules=("slow_prefill",), threshold="slow_prefill.long_p50_ms", unit="ms",
       needs=("prefill",))  # fmt: skip
def _long_prefill(m, t, ctx) -> Measure:
    th = t["slow_prefill"]
    return Measure(f"prefill p50 < {th['long_p50_ms'] / 1000:g} s for inputs ≥ {th['long_input_tokens']} tokens",
                   _p50(_prefill_class(m, "long")))


@check("kv_cache_size", rules=("kv_cache_bloat",), threshold="kv_cache_bloat.kv_cache_size_mb", unit="MiB",
       needs=("kv_cache",))  # fmt: skip
def _kv_cache_size(m, t, ctx) -> Measure:
    size = max((r["kv_cache_size_max_mb"] for r in m.get("kv_cache_per_session", [])
                if r.get("kv_cache_size_max_mb") is not None), default=None)  # fmt: skip
    return Measure(f"kv_cache_size_mb < {t['kv_cache_bloat']['kv_cache_size_mb'] / 1024:g} GiB", size)
