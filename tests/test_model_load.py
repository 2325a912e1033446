"""The one loader of saved models: JSON Schemas shipped in the package, checked on load by every
report-like input (render, both diff sides, weekly --previous); a wrong field is one line naming
it by JSON path, exit 2; a report is recognised by parsing, not by its first bytes."""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess

import jsonschema
import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.model.load import SCHEMA_DIR, first_error, shipped_schema
from dslogs.analyzer.model.schemas import BUILDERS, schema_text


@pytest.fixture(scope="module")
def report_file(sample_reports, tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "mixed.json"
    path.write_text(json.dumps(sample_reports["sample_logs/mixed/"], indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_shipped_schemas_are_current_and_valid_draft_2020_12(name):
    assert (SCHEMA_DIR / f"{name}.json").read_text(encoding="utf-8") == schema_text(name), \
        "regenerate with: python -m dslogs.analyzer.model.schemas"
    jsonschema.Draft202012Validator.check_schema(shipped_schema(name))


def test_every_sample_report_validates(sample_reports):
    assert len(sample_reports) >= 25
    validator = jsonschema.Draft202012Validator(shipped_schema("report"))
    for d, model in sample_reports.items():
        assert first_error(model, shipped_schema("report")) is None, d
        assert not list(validator.iter_errors(model)), d


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from _leaves(v, (*path, i))
    yield path


def _trimmed(value):
    """Two entries per list and per id-keyed map: every field kind stays, each check stays fast."""
    if isinstance(value, dict):
        items = list(value.items())
        keep = items[:2] if len(items) > 40 else items
        return {k: _trimmed(v) for k, v in keep}
    if isinstance(value, list):
        return [_trimmed(v) for v in value[:2]]
    return value


def _swapped(model, path, value):
    """Each mutation in place and undone after (a deep copy per case costs minutes)."""
    node = model
    for p in path[:-1]:
        node = node[p]
    old = node[path[-1]]
    node[path[-1]] = value
    return node, path[-1], old


SWAPS = [7, 1.5, "x", None, {"a": {"b": 1}}, 10**400]


def test_our_validator_agrees_with_jsonschema_on_mutated_reports(sample_reports):
    """Every field of a real report (first two rows of each table) swapped for each wrong kind:
    our validator and the reference implementation agree on valid/invalid."""
    schema = shipped_schema("report")
    validator = jsonschema.Draft202012Validator(schema)
    model = _trimmed(copy.deepcopy(sample_reports["sample_logs/mixed/"]))
    every = [p for p in _leaves(model) if p]
    assert len(every) > 200
    # every top-level field and a seeded sample of the nested ones (jsonschema takes ~40 ms a check)
    paths = [p for p in every if len(p) == 1] + random.Random(7).sample([p for p in every if len(p) > 1], 150)
    disagree, invalid = [], 0
    for path in paths:
        for swap in SWAPS:
            node, key, old = _swapped(model, path, swap)
            ours = first_error(model, schema) is None
            theirs = validator.is_valid(model)
            node[key] = old
            invalid += not theirs
            if ours != theirs:
                disagree.append((path, swap))
    assert not disagree, disagree[:5]
    assert invalid > len(paths)  # most swaps are caught


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda m: m["findings"].__setitem__(0, 5), "$.findings[0]: expected object, got integer"),
        (lambda m: m["findings"].__setitem__(0, {"rule": 1}), "$.findings[0].rule: expected string, got integer"),
        (lambda m: m.__setitem__("stages", "fast"), "$.stages: expected array, got string"),
        (lambda m: m["stages"][0].__setitem__("p50_ms", "12"), "$.stages[0].p50_ms: expected number or null, got string"),
        (lambda m: m["requests"].__setitem__("count", [1]), "$.requests.count: expected integer or null, got array"),
        (lambda m: m["hosts"][0].__setitem__("host", {"a": [1]}), "$.hosts[0].host: expected string or null, got object"),
        (lambda m: m["requests"].__setitem__("count", 10**400), "$.requests.count: number out of range"),
        (lambda m: m.__setitem__("schema", "dslogs.report/2"), '$.schema: expected "dslogs.report/1"'),
    ],
)
def test_a_hand_edited_report_is_one_line_naming_the_field(report_file, tmp_path, edit, field):
    model = json.loads(report_file.read_text(encoding="utf-8"))
    edit(model)
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(model), encoding="utf-8")
    for args in (["render", str(bad), "--out", str(tmp_path / "o.html")],
                 ["diff", str(bad), str(report_file)], ["diff", str(report_file), str(bad), "--format", "html",
                                                        "--out", str(tmp_path / "d.html")]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and str(bad) in lines[0] and field in lines[0], (args, r.output)
    assert not (tmp_path / "o.html").exists() and not (tmp_path / "d.html").exists()


def test_weekly_previous_is_checked_by_the_same_loader(report_file, tmp_path):
    model = json.loads(report_file.read_text(encoding="utf-8"))
    model["findings"] = [{"rule": "oom"}]
    bad = tmp_path / "prev.json"
    bad.write_text(json.dumps(model), encoding="utf-8")
    r = CliRunner().invoke(app, ["report", "weekly", "sample_logs/mixed", "--previous", str(bad), "--format", "md",
                                 "--no-cache"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith(f"dslogs: error: --previous {bad}: ") and '$.findings[0]: missing field "severity"' in r.output


@pytest.mark.parametrize("text", ["{\"schema\": 1e400}", '{"a": NaN}', "[" * 100_000, "1" * 5000, '{"schema": '])
def test_broken_json_is_one_line(tmp_path, text):
    bad = tmp_path / "b.json"
    bad.write_text(text, encoding="utf-8")
    r = CliRunner().invoke(app, ["render", str(bad)])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and str(bad) in r.output and "Traceback" not in r.output


def _sorted_like_jq(report_file, tmp_path):
    out = tmp_path / "sorted.json"
    if shutil.which("jq"):
        out.write_text(subprocess.run(["jq", "-S", ".", str(report_file)], capture_output=True, text=True,
                                      check=True).stdout, encoding="utf-8")
    else:
        out.write_text(json.dumps(json.loads(report_file.read_text(encoding="utf-8")), sort_keys=True, indent=2),
                       encoding="utf-8")
    return out


def test_a_report_reformatted_with_sorted_keys_is_still_a_report(report_file, tmp_path):
    resorted = _sorted_like_jq(report_file, tmp_path)
    assert not resorted.read_text(encoding="utf-8")[:256].count("dslogs.report/")
    r = CliRunner().invoke(app, ["diff", str(resorted), str(report_file), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["before"]["source"] == "report" and d["after"]["source"] == "report"
    assert first_error(d, shipped_schema("diff")) is None
    r = CliRunner().invoke(app, ["render", str(resorted), "--out", str(tmp_path / "s.html")])
    assert r.exit_code == 0, r.output


def test_weekly_model_matches_its_schema():
    r = CliRunner().invoke(app, ["report", "weekly", "sample_logs/mixed", "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    model = json.loads(r.stdout)
    assert first_error(model, shipped_schema("weekly")) is None
    assert jsonschema.Draft202012Validator(shipped_schema("weekly")).is_valid(model)
