"""Engines found by name: each engine module registers its opener with ``@engine(name)``.

An opener takes the log paths and the options every command passes (``since``, ``until``,
``tz``, ``cache``, ``use_cache``, ``master``, ``materialize``; an engine ignores what it has no
use for) and returns an ``engines.contract.MetricSource``. The modules are imported when their
engine is picked, so an engine's optional dependencies (pyspark) load only then, and the model
above imports this registry, never an engine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.engines.contract import MetricSource

# name -> the module whose @engine registers it (imported on first use), and the extra to install
# when its import fails
ENGINE_MODULES: dict[str, tuple[str, str | None]] = {
    "duckdb": ("dslogs.analyzer.engines.duckdb_open", None),
    "spark": ("dslogs.analyzer.engines.spark.driver", "spark"),
}

Opener = Callable[..., MetricSource]
OPENERS: dict[str, Opener] = {}


def engine(name: str) -> Callable[[Opener], Opener]:
    """Register ``fn`` as the opener of engine ``name`` (listed in ENGINE_MODULES)."""

    def register(fn: Opener) -> Opener:
        if name not in ENGINE_MODULES:
            raise ValueError(f"engine {name!r} is not in ENGINE_MODULES")
        OPENERS[name] = fn
        return fn

    return register


def opener(name: str) -> Opener:
    """The opener of engine ``name``, importing its module; unknown or unavailable: exit 2."""
    if name not in ENGINE_MODULES:
        raise UsageError(f"unknown engine {name!r}; valid: {', '.join(ENGINE_MODULES)}")
    module, extra = ENGINE_MODULES[name]
    if name not in OPENERS:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            hint = f"; install dslogs-llm[{extra}]" if extra else ""
            raise UsageError(f"--engine {name} is not available ({exc}){hint}") from None
    return OPENERS[name]


def open_engine(selection: Selection, materialize: bool = True) -> MetricSource:
    """The logs ``selection`` names, opened on its engine."""
    return opener(selection.engine)(selection, materialize=materialize)
