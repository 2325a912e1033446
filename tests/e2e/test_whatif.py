"""What if against the real Gradio app (bench/whatif_proof.py): the service model fitted from one
run's logs (concurrency_limit 3, 4 closed-loop users, 70 s) predicts a run at a limit that run
never had (limit 2, 4 users, 30 s: the requests past two wait in Gradio's queue); the run is made
and its e2e p95 and tokens/s compared. About 2.5 minutes (two app starts
included; under 2 on a quiet 2-core box). Limit 1 with many users waiting is the case it reads fastest:
Gradio's work for the waiting clients, outside the handlers, slows generate on a 2-core box
(docs/capacity.md, "When not to trust it").

The tolerance is the issue's outer bound (40 %), not its 20 % target: on a shared CPU box the
same cell measured twice moves by a fifth (docs/capacity.md, "What if", has the table)."""

from __future__ import annotations

import pytest

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

from bench.whatif_proof import calibrate, measured, run_cell  # noqa: E402

THINK_MS, CALIB_S, CELL_S = 600.0, 70.0, 30.0


def test_prediction_of_an_unseen_limit_and_user_count_holds(tmp_path):
    cal = tmp_path / "calib"
    run = run_cell(cal, 3, 4, CALIB_S, THINK_MS, seed=1)
    assert run["errors"] == 0
    pred = calibrate(cal, [(2, 4)])[(2, 4)]
    cell = tmp_path / "cell"
    run = run_cell(cell, 2, 4, CELL_S, THINK_MS, seed=2)
    assert run["errors"] == 0
    got = measured(cell, run)
    report = f"predicted {pred}, measured {got}"
    assert pred["e2e_p95_ms"] == pytest.approx(got["e2e_p95_ms"], rel=0.4), report
    assert pred["tokens_per_s"] == pytest.approx(got["tokens_per_s"], rel=0.4), report
    # the queue is what the lower limit adds: the prediction sees it
    assert pred["queue_p95_ms"] > 0, report
