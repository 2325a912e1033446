"""Small facts defined once, in analyzer/core: how a value is written as JSON, the severity order,
an exception as one line, the names of the views. A second copy is how two outputs came to print
one timestamp two ways; this test finds one by its shape, wherever it is."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from typer.testing import CliRunner

from dslogs.analyzer.cli import app

REPO = Path(__file__).resolve().parents[1]
# name -> the core module that defines it
ONCE = {"jsonable": "analyzer/core/jsonable.py", "one_line": "analyzer/core/errors.py",
        "severity_rank": "analyzer/core/severity.py"}  # fmt: skip
# literals -> the core module that holds them
LITERALS = {("events", "requests", "sessions"): "analyzer/core/views.py",
            ("critical", "warning", "info"): "analyzer/core/severity.py"}  # fmt: skip


def _sources():
    for package in ("analyzer", "dslogs"):
        for path in sorted((REPO / package).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _literal(node) -> tuple | None:
    """A tuple or list of strings as a tuple; a dict ranking strings (``{"a": 0, "b": 1}``) as its
    keys in rank order. A dict that maps them to something else (colours) is not an order."""
    if isinstance(node, ast.Tuple | ast.List) and node.elts and all(isinstance(e, ast.Constant) for e in node.elts):
        return tuple(e.value for e in node.elts)
    if isinstance(node, ast.Dict) and node.keys and all(isinstance(k, ast.Constant) for k in node.keys):
        ranks = [v.value if isinstance(v, ast.Constant) else None for v in node.values]
        if sorted(r for r in ranks if isinstance(r, int)) == list(range(len(ranks))):
            return tuple(k.value for _, k in sorted(zip(ranks, node.keys, strict=True), key=lambda p: p[0]))
    return None


def test_each_is_defined_once_in_core():
    copies = []
    for where, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and ONCE.get(node.name.lstrip("_"), where) != where:
                copies.append(f"{where}:{node.lineno} defines {node.name} ({ONCE[node.name.lstrip('_')]} has it)")
            if (found := _literal(node)) in LITERALS and LITERALS[found] != where:
                copies.append(f"{where}:{node.lineno} spells out {found} ({LITERALS[found]} has it)")
    assert not copies, "\n".join(copies)


def test_query_session_and_the_report_write_a_time_the_same_way():
    logs = "sample_logs/memory_leak"
    runner = CliRunner()
    model = json.loads(runner.invoke(app, ["analyze", logs, "--format", "json", "--no-cache"]).stdout)
    first = model["window"]["first_event"]
    assert first == "2026-11-23T22:00:00.467+00:00"  # the collector's own text in the log file
    sql = "SELECT min(ts) AS t FROM events"
    as_json = runner.invoke(app, ["query", logs, sql, "--format", "json", "--no-cache"])
    assert json.loads(as_json.stdout) == [{"t": first}], as_json.output
    for fmt in ("table", "csv"):
        res = runner.invoke(app, ["query", logs, sql, "--format", fmt, "--no-cache"])
        assert first in res.stdout.splitlines(), (fmt, res.output)
    events = runner.invoke(app, ["session", logs, "653f6e4a", "--format", "jsonl", "--no-cache"]).stdout
    times = [json.loads(line)["ts"] for line in events.splitlines()]
    assert times and all(len(t) == len(first) and t[19] == "." for t in times), times[:3]


def test_an_exception_as_one_line():
    from dslogs.analyzer.core.errors import one_line

    class Java(Exception):
        def getMessage(self):  # noqa: N802  (py4j's name)
            return "java.lang.IllegalStateException: stopped\n\tat org.apache.spark.X"

    assert one_line(Java("ignored")) == "java.lang.IllegalStateException: stopped"
    sql = ValueError('Parser Error: syntax error at or near "FORM"\n\nLINE 1: SELECT 1 FORM x\n                 ^')
    assert one_line(sql) == 'Parser Error: syntax error at or near "FORM"'
    assert one_line(sql, every_line=True) == 'Parser Error: syntax error at or near "FORM" LINE 1: SELECT 1 FORM x ^'
    assert one_line(sql, every_line=True, limit=12) == "Parser Error"
    assert one_line(OSError()) == "OSError" and one_line(ValueError("  \n")) == "ValueError"
