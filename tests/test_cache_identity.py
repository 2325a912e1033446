"""The cache replaces only its own files, and file identity never claims "same content"
falsely."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys

import duckdb
import pytest

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.ingest.cache import fingerprint
from dslogs.analyzer.ingest.logs import open_logs
from tests.ingest_lines import dumps, v1, write_lines

DSLOGS = [sys.executable, "-m", "dslogs"]
GOOD = [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "gpu_sample", None, None, gpu_util_pct=float(s)) for s in range(6)]


@pytest.fixture
def logs(tmp_path):
    return write_lines(tmp_path / "logs" / "ds15b_20261123.jsonl", GOOD).parent


def _foreign_duckdb(path):
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE invoices AS SELECT 42 AS amount")
    con.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_text("my notes\nkeep them\n", encoding="utf-8"),
        lambda p: p.write_bytes(b"<html>a report</html>" * 1000),
        lambda p: p.write_bytes(dumps(GOOD[0]).encode() + b"\n"),  # a log renamed
        lambda p: p.write_bytes(b"\x00" * 5000),
        _foreign_duckdb,
    ],
    ids=["notes", "report", "log", "zeros", "other-duckdb"],
)
def test_cache_path_at_a_foreign_file_is_exit_2_and_the_file_is_untouched(tmp_path, logs, make):
    target = tmp_path / "precious.log"
    make(target)
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    siblings = sorted(os.listdir(tmp_path))
    with pytest.raises(UsageError, match="not a dslogs cache; refusing to replace it"):
        open_logs([str(logs)], cache=target)
    r = subprocess.run([*DSLOGS, "analyze", str(logs), "--cache", str(target), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not a dslogs cache" in r.stderr
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before
    assert sorted(os.listdir(tmp_path)) == siblings  # no .wal left beside it


def test_a_jsonl_as_cache_is_one_line(tmp_path, logs):
    target = logs / "ds15b_20261123.jsonl"
    before = target.read_bytes()
    r = subprocess.run([*DSLOGS, "query", str(logs), "SELECT 1", "--cache", str(target)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert target.read_bytes() == before


def test_a_folder_as_cache_is_one_line(tmp_path, logs):
    with pytest.raises(UsageError, match="not a regular file"):
        open_logs([str(logs)], cache=tmp_path)


def test_an_own_cache_of_another_version_is_rebuilt(tmp_path, logs):
    target = tmp_path / "c.duckdb"
    open_logs([str(logs)], cache=target).close()
    con = duckdb.connect(str(target))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.close()
    with open_logs([str(logs)], cache=target) as db:
        assert db.ingest["read_files"] == 1 and db.ingest["events"] == 6


def test_a_new_and_an_empty_cache_file_are_used(tmp_path, logs):
    with open_logs([str(logs)], cache=tmp_path / "new.duckdb") as db:
        assert db.ingest["cache"] == str(tmp_path / "new.duckdb")
    (tmp_path / "empty.duckdb").write_bytes(b"")
    with open_logs([str(logs)], cache=tmp_path / "empty.duckdb") as db:
        assert db.ingest["events"] == 6


def _twins(tmp_path, gz: bool = False):
    """Two different logs with the same size and the same first 64 KiB."""
    head = b"".join(dumps(v1(f"2026-11-23T10:{m:02d}:{s:02d}.000+00:00", "gpu_sample", None, None,
                             gpu_util_pct=1.0)).encode() + b"\n" for m in range(10) for s in range(60))
    assert len(head) > 64 << 10
    a = head + dumps(v1("2026-11-23T11:00:00.000+00:00", "gpu_sample", None, None, gpu_util_pct=11.0)).encode() + b"\n"
    b = head + dumps(v1("2026-11-23T11:00:00.000+00:00", "gpu_sample", None, None, gpu_util_pct=22.0)).encode() + b"\n"
    assert len(a) == len(b) and a != b
    pa, pb = tmp_path / "a" / "ds15b_20261123.jsonl", tmp_path / "b" / "ds15b_20261123.jsonl"
    for p, data in ((pa, a), (pb, b)):
        p.parent.mkdir(parents=True, exist_ok=True)
        if gz:
            p = p.with_name(p.name + ".gz")
            data = gzip.compress(data)
        p.write_bytes(data)
    return tmp_path, len(head.splitlines()) + 1


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("use_cache", [True, False])
def test_same_size_and_head_is_not_same_content(tmp_path, gz, use_cache):
    root, per_file = _twins(tmp_path, gz)
    kw = {"cache": tmp_path / "c.duckdb"} if use_cache else {"use_cache": False}
    with open_logs([str(root / "a"), str(root / "b")], **kw) as db:
        assert db.ingest["duplicate_files"] == 0 and db.ingest["events"] == 2 * per_file
    files = sorted(root.glob("*/*.jsonl*"))
    assert fingerprint(files[0]) != fingerprint(files[1])


def test_a_gzipped_copy_still_has_the_plain_files_identity(tmp_path):
    plain = write_lines(tmp_path / "ds15b_20261123.jsonl", GOOD)
    gz = tmp_path / "ds15b_20261123.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert fingerprint(plain) == fingerprint(gz) is not None
    with open_logs([str(tmp_path)], cache=tmp_path / "c.duckdb") as db:
        assert db.ingest["duplicate_files"] == 1 and db.ingest["events"] == 6
    with open_logs([str(tmp_path)], use_cache=False) as db:  # --no-cache never skips a file
        assert db.ingest["duplicate_files"] == 0 and db.ingest["events"] == 12


@pytest.mark.parametrize("use_cache", [True, False])
def test_gz_corrupted_in_its_first_64_kib_is_counted_not_a_traceback(tmp_path, use_cache):
    body = b"".join(dumps(GOOD[k % 6]).encode() + b"\n" for k in range(3000))
    blob = bytearray(gzip.compress(body))
    for i in range(30, 60):
        blob[i] ^= 0xFF
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ds15b_20261122.jsonl.gz").write_bytes(bytes(blob))
    write_lines(tmp_path / "logs" / "ds15b_20261123.jsonl", GOOD[:2])
    assert fingerprint(tmp_path / "logs" / "ds15b_20261122.jsonl.gz") is None
    args = ["--cache", str(tmp_path / "c.duckdb")] if use_cache else ["--no-cache"]
    r = subprocess.run([*DSLOGS, "query", str(tmp_path / "logs"), "SELECT count(*) FROM events", "--format", "csv", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert int(r.stdout.splitlines()[1]) >= 2
