"""Several processes (Gradio server_workers=4) writing one log dir: no line interleaved, lost or
duplicated, while small files rotate and get gzipped under them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

from tests.collector_helpers import FILE_RE, log_files, read_lines, validate

REPO = Path(__file__).resolve().parents[1]
PROCESSES = 4
EVENTS = 25_000
MAX_BYTES = 64 * 1024  # ~400 lines a file: ~300 rotations during the test, raced by 4 writers

WORKER = """
import sys
from dslogs_collector import Tracer
log_dir, worker, n, max_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = Tracer(log_dir, max_bytes=max_bytes, gzip=True, flush_interval_s=0.02)
sys.stdin.readline()  # start together
for i in range(n):
    t.event("decode", duration_ms=12.5, session_id=f"w{worker}", request_id=f"w{worker}-{i // 10}",
            output_len=i % 300, worker=worker, seq=i)
    if i % 5000 == 0:
        t.flush()  # interleave batches of all workers with rotations
t.close()
print(t.stats()["dropped"])
"""


def test_four_processes_no_lost_duplicated_or_torn_lines(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), str(tmp_path), str(w), str(EVENTS),
                          str(MAX_BYTES)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert out.strip() == "0", (out, err)

    files = log_files(tmp_path)
    assert len(files) > 20, "rotation must happen during the test"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # one plain file at most per day: the current one; the rest were rotated and gzipped
    assert sum(1 for p in files if not p.name.endswith(".gz")) == 1
    for p in files:
        if p.name.endswith(".gz"):
            continue
        assert p.stat().st_size <= MAX_BYTES
    assert all(FILE_RE.match(p.name)["prefix"] == "ds15b" for p in files)

    events = read_lines(tmp_path)  # fails on any torn or interleaved line
    data = [e for e in events if e["stage"] == "decode"]
    keys = Counter((e["worker"], e["seq"]) for e in data)
    assert len(data) == PROCESSES * EVENTS
    assert len(keys) == PROCESSES * EVENTS and max(keys.values()) == 1
    for w in range(PROCESSES):  # each writer's own lines stay in order across files
        seqs = [e["seq"] for e in data if e["worker"] == w]
        assert seqs == list(range(EVENTS))
    health = [e for e in events if e["stage"] == "collector"]
    assert {e["pid"] for e in health} == {e["pid"] for e in data} and len({e["pid"] for e in data}) == PROCESSES
    assert all(e["dropped"] == 0 for e in health)
    for e in data[::500] + health:
        validate(e)
