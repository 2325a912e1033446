"""`dslogs query` and `dslogs session`: formats, errors, bound ids, and real pipes into jq."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from tests.ingest_lines import legacy_turn, v1, v1_request, write_lines

T0 = datetime(2026, 11, 23, 10, 0, 0)
DSLOGS = [sys.executable, "-m", "dslogs"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    lines = v1_request("s1", "r1", T0) + v1_request("s1", "r2", T0 + timedelta(minutes=1))
    lines += v1_request("s2", "r3", T0 + timedelta(minutes=2), with_request_event=False)
    lines.append(v1("2026-11-23T10:00:30.000+00:00", "gpu_memory", "s1", "r1", allocated_mb=1.0, reserved_mb=2.0))
    write_lines(root / "v1" / "ds15b_20261123.jsonl", lines)
    write_lines(root / "legacy" / "ds15b_20261123.jsonl", legacy_turn("L1", T0, 10.0, 5.0), legacy_style=True)
    return root


def invoke(*args):
    return CliRunner().invoke(app, [*map(str, args), "--no-cache"])


def test_query_table(logs):
    r = invoke("query", logs, "SELECT stage, count(*) AS n FROM events GROUP BY stage ORDER BY stage")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["stage", "n"] and lines[-1] == "(9 rows)"
    assert any(line.split() == ["decode", "3"] for line in lines)


def test_query_csv_json_jsonl_agree(logs):
    sql = "SELECT request_id, ttft_ms, start_ts, do_sample FROM requests ORDER BY request_id"
    as_csv = list(csv.DictReader(io.StringIO(invoke("query", logs, sql, "--format", "csv").stdout)))
    as_json = json.loads(invoke("query", logs, sql, "--format", "json").stdout)
    as_jsonl = [json.loads(x) for x in invoke("query", logs, sql, "--format", "jsonl").stdout.splitlines()]
    assert as_json == as_jsonl
    assert [r["request_id"] for r in as_json] == ["L1#1", "r1", "r2", "r3"]
    assert [r["request_id"] for r in as_csv] == ["L1#1", "r1", "r2", "r3"]
    r1 = as_json[1]
    assert r1["ttft_ms"] == 320.0 and r1["do_sample"] is True
    assert datetime.fromisoformat(r1["start_ts"]).utcoffset() is not None  # ISO with offset
    assert as_csv[1]["ttft_ms"] == "320.0" and as_csv[0]["ttft_ms"] == ""


def test_json_has_no_nan_and_nested_values_are_json(logs):
    out = invoke("query", logs, "SELECT 'NaN'::DOUBLE AS x, 'inf'::DOUBLE AS y, [1, 2] AS l, {'a': 1} AS s, 1.5::DECIMAL(4,2) AS d",
                 "--format", "json").stdout  # fmt: skip
    assert json.loads(out) == [{"x": None, "y": None, "l": [1, 2], "s": {"a": 1}, "d": 1.5}]
    assert "NaN" not in out and "Infinity" not in out


def test_sql_error_is_exit_2_on_one_line(logs):
    r = invoke("query", logs, "SELECT nope FROM events")
    assert r.exit_code == 2
    (line,) = [x for x in r.output.splitlines() if x.strip()]
    assert line.startswith("dslogs: error: SQL error: Binder Error") and "nope" in line


def test_query_window_and_bad_window(logs):
    r = invoke("query", logs, "SELECT count(*) AS n FROM requests", "--since", "2026-11-23T10:01:00+00:00", "--format", "json")
    assert json.loads(r.stdout) == [{"n": 2}]
    r = invoke("query", logs, "SELECT 1", "--since", "last tuesday")
    assert r.exit_code == 2 and "--since 'last tuesday'" in r.output and "30m, 12h" in r.output


def test_missing_logs_is_exit_2_naming_the_path(tmp_path):
    r = invoke("query", tmp_path / "gone", "SELECT 1")
    assert r.exit_code == 2 and f"{tmp_path / 'gone'}: no such file or directory" in r.output


def test_session_table_and_jsonl(logs):
    r = invoke("session", logs, "s1")
    assert r.exit_code == 0, r.output
    body = r.output.splitlines()
    assert body[0].split()[:3] == ["turn_index", "request_id", "start_ts"] and body[-1] == "(2 rows)"
    r = invoke("session", logs, "s1", "--format", "jsonl")
    events = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(events) == 15 and {e["session_id"] for e in events} == {"s1"}
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    r = invoke("session", logs, "L1", "--tz", "UTC")
    assert "L1#1" in r.output


def test_session_id_is_bound_not_spliced(logs):
    r = invoke("session", logs, "s1' OR '1'='1")
    assert r.exit_code == 2 and "no events for session" in r.output and "SQL error" not in r.output


def test_session_needs_an_id(logs):
    r = CliRunner().invoke(app, ["session", str(logs)])
    assert r.exit_code == 2


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed")
def test_query_and_session_pipe_into_jq(logs, tmp_path):
    env_cache = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    import os

    env = {**os.environ, **env_cache}
    q = subprocess.run(
        f"{' '.join(DSLOGS)} query {logs} \"SELECT request_id, e2e_ms FROM requests ORDER BY request_id\" "
        "--format jsonl | jq -r 'select(.e2e_ms > 2000) | .request_id'",
        shell=True, capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert q.stdout.split() == ["L1#1", "r1", "r2", "r3"]
    s = subprocess.run(
        f"{' '.join(DSLOGS)} session {logs} s1 --format jsonl | jq -c 'select(.stage == \"decode\") | [.request_id, .output_len]'",
        shell=True, capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert s.stdout.splitlines() == ['["r1",101]', '["r2",101]']
    # `| head` closes the pipe early: no traceback.
    h = subprocess.run(f"{' '.join(DSLOGS)} query {logs} \"SELECT * FROM range(100000)\" --format jsonl | head -1",
                       shell=True, capture_output=True, text=True, env=env)  # fmt: skip
    assert h.stdout == '{"range":0}\n' and "Traceback" not in h.stderr
    # The cache was built and reused by these runs, and kept out of the log folder.
    assert list((tmp_path / "xdg" / "dslogs").glob("*.duckdb"))
    assert not list(Path(logs).rglob("*.duckdb"))
