"""open_logs on hand-made v1 and legacy lines: normalisation, views, time zones, windows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dslogs.analyzer.core.errors import InputError, UsageError
from dslogs.analyzer.ingest.logs import EVENT_COLUMNS, open_logs, run_query, session_events
from tests.diag_fixture_db import EVENTS, REQUESTS, SESSIONS
from tests.ingest_lines import legacy, legacy_turn, v1, v1_request, write_lines

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 23, 10, 0, 0)


def rows(db, sql, params=None):
    return run_query(db, sql, params).dicts()


def one(db, sql, params=None):
    (row,) = rows(db, sql, params)
    return row


def columns(db, view):
    return {r[0]: r[1] for r in db.con.execute(f"DESCRIBE {view}").fetchall()}


@pytest.fixture
def v1_logs(tmp_path):
    lines = v1_request("s1", "r1", T0) + v1_request("s1", "r2", T0 + timedelta(minutes=1), with_request_event=False)
    lines += [
        v1("2026-11-23T10:00:30.000+00:00", "gpu_memory", "s1", "r1", allocated_mb=1000.0, reserved_mb=2000.0),
        v1("2026-11-23T10:01:30.000+00:00", "gpu_memory", "s1", "r2", allocated_mb=1000.0, reserved_mb=2100.0),
        v1("2026-11-23T10:02:30.000+00:00", "gpu_memory", "s1", None, allocated_mb=1000.0, reserved_mb=2200.0),
        v1("2026-11-23T10:00:00.000+00:00", "gpu_sample", None, None, gpu_index=0, gpu_util_pct=50, gpu_mem_used_mb=4000),
        v1("2026-11-23T10:00:00.000+00:00", "process_sample", None, None, rss_mb=1000.0, cpu_pct=5.0, threads=9),
        v1("2026-11-23T10:02:00.000+00:00", "process_sample", None, None, rss_mb=1020.0, cpu_pct=5.0, threads=9),
        v1("2026-11-23T10:00:01.000+00:00", "collector", None, None, queued=1, written=10, dropped=0, bytes_written=900),
    ]
    return write_lines(tmp_path / "v1logs" / "ds15b_20261123.jsonl", lines).parent


def test_views_have_the_documented_columns_and_types(v1_logs):
    db = open_logs([str(v1_logs)], use_cache=False)
    ev = columns(db, "events")
    assert list(ev) == EVENT_COLUMNS
    assert ev == {k: ("TIMESTAMP WITH TIME ZONE" if v == "TIMESTAMPTZ" else v) for k, v in EVENTS.items()}
    rq = columns(db, "requests")
    for name, kind in REQUESTS.items():
        assert rq.get(name) == ("TIMESTAMP WITH TIME ZONE" if kind == "TIMESTAMPTZ" else kind), name
    se = columns(db, "sessions")
    for name, kind in SESSIONS.items():
        assert se.get(name) == ("TIMESTAMP WITH TIME ZONE" if kind == "TIMESTAMPTZ" else kind), name


def test_v1_events_and_request_metrics(v1_logs):
    db = open_logs([str(v1_logs)], use_cache=False)
    assert db.ingest["files"] == 1 and db.ingest["events"] == 20 and db.ingest["bad_lines"] == 0
    assert db.ingest["formats"] == {"v1": 20}
    r1 = one(db, "SELECT * FROM requests WHERE request_id = 'r1'")
    assert r1["turn_index"] == 1 and r1["input_chars"] == 80 and r1["input_len"] == 40
    assert r1["ttft_ms"] == 320.0  # the request event's own value
    assert r1["tpot_ms"] == pytest.approx(2000 / 100) and r1["tpot_is_upper_bound"] is False
    assert r1["e2e_ms"] == 2329.0 and r1["tokens_per_s"] == pytest.approx(101 / 2.329)
    assert r1["prefill_decode_ratio"] == pytest.approx(0.15) and r1["reasoning_share"] == pytest.approx(30 / 101)
    assert (r1["num_beams"], r1["max_new_tokens"], r1["temperature"], r1["do_sample"]) == (1, 512, 0.6, True)
    assert r1["status"] == "ok" and r1["is_error"] is False and r1["ttfa_ms"] == 900.0
    r2 = one(db, "SELECT * FROM requests WHERE request_id = 'r2'")
    assert r2["turn_index"] == 2
    assert r2["ttft_ms"] == pytest.approx(20 + 5 + 300)  # tokenize + queue + prefill
    assert r2["e2e_ms"] == pytest.approx(20 + 5 + 300 + 2000 + 3)  # sum of the measured stages
    s = one(db, "SELECT * FROM sessions")
    assert s["requests"] == 2 and s["errors"] == 0 and s["reserved_first_mb"] == 2000 and s["reserved_last_mb"] == 2200
    assert s["reserved_slope_mb_per_min"] == pytest.approx(100.0) and s["reserved_r2"] == pytest.approx(1.0)
    assert s["ghost_max_mb"] == 1200 and s["ghost_share_max"] == pytest.approx(1200 / 2200)
    # The process RSS rose 20 MB over the session's two minutes.
    assert s["rss_slope_mb_per_min"] == pytest.approx(10.0)
    assert s["tpot_p50_ms"] == pytest.approx(20.0) and s["gpu_wait_pct_p50"] == 55.0


def test_rss_slope_is_the_exact_least_squares_slope_over_the_session(tmp_path):
    import random
    from fractions import Fraction

    rnd = random.Random(3)
    lines = []
    for k in range(60):
        ts = (T0 + timedelta(seconds=30 * k)).isoformat(timespec="milliseconds") + "+00:00"
        lines.append(v1(ts, "process_sample", None, None, rss_mb=1000 + 2 * k + rnd.random()))
    lines += [v1("2026-11-23T10:05:00.000+00:00", "input", "a", "q1", input_len=3),
              v1("2026-11-23T10:20:00.000+00:00", "format", "a", "q1", duration_ms=1.0)]  # fmt: skip
    db = open_logs([str(write_lines(tmp_path / "x.jsonl", lines))], use_cache=False)
    pts = [(Fraction(k * 30, 60), Fraction(str(round(lines[k]["rss_mb"], 3)))) for k in range(10, 41)]  # 10:05..10:20
    n, sx, sy = len(pts), sum(x for x, _ in pts), sum(y for _, y in pts)
    exact = (n * sum(x * y for x, y in pts) - sx * sy) / (n * sum(x * x for x, _ in pts) - sx * sx)
    assert one(db, "SELECT rss_slope_mb_per_min FROM sessions")["rss_slope_mb_per_min"] == pytest.approx(float(exact), rel=1e-12)


def test_line_bytes_are_the_raw_line_lengths(tmp_path):
    lines = [v1("2026-11-23T10:00:00.000+00:00", "input", input_len=1),
             "\n", "   \n",  # blank lines are not events
             legacy("2026-11-23T10:00:01.000", "tokenize", duration_ms=3.0)]  # fmt: skip
    path = write_lines(tmp_path / "a.jsonl", lines)
    path.write_bytes(path.read_bytes() + "{\"v\":1,\"ts\":\"2026-11-23T10:00:02.000Z\",\"stage\":\"format\",\"x\":\"é\"}\n".encode())
    db = open_logs([str(path)], use_cache=False)
    expected = [len(raw) + 1 for raw in path.read_bytes().split(b"\n") if raw.strip()]
    got = [r["line_bytes"] for r in rows(db, "SELECT line_bytes FROM events ORDER BY ts")]
    assert got == expected
    assert db.ingest["bad_lines"] == 0 and db.ingest["bytes"] == path.stat().st_size


def test_v1_offsets_are_honoured(tmp_path):
    lines = [v1("2026-11-23T18:00:00.000+08:00", "input", "a", "q1", input_len=1),
             v1("2026-11-23T10:00:01.000Z", "format", "a", "q1", duration_ms=1.0)]  # fmt: skip
    db = open_logs([str(write_lines(tmp_path / "x.jsonl", lines))], tz="America/New_York", use_cache=False)
    got = [r["ts"].astimezone(UTC) for r in rows(db, "SELECT ts FROM events ORDER BY ts")]
    assert got == [datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC), datetime(2026, 11, 23, 10, 0, 1, tzinfo=UTC)]


# -- legacy ---------------------------------------------------------------------------------------


@pytest.fixture
def legacy_logs(tmp_path):
    lines = legacy_turn("L1", T0, reserved=4000, allocated=3000) + legacy_turn("L1", T0 + timedelta(minutes=1), 4100, 3000)
    # Two writer threads: neighbouring lines swapped in the file (order by time, not position).
    lines[5], lines[6] = lines[6], lines[5]
    # A line before the session's first input, and one of the logger's 'unknown' session.
    lines.insert(0, legacy("2026-11-23T09:59:59.000", "gpu_memory", "L2", kv_cache_size_mb=10.0, reserved_mb=20.0))
    lines.append(legacy("2026-11-23T10:05:00.000", "error", "unknown", error_type="OOMError", error_msg="Beam search OOM"))
    return write_lines(tmp_path / "legacylogs" / "ds15b_20261123.jsonl", lines, legacy_style=True).parent


def test_legacy_mapping(legacy_logs):
    db = open_logs([str(legacy_logs)], tz="Asia/Shanghai", use_cache=False)
    assert db.ingest["formats"] == {"legacy": 12} and db.ingest["bad_lines"] == 0
    ev = rows(db, "SELECT * FROM events WHERE session_id = 'L1' ORDER BY ts")
    # Naive local time in --tz: 10:00 in Shanghai is 02:00 UTC.
    assert ev[0]["ts"].astimezone(UTC) == datetime(2026, 11, 23, 2, 0, tzinfo=UTC)
    assert [e["request_id"] for e in ev] == ["L1#1"] * 5 + ["L1#2"] * 5
    assert all(e["source_format"] == "legacy" and e["host"] is None for e in ev)
    fmt = [e for e in ev if e["stage"] == "format"]
    assert all(e["duration_ms"] is None for e in fmt)  # -1 = not measured
    mem = [e for e in ev if e["stage"] == "gpu_memory"]
    assert [(m["allocated_mb"], m["kv_cache_size_mb"], m["reserved_mb"]) for m in mem] == [(3000, None, 4000), (3000, None, 4100)]
    assert one(db, "SELECT request_id FROM events WHERE session_id = 'L2'")["request_id"] is None
    r = rows(db, "SELECT * FROM requests WHERE session_id = 'L1' ORDER BY turn_index")
    assert [x["request_id"] for x in r] == ["L1#1", "L1#2"]
    assert r[0]["tpot_ms"] == pytest.approx(40.0) and r[0]["tpot_is_upper_bound"] is True
    assert r[0]["ttft_ms"] is None  # no prefill in the legacy format
    assert r[0]["e2e_ms"] == pytest.approx(15 + 4000) and r[0]["inference_ms"] == 4000
    s = one(db, "SELECT * FROM sessions WHERE session_id = 'L1'")
    assert s["reserved_slope_mb_per_min"] == pytest.approx(100.0) and s["ghost_max_mb"] == 1100
    oom = one(db, "SELECT ooms, errors FROM sessions WHERE session_id = 'unknown'")
    assert oom["ooms"] == 1


def test_legacy_default_zone_is_the_machines(legacy_logs, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    db = open_logs([str(legacy_logs)], use_cache=False)
    first = one(db, "SELECT min(ts) AS t FROM events WHERE session_id = 'L1'")["t"]
    assert first.astimezone(UTC) == datetime(2026, 11, 23, 1, 0, tzinfo=UTC)
    assert db.tz == "Asia/Tokyo"


def test_legacy_request_ids_continue_across_files(tmp_path):
    day1 = legacy_turn("L1", datetime(2026, 11, 23, 23, 58), 4000, 3000)
    day2 = legacy_turn("L1", datetime(2026, 11, 24, 0, 1), 4100, 3000)
    write_lines(tmp_path / "ds15b_20261123.jsonl", day1, legacy_style=True)
    write_lines(tmp_path / "ds15b_20261124.jsonl", day2, legacy_style=True)
    db = open_logs([str(tmp_path)], tz="UTC", use_cache=False)
    got = rows(db, "SELECT request_id, count(*) AS n FROM events GROUP BY ALL ORDER BY 1")
    assert got == [{"request_id": "L1#1", "n": 5}, {"request_id": "L1#2", "n": 5}]


def test_unknown_zone_is_a_usage_error(legacy_logs):
    with pytest.raises(UsageError, match="Mars/Olympus"):
        open_logs([str(legacy_logs)], tz="Mars/Olympus", use_cache=False)


def test_mixed_formats_in_one_run(v1_logs, legacy_logs, tmp_path):
    db = open_logs([str(v1_logs), str(legacy_logs)], tz="UTC", use_cache=False)
    assert db.ingest["formats"] == {"v1": 20, "legacy": 12} and db.ingest["files"] == 2
    by_format = {r["source_format"]: r["n"] for r in rows(db, "SELECT source_format, count(*) AS n FROM requests GROUP BY 1")}
    assert by_format == {"v1": 2, "legacy": 2}


# -- windows --------------------------------------------------------------------------------------


def _day_file(folder: Path, day: str, hour_stamps: list[str]) -> Path:
    lines = [v1(f"{day[:4]}-{day[4:6]}-{day[6:]}T{h}+00:00", "gpu_sample", None, None, gpu_util_pct=1) for h in hour_stamps]
    return write_lines(folder / f"ds15b_{day}.jsonl", lines)


def test_window_filters_events_exactly_and_prunes_far_files(tmp_path):
    _day_file(tmp_path, "20261120", ["12:00:00.000"])
    _day_file(tmp_path, "20261123", ["00:00:00.000", "11:59:59.999", "12:00:00.000", "23:59:59.999"])
    _day_file(tmp_path, "20261124", ["00:00:00.000"])
    # Far outside the window and damaged: had it been opened it would count a bad line.
    (tmp_path / "ds15b_20261101.jsonl").write_bytes(b"{broken\n")
    db = open_logs([str(tmp_path)], since="2026-11-23T12:00:00+00:00", until="2026-11-24T00:00:00+00:00", use_cache=False)
    got = [r["t"] for r in rows(db, "SELECT strftime(timezone('UTC', ts), '%d %H:%M:%S.%g') AS t FROM events ORDER BY ts")]
    assert got == ["23 12:00:00.000", "23 23:59:59.999"]  # since inclusive, until exclusive
    assert db.ingest["bad_lines"] == 0
    assert db.ingest["pruned_files"] == 2  # 20261101 and 20261120; 20261124 is within the margin
    assert db.window == {"since": "2026-11-23T12:00:00+00:00", "until": "2026-11-24T00:00:00+00:00"}
    assert db.ingest["files"] == 2


def test_relative_window_and_bad_window_text(tmp_path):
    now = datetime.now(UTC)
    lines = [v1((now - timedelta(hours=h)).isoformat(timespec="milliseconds"), "gpu_sample", None, None) for h in (1, 5, 30)]
    write_lines(tmp_path / "x.jsonl", lines)
    db = open_logs([str(tmp_path)], since="12h", use_cache=False)
    assert db.ingest["events"] == 2
    with pytest.raises(UsageError, match="--since"):
        open_logs([str(tmp_path)], since="yesterdayish", use_cache=False)


# -- inputs that are not there ----------------------------------------------------------------------


def test_missing_path_and_no_logs(tmp_path):
    with pytest.raises(InputError, match="no such file or directory") as exc:
        open_logs([str(tmp_path / "nope")], use_cache=False)
    assert str(tmp_path / "nope") in str(exc.value) and "\n" not in str(exc.value)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no log files found"):
        open_logs([str(tmp_path / "empty")], use_cache=False)


# -- session_events ---------------------------------------------------------------------------------


def test_session_events_timeline_and_jsonl(v1_logs):
    db = open_logs([str(v1_logs)], use_cache=False, materialize=False)
    timeline = session_events(db, "s1", timeline=True)
    assert [r["request_id"] for r in timeline.dicts()] == ["r1", "r2"]
    events = session_events(db, "s1", timeline=False)
    assert len(events.rows) == 16 and events.columns == EVENT_COLUMNS
    assert session_events(db, "s1' OR '1'='1", timeline=False).rows == []


# -- the sample logs shipped with the repository ------------------------------------------------------

SAMPLES = REPO / "sample_logs"


@pytest.mark.skipif(not (SAMPLES / "bad_lines").is_dir(), reason="no sample_logs/")
def test_sample_bad_lines_are_found_where_truth_says():
    truth = json.loads((SAMPLES / "bad_lines" / "truth.json").read_text(encoding="utf-8"))
    db = open_logs([str(SAMPLES / "bad_lines")], use_cache=False)
    assert db.ingest["events"] == truth["events"]
    lines = {(str(Path(b["file"])), b["line"]) for b in truth["bad_lines"] if b["kind"] != "empty_file"}
    got = {(str(Path(s["file"]).relative_to(SAMPLES / "bad_lines")), s["line"]) for s in db.ingest["bad_line_samples"]}
    assert got == lines and db.ingest["bad_lines"] == len(lines)
    empty = [b["file"] for b in truth["bad_lines"] if b["kind"] == "empty_file"]
    assert [Path(s["file"]).name for s in db.ingest["skipped"]] == [Path(e).name for e in empty]


@pytest.mark.skipif(not (SAMPLES / "seed_format").is_dir(), reason="no sample_logs/")
def test_sample_seed_format_reads_as_is():
    truth = json.loads((SAMPLES / "seed_format" / "truth.json").read_text(encoding="utf-8"))
    db = open_logs([str(SAMPLES / "seed_format")], tz="Asia/Shanghai", use_cache=False)
    assert db.ingest["events"] == truth["events"] and db.ingest["formats"] == {"legacy": truth["events"]}
    assert one(db, "SELECT count(*) AS n FROM requests")["n"] == truth["requests"]
    # Every request id is <session>#<n>, numbered 1..k without gaps within each session.
    bad = rows(db, "SELECT session_id FROM requests GROUP BY session_id "
                   "HAVING max(CAST(split_part(request_id, '#', 2) AS INT)) <> count(*)")  # fmt: skip
    assert bad == []
