"""The real Gradio app at rising concurrency (1 → 8 closed-loop clients, concurrency_limit 8, on
CPU): the knee dslogs finds in what the Tracer logged and the knee of the curve the load driver
measures from its own client timings agree within one level (bench/capacity_sweep.py; its
``--device cuda`` variant is the GPU run)."""

from __future__ import annotations

import pytest

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

from bench.capacity_sweep import run, table  # noqa: E402

LEVELS, PER_CLIENT = 8, 4


def test_dslogs_knee_agrees_with_the_client_curve(tmp_path):
    # a model big enough that generate, not Gradio, is the work: one torch thread per generate on
    # the box's cores is the contended resource, as the GPU's batch is on a GPU (000 §1.3)
    result = run(LEVELS, PER_CLIENT, "cpu", LEVELS, tmp_path / "logs", hidden=768, layers=4)
    print(table(result))
    steps = result["steps"]
    assert all(s["errors"] == 0 for s in steps), steps
    assert [s["requests"] for s in steps] == [PER_CLIENT * n for n in range(1, LEVELS + 1)]
    cap = result["capacity"]
    # every request the driver completed is in the logs, with an in-flight level
    assert sum(lv["requests"] for lv in cap["levels"]) == sum(s["requests"] for s in steps)
    assert cap["top_level"] <= LEVELS  # the limit held
    client, found = result["client_knee"], result["dslogs_knee"]
    assert client is not None, steps
    assert found is not None and abs(found - client) <= 1, table(result)
