"""dslogs collector: a non-blocking JSONL tracer for LLM inference apps (standard library only).

torch, pynvml (nvidia-ml-py) and psutil are imported lazily, only by the samplers and the HF
integration that need them. See docs/collector.md.
"""

from typing import TYPE_CHECKING

from dslogs_collector._version import __version__
from dslogs_collector.schema import SCHEMA_VERSION, STAGES

if TYPE_CHECKING:
    from dslogs_collector.tracer import Span, Tracer, default_tracer, log_event, set_default_tracer

__all__ = ["SCHEMA_VERSION", "STAGES", "Span", "Tracer", "__version__", "default_tracer", "log_event",
           "set_default_tracer"]

_TRACER_NAMES = frozenset(("Span", "Tracer", "default_tracer", "log_event", "set_default_tracer"))


def __getattr__(name: str):
    # The tracer (its writer thread's modules) loads on first use: the analyzer imports this package
    # for the version and the schema only, on every command.
    if name in _TRACER_NAMES:
        from dslogs_collector import tracer

        return getattr(tracer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _TRACER_NAMES)
