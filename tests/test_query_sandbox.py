"""`dslogs query` is read-only by default (analyzer/ingest/sandbox.py): one statement,
over the views, no file, network or extension, the configuration locked, the cache untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from tests.ingest_lines import v1, write_lines


@pytest.fixture
def logs(tmp_path):
    lines = [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "gpu_sample", None, None, gpu_util_pct=float(s))
             for s in range(30)]
    write_lines(tmp_path / "logs" / "ds15b_20261123.jsonl", lines)
    return tmp_path / "logs"


def q(logs, cache: Path, sql: str, *extra):
    return CliRunner().invoke(app, ["query", str(logs), sql, "--cache", str(cache), "--format", "csv", *extra])


def count(logs, cache):
    r = q(logs, cache, "SELECT count(*) AS n FROM events")
    assert r.exit_code == 0, r.output
    return int(r.output.splitlines()[1])


def one_line_error(r, *words):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("dslogs: error:"), r.output
    assert "Traceback" not in r.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("DELETE FROM dslogs_cache.events WHERE gpu_util_pct > 0", ["read-only", "DELETE"]),
        ("DELETE FROM events", ["read-only", "DELETE"]),
        ("UPDATE dslogs_cache.events SET stage = 'x'", ["read-only", "UPDATE"]),
        ("DROP TABLE dslogs_cache.events", ["read-only", "DROP"]),
        ("DETACH dslogs_cache", ["read-only", "DETACH"]),
        ("ATTACH '{cache}' AS w", ["read-only", "ATTACH"]),
        ("CREATE TABLE x AS SELECT 1", ["read-only", "CREATE"]),
        ("INSERT INTO dslogs_cache.meta VALUES ('a', 'b')", ["read-only", "INSERT"]),
        ("SET enable_external_access = true", ["read-only", "SET"]),
        ("INSTALL httpfs", ["read-only"]),
        ("LOAD httpfs", ["read-only"]),
        ("PRAGMA enable_profiling", ["read-only"]),
        ("COPY (SELECT 1) TO '{out}'", ["read-only", "COPY", "--out FILE"]),
        ("SELECT 1; DELETE FROM dslogs_cache.events", ["one SQL statement", "2"]),
        ("SELECT 1; SELECT 2", ["one SQL statement"]),
    ],
)
def test_writes_and_several_statements_are_refused_and_the_cache_keeps_every_event(tmp_path, logs, sql, words):
    cache = tmp_path / "c.duckdb"
    assert count(logs, cache) == 30
    out = tmp_path / "out.csv"
    r = q(logs, cache, sql.format(cache=cache, out=out))
    one_line_error(r, *words)
    assert not out.exists()
    assert count(logs, cache) == 30


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_json('{logs}/ds15b_20261123.jsonl')",
        "SELECT * FROM read_text('https://example.com/x')",
        "FROM (SELECT * FROM read_parquet('{logs}/../x.parquet'))",
        "SELECT * FROM glob('/etc/*')",
    ],
)
def test_no_file_or_network_access_from_a_select(tmp_path, logs, sql):
    cache = tmp_path / "c.duckdb"
    r = q(logs, cache, sql.format(logs=logs, cache=cache))
    one_line_error(r, "disabled by configuration")


def test_no_cache_run_is_sandboxed_too(tmp_path, logs):
    r = CliRunner().invoke(app, ["query", str(logs), "SELECT * FROM read_text('/etc/passwd')", "--no-cache"])
    one_line_error(r, "disabled by configuration")


def test_reads_still_work_and_spill_is_allowed(tmp_path, logs):
    cache = tmp_path / "c.duckdb"
    r = q(logs, cache, "WITH x AS (SELECT stage, count(*) n FROM events GROUP BY stage) SELECT * FROM x")
    assert r.exit_code == 0 and r.output.splitlines()[1] == "gpu_sample,30"
    for sql in ("DESCRIBE events", "SHOW TABLES", "EXPLAIN SELECT * FROM sessions", "FROM requests LIMIT 1",
                "SELECT * FROM duckdb_settings() WHERE name = 'enable_external_access'"):
        r = q(logs, cache, sql)
        assert r.exit_code == 0, (sql, r.output)
    r = q(logs, cache, "SELECT value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration', "
                       "'autoload_known_extensions', 'autoinstall_known_extensions') ORDER BY name")
    assert r.output.splitlines()[1:] == ["false", "false", "false", "true"]


def test_allow_files_reads_files_and_never_writes_one(tmp_path, logs):
    """--allow-files lets the SQL read files; ad hoc SQL writes none, with it or without: COPY
    (to any file, /dev/null, a FIFO, the cache, a log) is one line, and a result reaches a file
    through --out and its checks."""
    cache = tmp_path / "c.duckdb"
    out = tmp_path / "out.csv"
    r = q(logs, cache, f"SELECT count(*) FROM read_json('{logs}/ds15b_20261123.jsonl')", "--allow-files")
    assert r.exit_code == 0 and r.output.splitlines()[1] == "30"
    log = f"{logs}/ds15b_20261123.jsonl"
    before = open(log, "rb").read()
    for target in (out, "/dev/null", log, cache):
        for extra in ([], ["--allow-files"]):
            one_line_error(q(logs, cache, f"COPY (SELECT stage, count(*) AS n FROM events GROUP BY stage) TO '{target}'",
                             *extra), "read-only", "COPY", "--out FILE")
    one_line_error(q(logs, cache, f"COPY events FROM '{log}'", "--allow-files"), "read-only", "COPY")
    assert not out.exists() and open(log, "rb").read() == before
    r = q(logs, cache, "SELECT stage, count(*) AS n FROM events GROUP BY stage", "--out", str(out))
    assert r.exit_code == 0 and out.read_text().splitlines() == ["stage,n", "gpu_sample,30"]
    # Still no writes, no second statement, no extension install.
    one_line_error(q(logs, cache, "DELETE FROM dslogs_cache.events", "--allow-files"), "read-only")
    one_line_error(q(logs, cache, "INSTALL httpfs", "--allow-files"), "read-only")
    assert count(logs, cache) == 30


def test_refused_before_the_logs_are_read(tmp_path):
    # A write is refused even when the logs do not exist: nothing is opened first.
    r = CliRunner().invoke(app, ["query", str(tmp_path / "none"), "DELETE FROM events", "--no-cache"])
    one_line_error(r, "read-only")


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN ANALYZE CREATE TABLE x AS SELECT 1",
        "EXPLAIN ANALYZE CREATE MACRO m(a) AS a + 1",
        "EXPLAIN ANALYZE INSERT INTO temp.main.t SELECT 1",
        "EXPLAIN ANALYZE DELETE FROM dslogs_cache.events",
        "/* c */ explain -- c\n analyse CREATE TEMP TABLE y AS SELECT 1",
        "EXPLAIN (ANALYZE, FORMAT json) CREATE TABLE x AS SELECT 1",
        "EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'",
    ],
)
def test_explain_of_a_refused_statement_is_refused(tmp_path, logs, sql):
    cache = tmp_path / "c.duckdb"
    n = count(logs, cache)
    sql = sql.format(cache=cache, out=tmp_path / "out.csv")
    one_line_error(q(logs, cache, sql), "read-only")
    assert count(logs, cache) == n
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("sql", ["EXPLAIN SELECT count(*) FROM events", "EXPLAIN ANALYZE SELECT * FROM requests",
                                 "explain analyze WITH a AS (SELECT 1) SELECT * FROM a"])
def test_explain_of_a_query_still_runs(tmp_path, logs, sql):
    r = q(logs, tmp_path / "c.duckdb", sql)
    assert r.exit_code == 0, r.output
    assert "physical_plan" in r.output or "explain_value" in r.output, r.output


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_ends_a_long_query_with_one_line_and_the_cache_intact(tmp_path, logs, sig, code):
    """A real `dslogs query` process and a real signal while DuckDB runs a query that would take
    hours: one line on stderr, exit 128 + the signal, and the cache answers the next query."""
    import signal
    import subprocess
    import sys
    import time

    cache = tmp_path / "c.duckdb"
    n = count(logs, cache)  # the cache is built before: the signal lands in the query
    slow = "SELECT sum(hash(e.ts, i)) FROM events e, range(100000000000) t(i)"
    proc = subprocess.Popen([sys.executable, "-m", "dslogs", "query", str(logs), slow, "--cache", str(cache)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The handlers are installed before the cache is opened: wait for the open file (a fixed
    # sleep loses the race on a loaded machine), then give the statement a moment to start.
    import psutil

    child, deadline = psutil.Process(proc.pid), time.monotonic() + 60
    while not any(f.path == str(cache) for f in child.open_files()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    t0 = time.perf_counter()
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=30)
    assert time.perf_counter() - t0 < 10
    assert proc.returncode == code, (proc.returncode, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and sig in lines[0] and "Traceback" not in err, err
    assert out == ""
    assert count(logs, cache) == n
