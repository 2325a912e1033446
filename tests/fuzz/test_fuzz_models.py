"""Fuzz: saved models and CLI values as a careless user or a tool leaves them.

Report models (hypothesis-generated JSON trees, and type swaps of every field of a real report)
go through the one loader and then render (md, html) and diff; numeric option values through the
one numeric parser. Each case ends in a result or one UsageError line (exit 2), never a traceback.
Bounded by ``max_examples`` to well under a minute on two cores.
"""

from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.numbers import parse_number
from dslogs.analyzer.model.diff import Side, diff_sides
from dslogs.analyzer.model.load import check_model
from dslogs.analyzer.render.diff_html import render_diff
from dslogs.analyzer.render.html import render_html
from dslogs.analyzer.render.markdown import render_markdown
from dslogs.analyzer.usecases.analyze import analyze_logs
from tests.ingest_lines import write_requests

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzmodels")
    write_requests(root, 8, sessions=3)
    return json.loads(json.dumps(analyze_logs([str(root)], use_cache=False)))


def _through_every_reader(model) -> str:
    """'ok' when the loader accepts the model and every renderer then reads it, 'refused' when
    the loader refuses it; anything else (a traceback) fails the test."""
    try:
        check_model(model, "report", "fuzz.json")
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.json: ")
        return "refused"
    render_markdown(copy.deepcopy(model))
    render_html(copy.deepcopy(model))
    d = diff_sides(Side("before", copy.deepcopy(model), "report"), Side("after", copy.deepcopy(model), "report"))
    render_diff(d, "md")
    render_diff(d, "html")
    return "ok"


def _paths(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from _paths(v, (*path, i))
    if path:
        yield path


WRONG = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.booleans(), st.none(), st.just([]), st.just({}), st.just({"a": {"b": [1]}}),
    st.just(10**400), st.lists(st.integers(), max_size=3),
)


@FAST
@given(data=st.data())
def test_type_swaps_of_a_real_report_never_traceback(real_report, data):
    paths = list(_paths(real_report))
    path = data.draw(st.sampled_from(paths))
    mutated = copy.deepcopy(real_report)
    node = mutated
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = data.draw(WRONG)
    _through_every_reader(mutated)


def test_every_field_swapped_for_each_kind(real_report):
    """Deterministic sweep: every top-level field and a seeded sample of nested ones (two rows per
    table), each swapped for a number, a string and a nested value."""
    every = list(_paths(real_report))
    picked = [p for p in every if len(p) == 1] + random.Random(3).sample([p for p in every if len(p) > 1], 80)
    outcomes = {"ok": 0, "refused": 0}
    for path in picked:
        for swap in (5, "x", {"a": 1}):
            mutated = copy.deepcopy(real_report)
            node = mutated
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = swap
            try:
                outcomes[_through_every_reader(mutated)] += 1
            except Exception as exc:  # report which field broke which reader
                raise AssertionError(f"{path} = {swap!r}: {type(exc).__name__}: {exc}") from exc
    assert outcomes["refused"] > outcomes["ok"] / 4


JSON_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=30,
)


@FAST
@given(tree=JSON_TREES)
def test_arbitrary_json_is_refused_or_read(tree):
    assert _through_every_reader(tree) == "refused"


@FAST
@given(section=st.sampled_from(["findings", "stages", "sessions", "hosts", "requests", "series", "errors"]),
       tree=JSON_TREES)
def test_arbitrary_trees_in_a_section_of_a_real_report(real_report, section, tree):
    mutated = copy.deepcopy(real_report)
    mutated[section] = tree
    _through_every_reader(mutated)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=30) | st.floats().map(repr) | st.integers().map(str))
def test_numeric_option_values(text):
    try:
        value = parse_number(text, "--x", minimum=0, maximum=1e6)
    except UsageError as exc:
        assert str(exc).startswith("--x ") and "\n" not in str(exc)
    else:
        assert 0 <= value <= 1e6
