"""Every log-derived string is safe for its medium: charts (vl-convert aborts
on control characters), terminal tables, Markdown, CSV (formulas), suggested shell commands."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core import textsafe
from dslogs.analyzer.render.markdown import render_markdown
from tests.ingest_lines import v1, v1_request, write_lines

DSLOGS = [sys.executable, "-m", "dslogs"]
ESC, BEL = "\x1b", "\x07"
HOSTILE = [
    "\x1b[2J\x1b[H",  # clear screen
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: write the clipboard
    "\x1b]0;title\x07",
    "abc\u202edcba",  # RTL override
    "\u2066iso\u2069",
    "\x9b31m",  # C1 CSI
    "bell\x07\x00nul\x7fdel",
]


def test_visible_shows_every_unsafe_character_as_an_escape():
    for s in HOSTILE:
        out = textsafe.visible(s)
        assert textsafe.is_safe(out), repr(out)
        assert all(ch.isprintable() for ch in out), repr(out)
    assert textsafe.visible("a\x1b]52;c;QQ==\x07b") == "a\\x1b]52;c;QQ==\\x07b"
    assert textsafe.visible("x\u202ey") == "x\\u202ey"
    assert textsafe.visible("中文 ok — é") == "中文 ok — é"  # printable text untouched


def test_markdown_escapes_formatting_links_tags_and_controls():
    out = textsafe.markdown("**x** _y_ [l](http://e) `c` <think> a|b ~~s~~ num_ooms \x1b[2J")
    assert "**" not in out.replace("\\*", "") and "<think>" not in out and "\x1b" not in out
    assert out.startswith("\\*\\*x\\*\\* \\_y\\_ \\[l\\](http://e) \\`c\\` &lt;think> a\\|b \\~\\~s\\~\\~ num_ooms")
    assert out.endswith("\\\\x1b\\[2J")


@pytest.mark.parametrize("cell", ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-2+3", "\tx", "\rx"])
def test_csv_formula_cells_get_a_quote(cell):
    assert textsafe.csv_cell(cell) == "'" + cell
    assert textsafe.csv_cell("ok " + cell) == "ok " + cell


@pytest.fixture(scope="module")
def hostile_logs(tmp_path_factory):
    """A small run whose host, session id, error type and stage carry ESC and BEL."""
    root = tmp_path_factory.mktemp("hostile")
    t0 = datetime(2026, 11, 23, 10, 0, 0)
    lines = []
    sids = ["s\x1b[31m1\x07", "**bold**", "<think>x</think>", "--cache=/tmp/evil", "=cmd|x"]
    for i, sid in enumerate(sids):
        for ev in v1_request(sid, f"r{i}", t0 + timedelta(minutes=i)):
            ev["host"] = f"gpu\x1b]52;c;QQ==\x07-{i % 2}\u202e"
            lines.append(ev)
        lines.append(v1((t0 + timedelta(minutes=i, seconds=3)).isoformat() + "+00:00", "error", sid, f"r{i}",
                        error_type=f"OutOfMemory\x1b[2J{BEL}Error", error_msg="CUDA out of memory \x1b[H", failed_stage="decode"))
        lines.append(v1((t0 + timedelta(minutes=i, seconds=4)).isoformat() + "+00:00", f"weird{BEL}stage\x1b",
                        sid, f"r{i}", duration_ms=5.0))
        for k in range(4):
            lines.append(v1((t0 + timedelta(minutes=i, seconds=5 + k)).isoformat() + "+00:00", "gpu_memory", sid,
                            f"r{i}", allocated_mb=1000.0 + k, reserved_mb=2000.0 + 300 * k))
    write_lines(root / "ds15b_20261123.jsonl", lines)
    return root


def test_html_report_and_render_with_control_characters_in_every_label(hostile_logs, tmp_path):
    # In a subprocess: vl-convert's panic aborts the whole process (exit 134), no exception.
    html = tmp_path / "r.html"
    r = subprocess.run([*DSLOGS, "analyze", str(hostile_logs), "--no-cache", "--out", str(html)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    text = html.read_text(encoding="utf-8")
    assert "<svg" in text  # the static fallbacks were drawn
    assert "weird\\x07stage\\x1b" in text  # the stage is a chart label, shown escaped
    js = tmp_path / "r.json"
    r = subprocess.run([*DSLOGS, "analyze", str(hostile_logs), "--no-cache", "--format", "json", "--out", str(js)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    model = json.loads(js.read_text(encoding="utf-8"))
    assert any(ESC in (s.get("host") or "") for s in model["sessions"])  # the model keeps the data as it is
    r = subprocess.run([*DSLOGS, "render", str(js), "--out", str(tmp_path / "again.html")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "<svg" in (tmp_path / "again.html").read_text(encoding="utf-8")
    assert "dslogs session LOGS -- " in text  # suggested commands end options before the id


def test_markdown_report_shows_controls_as_escapes_and_no_formatting(hostile_logs):
    r = subprocess.run([*DSLOGS, "analyze", str(hostile_logs), "--no-cache", "--format", "md"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    md = r.stdout
    assert ESC not in md and BEL not in md and "\u202e" not in md
    assert "\\\\x1b" in md  # ESC shown as the text \x1b (its backslash escaped for Markdown)
    assert "**bold**" not in md and "\\*\\*bold\\*\\*" in md
    assert "<think>" not in md


def test_checklist_note_think_tag_is_escaped_in_markdown():
    model = {"checklist": [{"id": "x", "label": "end-to-end p50 < 1.2 s", "status": "FAIL", "value": 3.0,
                            "unit": "ms", "source": "003 §5.2",
                            "note": "median reasoning share 60%: R1-style <think> output alone often exceeds this"}]}
    md = render_markdown(model)
    assert "<think>" not in md and "R1-style &lt;think> output" in md


def test_terminal_table_shows_escapes_not_raw_sequences(hostile_logs):
    r = CliRunner().invoke(app, ["query", str(hostile_logs), "SELECT min(host) FILTER (WHERE host LIKE 'gpu%') AS host, "
                                 "max(error_type) AS error_type FROM events", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert ESC not in r.output and BEL not in r.output and "\u202e" not in r.output
    assert "gpu\\x1b]52;c;QQ==\\x07-0\\u202e" in r.output and "OutOfMemory\\x1b[2J\\x07Error" in r.output
    r = CliRunner().invoke(app, ["query", str(hostile_logs), "SELECT chr(27) || '[2J' AS \"x\x1b\"", "--no-cache"])
    assert ESC not in r.output and "\\x1b[2J" in r.output


def test_csv_output_guards_formulas_unless_raw(hostile_logs):
    sql = ("SELECT DISTINCT session_id, -1.5 AS n FROM events WHERE session_id IN ('=cmd|x', '--cache=/tmp/evil') "
           "ORDER BY session_id")
    r = CliRunner().invoke(app, ["query", str(hostile_logs), sql, "--no-cache", "--format", "csv"])
    rows = list(csv.reader(io.StringIO(r.output)))
    assert rows == [["session_id", "n"], ["'--cache=/tmp/evil", "-1.5"], ["'=cmd|x", "-1.5"]]
    r = CliRunner().invoke(app, ["query", str(hostile_logs), sql, "--no-cache", "--format", "csv", "--raw-csv"])
    rows = list(csv.reader(io.StringIO(r.output)))
    assert rows[1:] == [["--cache=/tmp/evil", "-1.5"], ["=cmd|x", "-1.5"]]


def test_session_id_after_double_dash_is_a_value_not_an_option(hostile_logs, tmp_path):
    evil = tmp_path / "evil.duckdb"
    r = CliRunner().invoke(app, ["session", "--no-cache", str(hostile_logs), "--", "--cache=" + str(evil)])
    assert r.exit_code == 2 and "no events for session" in r.output and not evil.exists()
    r = CliRunner().invoke(app, ["session", "--no-cache", str(hostile_logs), "--", "--cache=/tmp/evil"])
    assert r.exit_code == 0, r.output
    assert "(1 row)" in r.output
