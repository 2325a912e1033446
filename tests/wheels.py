"""The two wheels of this tree, built once for every test that installs or inspects them
(tests/test_install.py, tests/test_packaging.py, tests/test_collector_pythons.py), stamped with
SOURCE_DATE_EPOCH as `make wheels` stamps them; build() builds again with the same stamp, for
the tests that check another build gives the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Any fixed instant: what `make wheels` sets (the last commit's time) is checked for its effect,
# every entry stamped with it, not for its value.
EPOCH = 1796515200  # 2026-12-06T00:00:00Z


def build(source: Path, out: Path, pattern: str) -> Path:
    """``pip wheel`` of ``source`` into ``out``, no dependencies, no build isolation, stamped."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(source)], capture_output=True, text=True, timeout=300,
                       env={**env, "SOURCE_DATE_EPOCH": str(EPOCH)})
    assert r.returncode == 0, r.stderr
    (wheel,) = out.glob(pattern)
    return wheel


def build_both(out: Path) -> tuple[Path, Path]:
    """(dslogs-llm wheel, dslogs-collector wheel), side by side in ``out``: pip finds the
    collector that dslogs-llm depends on there (--find-links)."""
    collector = build(REPO / "packaging" / "collector", out, "dslogs_collector-*.whl")
    return build(REPO, out, "dslogs_llm-*.whl"), collector
