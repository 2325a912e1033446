"""pandas and altair come with the ``notebook`` extra; the CLI needs neither."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA_HINT = "pip install 'dslogs-llm[notebook]'"


def need(module: str, what: str) -> ModuleType:
    """``module`` imported, or one ImportError naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs {module}, which is not installed: {EXTRA_HINT} (the command line needs "
            f"neither pandas nor altair)"
        ) from exc
