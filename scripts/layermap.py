"""The layer map of the code and its import graph, read from the source with ``ast``.

One definition for the two places that need it: ``tests/test_layers.py`` checks that imports
point down the layers, and ``scripts/gen_docs.py`` writes docs/architecture.md's module table
and import-graph height from it, so the doc cannot drift from the tree.

    collector <- core <- ingest <- metrics <- engines <- rules <- model <- usecases <- render <- live <- cli
                                                                                   dslogs (Python API)
"""

from __future__ import annotations

import ast
import fnmatch
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# folder of the repository -> the import name it ships under (dslogs/analyzer is a link to analyzer/)
PACKAGES = {"collector": "dslogs_collector", "analyzer": "dslogs.analyzer", "dslogs": "dslogs"}

# Lowest first. A pattern ending in ".*" takes a package's submodules.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("collector", ("dslogs_collector", "dslogs_collector.*")),
    ("core", ("dslogs.analyzer", "dslogs.analyzer.core", "dslogs.analyzer.core.*")),
    # reading logs (and writing them: compact, the simulator)
    ("ingest", ("dslogs.analyzer.ingest", "dslogs.analyzer.ingest.*", "dslogs.analyzer.simulate", "dslogs.analyzer.simulate.*")),
    ("metrics", ("dslogs.analyzer.metrics", "dslogs.analyzer.metrics.*")),
    # the engine contract and its engines: DuckDB, Spark (+ merge); compute_metrics over any of them
    ("engines", ("dslogs.analyzer.engines", "dslogs.analyzer.engines.*")),
    ("rules", ("dslogs.analyzer.rules", "dslogs.analyzer.rules.*")),
    ("model", ("dslogs.analyzer.model", "dslogs.analyzer.model.*")),
    # what each command does, from a Selection to a model (analyze, capacity, diff, weekly)
    ("usecases", ("dslogs.analyzer.usecases", "dslogs.analyzer.usecases.*")),
    ("render", ("dslogs.analyzer.render", "dslogs.analyzer.render.*")),
    # commands: the loop that re-runs the analysis (watch), the CLI
    ("live", ("dslogs.analyzer.live", "dslogs.analyzer.live.*")),
    # The two front ends, side by side over the same library functions: the command line and
    # the Python API (dslogs/). Neither imports the other (tests/test_layers.py): the CLI never
    # loads pandas or altair, and the API never parses arguments or exits.
    ("cli", ("dslogs.analyzer.cli", "dslogs.analyzer.__main__", "dslogs", "dslogs.*")),
]

# Inside the ingest layer, its steps in order: each imports only the steps before it, so the
# orchestration (logs) stays on top and a step never reaches back into it.
INGEST_STEPS = ("dslogs.analyzer.ingest.prometheus", "dslogs.analyzer.ingest.formats", "dslogs.analyzer.ingest.names", "dslogs.analyzer.ingest.filestats",
                "dslogs.analyzer.ingest.columns", "dslogs.analyzer.ingest.catalogue", "dslogs.analyzer.ingest.validate", "dslogs.analyzer.ingest.views",
                "dslogs.analyzer.ingest.viewdefs", "dslogs.analyzer.ingest.storage", "dslogs.analyzer.ingest.reader", "dslogs.analyzer.ingest.logs")  # fmt: skip


def ingest_internals_reached(graph: dict[str, set[str]]) -> list[str]:
    """Imports of an ingest submodule from outside ingest: the layers above read the logs through
    ``dslogs.analyzer.ingest`` (its ``open`` and the names in its ``PUBLIC``), never its internals."""
    import importlib

    public = importlib.import_module("dslogs.analyzer.ingest").PUBLIC
    namespaces = {f"dslogs.analyzer.ingest.{name}" for name, module in public.items() if module is None}
    return [f"{a} imports {b}" for a, bs in sorted(graph.items()) for b in sorted(bs)
            if b.startswith("dslogs.analyzer.ingest.") and b not in namespaces
            and not a.startswith(("dslogs.analyzer.ingest", "dslogs.analyzer.simulate"))
            and a.split(".")[0] in ("analyzer", "dslogs")]


def modules(repo: Path = REPO) -> dict[str, Path]:
    """Every module of the three packages: dotted name -> file."""
    out = {}
    for folder, name in PACKAGES.items():
        for path in sorted((repo / folder).rglob("*.py")):
            parts = path.relative_to(repo / folder).with_suffix("").parts
            if parts[0] == "analyzer" and (repo / folder / parts[0]).is_symlink():
                continue  # dslogs/analyzer: the analyzer/ folder again
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((name, *parts))] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (functions included)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
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
                # "import dslogs.analyzer.x.y" names dslogs.analyzer.x.y; the nearest project module counts.
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def without_reexports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph less each package's edges into its own submodules: an ``__init__`` re-exporting
    its submodules is the package's structure, not an import between layers' code."""
    return {a: {b for b in bs if not b.startswith(a + ".")} for a, bs in graph.items()}


def layer_of(module: str) -> int | None:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    return None


def longest_chain(graph: dict[str, set[str]], prefix: str = "dslogs.analyzer") -> list[str]:
    """The longest import chain among the modules under ``prefix`` (the graph has no cycles,
    tests/test_layers.py); ties go to the alphabetically first chain, so the doc is stable."""

    def under(m: str) -> bool:
        return m == prefix or m.startswith(prefix + ".")

    inside = {a: sorted(b for b in bs if under(b)) for a, bs in graph.items() if under(a)}

    @cache
    def from_(node: str) -> tuple[str, ...]:
        best: tuple[str, ...] = ()
        for nxt in inside.get(node, ()):
            chain = from_(nxt)
            if len(chain) > len(best):
                best = chain
        return (node, *best)

    return list(max((from_(m) for m in sorted(inside)), key=len, default=()))


def first_sentence(path: Path) -> str:
    """A module's docstring up to its first full stop: what the module is."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]
