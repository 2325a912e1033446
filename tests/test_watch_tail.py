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
