"""The generated parts of the docs (scripts/gen_docs.py) match the registries they come from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_generated_parts_are_current():
    gen = _gen()
    stale = [str(p.relative_to(REPO)) for p in gen.stale(REPO)]
    assert not stale, f"out of date (run python scripts/gen_docs.py): {stale}"


def test_every_part_is_used_and_every_rule_is_listed():
    gen = _gen()
    text = "".join(p.read_text(encoding="utf-8") for p in gen.documents(REPO) if p.is_file())
    for name in gen.PARTS:
        assert f"<!-- generated: {name} -->" in text, name
    from dslogs.analyzer.rules import RULE_SPECS

    table = gen.rules_table()
    assert all(f"| `{rid}` | " in table for rid in RULE_SPECS)


def test_a_stale_part_is_found_and_an_unknown_one_named():
    gen = _gen()
    fresh = gen.regenerate("a\n<!-- generated: rules -->\nold rows\n<!-- end generated -->\nb\n")
    assert "old rows" not in fresh and "| `memory_leak` |" in fresh and fresh.endswith("<!-- end generated -->\nb\n")
    assert gen.regenerate(fresh) == fresh
    with pytest.raises(ValueError, match="unknown generated part 'nope'"):
        gen.regenerate("<!-- generated: nope -->\n<!-- end generated -->", "x.md")


def test_every_citation_in_the_generated_tables_links_to_its_section_of_sources_md():
    import re

    gen = _gen()
    sources = (REPO / "docs" / "sources.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([0-9-]+)"></a>', sources))
    links = re.findall(r"\]\(sources\.md#([0-9-]+)\)", gen.rules_table() + gen.thresholds_table())
    assert links and set(links) <= anchors, set(links) - anchors
