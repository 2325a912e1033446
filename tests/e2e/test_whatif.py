"""What if against the real Gradio app (bench/whatif_proof.py): one app process, started once; the
service model is fitted from the logs of a calibration run (concurrency_limit 3, 4 closed-loop
users, until 50 requests are answered) and predicts a setting that run never had: the limit
lowered to 2 while 6 users send (the app's limit changed in place, as an operator changes it; the
requests past two wait in Gradio's queue). That run is made and its e2e p95 and tokens/s compared.
About 50-75 s on a shared 2-core box (one app start included).

The tolerance is the issue's outer bound (40 %), not its 20 % target: a 20 s cell holds some 60
requests, and on a shared CPU box the same cell measured twice moves by more than a fifth
(docs/capacity.md, "What if", has the tables). The prediction must also land closer to the
unseen cell's e2e p95 than the calibration run's own: a model that only repeated the calibration
fails."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

from bench.whatif_proof import App, calibrate, measured, run_cell, thresholds  # noqa: E402

THINK_MS, CALIB_REQUESTS, CALIB_S, CELL_S = 600.0, 50, 60.0, 20.0
CALIB, CELL = (3, 4), (2, 6)


def test_prediction_of_an_unseen_limit_and_user_count_holds(tmp_path):
    logs = tmp_path / "logs"
    app = App(logs, CALIB[0])
    try:
        cal = run_cell(logs, *CALIB, CALIB_S, THINK_MS, seed=1, app=app, requests=CALIB_REQUESTS)
        assert cal["errors"] == 0
        time.sleep(0.5)  # the collector's writer flushes every 0.1 s
        # fitted now, before the unseen run writes into the same folder
        pred = calibrate(logs, [CELL], thresholds(min_requests=CALIB_REQUESTS // 2, min_level_requests=5))[CELL]
        seen = measured(logs, cal)
        run = run_cell(logs, *CELL, CELL_S, THINK_MS, seed=2, app=app)
    finally:
        app.close()
    assert run["errors"] == 0
    got = measured(logs, run)
    report = f"predicted {pred}, measured {got}, calibration measured {seen}"
    print(report)  # pytest -rP shows it: the margin, run by run
    # the model knows more than the calibration run: its prediction is closer to the unseen cell
    # than the calibration's own e2e p95 (the queue the lower limit adds)
    assert abs(pred["e2e_p95_ms"] - got["e2e_p95_ms"]) < abs(seen["e2e_p95_ms"] - got["e2e_p95_ms"]), report
    assert pred["e2e_p95_ms"] == pytest.approx(got["e2e_p95_ms"], rel=0.4), report
    assert pred["tokens_per_s"] == pytest.approx(got["tokens_per_s"], rel=0.4), report
    # the queue is what the lower limit adds: the prediction sees it
    assert pred["queue_p95_ms"] > 0, report
