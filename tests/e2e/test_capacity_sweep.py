"""The real Gradio app at rising concurrency (1 → 8 closed-loop clients, concurrency_limit 8, on
CPU): the throughput dslogs reads per in-flight level from what the Tracer logged against the
curve the load driver measures from its own client timings (bench/capacity_sweep.py; its
``--device cuda`` variant is the GPU run).

On a GPU with a thread-pool server the two knees agree exactly. On a small shared CPU box they
need not: the client's tokens/s per step swings by a quarter from run to run with the box's other
load (its knee moves with it), and Gradio's own HTTP and streaming work competes with generate
for the cores outside the handlers, where the logs cannot see it. So the test checks what holds
under load: every output token is attributed to some level, and the limit dslogs recommends
holds the client's throughput to within the client curve's own spread. (A per-level comparison
does not hold: the client's one-client step read 45 tokens/s in one run and 82 in the next, on
the same code, while the logs' level 1 mixes lone moments from every step.)"""

from __future__ import annotations

import pytest

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

from bench.capacity_sweep import run, table  # noqa: E402
from tests.e2e.apps import tiny_r1  # noqa: E402

LEVELS, PER_CLIENT = 8, 4


def test_dslogs_capacity_curve_agrees_with_the_client_curve(tmp_path):
    # a model big enough that generate, not Gradio, is the work: one torch thread per generate on
    # the box's cores is the contended resource, as the GPU's batch is on a GPU (000 §1.3)
    result = run(LEVELS, PER_CLIENT, "cpu", LEVELS, tmp_path / "logs", hidden=768, layers=4)
    print(table(result))
    steps = result["steps"]
    assert all(s["errors"] == 0 for s in steps), steps
    assert [s["requests"] for s in steps] == [PER_CLIENT * n for n in range(1, LEVELS + 1)]
    cap = result["capacity"]
    levels = cap["levels"]
    # every request the driver completed is in the logs, with an in-flight level
    assert sum(lv["requests"] for lv in levels) == sum(s["requests"] for s in steps)
    assert cap["top_level"] <= LEVELS  # the limit held
    # every output token lies at some level: tokens/s × time at the level sums to what was sent
    # (micro-token rounding aside)
    sent = sum(s["requests"] for s in steps) * tiny_r1.OUTPUT_TOKENS
    attributed = sum((lv["tokens_per_s"] or 0) * lv["time_s"] for lv in levels)
    assert attributed == pytest.approx(sent, rel=1e-3), table(result)
    # the limit dslogs would set (its knee; "not seen", still rising: the highest measured level)
    # keeps the client's throughput within the knee's share of its best, widened by the client
    # curve's own spread past one client (the run's noise, measured, not assumed)
    dense = [lv["level"] for lv in levels if not lv["sparse"]]
    limit = result["dslogs_knee"] or max(dense)
    rates = [s["tokens_per_s"] for s in steps]
    best, past_one = max(rates), rates[1:]
    spread = (max(past_one) - min(past_one)) / max(past_one)
    tol = 0.05 + spread
    assert rates[limit - 1] >= (1 - tol) * best, (limit, tol, table(result))
    client, found = result["client_knee"], result["dslogs_knee"]
    if client is not None and found is not None and spread <= 0.1:
        # a clean client curve: the knees themselves agree within one level
        assert abs(found - client) <= 1, table(result)
