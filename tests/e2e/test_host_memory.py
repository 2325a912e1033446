"""Host-RAM attribution under concurrency on the real Gradio app (tests/e2e/host_memory.py): 16
client threads, /chat and /chat_stream at most 4 requests each, the tiny R1 model on CPU, real
RSS readings by the collector, then ``dslogs analyze``.

* leak: 4 sessions keep 40 MiB per request from their third turn on (160 MiB over 6 turns);
  ``rss_growth`` must name exactly those 4.
* transient: 8 sessions hold 200 MiB of real memory while they generate and keep nothing; no
  session may be named (one request's readings see another's working memory come and go).

bench/host_ram_e2e.py runs the same scenarios N times and prints the table per run.
"""

from __future__ import annotations

import pytest

from tests.e2e.apps.faults import HOST_LEAK_MB
from tests.e2e.findings import analyze
from tests.e2e.host_memory import LEAK_PLAN, TRANSIENT_PLAN, judged, serve_and_drive

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def leak_run(log_root, model, tokenizer):
    served = serve_and_drive(log_root / "host_leak" / "logs", LEAK_PLAN, model, tokenizer, turns=6)
    return served, analyze(log_root / "host_leak" / "logs")


@pytest.fixture(scope="module")
def transient_run(log_root, model, tokenizer):
    served = serve_and_drive(log_root / "host_transient" / "logs", TRANSIENT_PLAN, model, tokenizer, turns=4)
    return served, analyze(log_root / "host_transient" / "logs")


def test_every_late_host_leak_is_named_and_no_innocent(leak_run):
    served, report = leak_run
    assert not served["errors"], served["errors"]
    j = judged(report, served["key_of"], LEAK_PLAN)
    # a string, not the dict: pytest cuts a dict's repr at 240 characters, and a miss needs the credits
    assert j["found"] == j["leaking"] and not j["innocent"], f"{j}\nlogs kept in {served['log_dir']}"
    (f,) = [f for f in report["findings"] if f["rule"] == "rss_growth" and f["scope"] == "session"]
    for row in f["evidence"]["details"]["sessions"]:
        # per request from the first that kept: the 40 MiB each leaking turn keeps, within the
        # GPU leak's 30 % (test_gradio). A reading holds the process's RSS, so another thread's
        # heap growth lands in it too: 30.1 to 50.9 MiB over 28 runs of bench/host_ram_e2e.py and
        # this test; a double count would read 80, a missed turn 20.
        assert 0.7 * HOST_LEAK_MB <= row["rss_kept_per_request_mb"] <= 1.3 * HOST_LEAK_MB, row
        # in all: those requests' 40 MiB each, within the same 30 % (4 turns: 112 to 208 MiB; a
        # fixed 120-200 failed at 4 x 50.3 = 201.1, a per-request figure the line above accepts)
        n = row["requests_counted"]
        assert n >= 3 and 0.7 * HOST_LEAK_MB * n <= row["rss_kept_mb"] <= 1.3 * HOST_LEAK_MB * n, row


def test_large_transients_under_concurrency_name_no_session(transient_run):
    served, report = transient_run
    assert not served["errors"], served["errors"]
    j = judged(report, served["key_of"], TRANSIENT_PLAN)
    assert not j["innocent"], j
    # the scenario did what it says: some request's before/after readings saw another request's
    # 200 MiB come or go (else this test would prove nothing)
    from dslogs.analyzer.ingest.logs import open_logs
    from dslogs.analyzer.metrics.results import run_metric

    db = open_logs([str(served["log_dir"])], use_cache=False)
    deltas = [r["rss_delta_mb"] for r in run_metric(db.con, "request_memory_deltas", {}) if r["rss_delta_mb"] is not None]
    assert max(abs(d) for d in deltas) >= 150, sorted(deltas)[-5:]
