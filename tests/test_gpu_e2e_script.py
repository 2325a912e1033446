"""bench/gpu_e2e.py, the real-GPU end-to-end script, kept runnable on CI (no GPU): its dry run
(``--device cpu``: FakeCuda memory, simulated OOM, the handlers served by a thread pool) goes
through the whole flow, app -> collector -> ``dslogs analyze`` -> table, and finds every fault."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_e2e.py"


def run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def test_without_cuda_one_line_and_exit_0():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this box has CUDA")
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().count("\n") == 0 and "no CUDA device" in proc.stdout, proc.stdout
    assert proc.stderr == ""


@pytest.mark.hf
def test_dry_run_finds_every_fault(tmp_path):
    proc = run("--device", "cpu", "--server", "threads", "--keep-logs", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "SUMMARY: PASS" in proc.stdout, proc.stdout[-3000:]
    for rule in ("beam_search", "oom", "high_max_tokens", "memory_leak", "ghost_memory"):
        assert f"| {rule} |" in proc.stdout, rule
    assert "MISS" not in proc.stdout
    assert {p.name for p in tmp_path.iterdir()} == {"faults", "ghost"}
