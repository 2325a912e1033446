"""Fuzz: watch's polling under random and hostile appended bytes, lines, rotations, gzips and
truncations. Every case ends in a frame and its rendering; never a traceback. Bounded (about a
minute on two cores); DSLOGS_FUZZ_CASES raises the number of cases."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dslogs.analyzer.live.watch import LogTail, Window, render_frame

CASES = max(int(os.environ.get("DSLOGS_FUZZ_CASES", "0") or 0), 25)
TS = "2026-11-23T10:00:00+00:00"

HOSTILE_LINES = [
    b'{"v":1,"ts":"%s","stage":"request","pid":[1,2],"session_id":"s","request_id":"r"}' % TS.encode(),
    b'{"v":1,"ts":"%s","stage":"request","host":{"a":1},"session_id":{"b":[]},"request_id":"r"}' % TS.encode(),
    b'{"v":1,"ts":"%s","stage":"gpu_sample","host":5,"gpu_index":"0","gpu_util_pct":50}' % TS.encode(),
    b'{"v":1,"ts":"%s","stage":"request","pid":' % TS.encode() + b"9" * 400 + b"}",
    b'{"v":1,"ts":"0001-01-01T00:00:00+00:00","stage":"request","session_id":"s","request_id":"r"}',
    b'{"v":1,"ts":"%s","stage":"request","params":' % TS.encode() + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"v":1,"ts":"%s","stage":"request","session_id":"\\ud800"}' % TS.encode(),
    b'{"v":1,"ts":"9999-99-99","stage":"decode","duration_ms":"NaN","output_len":-1}',
    b'{"stage":"request","timestamp":"not a time"}',
    b"\xff\xfe\x00garbage",
    b"[1,2,3]",
    b"null",
    b'{"v":1,"ts":"%s","stage":"request","session_id":"s","request_id":"r","duration_ms":1e400}' % TS.encode(),
]


def _good(i: int) -> bytes:
    return json.dumps({"v": 1, "ts": TS, "stage": "request", "host": "h", "pid": 1, "session_id": f"s{i % 3}",
                       "request_id": f"r{i}", "duration_ms": 100.0 + i, "ttft_ms": 10.0}).encode()  # fmt: skip


op = st.one_of(
    st.tuples(st.just("append"), st.binary(max_size=300)),
    st.tuples(st.just("line"), st.sampled_from(range(len(HOSTILE_LINES))), st.booleans()),
    st.tuples(st.just("good"), st.integers(0, 99)),
    st.tuples(st.just("rotate"), st.sampled_from(["app.jsonl.1", "app.1.jsonl", "app_20261123.2.jsonl"])),
    st.tuples(st.just("gzip"), st.booleans()),
    st.tuples(st.just("truncate"), st.integers(0, 400), st.binary(max_size=200)),
    st.tuples(st.just("replace"),),
    st.tuples(st.just("mkdir"), st.sampled_from(["x.jsonl", "y.jsonl.3", "z.jsonl.gz"])),
)


def _apply(logs: Path, step: tuple) -> None:
    app = logs / "app.jsonl"
    kind = step[0]
    if kind == "append":
        with open(app, "ab") as fh:
            fh.write(step[1])
    elif kind == "line":
        with open(app, "ab") as fh:
            fh.write(HOSTILE_LINES[step[1]] + (b"\n" if step[2] else b""))
    elif kind == "good":
        with open(app, "ab") as fh:
            fh.write(_good(step[1]) + b"\n")
    elif kind == "rotate" and app.exists():
        os.replace(app, logs / step[1])
        app.touch()
    elif kind == "gzip":
        rotated = sorted(p for p in logs.iterdir() if p.is_file() and p.name != "app.jsonl" and not p.name.endswith(".gz"))
        if rotated:
            body = gzip.compress(rotated[0].read_bytes())
            (logs / (rotated[0].name + ".gz")).write_bytes(body if step[1] else body[: len(body) // 2])
            rotated[0].unlink()
    elif kind == "truncate" and app.exists():
        with open(app, "r+b") as fh:
            fh.truncate(min(step[1], app.stat().st_size))
            fh.seek(0, 2)
            fh.write(step[2])
    elif kind == "replace":
        tmp = logs / ".app.tmp"
        tmp.write_bytes(_good(0) + b"\n")
        os.replace(tmp, app)
    elif kind == "mkdir":
        (logs / step[1]).mkdir(exist_ok=True)


@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.lists(op, min_size=1, max_size=12))
def test_watch_polling_never_raises(steps):
    root = Path(tempfile.mkdtemp(prefix="dslogs-fuzz-watch-"))
    logs = root / "logs"
    logs.mkdir()
    (logs / "app.jsonl").write_bytes(_good(0) + b"\n")
    said: list[str] = []
    tail = LogTail([str(logs)], warn=said.append)
    win = Window(10 * 365 * 86400.0)
    try:
        win.add(tail.start(0))
        for k, step in enumerate(steps):
            _apply(logs, step)
            win.add(tail.poll())
            if k % 4 == 3:
                win.frame(1.8e9, rules=False)
        frame = win.frame(1.8e9)
        out = io.StringIO()
        Console(file=out, width=140).print(render_frame(frame, [str(logs)]))
        assert "since start" in out.getvalue()
        assert frame["bad_lines"] >= 0 and frame["requests"] >= 0
    finally:
        win.close()
        shutil.rmtree(root, ignore_errors=True)
