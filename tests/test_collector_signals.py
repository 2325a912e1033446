"""SIGTERM and SIGINT write what is queued before the process exits.

A real child process logs one event per millisecond with a sequence number and reports each
accepted seq on stdout; the test signals it mid-run. Every seq it accepted must be on disk
(0 lost), and the exit status must still be the signal's (SIGTERM) or the app's own handling
(SIGINT -> KeyboardInterrupt)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.collector_helpers import data_events, read_lines

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")

APP = """
import sys, time
from dslogs_collector import Tracer
log_dir, mode = sys.argv[1], sys.argv[2]
if mode == "chained":
    import signal
    def mine(signum, frame):
        print("app-handler", flush=True)
        raise SystemExit(3)
    signal.signal(signal.SIGTERM, mine)
# 1 s between writer wake-ups: without the handler the last second would be lost
t = Tracer(log_dir, flush_interval_s=1.0, handle_signals=(mode != "optout"))
print("ready", flush=True)
i = 0
try:
    while True:
        t.event("queue", 1.0, seq=i)
        sys.stdout.write(f"{i}\\n")
        sys.stdout.flush()
        i += 1
        time.sleep(0.001)
except KeyboardInterrupt:
    print("caught KeyboardInterrupt", flush=True)
    t.event("queue", 1.0, seq=i, after="interrupt")
    sys.exit(0)
"""


def _run_and_signal(tmp_path, mode: str, signum: int, after_s: float = 2.5):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(APP), str(tmp_path), mode], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(after_s)
    p.send_signal(signum)
    out, err = p.communicate(timeout=30)
    lines = out.splitlines()
    acked = [int(x) for x in lines if x.isdigit()]
    return p.returncode, acked, lines, err


def _seqs(tmp_path):
    return [e["seq"] for e in data_events(read_lines(tmp_path)) if "after" not in e]


def test_sigterm_loses_nothing_and_exit_status_says_sigterm(tmp_path):
    rc, acked, _, err = _run_and_signal(tmp_path, "default", signal.SIGTERM)
    assert rc == -signal.SIGTERM, (rc, err)
    seqs = _seqs(tmp_path)
    assert len(acked) > 500, "the app ran for ~2.5 s at ~1 event/ms"
    # every accepted event is on disk, once, in order (the last one may have been queued
    # after its stdout line was cut short by the signal)
    assert seqs == list(range(len(seqs))) and len(seqs) >= acked[-1] + 1, (len(seqs), acked[-1])
    health = [e for e in read_lines(tmp_path) if e["stage"] == "collector"]
    assert health[-1]["dropped"] == 0 and health[-1]["written"] == len(seqs) + len(health) - 1


def test_sigint_flushes_and_the_app_still_gets_keyboard_interrupt(tmp_path):
    rc, acked, lines, err = _run_and_signal(tmp_path, "default", signal.SIGINT, after_s=1.5)
    assert rc == 0 and "caught KeyboardInterrupt" in lines, (rc, err)
    events = data_events(read_lines(tmp_path))
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(seqs))) and len(seqs) >= acked[-1] + 2  # + the one after it
    assert events[-1]["after"] == "interrupt"


def test_sigterm_chains_to_the_apps_own_handler(tmp_path):
    rc, acked, lines, err = _run_and_signal(tmp_path, "chained", signal.SIGTERM, after_s=1.0)
    assert rc == 3 and "app-handler" in lines, (rc, err)  # the app's handler ran, its exit code
    seqs = _seqs(tmp_path)
    assert seqs == list(range(len(seqs))) and len(seqs) >= acked[-1] + 1


def test_opted_out_app_keeps_default_sigterm(tmp_path):
    rc, acked, _, _ = _run_and_signal(tmp_path, "optout", signal.SIGTERM, after_s=1.5)
    assert rc == -signal.SIGTERM
    # nothing flushed it: up to the last second is missing (this is what the handler fixes)
    assert len(_seqs(tmp_path)) < acked[-1] + 1


def test_handlers_installed_from_main_thread_only_and_chained(tmp_path):
    code = f"""
        import signal, threading
        from dslogs_collector import Tracer
        from dslogs_collector import tracer as tm
        before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        box = []
        th = threading.Thread(target=lambda: box.append(Tracer({str(tmp_path / 'a')!r})))
        th.start(); th.join()
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        t = Tracer({str(tmp_path / 'b')!r})
        assert signal.getsignal(signal.SIGTERM) is tm._on_signal
        assert signal.getsignal(signal.SIGINT) is tm._on_signal
        assert tm._previous_handlers[signal.SIGINT] is signal.default_int_handler
        assert tm._previous_handlers[signal.SIGTERM] == signal.SIG_DFL
        t2 = Tracer({str(tmp_path / 'c')!r})  # a second tracer: still one handler, both flushed
        assert signal.getsignal(signal.SIGTERM) is tm._on_signal and len(tm._signal_tracers) == 2
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_ignored_signal_stays_ignored(tmp_path):
    code = f"""
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        from dslogs_collector import Tracer
        t = Tracer({str(tmp_path)!r})
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_stale_gzip_temporaries_of_dead_processes_are_removed_at_start(tmp_path):
    """A SIGTERM or kill during a rotation's gzip can leave ``<file>.gz.<pid>.tmp``: a new
    writer removes those whose process is gone (and untouched for STALE_TMP_S), and nothing
    else."""
    from dslogs_collector import Tracer
    from dslogs_collector.files import STALE_TMP_S

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = time.time() - STALE_TMP_S - 5
    names = {
        "stale": f"ds15b_20261201.jsonl.gz.{dead.pid}.tmp",
        "stale_rotated": f"ds15b_20261201.2.jsonl.gz.{dead.pid}.tmp",
        "alive": f"ds15b_20261201.1.jsonl.gz.{os.getppid()}.tmp",  # a live process's gzip
        "fresh": f"ds15b_20261202.jsonl.gz.{dead.pid}.tmp",  # maybe another host's, under way
        "other_prefix": f"other_20261201.jsonl.gz.{dead.pid}.tmp",
        "log": "ds15b_20261201.jsonl",
    }
    for key, name in names.items():
        p = tmp_path / name
        p.write_bytes(b"\x1f\x8b partial")
        if key != "fresh":
            os.utime(p, (old, old))
    stderr = io.StringIO()
    t = Tracer(tmp_path, handle_signals=False, _stderr=stderr)
    t.event("decode", 1.0, session_id="s")
    t.close()
    left = {p.name for p in tmp_path.iterdir()}
    assert names["stale"] not in left and names["stale_rotated"] not in left
    for key in ("alive", "fresh", "other_prefix", "log"):
        assert names[key] in left, key
    assert "removed 2 unfinished gzip file(s)" in stderr.getvalue(), stderr.getvalue()


FORKED_GZIP = r"""
import os, random, sys, time
import dslogs_collector.files as files
from dslogs_collector import Tracer

files.GZIP_LEVEL = 9  # slow gzip of incompressible lines: a backlog still under way at SIGTERM
t = Tracer(sys.argv[1], max_bytes=4_000_000, gzip=True, health_interval_s=3600, queue_size=100000)
t.event("decode", 1.0, session_id="parent")
pid = os.fork()
if pid == 0:
    rng = random.Random(1)
    pads = [rng.randbytes(600).hex() for _ in range(64)]
    i = 0
    while True:
        t.event("decode", 1.0, session_id="child", i=i, pad=pads[i % 64])
        i += 1
        if i % 500 == 0:
            time.sleep(0.0005)
else:
    time.sleep(float(sys.argv[2]))
    os.kill(pid, 15)
    _, status = os.waitpid(pid, 0)
    t.close()
    print(os.WIFSIGNALED(status) and os.WTERMSIG(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_killed_while_gzipping_leaves_no_tmp(tmp_path):
    """A forked child whose rotated files are still being gzipped when SIGTERM ends it (its close
    gives up after SIGNAL_FLUSH_TIMEOUT_S): no ``*.jsonl.gz.<pid>.tmp`` stays in the log folder.
    About 5 s."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", FORKED_GZIP, str(tmp_path), "3"], env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "15", (r.stdout, r.stderr)
    assert list(tmp_path.glob("*.jsonl.gz")), "no rotation was gzipped: the case did not happen"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
