"""ruff (configured in pyproject.toml) passes on the whole tree (`make lint` in the test run), and
nothing that ships cites a ticket or a document that does not ship."""

from __future__ import annotations

import re
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


# A ticket tag ("issue 16 item 4"), the design notes or team notes the project was built from, or
# a path outside the checkout: none ships, so none tells a reader why. Upper-case DESIGN only, so
# the English word passes. This file names them to test the pattern, so the check skips it.
UNSHIPPED_REFERENCE = re.compile(
    r"(?i:\bissues? #?\d+|design\.md|team\.md|(?:\.\.|/work)/shared\b)|\bDESIGN\b"
)

# What ships: the packages, tests, benchmarks, scripts and docs (sample_logs/ is generated data).
SHIPPED = ("analyzer", "collector", "dslogs", "tests", "bench", "scripts", "docs", "examples",
           "packaging", "queries", "templates", "README.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".sql", ".json", ".toml", ".md", ".html", ".ipynb", ".cfg", ".txt"}
NOT_SHIPPED = {"__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}


def _shipped_text_files():
    for name in SHIPPED:
        top = REPO / name
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            rel = path.relative_to(REPO)
            if NOT_SHIPPED & set(rel.parts) or rel.parts[:2] == ("bench", "data"):
                continue  # caches, build output, bench/data/'s generated logs
            if path == Path(__file__).resolve() or not path.is_file():
                continue
            if path.suffix in TEXT_SUFFIXES or path.name == "Makefile":
                yield path, rel


def test_sources_cite_no_tickets_and_no_documents_that_do_not_ship():
    """Comments say why: a ticket number or a document outside the repository tells a reader of
    the code or the docs nothing, so nothing that ships names either."""
    hits = []
    for path, rel in _shipped_text_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if UNSHIPPED_REFERENCE.search(line):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, f"{len(hits)} lines:\n" + "\n".join(hits[:40])


def test_the_reference_pattern_catches_what_it_is_for():
    caught = ["(issue 13 item 1)", "Issue 12, analyzer side", "issues 4 and 16", "issue #7",
              "DESIGN.md §3", "the DESIGN §5 SLO", "TEAM.md's contract", "../shared/DESIGN.md",
              "/work/shared/seeds/", "see design.md"]
    passed = ["a ladder of ever more complete designs", "DESIGN_RULE_IDS", "no issue here",
              "docs/rules.md", "shared/ memory", "003 §5.2"]
    assert [s for s in caught if not UNSHIPPED_REFERENCE.search(s)] == []
    assert [s for s in passed if UNSHIPPED_REFERENCE.search(s)] == []


# what a test parses as the CLI's data (JSON, JSON lines) from a CliRunner result's `.output`,
# which interleaves stderr: a note the CLI writes there would make the data unreadable
_PARSES_OUTPUT = re.compile(r"json\.loads\([^()]*(?:\([^()]*\)[^()]*)*\.output\b|json\.loads\(\w+\) for \w+ in [^\n]*\.output\b")


def test_tests_parse_the_clis_data_from_stdout_not_output():
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if path.name == "test_lint.py":  # its own examples below
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _PARSES_OUTPUT.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "read the data from res.stdout:\n" + "\n".join(offenders)


def test_the_output_pattern_catches_what_it_is_for():
    assert _PARSES_OUTPUT.search('d = json.loads(res.output)')
    assert _PARSES_OUTPUT.search('m = json.loads(runner.invoke(app, ["analyze", x]).output)["requests"]')
    assert _PARSES_OUTPUT.search("rows = [json.loads(x) for x in r.output.splitlines()]")
    assert not _PARSES_OUTPUT.search("d = json.loads(res.stdout)")
    assert not _PARSES_OUTPUT.search('assert "x" in res.output')
