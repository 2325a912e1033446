"""Collector writer: line format, flushing, rotation, gzip, daily files, failures, overflow,
exit paths. Real files in tmp_path; failures are real (a path under a regular file, a deleted
directory) except disk full, which is injected at the os.write seam."""

from __future__ import annotations

import errno
import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dslogs_collector import Tracer
from tests.collector_helpers import FILE_RE, data_events, log_files, read_lines, read_raw, validate

REPO = Path(__file__).resolve().parents[1]


def _run_py(code: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_lines_are_schema_v1_with_fields_kept(tmp_path):
    t = Tracer(tmp_path, host="gpu-01")
    t.event("tokenize", duration_ms=12.34567, session_id="s1", request_id="r1", input_len=42)
    t.event("input", session_id="s1", request_id="r1", input_len=5, custom_note="中文 ok")
    t.event("format", duration_ms=-1, session_id="s1")
    t.event("decode", duration_ms=3, output_len=7, params={"num_beams": 1, "do_sample": False},
            gpu_wait_pct=float("nan"), weird=object(), host="spoofed")
    t.close()
    events = read_lines(tmp_path)
    for e in events:
        validate(e)
    by = {e["stage"]: e for e in data_events(events)}
    assert by["tokenize"]["duration_ms"] == 12.346 and by["tokenize"]["input_len"] == 42
    assert by["tokenize"]["session_id"] == "s1" and by["tokenize"]["request_id"] == "r1"
    assert "duration_ms" not in by["input"] and by["input"]["custom_note"] == "中文 ok"
    assert by["format"]["duration_ms"] == -1  # article 003's "not measured"
    d = by["decode"]
    assert d["host"] == "gpu-01" and d["host_"] == "spoofed"  # writer identity wins
    assert d["pid"] == os.getpid() and d["gpu_wait_pct"] is None and d["weird"].startswith("<object")
    # non-ASCII stays readable UTF-8 in the file
    assert "中文 ok" in read_raw(log_files(tmp_path)[0]).decode("utf-8")


def test_timestamp_is_caller_time_local_with_offset(tmp_path):
    fixed = 1_764_000_000.25  # taken on the caller thread, formatted on the writer
    t = Tracer(tmp_path, clock=lambda: fixed)
    t.event("queue", duration_ms=1.0)
    t.close()
    e = data_events(read_lines(tmp_path))[0]
    lt = time.localtime(fixed)
    off = lt.tm_gmtoff
    want = time.strftime("%Y-%m-%dT%H:%M:%S", lt) + ".250" + (
        f"{'+' if off >= 0 else '-'}{abs(off) // 3600:02d}:{abs(off) % 3600 // 60:02d}")
    assert e["ts"] == want
    assert log_files(tmp_path)[0].name == f"ds15b_{time.strftime('%Y%m%d', lt)}.jsonl"


def test_written_within_a_second_without_flush(tmp_path):
    t = Tracer(tmp_path, flush_interval_s=5.0)  # capped at 1 s: "flush at least every second"
    t.event("queue", duration_ms=1.0, marker="tick")
    deadline = time.monotonic() + 1.6
    seen = False
    while time.monotonic() < deadline and not seen:
        time.sleep(0.05)
        seen = any("tick" in p.read_text() for p in log_files(tmp_path))
    t.close()
    assert seen


def test_flush_returns_after_write(tmp_path):
    t = Tracer(tmp_path, flush_interval_s=1.0)
    for i in range(500):
        t.event("queue", duration_ms=0.1, seq=i)
    assert t.flush(timeout=5)
    assert [e["seq"] for e in data_events(read_lines(tmp_path))] == list(range(500))
    t.close()


def test_size_rotation_keeps_order_and_bound(tmp_path):
    t = Tracer(tmp_path, max_bytes=4000, flush_interval_s=0.01)
    for i in range(300):
        t.event("tokenize", duration_ms=1.5, session_id="s", seq=i)
        if i % 50 == 0:
            t.flush()
    t.close()
    files = log_files(tmp_path)
    assert len(files) >= 5
    names = [p.name for p in files]
    day = FILE_RE.match(names[0])["date"]
    assert names == [f"ds15b_{day}.jsonl"] + [f"ds15b_{day}.{i}.jsonl" for i in range(1, len(files))]
    assert all(p.stat().st_size <= 4000 for p in files)
    assert [e["seq"] for e in data_events(read_lines(tmp_path))] == list(range(300))


def test_gzip_of_rotated_files(tmp_path):
    t = Tracer(tmp_path, max_bytes=3000, gzip=True)
    for i in range(400):
        t.event("prefill", duration_ms=2.0, seq=i)
    t.close()
    files = log_files(tmp_path)
    assert all(p.name.endswith(".jsonl.gz") for p in files[:-1]) and len(files) > 3
    assert files[-1].name.endswith(".jsonl")  # the current file stays plain
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert [e["seq"] for e in data_events(read_lines(tmp_path))] == list(range(400))


def test_daily_file_by_local_date(tmp_path):
    midnight = time.mktime((2026, 12, 3, 0, 0, 0, 0, 0, -1))
    times = iter([midnight - 0.1, midnight + 0.1, midnight + 0.2])
    now = [midnight - 0.5]

    def clock():
        return now[0]

    t = Tracer(tmp_path, clock=clock, health_interval_s=1e9)
    for ts in times:
        now[0] = ts
        t.event("queue", duration_ms=1.0, at=ts)
    t.close()
    by_file = {p.name: [e for e in data_events(json.loads(x) for x in read_raw(p).decode().splitlines())]
               for p in log_files(tmp_path)}
    assert sorted(by_file) == ["ds15b_20261202.jsonl", "ds15b_20261203.jsonl"]
    assert [e["at"] for e in by_file["ds15b_20261202.jsonl"]] == [midnight - 0.1]
    assert [e["at"] for e in by_file["ds15b_20261203.jsonl"]] == [midnight + 0.1, midnight + 0.2]
    assert by_file["ds15b_20261202.jsonl"][0]["ts"].startswith("2026-12-02T23:59:59.9")
    assert by_file["ds15b_20261203.jsonl"][0]["ts"].startswith("2026-12-03T00:00:00.1")


def test_restart_appends_after_existing_and_closed_files(tmp_path):
    day = time.strftime("%Y%m%d")
    (tmp_path / f"ds15b_{day}.jsonl").write_text('{"v":1}\n')
    (tmp_path / f"ds15b_{day}.1.jsonl.gz").write_bytes(b"")  # closed: never appended to
    t = Tracer(tmp_path)
    t.event("queue", duration_ms=1.0)
    t.close()
    assert (tmp_path / f"ds15b_{day}.2.jsonl").exists()
    assert (tmp_path / f"ds15b_{day}.jsonl").read_text() == '{"v":1}\n'


def test_partial_last_line_is_closed_before_appending(tmp_path):
    day = time.strftime("%Y%m%d")
    f = tmp_path / f"ds15b_{day}.jsonl"
    f.write_text('{"v":1,"ts":"2026-12-02T10:00:00.000+00:00","stage":"queue"}\n{"v":1,"ts":"2026-12-0')
    t = Tracer(tmp_path)
    for i in range(3):
        t.event("queue", duration_ms=1.0, seq=i)
    t.close()
    lines = f.read_text().splitlines()
    assert lines[1] == '{"v":1,"ts":"2026-12-0'  # the crashed line stays one bad line
    parsed = [json.loads(x) for x in lines[2:]]
    assert [e["seq"] for e in parsed if e["stage"] == "queue"] == [0, 1, 2]


def test_unwritable_dir_app_goes_on_one_stderr_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    err = io.StringIO()
    t = Tracer(blocker / "logs", flush_interval_s=0.01, _stderr=err)  # root can't mkdir here either
    for i in range(50):
        t.event("queue", duration_ms=1.0, seq=i)
        if i % 10 == 0:
            t.flush()
    t.close()
    s = t.stats()
    assert s["written"] == 0 and s["dropped"] >= 50
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "cannot write logs" in lines[0], lines


def test_deleted_log_dir_is_recreated(tmp_path):
    logs = tmp_path / "logs"
    err = io.StringIO()
    t = Tracer(logs, _stderr=err)
    t.event("queue", duration_ms=1.0, seq=0)
    t.flush()
    shutil.rmtree(logs)
    t.event("queue", duration_ms=1.0, seq=1)
    t.flush()
    t.close()
    assert [e["seq"] for e in data_events(read_lines(logs))] == [1]
    assert (logs / ".ds15b.lock").exists() and err.getvalue() == ""


def test_disk_full_drops_batch_keeps_lines_whole_and_recovers(tmp_path):
    err = io.StringIO()
    state = {"full": False}

    def write(fd, data):
        if state["full"]:
            n = os.write(fd, bytes(data[: max(1, len(data) // 2)]))  # half a batch, then ENOSPC
            assert n > 0
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    t = Tracer(tmp_path, _write=write, _stderr=err, health_interval_s=1e9)
    t.event("queue", duration_ms=1.0, seq=0)
    t.flush()
    state["full"] = True
    for i in range(1, 6):
        t.event("queue", duration_ms=1.0, seq=i)
        t.flush()
    state["full"] = False
    t.event("queue", duration_ms=1.0, seq=6)
    t.flush()
    stats = t.stats()
    t.close()
    assert [e["seq"] for e in data_events(read_lines(tmp_path))] == [0, 6]  # every line whole
    assert stats["dropped_write"] == 5
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and "No space left" in lines[0] and "works again" in lines[1], lines


def test_queue_overflow_is_counted_and_reported(tmp_path):
    t = Tracer(tmp_path, queue_size=100, flush_interval_s=1.0)
    for i in range(1000):  # ~1 ms: the writer (waking each second) can't drain in between
        t.event("gpu_sample", gpu_index=0, gpu_util_pct=50.0, seq=i)
    t.close()
    events = read_lines(tmp_path)
    kept = [e for e in events if e["stage"] == "gpu_sample"]
    health = [e for e in events if e["stage"] == "collector"]
    dropped = health[-1]["dropped"]
    assert len(kept) + dropped == 1000 and dropped >= 800
    assert health[-1]["written"] >= len(kept) and health[-1]["bytes_written"] > 0
    for e in health:
        validate(e)


def test_event_after_close_is_counted_not_raised(tmp_path):
    err = io.StringIO()
    t = Tracer(tmp_path, _stderr=err)
    t.close()
    t.event("queue", duration_ms=1.0)
    t.event("queue", duration_ms=1.0)
    t.close()
    assert t.stats()["dropped_queue"] == 2 and len(err.getvalue().splitlines()) == 1


def test_self_referencing_and_hostile_values_are_written_cut(tmp_path):
    class Hostile:
        def __str__(self):
            raise RuntimeError("no")

    t = Tracer(tmp_path)
    loop: dict = {}
    loop["self"] = loop
    t.event("queue", duration_ms=1.0, bad=loop, hostile=Hostile(), seq=0)
    t.event("queue", duration_ms=1.0, seq=1)
    t.close()
    events = data_events(read_lines(tmp_path))
    assert [e.get("seq") for e in events] == [0, 1]
    depth, node = 0, events[0]["bad"]
    while isinstance(node, dict):
        node, depth = node["self"], depth + 1
    assert node == "…" and 3 <= depth <= 8  # nesting cut at MAX_DEPTH, not a RecursionError
    assert events[0]["hostile"] == "<Hostile>"
    assert t.stats()["dropped"] == 0


def test_stage_span_times_block_and_reports_errors(tmp_path):
    t = Tracer(tmp_path)
    with t.stage("format", session_id="s", request_id="r") as span:
        time.sleep(0.02)
        span.set(output_chars=10)
    with pytest.raises(KeyError) as exc:
        with t.stage("tokenize", session_id="s", request_id="r"):
            raise KeyError("missing")
    assert exc.value.args == ("missing",)
    t.close()
    events = data_events(read_lines(tmp_path))
    for e in events:
        validate(e)
    fmt = next(e for e in events if e["stage"] == "format")
    assert 15 <= fmt["duration_ms"] < 1000 and fmt["output_chars"] == 10 and fmt["cpu_time_ms"] >= 0
    err = next(e for e in events if e["stage"] == "error")
    assert err["error_type"] == "KeyError" and err["failed_stage"] == "tokenize"
    tok = next(e for e in events if e["stage"] == "tokenize")
    assert tok["status"] == "error"


def test_exit_without_close_writes_everything(tmp_path):
    r = _run_py(f"""
        from dslogs_collector import Tracer
        t = Tracer({str(tmp_path)!r}, flush_interval_s=1.0)
        for i in range(20000):
            t.event("queue", duration_ms=0.5, seq=i)
        # no close(): atexit writes the queue
    """)
    assert r.returncode == 0, r.stderr
    assert [e["seq"] for e in data_events(read_lines(tmp_path))] == list(range(20000))


def test_log_event_drop_in_for_article_003(tmp_path):
    # The article's app.py calls, unchanged but for session_id, on the default tracer.
    r = _run_py("""
        import time
        from dslogs_collector import log_event
        log_event("input", input_len=len("1+1等于几？"), session_id="a1b2c3")
        start_time = time.time()
        log_event("tokenize", duration_ms=(time.time() - start_time) * 1000, input_len=9, session_id="a1b2c3")
        log_event("inference", duration_ms=4820.7, output_len=156, session_id="a1b2c3")
        log_event("format", duration_ms=-1, session_id="a1b2c3")
        log_event("error", error_type="OOMError", error_msg="Beam search OOM, fallback to greedy", session_id="a1b2c3")
    """, env={"DSLOGS_LOG_DIR": str(tmp_path / "applogs")})
    assert r.returncode == 0, r.stderr
    events = data_events(read_lines(tmp_path / "applogs"))
    for e in events:
        validate(e)
    assert [e["stage"] for e in events] == ["input", "tokenize", "inference", "format", "error"]
    assert all(e["session_id"] == "a1b2c3" for e in events)
    assert events[0]["duration_ms"] == -1 and events[2]["duration_ms"] == 4820.7


def test_log_event_inside_a_request_span_joins_that_request(tmp_path):
    # Streamlit's article app: tracer.request around the turn, then the article's unchanged
    # log_event("format", -1) after the answer, with no request id: it is that turn's line, not a
    # made-up request of its own; outside any span the drop-in grouping still applies.
    r = _run_py("""
        from dslogs_collector import Tracer, log_event, set_default_tracer
        t = Tracer(LOGS, flush_interval_s=1.0)
        set_default_tracer(t)
        for turn in range(3):
            with t.request(session_id="s1", request_id=f"r{turn}"):
                t.event("decode", duration_ms=5.0, session_id="s1", request_id=f"r{turn}")
                log_event("format", -1, session_id="s1")
        with t.request(request_id="r9"):
            log_event("format", -1)  # no session anywhere: the span's request, session "unknown" kept
        log_event("format", -1, session_id="s1")  # after every span: a drop-in id of its own
        t.close()
    """.replace("LOGS", repr(str(tmp_path))))
    assert r.returncode == 0, r.stderr
    formats = [e for e in data_events(read_lines(tmp_path)) if e["stage"] == "format"]
    assert [e["request_id"] for e in formats[:3]] == ["r0", "r1", "r2"]
    assert formats[3]["request_id"] == "r9"
    assert formats[4]["request_id"] not in {"r0", "r1", "r2", "r9"}


def _child_logs(path: str) -> None:
    from dslogs_collector import tracer as tracer_mod

    t = tracer_mod._fork_test_tracer  # inherited from the parent by fork
    for i in range(50):
        t.event("queue", duration_ms=1.0, who="child", seq=i)
    t.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_forked_child_writes_its_own_lines_once(tmp_path):
    from dslogs_collector import tracer as tracer_mod

    t = Tracer(tmp_path, flush_interval_s=1.0)
    for i in range(100):  # still queued when the child forks: only the parent may write them
        t.event("queue", duration_ms=1.0, who="parent", seq=i)
    tracer_mod._fork_test_tracer = t
    try:
        p = multiprocessing.get_context("fork").Process(target=_child_logs, args=(str(tmp_path),))
        p.start()
        p.join(30)
    finally:
        del tracer_mod._fork_test_tracer
    t.close()
    assert p.exitcode == 0
    events = data_events(read_lines(tmp_path))
    parent = [e for e in events if e["who"] == "parent"]
    child = [e for e in events if e["who"] == "child"]
    assert [e["seq"] for e in parent] == list(range(100)) and {e["pid"] for e in parent} == {os.getpid()}
    assert [e["seq"] for e in child] == list(range(50)) and {e["pid"] for e in child} == {p.pid}
