"""`dslogs watch`: tailing (appended bytes only, rotation, gzip of the followed file, no double
count), the window's numbers, `--once`, and the live view in a real pseudo-terminal against a
collector writing from another process, stopped with Ctrl-C."""

from __future__ import annotations

import fcntl
import gzip
import io
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import parse_duration
from dslogs.analyzer.live.watch import LogTail, Window

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# A collector in another process: requests with stages, memory and GPU samples; small files so
# it rotates many times and gzips each closed file (the plain file disappears, the .gz appears).
WRITER = r"""
import random, sys, time, uuid
from dslogs_collector import Tracer
out, seconds, max_bytes = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
tr = Tracer(out, max_bytes=max_bytes, gzip=True, flush_interval_s=0.02, health_interval_s=3600)
rng = random.Random(1)
n = errors = 0
end = time.time() + seconds
print("started", flush=True)
while time.time() < end:
    sid, rid = "s%d" % (n % 7), uuid.uuid4().hex
    tr.event("tokenize", 12.0, session_id=sid, request_id=rid, input_len=300)
    tr.event("prefill", 200.0 + 100 * rng.random(), session_id=sid, request_id=rid, input_len=300)
    tr.event("decode", 3000.0, session_id=sid, request_id=rid, output_len=101,
             params={"num_beams": 1, "max_new_tokens": 512})
    if n % 10 == 9:
        tr.event("error", None, session_id=sid, request_id=rid, error_type="OutOfMemoryError",
                 error_msg="CUDA out of memory <b>", failed_stage="decode")
        errors += 1
    tr.event("gpu_memory", None, session_id=sid, request_id=rid, reserved_mb=4200.0, allocated_mb=3400.0)
    tr.event("request", 3300.0, session_id=sid, request_id=rid, ttft_ms=250.0, input_len=300, output_len=101,
             status="error" if n % 10 == 9 else "ok")
    tr.event("gpu_sample", None, gpu_index=0, gpu_util_pct=81.0, gpu_mem_used_mb=9000.0, gpu_mem_total_mb=24576.0)
    n += 1
    time.sleep(0.01)
tr.close()
print("wrote", n, errors, flush=True)
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start_writer(logs: Path, seconds: float, max_bytes: int = 6000) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(logs), str(seconds), str(max_bytes)],
                            stdout=subprocess.PIPE, text=True, env=_env())  # fmt: skip
    assert proc.stdout.readline().strip() == "started"
    return proc


def _finish_writer(proc: subprocess.Popen) -> tuple[int, int]:
    out, _ = proc.communicate(timeout=60)
    m = re.search(r"wrote (\d+) (\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_parse_duration():
    assert parse_duration("2s", "--interval") == 2.0
    assert parse_duration("500ms", "--interval") == 0.5
    assert parse_duration("15m", "--window") == 900.0
    assert parse_duration("1h", "--window") == 3600.0
    for bad in ("", "0s", "-1s", "2 days", "s"):
        with pytest.raises(UsageError):
            parse_duration(bad, "--interval")


def test_tail_reads_appended_bytes_and_keeps_partial_lines(tmp_path):
    f = tmp_path / "ds15b_20261203.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b"')
    tail = LogTail([str(tmp_path)])
    assert tail.start(None) == []  # not in the backfill: followed from its end
    with f.open("ab") as fh:
        fh.write(b': 2}\n{"c": 3}\n')
    # the half line written before start is not ours; everything after it is, exactly once
    assert tail.poll() == [b': 2}', b'{"c": 3}']
    assert tail.poll() == []
    with f.open("ab") as fh:
        fh.write(b'{"d": 4')
    assert tail.poll() == []
    with f.open("ab") as fh:
        fh.write(b"}\n")
    assert tail.poll() == [b'{"d": 4}']
    assert tail.bytes_read == len(b': 2}\n{"c": 3}\n{"d": 4}\n')


def test_tail_follows_rotation_and_gzip_without_double_count(tmp_path):
    plain = tmp_path / "ds15b_20261203.jsonl"
    plain.write_bytes(b"1\n2\n")
    tail = LogTail([str(tmp_path)])
    assert tail.start(0.0) == [b"1", b"2"]  # recent: backfilled
    with plain.open("ab") as fh:
        fh.write(b"3\n4")  # "4" not finished yet
    assert tail.poll() == [b"3"]
    # the writer finishes the line, rotates and gzips: .gz appears, then the plain file goes
    with plain.open("ab") as fh:
        fh.write(b"\n5\n")
    (tmp_path / "ds15b_20261203.1.jsonl").write_bytes(b"6\n")
    gz = tmp_path / "ds15b_20261203.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert tail.poll() == [b"4", b"5", b"6"]  # plain still there: read from it, the .gz waits
    plain.unlink()
    assert tail.poll() == []  # its .gz holds nothing new
    # a file gzipped after more was appended that we had not read yet: only the rest counts
    second = tmp_path / "ds15b_20261203.1.jsonl"
    with second.open("ab") as fh:
        fh.write(b"7\n8\n")
    (tmp_path / "ds15b_20261203.1.jsonl.gz").write_bytes(gzip.compress(second.read_bytes()))
    second.unlink()
    assert tail.poll() == [b"7", b"8"]
    assert tail.poll() == []
    # gzip -k: a copy next to the plain file is never read
    third = tmp_path / "ds15b_20261203.2.jsonl"
    third.write_bytes(b"9\n")
    assert tail.poll() == [b"9"]
    (tmp_path / "ds15b_20261203.2.jsonl.gz").write_bytes(gzip.compress(b"9\n"))
    assert tail.poll() == []


def _request(ts: str, rid: str, ttft: float, e2e: float) -> bytes:
    return json.dumps({"v": 1, "ts": ts, "stage": "request", "host": "h", "pid": 1, "session_id": "s",
                       "request_id": rid, "ttft_ms": ttft, "duration_ms": e2e}).encode()  # fmt: skip


def test_window_numbers():
    now = time.time()

    def iso(t):
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}+00:00"

    w = Window(600)
    lines = [_request(iso(now - 30 - i), f"r{i}", 100.0 + i, 1000.0 + 10 * i) for i in range(11)]
    lines.append(_request(iso(now - 3600), "old", 99999.0, 99999.0))  # outside the window
    start = json.dumps({"v": 1, "ts": iso(now - 1), "stage": "prefill", "host": "h", "pid": 1,
                        "session_id": "s", "request_id": "open", "duration_ms": 5}).encode()  # fmt: skip
    w.add([*lines, start, b"not json", b"[1]"])
    f = w.frame(now)
    # as analyze counts them: the request in flight is a request (its TTFT and end-to-end are
    # its prefill's 5 ms, from its stages)
    assert f["requests"] == 12 and f["inflight"] == 1 and f["bad_lines"] == 2
    assert f["ttft_ms"]["p50"] == pytest.approx(104.5) and f["e2e_ms"]["p95"] == pytest.approx(1094.5)
    assert f["requests_per_s_1m"] == pytest.approx(12 / 60, abs=1e-3)
    assert f["requests_per_s"] == pytest.approx(12 / 600, abs=1e-3)  # over the window it covers


def test_live_collector_counts_every_request_once(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    tail = LogTail([str(logs)])
    win = Window(900)
    win.add(tail.start(time.time() - 900))
    writer = _start_writer(logs, 4.0)
    deadline = time.time() + 60
    while writer.poll() is None and time.time() < deadline:
        win.add(tail.poll())
        time.sleep(0.01)  # fast polls: the listing races the collector's gzip (a .gz without its state)
    n, errors = _finish_writer(writer)
    win.add(tail.poll())
    assert len(list(logs.glob("*.jsonl.gz"))) >= 3  # it did rotate and gzip while we followed
    assert win.total_requests == n and win.total_errors == errors
    assert win.frame(time.time())["inflight"] == 0


def test_once_prints_one_frame(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    n, errors = _finish_writer(_start_writer(logs, 1.5))
    res = CliRunner().invoke(app, ["watch", str(logs), "--once", "--window", "15m"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"since start: {n} requests, {errors} errors" in out
    row = re.search(r"^TTFT\s+(\S+)\s+(\S+)\s+(\d+)", out, re.M)
    assert row and row.groups() == ("250", "250", str(n))
    assert re.search(r"^\S+\s+0\s+81\.0\s+9,000 / 24,576 MiB", out, re.M)
    assert "4,200" in out and "3,400" in out  # reserved / allocated per process
    assert "oom" in out  # the analyzer's own rules over the window
    assert CliRunner().invoke(app, ["watch", str(tmp_path / "nope"), "--once"]).exit_code == 2
    assert CliRunner().invoke(app, ["watch", str(logs), "--once", "--interval", "soon"]).exit_code == 2


def test_live_view_in_a_pty_follows_a_writer_and_quits_on_ctrl_c(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 140, 0, 0))

    def controlling_tty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    watch = subprocess.Popen([sys.executable, "-m", "dslogs", "watch", str(logs), "--interval", "0.3s"],
                             stdin=slave, stdout=slave, stderr=slave, env=_env(), cwd=REPO,
                             preexec_fn=controlling_tty, close_fds=True)  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def drain(seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunks.append(os.read(master, 65536))
                except OSError:
                    return

    try:
        drain(3.0)  # the first frame, with no logs yet
        writer = _start_writer(logs, 4.0)
        while writer.poll() is None:
            drain(0.2)
        n, errors = _finish_writer(writer)
        # more refreshes after the writer stopped, until the last frame has every line (a frame
        # takes longer on a busy machine: up to 30 s)
        deadline = time.time() + 30
        while True:
            drain(0.5)
            text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
            totals = re.findall(r"since start: (\d+) requests, (\d+) errors", text)
            if (totals and totals[-1] == (str(n), str(errors))) or time.time() > deadline:
                break
        assert totals, text[-2000:]
        assert totals[-1] == (str(n), str(errors))
        assert "in flight" in text and "GPU (latest sample)" in text
        os.write(master, b"\x03")  # Ctrl-C through the terminal's line discipline
        assert watch.wait(timeout=20) == 0
        drain(0.5)
        text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
        assert "dslogs watch: stopped" in text and "Traceback" not in text
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGKILL)
            watch.wait()
        os.close(master)


def test_ctrl_c_inside_a_duckdb_statement_ends_watch_cleanly(tmp_path, monkeypatch):
    """Ctrl-C that lands while a frame's SQL runs: DuckDB fails the statement (a RuntimeError,
    not a KeyboardInterrupt), and watch still stops with "stopped" and exit 0, never a traceback."""
    from rich.console import Console

    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.live import watch as watch_module

    logs = tmp_path / "logs"
    logs.mkdir()
    real_frame = watch_module.Window.frame
    calls = []

    def frame_interrupted(self, now, rules=True):
        calls.append(now)
        if len(calls) == 2:  # the first frame of the loop: Ctrl-C while a long statement runs
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            self.con.execute("SELECT count(*) FROM range(100000000000) a").fetchall()
        return real_frame(self, now, rules=rules)

    monkeypatch.setattr(watch_module.Window, "frame", frame_interrupted)
    handler = signal.getsignal(signal.SIGINT)  # the test process's own (pyspark may have set one)
    out = io.StringIO()
    code = watch_module.watch(Selection.build([str(logs)]), interval="0.2s", console=Console(file=out, width=120), max_frames=50)
    assert code == 0 and len(calls) == 2
    assert "dslogs watch: stopped" in out.getvalue()
    assert signal.getsignal(signal.SIGINT) is handler  # watch put it back
