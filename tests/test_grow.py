"""The hourly cron over a growing log: the collector appends to today's file
between cached runs; a grown file is read only past where the last read stopped
(catalogue.grown), its rows keep the file's id, and the cache's requests_all/sessions_all are
updated for the sessions the new lines touch (viewdefs.update_derived). Every report must equal
the one computed from the files alone (--no-cache), the cache must hold each line's row once,
bad lines keep their true line numbers, and a rewritten or truncated file is read whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dslogs.analyzer.ingest import viewdefs
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.usecases.analyze import analyze_logs
from dslogs_collector import Tracer
from tests.collector_helpers import log_files
from tests.model_helpers import record_windows, stable

BASE = time.mktime((2026, 11, 24, 8, 0, 0, 0, 0, -1))  # local 08:00: one day's file


class App:
    """The host app's side: a Tracer writing chat sessions, as a Gradio handler would."""

    def __init__(self, folder: Path):
        self.now = BASE  # the app's clock: the collector's own lines go to the same day's file
        self.t = Tracer(folder, host="gpu-01", handle_signals=False, health_interval_s=1e9,
                        clock=lambda: self.now)  # fmt: skip
        self.rss = 1000.0

    def session(self, sid: str, start: float, turns: int, step: float = 40.0, fail: bool = False):
        for k in range(turns):
            self.turn(sid, f"{sid}-r{k}", start + k * step, fail=fail and k == turns - 1)

    def turn(self, sid: str, rid: str, at: float, fail: bool = False) -> None:
        t = self.t
        self.now = max(self.now, at)
        t.event_at(at, "input", session_id=sid, request_id=rid, input_len=120)
        t.event_at(at + 0.1, "tokenize", 3.0, session_id=sid, request_id=rid, input_len=40)
        t.event_at(at + 0.2, "prefill", 25.0, session_id=sid, request_id=rid, input_len=40,
                   kv_seq_len=40)  # fmt: skip
        if fail:
            t.event_at(at + 0.3, "error", session_id=sid, request_id=rid, error_type="OutOfMemoryError",
                       error_msg="CUDA out of memory", failed_stage="decode", params={"num_beams": 4})  # fmt: skip
            return
        t.event_at(at + 2.0, "decode", 1800.0, session_id=sid, request_id=rid, output_len=90,
                   params={"num_beams": 1, "max_new_tokens": 256, "do_sample": False})  # fmt: skip
        t.event_at(at + 2.1, "gpu_memory", session_id=sid, request_id=rid, allocated_mb=3000 + at % 97,
                   reserved_mb=3500 + at % 89)  # fmt: skip
        t.event_at(at + 2.2, "request", 2200.0, session_id=sid, request_id=rid, input_len=40,
                   output_len=90, status="ok")  # fmt: skip

    def samples(self, start: float, end: float, every: float = 10.0) -> None:
        at = start
        while at < end:
            self.rss += 1.5
            self.now = max(self.now, at)
            self.t.event_at(at, "process_sample", rss_mb=self.rss, cpu_pct=20.0, threads=12)
            at += every

    def sessionless(self, rid: str, at: float) -> None:
        self.t.event_at(
            at, "request", 900.0, request_id=rid, input_len=10, output_len=20, status="ok"
        )

    def flush(self) -> None:
        assert self.t.flush()


def both(logs: Path, cache: Path, **window) -> tuple[dict, dict]:
    warm = analyze_logs([str(logs)], cache=cache, **window)
    cold = analyze_logs([str(logs)], use_cache=False, **window)
    return warm, cold


def counts(logs: Path, cache: Path | None) -> tuple:
    """Rows of events, requests and sessions, and the cache's own events table (each line once)."""
    kw = {"cache": cache} if cache else {"use_cache": False}
    with open_logs([str(logs)], **kw) as db:
        views = tuple(
            db.con.execute(f"SELECT count(*) FROM {v}").fetchall()[0][0]
            for v in ("events", "requests", "sessions")
        )
        stored = (
            db.con.execute("SELECT count(*) FROM dslogs_cache.events").fetchall()[0][0]
            if cache
            else views[0]
        )
        return views + (stored, db.ingest["bad_lines"], db.ingest["bad_line_samples"])


def derived(cache: Path) -> tuple[list, list]:
    """The cache's requests_all and sessions_all, in order, floats to 8 significant digits: the
    regr_slope/regr_r2 columns differ in their 9th-10th digit between any two runs (summation
    order)."""
    import duckdb

    def rounded(v):
        return float(f"{v:.8g}") if isinstance(v, float) else v

    con = duckdb.connect(str(cache), read_only=True)
    try:
        return tuple(
            sorted(
                (
                    tuple(rounded(v) for v in row)
                    for row in con.execute(f"SELECT * FROM {t}").fetchall()
                ),
                key=repr,
            )
            for t in ("requests_all", "sessions_all")
        )
    finally:
        con.close()


@pytest.fixture
def reads(monkeypatch):
    """What each open_logs read: (tail files, bytes read, read_files, derived tables updated in
    step, derived tables rebuilt whole)."""
    seen: list[tuple[int, int, int, bool, bool]] = []
    from dslogs.analyzer.ingest import logs as ingest

    load, update, refresh = ingest._load, viewdefs.update_derived, viewdefs.refresh_derived
    flags = {"updated": False, "rebuilt": False}

    def recording(db, *args, **kw):
        flags.update(updated=False, rebuilt=False)
        load(db, *args, **kw)
        seen.append((db.tail_files, db.read_bytes, db.ingest["read_files"], flags["updated"],
                     flags["rebuilt"]))  # fmt: skip

    def updating(*args, **kw):
        flags["updated"] = True
        return update(*args, **kw)

    def refreshing(con, store, run, lo, hi, *args, **kw):
        stored = con.execute(f"SELECT value FROM {store}.meta WHERE key = 'derived_key'").fetchall()
        key = viewdefs.derived_key(run, lo, hi)
        done = refresh(con, store, run, lo, hi, *args, **kw)
        flags["rebuilt"] = done and not (stored and stored[0][0] == key)
        return done

    monkeypatch.setattr(ingest, "_load", recording)
    monkeypatch.setattr(viewdefs, "update_derived", updating)
    monkeypatch.setattr(viewdefs, "refresh_derived", refreshing)
    return seen


def test_the_hourly_cron_over_a_growing_file_reads_only_the_tail(tmp_path, reads):
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    app = App(logs)
    # 08:00-09:00: five sessions, one left open (s5), samples, a request without a session
    for i in range(5):
        app.session(f"s{i}", BASE + i * 300, turns=3 + i % 3)
    app.session("s5", BASE + 3000, turns=2)
    app.samples(BASE, BASE + 3600)
    app.sessionless("free-1", BASE + 100)
    app.flush()
    (live,) = log_files(logs)
    warm, cold = both(logs, cache)  # the first run reads the file whole
    assert stable(warm) == stable(cold) and reads[0][0] == 0
    assert counts(logs, cache)[:4] == counts(logs, None)[:4]

    # 09:00-10:00: s5 goes on across the boundary, new sessions; the last line is cut mid-write
    size_before = live.stat().st_size
    app.session("s5", BASE + 3700, turns=2, step=60)
    for i in range(6, 9):
        app.session(f"s{i}", BASE + 3600 + (i - 5) * 400, turns=2, fail=i == 7)
    app.samples(BASE + 3600, BASE + 7200)
    app.sessionless("free-2", BASE + 4000)
    # samples written late (a sampler's backlog): they fall in s2's span, which the tail has no
    # other line of; its RSS slope changes all the same
    for k in range(4):
        app.t.event_at(BASE + 603 + k * 20, "process_sample", rss_mb=4000.0 + 300 * k)
    app.flush()
    cut = json.dumps({"v": 1, "ts": "2026-11-24T10:00:00.000+00:00", "stage": "input",
                      "session_id": "s9", "request_id": "s9-r0", "host": "gpu-01", "pid": 1,
                      "input_len": 5}) + "\n"  # fmt: skip
    with open(live, "ab") as out:
        out.write(cut.encode()[:37])  # the writer caught mid-line
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold)
    assert reads[0][:2] == (1, live.stat().st_size - size_before)  # the new bytes only
    assert reads[0][3:] == (True, False)  # derived tables updated for them, not rebuilt
    got, want = counts(logs, cache), counts(logs, None)
    assert got == want and got[4] == 1  # rows once each; the cut line is one bad line
    lines = live.read_bytes().count(b"\n")
    assert got[5][0]["line"] == lines + 1 and got[5][0]["reason"] == "truncated line at end of file"
    assert derived(cache) == derived(_fresh(logs, tmp_path / "fresh1.duckdb"))

    # 10:00-11:00: the cut line is completed; a damaged line, then more events
    with open(live, "ab") as out:
        out.write(cut.encode()[37:])
        out.write(b'{"v": 1, "ts": "2026-11-24T10:01:00Z", "stage": \n')
    bad_line = live.read_bytes().count(b"\n")
    app.session("s9", BASE + 7300, turns=2)
    app.samples(BASE + 7200, BASE + 10800)
    app.flush()
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][0] == 1
    got, want = counts(logs, cache), counts(logs, None)
    assert got == want and got[4] == 1  # the completed line is read once, no longer bad
    assert [s["line"] for s in got[5]] == [bad_line] and got[5][0]["reason"].startswith("malformed")
    assert derived(cache) == derived(_fresh(logs, tmp_path / "fresh2.duckdb"))
    # the record's fingerprint, carried on over the tail, is the whole file's (a rotation that
    # renames or gzips it then finds its rows)
    import duckdb

    from dslogs.analyzer.ingest.cache import fingerprint

    con = duckdb.connect(str(cache), read_only=True)
    (fp,) = con.execute("SELECT fingerprint FROM files").fetchall()[0]
    con.close()
    assert fp == fingerprint(live)

    # windows over the grown cache come from the derived tables (the cron's --since)
    app.t.close()
    for since in ("2026-11-24T08:50:00", "2026-11-24T09:30:00"):
        warm, cold = both(logs, cache, since=time_at(since))
        assert stable(warm) == stable(cold)

    # the day is over: rotated and gzipped, its rows are found by content, not read again
    import gzip

    gz = live.with_name(live.name + ".gz")
    gz.write_bytes(gzip.compress(live.read_bytes()))
    live.unlink()
    reads.clear()
    warm, cold = both(logs, cache)
    assert (
        stable(warm) == stable(cold) and reads[0][2] == 0 and warm["ingest"]["renamed_files"] == 1
    )


def time_at(local: str) -> str:
    """A local wall-clock time with its offset (the tests run in any zone)."""
    from datetime import datetime

    return datetime.fromisoformat(local).astimezone().isoformat()


def _fresh(logs: Path, cache: Path) -> Path:
    analyze_logs([str(logs)], cache=cache)
    return cache


def test_a_window_after_a_grow_uses_the_derived_tables(tmp_path, monkeypatch):
    calls = record_windows(monkeypatch)
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    app = App(logs)
    for i in range(6):
        app.session(f"s{i}", BASE + i * 500, turns=4)
    app.samples(BASE, BASE + 3600)
    app.flush()
    analyze_logs([str(logs)], cache=cache)  # builds requests_all / sessions_all
    for hour in range(1, 4):  # each hour: more lines, --since an hour later
        app.session(f"h{hour}", BASE + hour * 3600 + 60, turns=3)
        app.session("s5", BASE + hour * 3600 + 120, turns=1)  # a session that spans the hours
        app.samples(BASE + hour * 3600, BASE + (hour + 1) * 3600)
        app.flush()
        since = time_at(f"2026-11-24T{8 + hour - 1:02d}:30:00")
        calls.clear()
        warm = analyze_logs([str(logs)], cache=cache, since=since)
        assert calls and all(calls)  # the window came from the updated derived tables
        cold = analyze_logs([str(logs)], use_cache=False, since=since)
        assert stable(warm) == stable(cold)
    app.t.close()


def test_a_rewritten_or_truncated_file_is_read_whole(tmp_path, reads):
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    app = App(logs)
    for i in range(4):
        app.session(f"s{i}", BASE + i * 300, turns=3)
    app.samples(BASE, BASE + 1800)
    app.t.close()
    (live,) = log_files(logs)
    data = live.read_bytes()
    both(logs, cache)
    # rewritten: larger than before, but not an append (copytruncate, then a new day's lines)
    other = tmp_path / "other"
    app2 = App(other)
    for i in range(6):
        app2.session(f"n{i}", BASE + 60 + i * 300, turns=3)
    app2.samples(BASE + 5, BASE + 2400)
    app2.t.close()
    new = log_files(other)[0].read_bytes()
    assert len(new) > len(data)
    live.write_bytes(new)
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][0] == 0 and reads[0][2] == 1
    assert counts(logs, cache) == counts(logs, None)
    # the same head, a changed middle at the old end, then larger: read whole too
    lines = new.splitlines(keepends=True)
    live.write_bytes(b"".join(lines[:-3]))
    both(logs, cache)
    edited = (
        b"".join(lines[:-4]) + lines[-4].replace(b'"gpu-01"', b'"gpu-02"') + b"".join(lines[-3:])
    )
    live.write_bytes(edited)
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][0] == 0
    assert counts(logs, cache) == counts(logs, None)
    # truncated (shrank): read whole
    live.write_bytes(b"".join(lines[: len(lines) // 2]))
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][0] == 0 and reads[0][2] == 1
    assert counts(logs, cache) == counts(logs, None)
    assert derived(cache) == derived(_fresh(logs, tmp_path / "fresh.duckdb"))


def test_a_last_line_read_as_a_row_is_read_whole_when_it_grows(tmp_path, reads):
    # an unterminated last line that is whole JSON becomes a row: it cannot be taken back by
    # line number, so the grown file is read whole (and the row is not counted twice)
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    app = App(logs)
    app.session("s0", BASE, turns=3)
    app.t.close()
    (live,) = log_files(logs)
    line = live.read_bytes().splitlines(keepends=True)[-1]
    with open(live, "ab") as out:
        out.write(line.replace(b'"s0"', b'"s1"').rstrip(b"\n"))
    both(logs, cache)
    with open(live, "ab") as out:
        out.write(b"\n" + line.replace(b'"s0"', b'"s2"'))
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][0] == 0
    assert counts(logs, cache) == counts(logs, None)


def _grow_in_steps(
    src: Path, logs: Path, cache: Path, parts: int, reads, in_step: bool = False
) -> None:
    """Copy ``src``'s files to ``logs``, its last one cut into ``parts`` growing pieces (each cut
    mid-line); after each piece the cached report equals the --no-cache one, and so do the rows
    and the derived tables (against a cache built afresh)."""
    import shutil

    files = sorted(src.rglob("*.jsonl*"), key=lambda p: (p.name.endswith(".jsonl"), p.name))
    for f in files[:-1]:
        dest = logs / f.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    data = files[-1].read_bytes()
    live = logs / files[-1].relative_to(src)
    live.parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, parts + 1):
        end = len(data) * k // parts
        live.write_bytes(data[:end])
        reads.clear()
        warm, cold = both(logs, cache)
        assert stable(warm) == stable(cold)
        assert reads[0][0] == (1 if k > 1 else 0)
        if k > 1 or in_step:  # the derived tables were updated for the new rows, not rebuilt
            assert reads[0][3:] == (True, False)
        assert counts(logs, cache) == counts(logs, None)
    assert derived(cache) == derived(_fresh(logs, cache.with_name("fresh.duckdb")))


def test_a_growing_legacy_file(tmp_path, reads):
    # legacy request ids are numbered by the session's input events across the file: the tail's
    # sessions are numbered again with the rows read before
    from dslogs.analyzer.simulate import simulate

    src = tmp_path / "src"
    simulate(src, ["healthy", "memory_leak"], seed=5, fmt="legacy", events=4000, hosts=1,
             start="2026-11-23T00:00", hours=8, max_turns=6)  # fmt: skip
    _grow_in_steps(src, tmp_path / "logs", tmp_path / "c.duckdb", 4, reads)


def test_a_growing_file_beside_new_and_deleted_ones(tmp_path, reads):
    # the next day's file appears (read whole), an old one is deleted (retention): the derived
    # tables follow the rows added and dropped
    from dslogs.analyzer.simulate import simulate

    src = tmp_path / "src"
    simulate(src, ["healthy", "rss_growth", "oom"], seed=9, fmt="v1", events=9000, hosts=1,
             start="2026-11-23T12:00", hours=30, max_turns=6)  # fmt: skip
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    (day1,) = src.rglob("*.jsonl.gz")
    (logs / day1.parent.name).mkdir(parents=True)
    (logs / day1.parent.name / day1.name).write_bytes(day1.read_bytes())
    analyze_logs([str(logs)], cache=cache)  # the first day alone: derived tables of it
    _grow_in_steps(src, logs, cache, 3, reads, in_step=True)  # the next day's file, growing
    (logs / day1.parent.name / day1.name).unlink()
    reads.clear()
    warm, cold = both(logs, cache)
    assert stable(warm) == stable(cold) and reads[0][2] == 0 and reads[0][3:] == (True, False)
    assert derived(cache) == derived(_fresh(logs, tmp_path / "fresh-after.duckdb"))


DAMAGE = [
    b'{"v": 1, "ts": "2026-11-24T09:00:00Z", "stage": \n',  # malformed JSON
    b"[1, 2, 3]\n",  # not an object
    b'{"v": 1, "ts": "2026-11-24T09:00:00Z", "stage": "decode", "pid": "x", "host": "h1"}\n',
    b"   \n",  # blank: not a line, not counted
    b'{"v": 1, "ts": "2026-11-24T09:00:00Z", "stage": "queue", "note": "a\\rb", "host": "h1"}\r\n',
    b'{"v": 1, "stage": "decode", "host": "h1"}\n',  # no time
]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_cut_points_give_the_rows_and_bad_lines_of_a_whole_read(tmp_path, seed, reads):
    # a damaged live file grown through random cut points (mid-line most of the time): rows,
    # bad lines and their samples (true line numbers) equal a read of the whole file each time
    import random
    from datetime import datetime, timedelta

    from tests.ingest_lines import dumps, v1_request

    rng = random.Random(seed)
    t0 = datetime(2026, 11, 24, 8, 0)
    parts: list[bytes] = []
    for i in range(60):
        sid = f"s{i % 7}"
        parts += [
            (dumps(e) + "\n").encode() for e in v1_request(sid, f"r{i}", t0 + timedelta(minutes=i))
        ]
        if i % 12 == 5:
            parts.append(DAMAGE[(i // 12 + seed) % len(DAMAGE)])
    data = b"".join(parts)
    logs, cache = tmp_path / "logs", tmp_path / "c.duckdb"
    logs.mkdir()
    live = logs / "ds15b_20261124.jsonl"
    cuts = sorted(rng.sample(range(1, len(data)), 6)) + [len(data)]
    tails = 0
    for cut in cuts:
        live.write_bytes(data[:cut])
        reads.clear()
        got, want = counts(logs, cache), counts(logs, None)
        assert got == want, cut
        tails += reads[0][0]
        with open_logs([str(logs)], cache=cache) as db:
            rows = db.con.execute(
                "SELECT * EXCLUDE (source_file) FROM events ORDER BY ALL"
            ).fetchall()
        with open_logs([str(logs)], use_cache=False) as db:
            assert (
                rows
                == db.con.execute(
                    "SELECT * EXCLUDE (source_file) FROM events ORDER BY ALL"
                ).fetchall()
            )
    assert tails >= 3  # most steps read only the tail (a cut right after a whole JSON line
    # without its LF makes a row of it: that step's next grow is read whole)
