"""Every file, folder and module the docs name exists in the tree.

README.md and docs/*.md name code in backticks (`analyzer/engines/merge.py`, `engines/merge.py`,
`merge.py`, `dslogs.analyzer.engines.merge.MERGES`, `queries/*.sql`), and the code's docstrings do the
same in double backticks. A restructure that moves a module leaves such names pointing at
nothing; this test finds them. What counts as a name, and how each is checked:

- a dotted name under analyzer, collector or dslogs: its longest module prefix is a module of the
  tree, and the next part is defined at that module's top level (or is one of its submodules);
- a path from the repository root (`analyzer/…`, `queries/…`, `tests/…`, globs allowed): it
  matches a file or folder (files git ignores, such as bench/data/, are outputs, not names);
- a relative path or a bare file name of source (`engines/merge.py`, `merge.py`, `*.sql`): some
  file of the tree ends with it.
"""

from __future__ import annotations

import ast
import glob
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import layermap  # noqa: E402

PACKAGES = ("analyzer", "collector", "dslogs")
TOP = (*PACKAGES, "queries", "templates", "tests", "scripts", "bench", "docs", "packaging", "sample_logs", "examples")
# Names the docs give on purpose for something not in the tree: (document, name) -> why
NOT_IN_TREE = {
    ("docs/architecture.md", "queries/prefill_share.sql"): "the worked example of adding a rule",
    ("README.md", "collector.py"): "an app's own module, which dslogs' names no longer shadow",
}
DOTTED = re.compile(r"(?:dslogs_collector|dslogs)(?:\.[A-Za-z_]\w*)+")
PATHLIKE = re.compile(r"[\w.*-]+(?:/[\w.*-]*)+|[\w*-]+\.(?:py|sql)")


@cache
def _modules() -> dict[str, Path]:
    return layermap.modules(REPO)


@cache
def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return out


@cache
def _defined(module: str) -> frozenset[str]:
    """The names a module defines at its top level (and a package's submodules)."""
    path = _modules()[module]
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update(x.id for x in ast.walk(target) if isinstance(x, ast.Name))
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                out.update(ast.literal_eval(node.value))  # lazily re-exported names
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    if path.name == "__init__.py":
        out.update(m.rpartition(".")[2] for m in _modules() if m.rpartition(".")[0] == module)
    return frozenset(out)


def _ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0


def problem(name: str) -> str | None:
    """Why ``name`` names nothing in the tree; None when it exists or is not a name of code."""
    if DOTTED.fullmatch(name):
        parts = name.split(".")
        i = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in _modules())
        module, rest = ".".join(parts[:i]), parts[i:]
        if rest and rest[0] not in _defined(module):
            return f"module {module} has no {rest[0]}"
        return None
    if not PATHLIKE.fullmatch(name) or name.startswith((".", "/")) or "<" in name:
        return None
    pattern = name.rstrip("/")
    if pattern.split("/")[0] in TOP:
        if glob.glob(str(REPO / pattern)) or _ignored(pattern):
            return None
        return "no such file or folder"
    if not pattern.endswith((".py", ".sql")):
        return None  # a relative folder or an output file name: too loose to check
    tail = re.compile("(?:^|/)" + re.escape(pattern).replace(r"\*", "[^/]*") + "$")
    return None if any(tail.search(f) for f in _files()) else "no file of the tree ends with it"


def _doc_names(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code blocks hold shell and JSON
    return {s.strip() for s in re.findall(r"`([^`\n]+)`", text)}


def test_every_path_and_module_the_docs_name_exists():
    wrong = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        where = doc.relative_to(REPO).as_posix()
        for name in sorted(_doc_names(doc.read_text(encoding="utf-8"))):
            why = problem(name)
            if why and (where, name) not in NOT_IN_TREE:
                wrong.append(f"{where}: `{name}`: {why}")
    assert not wrong, "\n".join(wrong)


def test_every_module_the_docstrings_name_exists():
    wrong = []
    for path in sorted(_modules().values()):
        for name in sorted(set(re.findall(r"``([^`\n]+)``", path.read_text(encoding="utf-8")))):
            if why := problem(name):
                wrong.append(f"{path.relative_to(REPO)}: ``{name}``: {why}")
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_what_a_move_leaves_behind():
    assert problem("dslogs.analyzer.spark_engine") == "module dslogs.analyzer has no spark_engine"
    assert problem("dslogs.analyzer.engines.merge.NO_SUCH") == "module dslogs.analyzer.engines.merge has no NO_SUCH"
    assert problem("analyzer/ingest.py") == "no such file or folder"
    assert problem("render_md.py") == "no file of the tree ends with it"
    assert problem("engines/spark_engine.py") == "no file of the tree ends with it"
    for name in ("dslogs.analyzer.engines.merge.MERGES", "dslogs.analyzer.engines.spark", "dslogs.DslogsError", "engines/merge.py",
                 "merge.py", "queries/*.sql", "analyzer/ingest/views/", "bench/data/x", "dslogs.report/1", "--since 1d"):
        assert problem(name) is None, name
