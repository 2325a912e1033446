"""Damaged input costs exactly its own lines: each bad line named by file and
line with the right reason, judged the way DuckDB reads it, and no good line lost; the slow
path costs one pass plus work per damaged line (no blind retries)."""

from __future__ import annotations

import json

import pytest

from dslogs.analyzer.ingest.logs import open_logs, run_query
from dslogs.analyzer.ingest.reader import Reader
from tests.ingest_lines import dumps, v1

N = 30


def good(k: int) -> bytes:
    return dumps(v1(f"2026-11-23T10:{k // 60:02d}:{k % 60:02d}.000+00:00", "gpu_sample", None, None,
                    gpu_util_pct=float(k))).encode() + b"\n"


def line(ts="2026-11-23T11:00:00.000+00:00", **fields) -> bytes:
    obj = {"v": 1, "ts": ts, "stage": "gpu_sample", "gpu_util_pct": 99.0, **fields}
    return json.dumps(obj).encode() + b"\n"


def read_file(tmp_path, body: bytes):
    path = tmp_path / "ds15b_20261123.jsonl"
    path.write_bytes(body)
    db = open_logs([str(path)], use_cache=False)
    return db, path


def samples(db):
    return [(s["line"], s["reason"]) for s in db.ingest["bad_line_samples"]]


def with_bad(bads: dict[int, bytes], n: int = N) -> bytes:
    return b"".join(bads.get(k, good(k)) for k in range(1, n + 1))


@pytest.mark.parametrize("ts", ["2026-W48-1", "20261123T100000", "2026-11-23x10:00", "2026-11-23T10Z",
                                "2026-11-23T10:00:00 Asia/Tokyo", "0001-01-01 00:00:00 BC"])
def test_a_time_python_reads_but_duckdb_does_not_costs_only_its_line(tmp_path, ts):
    db, path = read_file(tmp_path, with_bad({7: line(ts=ts)}))
    assert db.ingest["events"] == N - 1 and db.ingest["bad_lines"] == 1
    assert samples(db) == [(7, f"unreadable time: ts={json.dumps(ts) if len(ts) <= 16 else f'<text of {len(ts)} characters>'}")]
    assert db.ingest["bad_line_samples"][0]["file"] == str(path)
    util = [r[0] for r in run_query(db, "SELECT gpu_util_pct FROM events ORDER BY ts").rows]
    assert util == [float(k) for k in range(1, N + 1) if k != 7]


@pytest.mark.parametrize("ts", ["2026-11-23T24:00:00Z", "epoch", "infinity", "2026-11-23 10:00:00+08"])
def test_a_time_duckdb_reads_is_kept_even_in_a_damaged_file(tmp_path, ts):
    db, _ = read_file(tmp_path, with_bad({3: b"{garbage\n", 9: line(ts=ts)}))
    assert db.ingest["events"] == N - 1 and samples(db) == [(3, samples(db)[0][1])]
    assert samples(db)[0][1].startswith("malformed JSON")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","stage":"b"}\n', "duplicate key: stage"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","ts":"2026-11-23T11:00:00Z"}\n', "duplicate key: ts"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","params":{"num_beams":1,"num_beams":2}}\n', "duplicate key: params.num_beams"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","pid":"1.5"}\n', "wrong value type: pid"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","pid":1e19}\n', "wrong value type: pid"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","duration_ms":"0x10"}\n', "wrong value type: duration_ms"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","params":{"do_sample":"1"}}\n', "wrong value type: params.do_sample"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","params":[1]}\n', "wrong value type: params"),
        (b'{"v":1,"ts":2026,"stage":"a"}\n', "unreadable time: ts=2026"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","error_msg":"\\ud800"}\n', "malformed JSON"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a\rb"}\n', "malformed JSON"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z"}\n', "no stage"),
        # DuckDB reads it, but an infinity is no measurement (rule 9)
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","duration_ms":"inf"}\n', "not a finite number"),
        (b'{"v":1,"stage":"a"}\n', "no ts"),
        (b'5\n', "not a JSON object"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"\xff"}\n', "invalid UTF-8"),
        (b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","x":' + b"[" * 1000 + b"\n", "malformed JSON"),
    ],
)
def test_each_reason_is_named_on_its_own_line(tmp_path, bad, reason):
    db, _ = read_file(tmp_path, with_bad({11: bad}))
    assert db.ingest["events"] == N - 1, samples(db)
    ((no, why),) = samples(db)
    assert no == 11 and why.startswith(reason), why


@pytest.mark.parametrize(
    "ok",
    [
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","q":1,"q":2}\n',  # duplicate of a field not read
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","pid":1.5}\n',
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","params":{"do_sample":"yes"}}\n',
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":5}\n',
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","pid":true}\n',
        b'{"v":1,"ts":"2026-11-23T11:00:00Z",\r"stage":"a"}\n',  # a bare CR between tokens
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","x":' + b"[" * 1000 + b"]" * 1000 + b"}\n",
        b'{"v":1,"ts":"2026-11-23T11:00:00Z","stage":"a","x":' + b"[" * 100000 + b"]" * 100000 + b"}\n",
    ],
)
def test_lines_duckdb_reads_are_kept_even_next_to_damage(tmp_path, ok):
    db, _ = read_file(tmp_path, with_bad({4: b"{oops\n", 11: ok}))
    assert samples(db) == [(4, samples(db)[0][1])] and db.ingest["events"] == N - 1


def test_mixed_crlf_and_lf_with_a_damaged_line_keeps_line_lengths(tmp_path):
    parts = []
    for k in range(1, N + 1):
        raw = good(k)
        parts.append(raw[:-1] + b"\r\n" if k % 2 else raw)
    parts[14] = b"{damaged\r\n"
    db, _ = read_file(tmp_path, b"".join(parts))
    assert samples(db) == [(15, samples(db)[0][1])] and db.ingest["events"] == N - 1
    got = run_query(db, "SELECT gpu_util_pct, line_bytes FROM events ORDER BY ts").rows
    assert [(int(u), n) for u, n in got] == [(k, len(parts[k - 1])) for k in range(1, N + 1) if k != 15]


def test_many_bad_values_are_all_named_and_no_good_line_is_lost(tmp_path):
    # More bad lines than the old 20 retries, of the kind only DuckDB judges.
    bads = {k: line(ts="2026-W48-1") if k % 2 else line(pid="1.5") for k in range(5, 200, 4)}
    db, _ = read_file(tmp_path, with_bad(bads, n=300))
    assert db.ingest["bad_lines"] == len(bads) and db.ingest["events"] == 300 - len(bads)
    assert [no for no, _ in samples(db)] == sorted(bads)[:5]
    util = {int(r[0]) for r in run_query(db, "SELECT gpu_util_pct FROM events").rows}
    assert util == set(range(1, 301)) - set(bads)


def test_slow_path_reads_the_file_a_bounded_number_of_times(tmp_path, monkeypatch):
    calls = []
    real = Reader._insert

    def counting(self, loads, lenient=False):
        calls.append(lenient)
        return real(self, loads, lenient)

    monkeypatch.setattr(Reader, "_insert", counting)
    bads = {k: line(ts="2026-W48-1") for k in range(10, 2000, 50)}
    db, _ = read_file(tmp_path, with_bad(bads, n=2000))
    assert db.ingest["bad_lines"] == len(bads) and db.ingest["events"] == 2000 - len(bads)
    # the whole file (fails), its one chunk as it is (fails), the chunk's good lines: never
    # one read per bad line
    assert calls == [False, False, False]


def test_damage_in_one_chunk_leaves_the_other_chunks_one_read_each(tmp_path, monkeypatch):
    from dslogs.analyzer.ingest import validate

    monkeypatch.setattr(validate, "CHUNK_LINES", 100)
    calls = []
    real = Reader._insert
    monkeypatch.setattr(Reader, "_insert", lambda self, loads, lenient=False: (calls.append(1), real(self, loads, lenient))[1])
    db, _ = read_file(tmp_path, with_bad({150: line(ts="2026-W48-1"), 160: b"{bad\n"}, n=500))
    assert samples(db)[0][0] == 150 and [n for n, _ in samples(db)] == [150, 160]
    assert db.ingest["events"] == 498
    assert len(calls) == 1 + 5 + 1  # the file, five chunks, the damaged chunk's good lines
