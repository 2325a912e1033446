"""The fast path reads a large file in a statement of its own (read_json and read_csv pair
rows by position, and DuckDB shifts one side over many large files), several statements at
once; small files share one. The stored rows are those of a one-at-a-time read."""

from __future__ import annotations

import gzip
import zlib
from types import SimpleNamespace

import pytest

from dslogs.analyzer.ingest import reader
from dslogs.analyzer.ingest.logs import open_logs, run_query
from dslogs.analyzer.ingest.reader import Reader
from tests.ingest_lines import dumps, v1


def day_file(folder, day: int, n: int, gz: bool, extra: bytes = b"") -> tuple:
    lines = [
        dumps(v1(f"2026-11-{day:02d}T10:{k // 60:02d}:{k % 60:02d}.{k % 1000:03d}+00:00", "gpu_sample",
                 None, None, gpu_util_pct=float(k), host="h" * (k % 7))).encode() + b"\n"
        for k in range(n)
    ]  # fmt: skip
    body = b"".join(lines) + extra
    path = folder / f"ds15b_202611{day:02d}.jsonl{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(body) if gz else body)
    return path, body


def counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = Reader._insert

    def counting(self, loads, lenient=False):
        calls.append(len(loads))
        return real(self, loads, lenient)

    monkeypatch.setattr(Reader, "_insert", counting)
    return calls


def table(db) -> list[tuple]:
    return run_query(db, "SELECT source_file, ts, gpu_util_pct, host, line_bytes FROM events "
                         "ORDER BY source_file, ts").rows  # fmt: skip


def test_large_files_are_read_once_each_with_exact_line_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "GROUP_BYTES", 1)  # every file is "large"
    files = [day_file(tmp_path, d, 300 + d, gz=d % 2 == 0) for d in range(20, 27)]
    calls = counted(monkeypatch)
    db = open_logs([str(tmp_path)], use_cache=False)
    assert calls == [1] * 7  # one statement per file, none read twice
    assert (
        db.ingest["events"] == sum(300 + d for d in range(20, 27)) and db.ingest["bad_lines"] == 0
    )
    per_file = dict(
        run_query(db, "SELECT source_file, sum(line_bytes) FROM events GROUP BY 1").rows
    )
    assert per_file == {str(p): len(body) for p, body in files}
    parallel = table(db)
    db.close()
    monkeypatch.setattr(reader, "MAX_READERS", 1)
    with open_logs([str(tmp_path)], use_cache=False) as one:
        assert table(one) == parallel


def test_small_files_share_one_statement(tmp_path, monkeypatch):
    for d in range(20, 26):
        day_file(tmp_path, d, 20, gz=d % 2 == 0)
    calls = counted(monkeypatch)
    with open_logs([str(tmp_path)], use_cache=False) as db:
        assert db.ingest["events"] == 120
    assert calls == [6]


@pytest.mark.parametrize("group_bytes", [1, 16 << 20])
def test_a_damaged_file_among_others_costs_its_own_lines(tmp_path, monkeypatch, group_bytes):
    monkeypatch.setattr(reader, "GROUP_BYTES", group_bytes)
    for d in range(20, 25):
        day_file(tmp_path, d, 50, gz=d % 2 == 0, extra=b"{not json\n" if d == 22 else b"")
    with open_logs([str(tmp_path)], use_cache=False) as db:
        assert db.ingest["events"] == 250 and db.ingest["bad_lines"] == 1
        assert [s["line"] for s in db.ingest["bad_line_samples"]] == [51]
        assert run_query(db, "SELECT count(*) FROM events WHERE line_bytes IS NULL").rows == [(0,)]


def test_a_gz_is_inflated_once_and_read_plain(tmp_path, monkeypatch):
    from pathlib import Path

    _, body = day_file(tmp_path, 20, 40, gz=True)
    second = body.replace(b"2026-11-20", b"2026-11-21")
    path = tmp_path / "ds15b_20261120.jsonl.gz"
    path.write_bytes(gzip.compress(body) + gzip.compress(second))  # two members: `cat a.gz b.gz`
    seen: list[str] = []
    real = Reader._insert
    monkeypatch.setattr(Reader, "_insert", lambda self, loads, lenient=False: (
        seen.extend(p for p, _ in loads), real(self, loads, lenient))[1])  # fmt: skip
    with open_logs([str(path)], use_cache=False) as db:
        assert db.ingest["events"] == 80 and db.ingest["bad_lines"] == 0
        total = run_query(db, "SELECT sum(line_bytes) FROM events").rows[0][0]
        assert total == len(body) + len(second)
        assert [Path(p).name for p in seen] == [f"plain-{1}.jsonl"]  # one statement, plain
        assert not list(Path(db._tmp.name).glob("plain-*"))  # and gone once read


@pytest.mark.parametrize("tail", [b"\0\0\0\0", b"garbage", b"\x1f\x8b\x08"])
def test_a_gz_with_bytes_after_its_members_is_read_as_before(tmp_path, tail):
    _, body = day_file(tmp_path, 20, 40, gz=True)
    path = tmp_path / "ds15b_20261120.jsonl.gz"
    path.write_bytes(gzip.compress(body) + tail)
    with open_logs([str(path)], use_cache=False) as db:
        assert db.ingest["events"] == 40
        assert run_query(db, "SELECT sum(line_bytes) FROM events").rows[0][0] == len(body)


def test_a_gz_too_large_to_copy_is_read_as_it_is_without_inflating_it(tmp_path, monkeypatch):
    path, body = day_file(tmp_path, 20, 40, gz=True)
    monkeypatch.setattr(reader, "PLAIN_MAX_BYTES", len(body) - 1)
    # the trailer says so: the copy is not tried. Only the reader's own zlib goes, so the
    # format sniff still inflates the file's first bytes to see what it holds.
    monkeypatch.setattr(reader, "zlib", SimpleNamespace(decompressobj=None, error=zlib.error))
    seen: list[str] = []
    real = Reader._insert
    monkeypatch.setattr(Reader, "_insert", lambda self, loads, lenient=False: (
        seen.extend(p for p, _ in loads), real(self, loads, lenient))[1])  # fmt: skip
    with open_logs([str(path)], use_cache=False) as db:
        assert db.ingest["events"] == 40 and db.ingest["bad_lines"] == 0
        assert run_query(db, "SELECT sum(line_bytes) FROM events").rows[0][0] == len(body)
    assert seen == [str(path.resolve())]
