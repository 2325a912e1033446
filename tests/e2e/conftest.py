"""Fixtures of the end-to-end suite: real apps (Gradio server, Streamlit AppTest) on a tiny
R1-shaped Qwen2 on CPU, real dslogs analysis of what they logged, and the per-fault tables
(sessions injected / found / extra) printed at the end of the run and written to
``$DSLOGS_E2E_TABLES`` (a markdown file) when that is set.
"""

from __future__ import annotations

import os

# Gradio reads this when it is imported: per-request queue wait is kept only with it on.
os.environ.setdefault("GRADIO_PROFILING", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.e2e.apps import tiny_r1  # noqa: E402
from tests.e2e.findings import TABLES, tables_markdown  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: real apps end to end (Gradio server, Streamlit AppTest, tiny Qwen2)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.hf)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    # 2-core CI box: one thread per generate keeps concurrent requests from fighting over cores
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_r1.load_tokenizer()


@pytest.fixture(scope="session")
def model():
    return tiny_r1.load_model()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not TABLES:
        return
    text = tables_markdown()
    terminalreporter.write_sep("-", "dslogs e2e: faults injected / found / extra, per app")
    terminalreporter.write_line(text)
    dest = os.environ.get("DSLOGS_E2E_TABLES")
    if dest:
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text)


@pytest.fixture(scope="session")
def log_root(tmp_path_factory):
    """Where the apps write their logs: ``$DSLOGS_E2E_KEEP`` to keep them for a look, else tmp."""
    keep = os.environ.get("DSLOGS_E2E_KEEP")
    if keep:
        import shutil
        from pathlib import Path

        root = Path(keep)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        return root
    return tmp_path_factory.mktemp("e2e")
