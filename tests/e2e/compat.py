"""What of dslogs this checkout has, for assertions that need another branch's work.

The apps need the collector's request-span API (docs/collector.md:
``Tracer(memory_probe=)``, ``tracer.request()``, ``tracer.stream_generate()``, from branch
stream), which this branch has merged. The analyzer side (branch diagnosis) is detected here so
that its assertions are marked xfail(strict) on a checkout without it: once it is there they
run, and an xfail that starts passing fails the run.
"""

from __future__ import annotations


def _has_diagnosis() -> bool:
    """Branch diagnosis's rules attribute memory by per-request deltas (new thresholds)."""
    from dslogs.analyzer.core.thresholds import defaults

    return "leak_per_request_mb" in defaults().get("memory_leak", {})


HAS_DIAGNOSIS = _has_diagnosis()
