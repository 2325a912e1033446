"""The tail under input it did not expect: a .gz that appears half-written, a file truncated
and regrown past the old offset between two polls, non-files among the logs, lines over 16 MiB."""

from __future__ import annotations

import gzip
import json
import os

from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.format import duration as human_age
from dslogs.analyzer.ingest import LogTail
from dslogs.analyzer.ingest import tail as watch_mod


def _line(i: int, tag: str = "a") -> bytes:
    return json.dumps({"v": 1, "ts": f"2026-11-23T10:00:{i % 60:02d}+00:00", "stage": "request",
                       "session_id": tag, "request_id": f"{tag}{i}"}).encode()  # fmt: skip


def test_growing_gz_is_read_once_complete(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    tail = LogTail([str(logs)])
    assert tail.start(None) == []
    body = gzip.compress(b"".join(_line(i) + b"\n" for i in range(200)))
    gz = logs / "app.1.jsonl.gz"
    gz.write_bytes(body[: len(body) // 2])  # a writer half-way through
    assert tail.poll() == []
    assert tail.poll() == []  # still incomplete: not given up
    gz.write_bytes(body)
    got = tail.poll()
    assert got == [_line(i) for i in range(200)]
    assert tail.poll() == []  # read once


def test_gz_damaged_for_good_keeps_its_lines_before_the_damage(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setattr(watch_mod, "GZ_SETTLE_S", 0.0)
    body = gzip.compress(b"".join(_line(i) + b"\n" for i in range(2000)))
    (logs / "app.1.jsonl.gz").write_bytes(body[: len(body) * 3 // 4])
    tail = LogTail([str(logs)])
    got = tail.start(0)
    # the cut last line goes to the judge as it is (analyze counts it bad too)
    assert 0 < len(got) < 2000 and got[:-1] == [_line(i) for i in range(len(got) - 1)]
    assert _line(len(got) - 1).startswith(got[-1])
    assert tail.poll() == []


def test_truncated_and_regrown_past_the_offset_is_read_again(tmp_path):
    path = tmp_path / "app.jsonl"
    path.write_bytes(b"".join(_line(i, "old") + b"\n" for i in range(3)))
    tail = LogTail([str(path)])
    tail.start(0)
    ino = os.stat(path).st_ino
    with open(path, "r+b") as fh:  # same inode, truncated, then longer than before
        fh.truncate(0)
        fh.write(b"".join(_line(i, "new") + b"\n" for i in range(6)))
    assert os.stat(path).st_ino == ino
    assert tail.poll() == [_line(i, "new") for i in range(6)]
    with open(path, "ab") as fh:
        fh.write(_line(6, "new") + b"\n")
    assert tail.poll() == [_line(6, "new")]


def test_non_files_are_one_line_and_the_rest_is_followed(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "folder.jsonl").mkdir()
    os.mkfifo(logs / "pipe.jsonl")
    os.symlink(logs / "missing.jsonl", logs / "dangling.jsonl")
    (logs / "app.jsonl").write_bytes(_line(1) + b"\n")
    said: list[str] = []
    tail = LogTail([str(logs)], warn=said.append)
    assert tail.start(0) == [_line(1)]
    with open(logs / "app.jsonl", "ab") as fh:
        fh.write(_line(2) + b"\n")
    assert tail.poll() == [_line(2)]
    assert len(said) == 2 and any("pipe.jsonl" in s and "FIFO" in s for s in said)
    assert any("dangling.jsonl" in s for s in said)
    res = CliRunner().invoke(app, ["watch", str(logs), "--once", "--window", "1000d"])
    assert res.exit_code == 0 and res.exception is None, res.output


def test_unreadable_file_is_one_line(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "secret.jsonl").write_bytes(_line(1) + b"\n")
    (logs / "secret.jsonl").chmod(0)
    if os.geteuid() == 0:  # root reads a mode-0 file: the kernel's refusal is raised by hand
        real_open = open

        def refusing_open(path, *args, **kw):
            if str(path).endswith("secret.jsonl"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kw)

        monkeypatch.setattr(watch_mod, "open", refusing_open, raising=False)
    (logs / "app.jsonl").write_bytes(_line(2) + b"\n")
    said: list[str] = []
    tail = LogTail([str(logs)], warn=said.append)
    assert tail.start(0) == [_line(2)]
    assert len(said) == 1 and "secret.jsonl" in said[0]


def test_line_over_16_mib_is_counted_never_held(tmp_path, monkeypatch):
    monkeypatch.setattr(watch_mod, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "app.jsonl"
    path.write_bytes(_line(1) + b"\n" + b"x" * 800)
    tail = LogTail([str(path)])
    assert tail.start(0) == [_line(1)]
    with open(path, "ab") as fh:
        fh.write(b"x" * 800)  # the unterminated line passes the limit: dropped, counted
    assert tail.poll() == [] and tail.bad_lines == 1
    with open(path, "ab") as fh:
        fh.write(b"y" * 800 + b"\n" + _line(2) + b"\n")  # its end, then a good line
    assert tail.poll() == [_line(2)] and tail.bad_lines == 1


def test_human_age():
    assert human_age(916989) == "10 d 14 h"
    assert human_age(11520) == "3 h 12 min"
    assert human_age(250) == "4 min 10 s"
    assert human_age(120) == "2 min"
    assert human_age(4.4) == "4 s"


def test_a_50_mb_line_appended_live_costs_that_line_only(tmp_path):
    """A line of 50 MB written in pieces between polls (a dumped tensor): counted as one bad line,
    and the requests before and after it, in the same writes, are all read."""
    path = tmp_path / "app.jsonl"
    path.write_bytes(_line(0) + b"\n")
    tail = LogTail([str(tmp_path)])
    tail.start(None)
    big = b'{"v":1,"pad":"' + b"x" * (50 << 20) + b'"}'
    data = _line(1) + b"\n" + big + b"\n" + _line(2)[:7]
    got = []
    for i in range(0, len(data), 7 << 20):
        with open(path, "ab") as fh:
            fh.write(data[i : i + (7 << 20)])
        got += tail.poll()
    with open(path, "ab") as fh:
        fh.write(_line(2)[7:] + b"\n" + _line(3) + b"\n")
    got += tail.poll()
    assert got == [_line(1), _line(2), _line(3)] and tail.bad_lines == 1


WATCH_UNREADABLE = r"""
import ctypes, json, os, signal, subprocess, sys, time
from pathlib import Path

def drop():  # as root: file modes bind the child as they bind any user
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2, 3):
            libc.prctl(24, cap, 0, 0, 0)

folder, log = Path(sys.argv[1]), Path(sys.argv[2])
env = {**os.environ, "COLUMNS": "200"}
proc = subprocess.Popen([sys.executable, "-m", "dslogs", "watch", str(folder), "--interval", "200ms"], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=drop)
time.sleep(2.5)
log.chmod(0)
time.sleep(1.5)
alive = proc.poll() is None
log.chmod(0o644)
time.sleep(1.0)
proc.send_signal(signal.SIGINT)
out, err = proc.communicate(timeout=60)
print(json.dumps({"alive": alive, "rc": proc.returncode, "err": err, "stopped": "dslogs watch: stopped" in out}))
"""


def test_a_log_made_unreadable_mid_run_does_not_end_watch(tmp_path):
    """chmod 000 on the only log while watch runs: watch says so and keeps following (about 6 s)."""
    import subprocess
    import sys
    from datetime import datetime, timedelta
    from pathlib import Path

    from tests.ingest_lines import v1_request, write_lines

    logs = tmp_path / "logs"
    now = datetime.now().replace(microsecond=0) - timedelta(minutes=1)
    log = write_lines(logs / f"ds15b_{now:%Y%m%d}.jsonl", v1_request("s0", "r0", now, offset=""))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        r = subprocess.run([sys.executable, "-c", WATCH_UNREADABLE, str(logs), str(log)], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        log.chmod(0o644)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["alive"] and result["rc"] == 0 and result["stopped"], result
    assert "Traceback" not in result["err"], result["err"]
