"""ruff (configured in pyproject.toml) passes on the whole tree: `make lint` in the test run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is in the test extra"
    run = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-1000:]


def test_sources_cite_no_tickets_and_no_documents_that_do_not_ship():
    """Comments say why: a ticket number or a document outside the repository tells a reader of
    the code nothing, so analyzer/ and collector/ name neither."""
    import re

    pattern = re.compile(r"issue \d+|DESIGN|TEAM\.md", re.IGNORECASE)
    hits = []
    for package in ("analyzer", "collector"):
        for path in sorted((REPO / package).rglob("*")):
            if path.suffix not in (".py", ".sql", ".json", ".toml"):
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits[:20])
