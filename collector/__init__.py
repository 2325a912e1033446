"""dslogs collector: a non-blocking JSONL tracer for LLM inference apps (standard library only)."""

from collector.schema import SCHEMA_VERSION, STAGES

__all__ = ["SCHEMA_VERSION", "STAGES"]
