"""Discovery skips and counts what is not a regular readable file and goes on:
FIFOs (never opened: that would block), sockets, dangling or looping symlinks, unreadable
folders, names that are not UTF-8. Exit 2 only when nothing is readable."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest.discovery import discover
from dslogs.analyzer.ingest.logs import open_logs
from tests.ingest_lines import v1, write_lines

DSLOGS = [sys.executable, "-m", "dslogs"]
GOOD = [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "gpu_sample", None, None, gpu_util_pct=float(s)) for s in range(3)]


@pytest.fixture
def hostile_dir(tmp_path):
    root = tmp_path / "logs"
    write_lines(root / "ds15b_20261123.jsonl", GOOD)
    os.mkfifo(root / "fifo.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock.jsonl"))
    os.symlink(root / "gone.jsonl", root / "dangling.jsonl")
    os.symlink(root / "loop_b.jsonl", root / "loop_a.jsonl")
    os.symlink(root / "loop_a.jsonl", root / "loop_b.jsonl")
    bad_name = os.fsencode(str(root)) + b"/ds15b_\xff\xfe.jsonl"
    with open(bad_name, "wb") as fh:
        fh.write(b'{"v":1,"ts":"2026-11-23T11:00:00.000+00:00","stage":"gpu_sample"}\n')
    yield root
    sock.close()


def test_every_special_entry_is_skipped_and_counted(hostile_dir):
    found = discover([str(hostile_dir)])
    assert [f.path.name for f in found.files] == ["ds15b_20261123.jsonl"]
    reasons = {os.path.basename(name): why for name, why in found.unreadable}
    assert reasons["fifo.jsonl"] == "not a regular file (FIFO)"
    assert reasons["sock.jsonl"] == "not a regular file (socket)"
    assert reasons["dangling.jsonl"].startswith("dangling symlink")
    assert reasons["loop_a.jsonl"].startswith("symlink loop") and reasons["loop_b.jsonl"].startswith("symlink loop")
    assert reasons["ds15b_\\xff\\xfe.jsonl"] == "file name is not valid UTF-8"


def test_the_run_goes_on_and_reports_them(hostile_dir, tmp_path):
    # A subprocess with a timeout: a FIFO opened for reading would block forever.
    out = tmp_path / "r.json"
    r = subprocess.run([*DSLOGS, "analyze", str(hostile_dir), "--format", "json", "--out", str(out)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    ingest = json.loads(out.read_text())["ingest"]
    assert ingest["events"] == 3 and ingest["files"] == 1
    assert ingest["skipped_files"] == 6 and ingest["unreadable_files"] == 6
    assert {s["reason"].split(" (")[0] for s in ingest["skipped"]} == {
        "not a regular file", "dangling symlink", "symlink loop", "file name is not valid UTF-8"}


def test_a_fifo_named_explicitly_is_exit_2_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "x.jsonl")
    r = subprocess.run([*DSLOGS, "query", str(tmp_path / "x.jsonl"), "SELECT 1", "--no-cache"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"dslogs: error: no readable log files under {tmp_path / 'x.jsonl'}: "
                                             f"{tmp_path / 'x.jsonl'}: not a regular file (FIFO)"]


def test_a_fifo_next_to_a_good_file_named_explicitly(tmp_path):
    os.mkfifo(tmp_path / "x.jsonl")
    good = write_lines(tmp_path / "g.jsonl", GOOD)
    with open_logs([str(tmp_path / "x.jsonl"), str(good)], use_cache=False) as db:
        assert db.ingest["events"] == 3 and db.ingest["skipped_files"] == 1


def test_unreadable_folder_is_counted_and_only_it_is_exit_2(tmp_path, monkeypatch):
    write_lines(tmp_path / "a" / "ds15b_20261123.jsonl", GOOD)
    write_lines(tmp_path / "locked" / "ds15b_20261123.jsonl", GOOD)
    real_scandir = os.scandir
    locked = str(tmp_path / "locked")

    def scandir(path="."):
        if isinstance(path, str | os.PathLike) and os.fspath(path) == locked:  # what a folder without r/x permission gives (root ignores chmod)
            raise PermissionError(13, "Permission denied", locked)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with open_logs([str(tmp_path)], use_cache=False) as db:
        assert db.ingest["events"] == 3 and db.ingest["unreadable_files"] == 1
        assert db.ingest["skipped"] == [{"file": locked, "reason": "folder not readable (Permission denied)"}]
    with pytest.raises(InputError, match="no readable log files under .*locked: folder not readable"):
        open_logs([locked], use_cache=False)


def test_only_dangling_links_is_one_line_exit_2(tmp_path):
    os.symlink(tmp_path / "gone.jsonl", tmp_path / "a.jsonl")
    r = subprocess.run([*DSLOGS, "analyze", str(tmp_path), "--format", "json", "--no-cache"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "dangling symlink" in r.stderr


def test_non_utf8_name_given_as_logs_is_one_line(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/x\xff.jsonl"
    with open(name, "wb") as fh:
        fh.write(b'{"v":1,"ts":"2026-11-23T11:00:00.000+00:00","stage":"gpu_sample"}\n')
    r = subprocess.run([*DSLOGS, "query", name, "SELECT 1", "--no-cache"], capture_output=True, timeout=60)
    assert r.returncode == 2 and b"Traceback" not in r.stderr and b"not valid UTF-8" in r.stderr
    missing = os.fsencode(str(tmp_path)) + b"/nope\xff"
    r = subprocess.run([*DSLOGS, "query", missing, "SELECT 1", "--no-cache"], capture_output=True, timeout=60)
    assert r.returncode == 2 and b"Traceback" not in r.stderr and b"nope\\xff: no such file" in r.stderr
