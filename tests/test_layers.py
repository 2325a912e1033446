"""The layers stay one-directional (docs/architecture.md): a module imports only modules of its own
layer or below, imports inside functions included, and no two modules import each other through
any path. Every module has a layer: a new module fails here until it is placed (add it to LAYERS
and to the module map in docs/architecture.md).

    collector <- core <- ingest <- metrics <- engines <- rules <- model <- render <- live <- cli
                                                                                   dslogs (Python API)
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Lowest first. A pattern ending in ".*" takes a package's submodules.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("collector", ("collector", "collector.*")),
    ("core", ("analyzer", "analyzer.core", "analyzer.core.*")),
    # reading logs (and writing them: compact, the simulator)
    ("ingest", ("analyzer.ingest", "analyzer.ingest.*", "analyzer.simulate", "analyzer.simulate.*")),
    ("metrics", ("analyzer.metrics", "analyzer.metrics.*")),
    # the engine contract and its engines: DuckDB, Spark (+ merge); compute_metrics over any of them
    ("engines", ("analyzer.engines", "analyzer.engines.*")),
    ("rules", ("analyzer.rules", "analyzer.rules.*")),
    ("model", ("analyzer.model", "analyzer.model.*")),
    ("render", ("analyzer.render", "analyzer.render.*")),
    # commands: the loop that re-runs the analysis (watch), the CLI
    ("live", ("analyzer.live", "analyzer.live.*")),
    # The two front ends, side by side over the same library functions: the command line and
    # the Python API (dslogs/). Neither imports the other (test below): the CLI never loads
    # pandas or altair, and the API never parses arguments or exits.
    ("cli", ("analyzer.cli", "analyzer.__main__", "dslogs", "dslogs.*")),
]


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("analyzer", "collector", "dslogs"):
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (functions included)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                # "import analyzer.x.y" names analyzer.x.y; the nearest project module counts.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def layer_of(module: str) -> int | None:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    return None


def test_every_module_has_a_layer():
    missing = sorted(m for m in _modules() if layer_of(m) is None)
    assert not missing, f"place these modules in tests/test_layers.py LAYERS and docs/architecture.md: {missing}"


def test_imports_point_down_or_sideways():
    graph = imports(_modules())
    upward = [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in sorted(graph.items())
        for b in sorted(targets)
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = imports(_modules())
    # Package __init__ modules re-export their submodules: an edge into a package's own
    # submodule is its structure, not a cycle between layers' code.
    graph = {a: {b for b in bs if not b.startswith(a + ".")} for a, bs in graph.items()}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_cli_and_python_api_do_not_import_each_other():
    graph = imports(_modules())
    crossing = [f"{a} imports {b}" for a, bs in sorted(graph.items()) for b in sorted(bs)
                if (a.startswith("analyzer.") and b.split(".")[0] == "dslogs")
                or (a.split(".")[0] == "dslogs" and b in ("analyzer.cli", "analyzer.__main__"))]
    assert not crossing, "the CLI and the Python API are siblings:\n" + "\n".join(crossing)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """A function-level import is an import (import cycles hide there)."""
    pkg = tmp_path / "analyzer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from analyzer.b import g\n    return g\n")
    (pkg / "b.py").write_text("def g():\n    from . import a\n    return a\n")
    modules = {"analyzer": pkg / "__init__.py", "analyzer.a": pkg / "a.py", "analyzer.b": pkg / "b.py"}
    graph = imports(modules)
    assert graph["analyzer.a"] == {"analyzer.b"} and "analyzer.a" in graph["analyzer.b"]


# Inside the ingest layer, its steps in order: each imports only the steps before it, so the
# orchestration (ingest) stays on top and a step never reaches back into it.
INGEST_STEPS = ("analyzer.ingest.prometheus", "analyzer.ingest.formats", "analyzer.ingest.columns", "analyzer.ingest.catalogue", "analyzer.ingest.validate", "analyzer.ingest.viewdefs",
                "analyzer.ingest.storage", "analyzer.ingest.reader", "analyzer.ingest.logs")  # fmt: skip


def test_ingest_steps_import_only_earlier_steps():
    graph = imports(_modules())
    wrong = [
        f"{a} imports {b}"
        for i, a in enumerate(INGEST_STEPS)
        for b in sorted(graph[a])
        if b in INGEST_STEPS and INGEST_STEPS.index(b) > i
    ]
    assert not wrong, "ingest steps out of order (docs/architecture.md):\n" + "\n".join(wrong)
