"""One line for each word the reports use without explaining it (the HTML report's glossary and
tooltips, the Markdown report's glossary)."""

from __future__ import annotations

import re

GLOSSARY: dict[str, str] = {
    "TTFT": "time to first token: from the request's start (queue wait included) to the first output token, ms",
    "TPOT": "time per output token after the first: decode time / (output tokens − 1), ms per token",
    "TTFA": "time to first answer token: to the first token after the reasoning block (</think>), ms",
    "e2e": "end-to-end: the whole request as the user waits for it, queue and every stage included, ms",
    "reasoning share": "the share of a reply's tokens inside its <think> reasoning block (R1-style models)",
    "goodput": "the share of requests that met both SLOs (TTFT ≤ 1000 ms and TPOT ≤ 130 ms by default)",
    "gpu_wait": "gpu_wait_pct = (wall time − process CPU time) / wall time over generate (article 003 §4.2): "
                "the CPU waiting on the GPU; not computed on a CPU device",
    "prefill/decode ratio": "prefill time / decode time of a request",
    "reserved / allocated": "GPU memory torch's caching allocator holds (reserved) and what tensors use (allocated), MiB",
    "ghost memory": "reserved − allocated: memory the allocator caches that nvidia-smi shows as used (article 000 §1.1)",
    "RSS": "resident set size: the host RAM (not GPU memory) a process holds, MiB; the collector reads it "
           "per process (process_sample) and before/after each request",
    "kept": "what a request left behind: its process's memory after it − before it, MiB: allocated (else "
            "reserved) GPU memory, or RSS for host RAM; other requests' leaks and working memory are in it",
    "credited": "the part of what a process kept that attribution gives one request, other requests' leaks "
                "and working memory subtracted, MiB; memory_leak (GPU memory) and rss_growth (host RAM) judge a "
                "session by its requests' credited MiB, per request and in all",
    "below zero": "a judged (credited) figure under 0 MiB: over the turns counted, the session's requests "
                  "released more memory than they kept (memory an earlier turn or another request held, freed "
                  "in its step); not a leak, nothing to fix",
    "at risk": "in a ranked line's impact: the requests of the sessions (or hosts) the finding names, where none "
               "of them failed or missed the SLO: what the problem can do to them (memory kept, a limit that "
               "lets a request run long), not what it did in these logs",
    "turn": "one request of a session, numbered in start order: turn 1 is the session's first request, turn "
            "4 its fourth (a chat's user message and its answer)",
    "in flight": "requests running in the same process when a request started, itself included",
    "rise": "memory at the end − at the start, MiB: a session's reserved GPU memory at its last turn − its "
            "first (the process's readings), or a process's RSS (host RAM) last − first",
    "held rise": "a process's RSS (host RAM) that stays: the lowest reading of the last third of its sampled "
                 "time − the highest of the first third, MiB; a spike that is given back does not count",
    "slope": "a least-squares trend, MiB per minute: of a session's reserved GPU memory over its snapshots, "
             "or of a process's RSS (host RAM) over its samples",
    "N/A": "not applicable: a GPU check on a host without a GPU, or an input the source format does not carry",
    "SLO": "service-level objective: the latency a request must meet to count as good (TTFT and TPOT limits, "
           "thresholds slo.ttft_ms and slo.tpot_ms)",
    "queue wait": "the time a request waited before its handler ran (Gradio's queue, a handler's semaphore), ms; "
                  "part of its TTFT and e2e",
    "rest": "a request's handler time outside its measured stages: e2e minus queue wait, tokenize, prefill "
            "and decode, ms. Its format stage (logged, usually a few ms) is in it; the remainder is the app's "
            "own code between the stages (building the prompt, streaming, callbacks), not the model",
    "shared": "the part of a request's time during which at least one other request of its process was in "
              "flight (queued or running), ms",
    "knee": "the in-flight level past which throughput (tokens/s) stops rising while latency keeps growing: "
            "more requests at once only wait longer",
    "seed app": "the example app of the two source articles (a Streamlit chat on DeepSeek-R1-Distill-Qwen-1.5B, "
                "max_new_tokens=2048, greedy fallback on OOM) that dslogs' thresholds and fixes are written against",
}


def term_anchor(word: str) -> str:
    """The glossary entry's id in the HTML report."""
    return "gloss-" + re.sub(r"[^a-z0-9]+", "-", word.lower()).strip("-")


# the terms linked to their entry where finding, fix and lead texts use them (words such as
# "kept" or "rise" read plainly there)
LINKED_TERMS = ("TTFT", "TPOT", "TTFA", "e2e", "goodput", "SLO", "RSS", "knee", "seed app", "queue wait",
                "ghost memory", "in flight", "gpu_wait", "at risk")
_TERMS = sorted(LINKED_TERMS, key=len, reverse=True)
TERM_RE = re.compile(r"(?<![\w/])(" + "|".join(re.escape(w) for w in _TERMS) + r")(?![\w/])")


# The article sections findings and checks cite, each in one line (docs/sources.md says more).
SOURCES: dict[str, str] = {
    "003 §2.1": "article 003, log structure: one JSON line per event, daily files under 10 MB",
    "003 §2.2": "article 003, non-blocking log_event in Streamlit (session_id from st.session_state)",
    "003 §3.1": "article 003, five latency slices: input, tokenize, prefill, decode, format",
    "003 §3.2": "article 003, a 'false slow' case: num_beams=5 with max_new_tokens=2048 hit CUDA OOM and retries",
    "003 §4.1": "article 003, hidden GPU memory leaks: reserved only grows; del outputs, torch.cuda.empty_cache()",
    "003 §4.2": "article 003, CPU–GPU imbalance: gpu_wait_pct = (wall − CPU) / wall above 60 %",
    "003 §4.3": "article 003, KV cache growth with long context: keep the last 8 turns; kv_seq_len > 2048",
    "003 §5.2": "article 003 checklist, latency: tokenize < 100 ms, prefill < 900 ms, decode < 130 ms/token, "
                "a simple prompt end to end < 1.2 s",
    "003 §5.3": "article 003 checklist, memory: reserved within ±200 MB, GPU peak > 65 %, no OOM",
    "003 §5.4": "article 003 checklist, long context (1200 tokens): prefill < 2.5 s, KV cache < 8 GB",
    "000 §1.1": "article 000: reserved − allocated is cached 'ghost' memory that leads to OOM",
    "000 §1.2": "article 000: low CPU is not 'no bottleneck' (GIL, JSON, log flushing)",
    "000 §1.3": "article 000: one fast request is not concurrency; past what GPU memory holds, throughput collapses",
    "000 §2.1": "article 000: GPU < 20 % with memory near full = starved; > 80 % with ±2 GB/s swings = thrash",
    "000 §2.2": "article 000: read utilisation through NVML; bursts nvidia-smi misses mean max_tokens is set "
                "too large (4096): too many decode steps per request",
    "000 §3.2": "article 000: log writes above 2 MB/s eat the disk's IOPS",
    "000 §3.3": "article 000: an RSS that only climbs is a Python-side leak",
    "000 §4.1": "article 000: a connection-queue backlog (Recv-Q > 0) means too few workers",
    "000 §4.2": "article 000: postprocess (JSON, return) < 30 ms; > 100 ms means huge replies (3000+ tokens): "
                "limit max_tokens",
    "000 §5": "article 000, diagnosis table: memory creeping > 50 MiB/min = KV cache not shared; logs > 1 MB/s",
}
SOURCES["000 §5 table"] = SOURCES["000 §5"]

# The two articles, by title (docs/sources.md says what each cited section says, in English).
ARTICLES: dict[str, str] = {
    "003": "“DeepSeek-R1-Distill-Qwen-1.5B 实操手册：日志监控 + 响应延迟埋点 + 性能瓶颈定位方法” "
           "(hands-on manual: log monitoring, latency instrumentation and locating performance bottlenecks)",
    "000": "“DeepSeek-R1-Distill-Qwen-1.5B 性能瓶颈定位：系统资源监控指南” "
           "(locating performance bottlenecks: a guide to monitoring system resources)",
}

_CITATION = re.compile(r"(?:(000|003) )?§(\d+(?:\.\d+)?)( table)?")


def citations(text: str):
    """Each citation in a source text such as "000 §5 table; 003 §4.1, §5.3": (match, key in
    SOURCES or None, anchor), a later "§5.3" taking the article named before it. The anchor is
    docs/sources.md's (and the HTML report's) id of the section: "003-4-1"."""
    article = None
    for m in _CITATION.finditer(text):
        article = m.group(1) or article
        if article is None:
            yield m, None, None
            continue
        key = f"{article} §{m.group(2)}"
        yield m, (key if key in SOURCES else None), f"{article}-{m.group(2).replace('.', '-')}"


def source_sections() -> list[tuple[str, str, str]]:
    """(anchor, section, meaning) of every section the reports cite, article by article."""
    out = []
    for key, meaning in SOURCES.items():
        if key.endswith(" table"):
            continue
        article, _, section = key.partition(" §")
        out.append((f"{article}-{section.replace('.', '-')}", key, meaning))
    return sorted(out, key=lambda t: (t[1][:3] != "003", [int(x) for x in t[1].split("§")[1].split(".")]))


def counted_of(session: dict, judged: dict) -> str:
    """What follows "per request × N" in a session's judged memory figure when N is fewer than
    the session's requests: which were not counted and why (the sessions tables of both reports)."""
    total = session.get("requests") or 0
    n = judged.get("requests_counted") or 0
    if n >= total:
        return ""
    read = judged.get("requests_read")
    read = total if read is None else read
    why = []
    if read > n:
        why.append(f"{read - n} before the turn it started keeping")
    if total > read:
        why.append(f"{total - read} without a reading before and after")
    return f" of {total}" + (f"; not counted: {', '.join(why)}" if why else "")


def below_zero(rows: list[dict] | None) -> bool:
    """Whether a memory evidence list shows a request that kept or was credited under 0 MiB."""
    return any((r.get(k) or 0) < 0 for r in rows or [] for k in ("kept_mb", "credited_mb"))


def oom_line(c: dict) -> str:
    """A capacity block's "OOM likely from" and the memory fit it rests on, one sentence for both
    reports: the level, or "not estimated" with why, then the fit where there is one."""
    from dslogs.analyzer.core import format as fmt
    from dslogs.analyzer.rules.capacity_curve import memory_fit_text

    mb = c.get("mb_per_request")
    fit = (f"{fmt.table(mb)} MiB reserved per request in flight, fit R² {fmt.table(c.get('fit_r2'), 2)}"
           if mb is not None else "")
    total = c.get("gpu_total_mb")
    if c.get("oom_level") is not None:
        extra = ", ".join(x for x in (fit, f"GPU total {fmt.table(total)} MiB" if total else "") if x)
        return f"{fmt.table(c['oom_level'])}" + (f" ({extra})" if extra else "")
    if not total:
        return "not estimated: the logs carry no GPU total" + (f" ({memory_fit_text(c)})" if fit else "")
    if mb is None:
        return "not estimated: no memory growth per request in flight fitted"
    return f"not estimated: memory does not grow with requests in flight ({fit})"
