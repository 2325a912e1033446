"""Regenerate the parts of the docs that a registry defines, so they cannot drift from the code.

A generated part sits between two marker comments in a Markdown file:

    <!-- generated: rules -->
    ...replaced on every run...
    <!-- end generated -->

``python scripts/gen_docs.py`` rewrites every such part in README.md and docs/*.md;
``--check`` rewrites nothing and exits 1 naming the stale files (tests/test_gen_docs.py runs
the same check). Parts: ``rules`` (dslogs.analyzer.rules.RULE_SPECS), ``thresholds``
(dslogs.analyzer.core.thresholds.TABLES), ``charts``
(dslogs.analyzer.render.charts.specs.CHARTS), ``modules``, ``packages`` and ``import_height`` (the layer
map and the import graph of scripts/layermap.py).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- generated: ([a-z_]+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cited(source) -> str:
    """A rule's source with each article section it cites linked to docs/sources.md."""
    from dslogs.analyzer.render.glossary import citations

    text, out, last = str(source), [], 0
    for m, key, anchor in citations(text):
        out.append(_cell(text[last:m.start()]))
        out.append(f"[{m.group(0)}](sources.md#{anchor})" if key else _cell(m.group(0)))
        last = m.end()
    return "".join(out) + _cell(text[last:])


def _codes(names) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def rules_table() -> str:
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.rules import RULE_SPECS

    table = defaults()
    out = ["| rule | area | severity | metric tables | thresholds (default) | source | report sections | charts | fix |",
           "|---|---|---|---|---|---|---|---|---|"]
    for rid, s in RULE_SPECS.items():
        area = s.fn.__module__.rpartition(".")[2] + (" (GPU)" if s.gpu else "")
        keys = ", ".join(f"`{k}` {v}" for k, v in table.get(rid, {}).items()) or "—"
        out.append(f"| `{rid}` | {area} | {s.severity} | {_codes(s.inputs)} | {keys} | {_cited(s.source)} | "
                   f"{_codes(s.sections)} | {_codes(s.charts)} | {_cell(s.fix)} |")
    return "\n".join(out) + "\n"


def thresholds_table() -> str:
    from dslogs.analyzer.core.thresholds import DEFAULTS, SOURCES

    out = ["| table | key | default | source |", "|---|---|---|---|"]
    for table, keys in DEFAULTS.items():
        for key, value in keys.items():
            out.append(f"| `[{table}]` | `{key}` | {value} | {_cited(SOURCES[table][key])} |")
    return "\n".join(out) + "\n"


def charts_table() -> str:
    from dslogs.analyzer.render.charts.specs import CHARTS

    out = ["| chart | page | section | series (metric queries) | follows the time range |", "|---|---|---|---|---|"]
    for c in CHARTS.values():
        out.append(f"| `{c.id}` | {c.page} | `{c.section}` | {_codes(c.series)} | {'yes' if c.timeline else 'no'} |")
    return "\n".join(out) + "\n"


def _layermap():
    sys.path.insert(0, str(REPO / "scripts"))
    import layermap

    return layermap


def modules_table() -> str:
    lm = _layermap()
    out = ["| layer | module | what it is |", "|---|---|---|"]
    mods = lm.modules(REPO)
    for name in sorted(mods, key=lambda m: (lm.layer_of(m), m)):
        layer = lm.LAYERS[lm.layer_of(name)][0]
        out.append(f"| {layer} | `{name}` | {_cell(lm.first_sentence(mods[name])) or '—'} |")
    return "\n".join(out) + "\n"


def packages_table() -> str:
    """The analyzer's packages (and the CLI module), in layer order: README's map of analyzer/."""
    lm = _layermap()
    mods = lm.modules(REPO)
    rows = [m for m, path in mods.items() if m.startswith("analyzer.") and (path.name == "__init__.py" or m == "dslogs.analyzer.cli")]
    out = ["| path | layer | what it is |", "|---|---|---|"]
    for name in sorted(rows, key=lambda m: (lm.layer_of(m), m)):
        path = mods[name].relative_to(REPO)
        shown = f"{path.parent.as_posix()}/" if path.name == "__init__.py" else path.as_posix()
        out.append(f"| `{shown}` | {lm.LAYERS[lm.layer_of(name)][0]} | {_cell(lm.first_sentence(mods[name])) or '—'} |")
    return "\n".join(out) + "\n"


def import_height() -> str:
    lm = _layermap()
    chain = lm.longest_chain(lm.without_reexports(lm.imports(lm.modules(REPO))))
    short = " -> ".join(m.removeprefix("analyzer.") for m in chain)
    return (f"The import graph's height (the longest chain of imports among analyzer modules, "
            f"imports inside functions included) is **{len(chain) - 1} edges**:\n`{short}`.\n")


PARTS: dict[str, Callable[[], str]] = {
    "rules": rules_table,
    "thresholds": thresholds_table,
    "charts": charts_table,
    "modules": modules_table,
    "packages": packages_table,
    "import_height": import_height,
}


def documents(repo: Path = REPO) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def regenerate(text: str, where: str = "") -> str:
    """``text`` with every generated part rewritten; ValueError for an unknown part's name."""
    made: dict[str, str] = {}

    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in PARTS:
            raise ValueError(f"{where}: unknown generated part {name!r} (known: {', '.join(PARTS)})")
        if name not in made:
            made[name] = PARTS[name]()
        return m.group(1) + made[name] + m.group(4)

    return BLOCK.sub(fill, text)


def stale(repo: Path = REPO) -> list[Path]:
    """The documents whose generated parts differ from what the registries give now."""
    return [p for p in documents(repo) if p.is_file() and regenerate(p.read_text(encoding="utf-8"), str(p)) != p.read_text(encoding="utf-8")]


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    if "--check" in argv:
        old = stale()
        for p in old:
            print(f"{p.relative_to(REPO)}: generated part out of date; run python scripts/gen_docs.py", file=sys.stderr)
        return 1 if old else 0
    for p in documents():
        if not p.is_file():
            continue
        text = p.read_text(encoding="utf-8")
        new = regenerate(text, str(p))
        if new != text:
            p.write_text(new, encoding="utf-8")
            print(f"rewrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
