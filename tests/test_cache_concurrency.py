"""The cache under concurrent use and in folders not ours.

A run holds its cache (a shared lock beside it) while it uses it; `dslogs cache --clear` and
`--prune --unused-days 0` keep a cache held so, rather than pull it from under a running analysis
or an open notebook session. A cache folder or file this user may not read or change is one
line (query reads without a cache; cache, --clear, --prune say so and exit 2), never a traceback.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dslogs
from dslogs.analyzer.cli import app
from tests.ingest_lines import v1_request, write_lines

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _logs(folder: Path, requests: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    t0 = datetime(2026, 11, 23, 10)
    for i in range(requests):
        lines += v1_request(f"s{i % 7}", f"r{i}", t0 + timedelta(seconds=3 * i))
    write_lines(folder / "ds15b_20261123.jsonl", lines)
    return folder


def _caches(home: Path) -> list[Path]:
    return sorted((home / "dslogs").glob("*.duckdb"))


@pytest.mark.parametrize("how", [["--clear"], ["--prune", "--unused-days", "0"]])
def test_a_clear_keeps_the_cache_of_an_open_session(tmp_path, monkeypatch, how):
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    logs = _logs(tmp_path / "logs")
    opened = dslogs.open(str(logs))
    try:
        assert len(opened.requests) == 6
        (cache,) = _caches(home)
        r = CliRunner().invoke(app, ["cache", *how])
        assert r.exit_code == 0, r.output
        assert cache.exists(), r.output
        if how == ["--clear"]:
            assert "in use" in r.output and "removed 0 cache(s)" in r.output, r.output
        # the session reads on, and its report (which reopens the logs) is made
        assert int(opened.query("SELECT count(*) AS n FROM requests")["n"][0]) == 6
        assert opened.report().model["requests"]["count"] == 6
    finally:
        opened.close()
    r = CliRunner().invoke(app, ["cache", "--clear"])
    assert r.exit_code == 0 and "removed 1 cache(s)" in r.output, r.output
    assert _caches(home) == []


def test_analyze_survives_clears_and_prunes_in_a_loop(tmp_path):
    """A real race: analyze in its own process, `cache --clear` and `--prune --unused-days 0` run
    over and over meanwhile. Bounded: a few seconds."""
    home = tmp_path / "xdg"
    logs = _logs(tmp_path / "logs", requests=3000)
    env = {**os.environ, "XDG_CACHE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    for _round in range(1):
        proc = subprocess.Popen([sys.executable, "-m", "dslogs", "analyze", str(logs), "--format", "json", "--out",
                                 str(tmp_path / "r.json"), "-q"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        clears = 0
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            for args in (["cache", "--clear"], ["cache", "--prune", "--unused-days", "0"]):
                r = CliRunner().invoke(app, args, env={"XDG_CACHE_HOME": str(home)})
                assert r.exit_code == 0, r.output
                clears += 1
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and clears > 0


def _restricted():
    """As root, drop the capabilities that let root past file modes (DAC_OVERRIDE,
    DAC_READ_SEARCH, FOWNER) from the child: a mode then holds for it as for any user."""
    if IS_ROOT:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2, 3):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP


def _run(args, home: Path):
    env = {**os.environ, "XDG_CACHE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dslogs", *args], env=env, capture_output=True, text=True,
                          preexec_fn=_restricted, timeout=120)  # fmt: skip


@pytest.fixture
def cached(tmp_path):
    home = tmp_path / "xdg"
    logs = _logs(tmp_path / "logs")
    r = _run(["query", str(logs), "SELECT 1"], home)
    assert r.returncode == 0, r.stderr
    folder = home / "dslogs"
    yield logs, home, folder
    folder.chmod(0o755)
    for p in folder.iterdir():
        p.chmod(0o644)


def _probe_modes_hold(folder: Path) -> None:
    r = subprocess.run([sys.executable, "-c", f"import os; os.listdir({str(folder)!r})"], capture_output=True,
                       preexec_fn=_restricted)  # fmt: skip
    if r.returncode == 0:
        pytest.skip("file modes do not bind this user here")


@pytest.mark.parametrize("mode", [0o000, 0o555])
def test_a_cache_folder_not_ours_is_one_line(cached, tmp_path, mode):
    logs, home, folder = cached
    folder.chmod(mode)
    if mode == 0o000:
        _probe_modes_hold(folder)
    for args in (["query", str(logs), "SELECT count(*) AS n FROM events"],
                 ["analyze", str(logs), "--format", "json", "--out", str(tmp_path / "r.json")]):  # fmt: skip
        r = _run(args, home)
        assert r.returncode == 0, r.stderr
        said = [x for x in r.stderr.strip().splitlines() if not x.startswith("dslogs: note: ")]
        assert "Traceback" not in r.stderr and len(said) <= 1, r.stderr
    for args in (["cache"], ["cache", "--clear"], ["cache", "--prune"], ["cache", "--prune", "--unused-days", "0"]):
        r = _run(args, home)
        assert "Traceback" not in r.stderr, r.stderr
        # a folder it may read but not change: listing works, and so does a prune with nothing to remove
        changes = args in (["cache", "--clear"], ["cache", "--prune", "--unused-days", "0"])
        if mode == 0o000 or changes:
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("dslogs: error: cache ") and str(folder) in lines[0]
        else:
            assert r.returncode == 0, (args, r.stderr)
    folder.chmod(0o755)
    assert _caches(home), "nothing was removed"
