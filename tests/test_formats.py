"""The source-format registry (analyzer/ingest/formats): every module of the package is a format,
and one module dropped into it is read end to end with nothing else edited: discovery takes its
files, the reader reads them by its statement, the events view names its source_format, watch
batches its lines apart and the "not available for this source" test sees what it lacks."""

from __future__ import annotations

import json
import pkgutil
import sys
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.ingest import formats
from dslogs.analyzer.ingest.logs import open_logs

# A format of one module: "toy" lines, a JSON object per line with `toy_t` (unix seconds) and
# `toy_ms`, each one request; in *.toy files.
TOY = '''
from dslogs.analyzer.ingest.formats import STATEMENT, Format

FORMAT = Format(
    name="toyfmt", order=15, writer="a test",
    sniff=lambda head, first: head.lstrip().startswith(b'{"toy_t"'),
    read=STATEMENT, names=r"^.*\\.toy$", names_text="*.toy (toy lines)",
    source_formats={"toy": "toy lines"}, tag=("v = 'toy'", "v"),
    not_carried={"toy": frozenset({"gpu_memory", "tokenize"})},
    line_name="toy", unreadable="toy lines",
    statement=lambda: (
        "SELECT 'toy' AS v, to_timestamp(toy_t) AS ts, 'request' AS stage, 's-' || toy_id AS session_id, "
        "'r-' || toy_id AS request_id, toy_ms AS duration_ms, 'ok' AS status "
        "FROM read_json($file, format='newline_delimited', maximum_object_size={max_object_size}, "
        "columns={'toy_t': 'DOUBLE', 'toy_id': 'VARCHAR', 'toy_ms': 'DOUBLE'})"),
    gives=frozenset({"v", "ts", "stage", "session_id", "request_id", "duration_ms", "status"}),
    line_problem=lambda value: None if "toy_t" in value else "no toy_t",
)
'''


def test_every_module_of_the_package_is_a_format_named_as_it():
    names = [m.name for m in pkgutil.iter_modules(formats.__path__) if not m.name.startswith("_")]
    assert sorted(f.name for f in formats.registry()) == sorted(names)
    values = [v for f in formats.registry() for v in f.source_formats]
    assert len(values) == len(set(values)), "two formats claim one source_format"
    for f in formats.registry():
        assert set(f.not_carried) <= set(f.source_formats), f.name
        assert set(f.estimated_tokens) <= set(f.source_formats), f.name
        assert f.names or f.sniffed_names, f"{f.name}: no file name a folder search takes"


def test_source_format_tags_name_each_events_writer():
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT {formats.source_format_sql()} FROM (VALUES (NULL), ('1'), ('otlp:vllm'), ('otlp:openlit')) AS t(v)"
    ).fetchall()
    assert [r[0] for r in rows] == ["legacy", "v1", "otlp:vllm", "otlp:openlit"]


def test_a_format_whose_module_holds_no_format_is_refused(tmp_path, monkeypatch):
    (tmp_path / "broken.py").write_text("X = 1\n")
    monkeypatch.setattr(formats, "__path__", [*formats.__path__, str(tmp_path)])
    formats.registry.cache_clear()
    try:
        with pytest.raises(TypeError, match="broken"):
            formats.registry()
    finally:
        monkeypatch.undo()
        formats.registry.cache_clear()
        sys.modules.pop("dslogs.analyzer.ingest.formats.broken", None)


def test_a_format_is_its_module(tmp_path, monkeypatch):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "toyfmt.py").write_text(TOY)
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [{"toy_t": 1_790_000_000 + i, "toy_id": str(i), "toy_ms": 100.0 + i} for i in range(5)]
    (logs / "server.toy").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (logs / "notes.txt").write_text("not a log\n")
    monkeypatch.setattr(formats, "__path__", [*formats.__path__, str(plugin)])
    formats.registry.cache_clear()
    try:
        assert "*.toy (toy lines)" in formats.accepted_names()
        assert formats.sniff(json.dumps(lines[0]).encode() + b"\n").name == "toyfmt"
        v1 = b'{"v":1,"ts":"2026-01-01T00:00:00Z","stage":"input"}'
        toy = json.dumps(lines[0]).encode()
        assert formats.split_lines([v1, toy, v1]) == [[v1, v1], [toy]]
        with open_logs([str(logs)], use_cache=False) as db:
            got = db.con.execute(
                "SELECT source_format, count(*), sum(e2e_ms) FROM requests GROUP BY 1").fetchall()  # fmt: skip
            assert got == [("toy", 5, sum(x["toy_ms"] for x in lines))]
            assert db.ingest["formats"] == {"toy": 5} and db.ingest["files"] == 1
        assert formats.unavailable({"toy": 5}, "gpu_memory")
        assert not formats.unavailable({"toy": 5, "v1": 3}, "gpu_memory")
    finally:
        monkeypatch.undo()
        formats.registry.cache_clear()
        sys.modules.pop("dslogs.analyzer.ingest.formats.toyfmt", None)
    assert "toyfmt" not in [f.name for f in formats.registry()]


def test_format_declarations_are_checked():
    with pytest.raises(ValueError, match="unknown inputs"):
        formats.Format(name="x", order=1, writer="", sniff=lambda h, f: False,
                       source_formats={"x": ""}, not_carried={"x": frozenset({"gpu_mem"})})  # fmt: skip
    with pytest.raises(ValueError, match="statement"):
        formats.Format(name="x", order=1, writer="", sniff=lambda h, f: False, read=formats.STATEMENT)


def test_registry_tables_stay_importable():
    from dslogs.analyzer.ingest.formats import (
        ESTIMATED_TOKENS,
        LINE_FORMATS,
        NOT_CARRIED,
        SOURCE_FORMATS,
    )

    assert NOT_CARRIED["otlp:vllm"] >= {"gpu_memory", "tokenize"} and "queue" not in NOT_CARRIED["otlp:vllm"]
    assert set(ESTIMATED_TOKENS) == {"otlp:openlit"} and LINE_FORMATS["v1"] == "dslogs v1"
    assert set(SOURCE_FORMATS) >= {"v1", "legacy", "otlp:vllm", "otlp:genai", "otlp:openlit"}
    assert formats.not_carried("v1") == frozenset() and Path(formats.__file__).parent.name == "formats"
