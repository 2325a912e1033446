"""Counters that add up: once the queue is empty, written + dropped ==
accepted, and the lines on disk are exactly `written`, whatever failed on the way: a full
disk (a real tmpfs when this machine lets us mount one, and always an injected ENOSPC), a
rotation that cannot create its file, a batch split by a rotation whose second half fails, a
deleted directory."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from dslogs_collector import Tracer
from tests.collector_helpers import data_events, log_files, read_lines


def _lines_on_disk(folder: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in log_files(folder)) if folder.exists() else 0


def _check(t: Tracer, sent: int, on_disk: int) -> dict:
    s = t.stats()
    assert s["queued"] == 0
    assert s["accepted"] == sent + s["heartbeats"], s
    assert s["written"] + s["dropped"] == s["accepted"], s
    assert on_disk == s["written"], (on_disk, s)
    return s


@contextlib.contextmanager
def _tmpfs(path: Path, options: str):
    path.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root and mount(8); the injected-failure tests cover this")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); "
                    "the injected-failure tests cover this")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(t: Tracer, n: int, every: int = 50) -> None:
    for i in range(n):
        t.event("decode", 12.5, session_id="s", request_id=f"r{i // 10}", output_len=i % 300, seq=i,
                note="x" * 40)
        if i % every == every - 1:
            t.flush()


def test_real_full_tmpfs_with_rotations(tmp_path):
    with _tmpfs(tmp_path / "small", "size=256k") as logs:
        err = io.StringIO()
        t = Tracer(logs, max_bytes=32 * 1024, _stderr=err, handle_signals=False, deploy_record=False)
        _fill(t, 6000)  # ~1 MB of lines into 256 KiB
        t.close()
        s = _check(t, 6000, _lines_on_disk(logs))
        assert s["written"] > 1000 and s["dropped_write"] > 1000
        assert len(log_files(logs)) > 3  # it rotated before the disk filled
        seqs = [e["seq"] for e in data_events(read_lines(logs))]  # every line whole
        assert seqs == sorted(set(seqs))
        assert "No space left" in err.getvalue()


def test_real_rotation_that_cannot_create_its_file(tmp_path):
    # 5 inodes: the root, the lock file, then 3 log files; the 4th rotation's open() fails
    with _tmpfs(tmp_path / "few", "size=4m,nr_inodes=5") as logs:
        err = io.StringIO()
        t = Tracer(logs, max_bytes=8 * 1024, _stderr=err, handle_signals=False, deploy_record=False)
        _fill(t, 2000, every=200)  # batches of 200 lines split across rotations
        t.close()
        s = _check(t, 2000, _lines_on_disk(logs))
        assert len(log_files(logs)) == 3 and s["written"] > 100 and s["dropped_write"] > 100
        assert "cannot write logs" in err.getvalue()


def test_injected_enospc_after_a_rotation_splits_the_count(tmp_path):
    # The case: a batch is split by a rotation, the part in the first file is written,
    # the write into the new file fails. Counters said written 1, dropped 30 for 11 lines on disk.
    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".1.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    err = io.StringIO()
    t = Tracer(tmp_path, max_bytes=4096, _write=write, _stderr=err, handle_signals=False, deploy_record=False,
               health_interval_s=1e9, flush_interval_s=1.0)
    for i in range(30):
        t.event("decode", 12.5, session_id="s", seq=i, note="y" * 100)
    t.flush()
    t.close()
    s = _check(t, 30, _lines_on_disk(tmp_path))
    first = [e["seq"] for e in read_lines(tmp_path) if e["stage"] == "decode"]
    assert first == list(range(len(first))) and 0 < len(first) < 30  # the part before the rotation
    assert s["dropped_write"] >= 30 - len(first) and "No space left" in err.getvalue()


def test_injected_partial_write_then_recovery(tmp_path):
    state = {"full": False}

    def write(fd, data):
        if state["full"]:
            os.write(fd, bytes(data[: max(1, len(data) // 3)]))  # a third, then ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    t = Tracer(tmp_path, max_bytes=16 * 1024, _write=write, _stderr=io.StringIO(), handle_signals=False, deploy_record=False)
    _fill(t, 500)
    state["full"] = True
    _fill(t, 500)
    state["full"] = False
    _fill(t, 500)
    t.close()
    s = _check(t, 1500, _lines_on_disk(tmp_path))
    assert s["dropped_write"] >= 500 and s["written"] >= 1000
    read_lines(tmp_path)  # every line whole: the partial writes were cut back


def test_deleted_directory_counts_add_up(tmp_path):
    logs = tmp_path / "logs"
    t = Tracer(logs, max_bytes=8 * 1024, handle_signals=False, deploy_record=False, _stderr=io.StringIO())
    _fill(t, 300)
    before = _lines_on_disk(logs)
    shutil.rmtree(logs)
    _fill(t, 300)
    t.close()
    s = _check(t, 600, before + _lines_on_disk(logs))
    assert s["dropped"] == 0 and _lines_on_disk(logs) >= 300


def test_queue_overflow_and_close_counts_add_up(tmp_path):
    t = Tracer(tmp_path, queue_size=100, flush_interval_s=1.0, handle_signals=False, deploy_record=False, _stderr=io.StringIO())
    for i in range(1000):
        t.event("decode", 1.0, seq=i)
    t.close()
    t.event("decode", 1.0, seq=-1)  # after close: counted
    s = _check(t, 1001, _lines_on_disk(tmp_path))
    assert s["dropped_queue"] >= 801


def test_close_counts_what_a_hung_writer_could_not_write(tmp_path):
    gate = threading.Event()

    def write(fd, data):
        gate.wait(20)  # a hung disk (NFS): the writer is stuck in its start heartbeat
        return os.write(fd, data)

    err = io.StringIO()
    t = Tracer(tmp_path, _write=write, _stderr=err, handle_signals=False, deploy_record=False)
    for i in range(100):
        t.event("decode", 1.0, seq=i)
    t.close(timeout=0.3)
    stuck = t.stats()
    gate.set()  # the disk comes back: the writer finishes what it held, never the counted ones
    t._writer.thread.join(10)
    assert stuck["dropped_queue"] == 100 and "100 queued events not written" in err.getvalue()
    _check(t, 100, _lines_on_disk(tmp_path))
    assert data_events(read_lines(tmp_path)) == []
