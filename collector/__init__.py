"""dslogs collector: a non-blocking JSONL tracer for LLM inference apps (standard library only).

torch, pynvml (nvidia-ml-py) and psutil are imported lazily, only by the samplers and the HF
integration that need them. See docs/collector.md.
"""

from dslogs_collector._version import __version__
from dslogs_collector.schema import SCHEMA_VERSION, STAGES
from dslogs_collector.tracer import Span, Tracer, default_tracer, log_event, set_default_tracer

__all__ = ["SCHEMA_VERSION", "STAGES", "Span", "Tracer", "__version__", "default_tracer", "log_event",
           "set_default_tracer"]
