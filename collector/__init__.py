"""dslogs collector: a non-blocking JSONL tracer for LLM inference apps (standard library only).

torch, pynvml (nvidia-ml-py) and psutil are imported lazily, only by the samplers and the HF
integration that need them. See docs/collector.md.
"""

from collector.schema import SCHEMA_VERSION, STAGES
from collector.tracer import Span, Tracer, default_tracer, log_event, set_default_tracer

__all__ = ["SCHEMA_VERSION", "STAGES", "Span", "Tracer", "default_tracer", "log_event", "set_default_tracer"]
