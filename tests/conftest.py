"""Suite-wide hooks.

In CI (CI=true) every test must run: a skip means an install step is missing (chromium,
playwright, torch, pyspark, java), so the run fails instead of passing quietly.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sample_reports():
    """The report model of every sample_logs/ folder, as JSON reads it back (built once for
    every test file that checks models against their declarations and schemas)."""
    from dslogs.analyzer.usecases.analyze import analyze_logs
    from tests.diag_sim import sample_model

    def model(d: str) -> dict:
        truth = Path(d) / "truth.json"
        if truth.is_file() and json.loads(truth.read_text(encoding="utf-8")).get("format") != "legacy":
            return sample_model(Path(d).name)  # the same call, already made for the diagnosis tests
        return analyze_logs([d], use_cache=False)  # legacy folders here in the default zone

    return {d: json.loads(json.dumps(model(d))) for d in sorted(glob.glob("sample_logs/*/"))}


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    """(dslogs-llm wheel, dslogs-collector wheel) of this tree in one folder, built once for the
    run: built only when a test asks for them."""
    from tests.wheels import build_both

    return build_both(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def local_spark():
    """One local[2] SparkSession for the run: get_spark hands the running session to every later
    --engine spark --master local[2] (CLI or API) in this process, so the JVM starts once."""
    from dslogs.analyzer.engines.spark.session import get_spark

    session = get_spark("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the browser tests of a module that ask for it (a launch is about a
    second on two cores); skipped where chromium or playwright is missing. Module-scoped: a sync
    Playwright left running makes every later `sync_playwright()` in the thread fail."""
    import shutil
    from pathlib import Path

    path = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
    if not path:
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped — a dependency is not installed; failing the run")
        session.exitstatus = 1
