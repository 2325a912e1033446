"""The layers stay one-directional (docs/architecture.md): a module imports only modules of its own
layer or below, imports inside functions included, and no two modules import each other through
any path. Every module has a layer: a new module fails here until it is placed (add it to LAYERS in
scripts/layermap.py; the module table in docs/architecture.md is generated from it).

    collector <- core <- ingest <- metrics <- engines <- rules <- model <- usecases <- render <- live <- cli
                                                                                   dslogs (Python API)
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from layermap import (  # noqa: E402
    INGEST_STEPS,
    LAYERS,
    imports,
    ingest_internals_reached,
    layer_of,
    longest_chain,
    modules,
    without_reexports,
)


def _modules() -> dict[str, Path]:
    return modules(REPO)


def test_every_module_has_a_layer():
    missing = sorted(m for m in _modules() if layer_of(m) is None)
    assert not missing, f"place these modules in LAYERS (scripts/layermap.py), then run python scripts/gen_docs.py: {missing}"


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
    graph = without_reexports(imports(_modules()))
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

    def analyzer(m: str) -> bool:
        return m == "dslogs.analyzer" or m.startswith("dslogs.analyzer.")

    def api(m: str) -> bool:  # dslogs/ less the analyzer and `python -m dslogs` (the CLI's door)
        return m.split(".")[0] == "dslogs" and not analyzer(m) and m != "dslogs.__main__"

    crossing = [f"{a} imports {b}" for a, bs in sorted(graph.items()) for b in sorted(bs)
                if (analyzer(a) and api(b)) or (api(a) and b in ("dslogs.analyzer.cli", "dslogs.analyzer.__main__"))]
    assert not crossing, "the CLI and the Python API are siblings:\n" + "\n".join(crossing)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """A function-level import is an import (import cycles hide there)."""
    pkg = tmp_path / "analyzer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from dslogs.analyzer.b import g\n    return g\n")
    (pkg / "b.py").write_text("def g():\n    from . import a\n    return a\n")
    modules = {"analyzer": pkg / "__init__.py", "dslogs.analyzer.a": pkg / "a.py", "dslogs.analyzer.b": pkg / "b.py"}
    graph = imports(modules)
    assert graph["dslogs.analyzer.a"] == {"dslogs.analyzer.b"} and "dslogs.analyzer.a" in graph["dslogs.analyzer.b"]


def test_ingest_steps_import_only_earlier_steps():
    graph = imports(_modules())
    wrong = [
        f"{a} imports {b}"
        for i, a in enumerate(INGEST_STEPS)
        for b in sorted(graph[a])
        if b in INGEST_STEPS and INGEST_STEPS.index(b) > i
    ]
    assert not wrong, "ingest steps out of order (docs/architecture.md):\n" + "\n".join(wrong)


def test_the_import_graph_is_at_most_nine_imports_high():
    """The flat analyzer/ had a 15-edge chain (cli -> watch -> weekly -> render_diff -> …), the
    first layered tree 12; with the use cases above the model and the model computing nothing,
    at most 9. The height docs/architecture.md prints is this one."""
    chain = longest_chain(without_reexports(imports(_modules())))
    assert 2 <= len(chain) - 1 <= 9, chain
    assert all(b in imports(_modules())[a] for a, b in zip(chain, chain[1:], strict=False)), chain


def test_ingest_is_at_most_four_imports_deep_inside():
    """A step of ingest reaches the leaves (formats, names, filestats, columns) in a few imports:
    the orchestration stays on top of short chains."""
    graph = without_reexports(imports(_modules()))
    inside = {a: {b for b in bs if b.startswith("dslogs.analyzer.ingest")} for a, bs in graph.items()
              if a.startswith("dslogs.analyzer.ingest")}  # fmt: skip
    chain = longest_chain(inside)
    assert len(chain) - 1 <= 4, " -> ".join(chain)


def test_longest_chain_takes_the_longest_path_and_breaks_ties_alphabetically():
    graph = {"dslogs.analyzer.a": {"dslogs.analyzer.b", "dslogs.analyzer.c"}, "dslogs.analyzer.b": {"dslogs.analyzer.d"}, "dslogs.analyzer.c": {"dslogs.analyzer.d"},
             "dslogs.analyzer.d": set(), "dslogs.analyzer.e": {"dslogs_collector.x"}, "dslogs_collector.x": set()}
    assert longest_chain(graph) == ["dslogs.analyzer.a", "dslogs.analyzer.b", "dslogs.analyzer.d"]


def test_nothing_above_ingest_reaches_into_its_internals():
    """The layers above read the logs through ``dslogs.analyzer.ingest`` alone (``ingest.open`` and the
    names in ``ingest.PUBLIC``), so ingest's modules can move without a command noticing."""
    reached = ingest_internals_reached(imports(_modules()))
    assert not reached, "use dslogs.analyzer.ingest's public names (add one to PUBLIC if it is missing):\n" + "\n".join(reached)


def test_the_model_builds_models_and_nothing_else():
    """analyzer/model/ turns metric tables into models: it opens no logs and runs no engine (the
    use cases in analyzer/usecases/ do), so a model is the same whatever engine computed it."""
    graph = imports(_modules())
    reaching = [f"{a} imports {b}" for a, bs in sorted(graph.items()) if a.startswith("dslogs.analyzer.model")
                for b in sorted(bs) if b.startswith(("dslogs.analyzer.engines", "dslogs.analyzer.usecases"))]
    assert not reaching, "\n".join(reaching)
