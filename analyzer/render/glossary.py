"""One line for each word the reports use without explaining it (the HTML report's glossary and
tooltips, the Markdown report's glossary)."""

from __future__ import annotations

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
    "kept": "what a request left allocated: allocated (else reserved) after it − before it, MiB",
    "in flight": "requests running in the same process when a request started, itself included",
    "rise": "a session's memory at its last turn − at its first (memory_leak judges it with the slope)",
    "slope": "a session's reserved-memory trend: least-squares MiB per minute over its snapshots",
    "N/A": "not applicable: a GPU check on a host without a GPU, or an input the source format does not carry",
}
