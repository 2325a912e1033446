"""Saved report models at their edges: what the schema lets through, every renderer draws; what
it does not is one line. Notes as strings or objects, server metrics of odd shapes, NaN,
Infinity and a BOM in the file, and `render` given a folder or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.model.load import check_model, first_error, shipped_schema

GOLD = Path(__file__).parent / "gold" / "report_model.json"


def _gold() -> dict:
    return json.loads(GOLD.read_text(encoding="utf-8"))


def _no_traceback(r, codes=(0,)):
    assert r.exit_code in codes, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _one_line(r, *words):
    _no_traceback(r, (2,))
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("dslogs: error: "), r.output
    assert all(w in lines[0] for w in words), lines[0]


SCHEMA_VALID = {
    "notes-strings": lambda m: m.__setitem__("notes", ["a plain note", "another"]),
    "notes-mixed": lambda m: m.__setitem__("notes", ["text", {"level": "info", "message": "obj"}, {}]),
    "server-metrics-empty": lambda m: m.__setitem__("server_metrics", []),
    "server-metrics-null": lambda m: m.__setitem__("server_metrics", None),
}
SCHEMA_INVALID = {
    "server-metrics-string": lambda m: m.__setitem__("server_metrics", "x"),
    "server-metrics-numbers": lambda m: m.__setitem__("server_metrics", [1, "a", None]),
    "server-metrics-object": lambda m: m.__setitem__("server_metrics", {"a": "b"}),
    "notes-number": lambda m: m.__setitem__("notes", [5]),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_VALID))
def test_what_the_schema_accepts_every_renderer_draws(tmp_path, case):
    model = _gold()
    SCHEMA_VALID[case](model)
    assert first_error(model, shipped_schema("report")) is None
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model), encoding="utf-8")
    r = CliRunner().invoke(app, ["render", str(path), "--out", str(tmp_path / "m.html")])
    _no_traceback(r)
    html = (tmp_path / "m.html").read_text(encoding="utf-8")
    if case.startswith("notes"):
        assert "a plain note" in html or "text" in html
    _no_traceback(CliRunner().invoke(app, ["diff", str(GOLD), str(path), "--format", "md"]))
    _no_traceback(CliRunner().invoke(app, ["diff", str(GOLD), str(path), "--format", "html",
                                           "--out", str(tmp_path / "d.html")]))  # fmt: skip


@pytest.mark.parametrize("case", sorted(SCHEMA_INVALID))
def test_what_the_schema_refuses_is_one_line(tmp_path, case):
    model = _gold()
    SCHEMA_INVALID[case](model)
    with pytest.raises(Exception, match="not a valid dslogs.report/1 model"):
        check_model(model, "report", "m.json")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model), encoding="utf-8")
    _one_line(CliRunner().invoke(app, ["render", str(path), "--out", str(tmp_path / "m.html")]), "m.json")
    _one_line(CliRunner().invoke(app, ["diff", str(path), str(GOLD)]), "m.json")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("indent", [None, 1])
def test_nan_and_infinity_in_a_saved_report_are_one_line_not_logs(tmp_path, constant, indent):
    text = json.dumps(_gold(), indent=indent).replace('"sessions_total": ', f'"sessions_total": {constant}, "x": ', 1)
    path = tmp_path / "m.json"
    path.write_text(text, encoding="utf-8")
    for args in (["diff", str(path), str(GOLD)], ["render", str(path), "--out", str(tmp_path / "m.html")]):
        r = CliRunner().invoke(app, args)
        _one_line(r, "m.json", f"{constant.lstrip('-')} is not JSON")
        assert "no events" not in r.output and "legacy" not in r.output


def test_a_bom_before_a_saved_report_is_read(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("\ufeff" + json.dumps(_gold(), indent=1), encoding="utf-8")
    _no_traceback(CliRunner().invoke(app, ["diff", str(path), str(GOLD), "--format", "md"]))
    _no_traceback(CliRunner().invoke(app, ["render", str(path), "--out", str(tmp_path / "m.html")]))


@pytest.mark.parametrize("arg", [".", "/", ""])
def test_render_of_a_folder_or_nothing_is_one_line(arg):
    _one_line(CliRunner().invoke(app, ["render", arg]), "REPORT_JSON")


def test_cli_notes_as_strings_are_printed(capsys):
    from dslogs.analyzer.cli import _print_notes

    _print_notes({"notes": ["plain", {"level": "info", "message": "obj"}]})
    assert capsys.readouterr().err.splitlines() == ["dslogs: warning: plain", "dslogs: info: obj"]
