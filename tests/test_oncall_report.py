"""The report an on-call engineer reads: what is wrong, for whom, why, what to change.

Each set is read once by ``dslogs analyze --format json`` and rendered as HTML from that JSON:
the recorded Gradio run where 4 of 16 concurrent sessions leak host RAM
(tests/fixtures/gradio_host_leak) and sample_logs folders with beam search with and without
failed beam requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.render.report import render_report

ROOT = Path(__file__).resolve().parent.parent
HOST_LEAK = ROOT / "tests" / "fixtures" / "gradio_host_leak"
SETS = {"gradio_host_leak": HOST_LEAK, "beam_search": ROOT / "sample_logs" / "beam_search",
        "oom_fallback": ROOT / "sample_logs" / "oom_fallback", "queue_wait": ROOT / "sample_logs" / "queue_wait"}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oncall")
    cache: dict[str, tuple[dict, str]] = {}

    def get(name: str) -> tuple[dict, str]:
        if name not in cache:
            out = tmp / f"{name}.json"
            res = CliRunner().invoke(app, ["analyze", str(SETS[name]), "--format", "json", "--no-cache", "-q",
                                           "--out", str(out)])
            assert res.exit_code == 0, res.output
            model = json.loads(out.read_text(encoding="utf-8"))
            cache[name] = (model, render_report(model, "html"))
        return cache[name]

    return get


def _finding(model: dict, rule: str, scope: str | None = None) -> dict:
    return next(f for f in model["findings"] if f["rule"] == rule and (scope is None or f["scope"] == scope))


# -- fixes from the evidence ---------------------------------------------------------------------


def test_rss_growth_in_a_few_sessions_points_at_per_session_state(report):
    model, html = report("gradio_host_leak")
    f = _finding(model, "rss_growth", "session")
    assert f["session_count"] == 4
    assert "instantiated again per request" not in f["fix"]
    assert "4 of the 16 sessions" in f["fix"] and "per session" in f["fix"]
    assert "Checked and absent" in f["fix"]
    assert "instantiated again per request" not in html


def test_beam_finding_without_failed_beam_requests_does_not_claim_ooms(report):
    model, _ = report("beam_search")
    f = _finding(model, "beam_search")
    assert not any((s.get("beam_failed_requests") or 0) for s in f["evidence"]["details"]["sessions"])
    assert "OOM" not in f["fix"] and "out of memory" not in f["fix"]
    assert "no beam request failed" in f["fix"]


def test_beam_finding_with_failed_beam_requests_says_how_many(report):
    model, _ = report("oom_fallback")
    f = _finding(model, "beam_search")
    failed = sum(s.get("beam_failed_requests") or 0 for s in f["evidence"]["details"]["sessions"])
    assert failed > 0
    assert f"{failed} beam request" in f["fix"] and "failed (out of memory)" in f["fix"]
