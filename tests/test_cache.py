"""The persistent cache: reuse, growth, rotation, gzip, schema version, a lock held elsewhere."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.ingest import cache as cache_mod
from dslogs.analyzer.ingest.logs import open_logs, run_query
from tests.ingest_lines import legacy_turn, v1_request, write_lines

T0 = datetime(2026, 11, 23, 10, 0, 0)


def day_lines(day: int, requests: int = 3) -> list[dict]:
    out = []
    for k in range(requests):
        out += v1_request(f"s{day}", f"r{day}-{k}", T0 + timedelta(days=day, minutes=k))
    return out


@pytest.fixture
def logs(tmp_path):
    folder = tmp_path / "logs"
    write_lines(folder / "ds15b_20261123.jsonl", day_lines(0))
    write_lines(folder / "ds15b_20261124.jsonl", day_lines(1))
    return folder


@pytest.fixture
def cache_file(tmp_path):
    return tmp_path / "cache" / "c.duckdb"


def counts(db):
    return run_query(db, "SELECT count(*), count(DISTINCT request_id) FROM events").rows[0]


def open_cached(logs, cache_file, **kw):
    db = open_logs([str(logs)], cache=cache_file, **kw)
    db.close()  # the cache is released between runs, as between two CLI calls
    return db


def test_second_run_reads_nothing_and_gives_the_same_answers(logs, cache_file):
    first = open_logs([str(logs)], cache=cache_file)
    assert first.ingest["read_files"] == 2 and first.ingest["cache"] == str(cache_file)
    before = counts(first), run_query(first, "SELECT * FROM requests ORDER BY request_id").rows
    first.close()
    assert cache_file.is_file()
    second = open_logs([str(logs)], cache=cache_file)
    assert second.ingest["read_files"] == 0 and second.ingest["cached_files"] == 2
    assert (counts(second), run_query(second, "SELECT * FROM requests ORDER BY request_id").rows) == before
    second.close()


def test_the_cache_is_read_only_to_user_sql(logs, cache_file):
    db = open_logs([str(logs)], cache=cache_file)
    with pytest.raises(Exception, match="read-only|read only"):
        run_query(db, "DELETE FROM dslogs_cache.events")
    db.close()


def test_a_growing_file_is_read_again_and_not_counted_twice(logs, cache_file):
    open_cached(logs, cache_file)
    today = logs / "ds15b_20261124.jsonl"
    with open(today, "ab") as fh:
        fh.write(write_lines(logs.parent / "extra.tmp", day_lines(1, 5)[-7:]).read_bytes())
    os.utime(today, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    db = open_logs([str(logs)], cache=cache_file)
    assert db.ingest["read_files"] == 1 and db.ingest["cached_files"] == 1
    assert counts(db) == (7 * 3 + 7 * 4, 7)
    db.close()


def test_a_new_file_costs_only_its_own_read(logs, cache_file):
    open_cached(logs, cache_file)
    write_lines(logs / "ds15b_20261125.jsonl", day_lines(2))
    db = open_logs([str(logs)], cache=cache_file)
    assert db.ingest["read_files"] == 1 and db.ingest["files"] == 3 and counts(db) == (63, 9)
    db.close()


def test_rotation_rename_is_not_counted_twice(logs, cache_file):
    open_cached(logs, cache_file)
    # logrotate: the file moves to .1 and a new one starts under the old name.
    old = logs / "ds15b_20261124.jsonl"
    old.rename(logs / "ds15b_20261124.jsonl.1")
    write_lines(old, day_lines(3, 1))
    db = open_logs([str(logs)], cache=cache_file)
    assert db.ingest["renamed_files"] == 1 and db.ingest["read_files"] == 1
    assert counts(db) == (7 * 7, 7)
    assert sorted({Path(p).name for (p,) in run_query(db, "SELECT DISTINCT source_file FROM events").rows}) == [
        "ds15b_20261123.jsonl", "ds15b_20261124.jsonl", "ds15b_20261124.jsonl.1"]  # fmt: skip
    db.close()


def test_gzipped_closed_file_is_not_counted_twice(logs, cache_file):
    open_cached(logs, cache_file)
    plain = logs / "ds15b_20261123.jsonl"
    gz = logs / "ds15b_20261123.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    # gzip -k: both copies present for a while; then the plain one is removed.
    db = open_logs([str(logs)], cache=cache_file)
    assert counts(db) == (42, 6) and db.ingest["duplicate_files"] == 1
    db.close()
    plain.unlink()
    db = open_logs([str(logs)], cache=cache_file)
    assert counts(db) == (42, 6) and db.ingest["read_files"] == 0 and db.ingest["duplicate_files"] == 0
    assert any(p.endswith(".jsonl.gz") for (p,) in run_query(db, "SELECT DISTINCT source_file FROM events").rows)
    db.close()


def test_a_deleted_file_leaves_the_cache(logs, cache_file):
    open_cached(logs, cache_file)
    (logs / "ds15b_20261123.jsonl").unlink()
    db = open_logs([str(logs)], cache=cache_file)
    assert counts(db) == (21, 3)
    db.close()
    con = duckdb.connect(str(cache_file), read_only=True)
    assert con.execute("SELECT count(*) FROM files").fetchall() == [(1,)]
    con.close()


def test_schema_version_mismatch_rebuilds(logs, cache_file):
    open_cached(logs, cache_file)
    con = duckdb.connect(str(cache_file))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.close()
    db = open_logs([str(logs)], cache=cache_file)
    assert db.ingest["read_files"] == 2 and counts(db) == (42, 6)
    db.close()


def test_a_file_that_is_not_a_cache_is_replaced_only_in_the_default_location(logs, tmp_path, monkeypatch):
    # --cache PATH at a foreign file is refused (tests/test_cache_identity.py); dslogs' own
    # folder holds only its caches, so a damaged one there is rebuilt.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    from dslogs.analyzer.ingest.cache import default_cache_path
    from dslogs.analyzer.ingest.discovery import discover

    default = default_cache_path([f.path for f in discover([str(logs)]).files])
    default.parent.mkdir(parents=True)
    default.write_bytes(b"not a database" * 100)
    db = open_logs([str(logs)])
    assert db.ingest["read_files"] == 2 and db.ingest["cache"] == str(default)
    db.close()


def test_legacy_files_are_read_again_under_another_zone(tmp_path, cache_file):
    path = write_lines(tmp_path / "ds15b_20261123.jsonl", legacy_turn("L", T0, 10, 5), legacy_style=True)
    first = open_logs([str(path)], cache=cache_file, tz="UTC")
    t_utc = run_query(first, "SELECT min(ts) FROM events").rows[0][0]
    first.close()
    second = open_logs([str(path)], cache=cache_file, tz="Asia/Shanghai")
    assert second.ingest["read_files"] == 1
    assert (t_utc - run_query(second, "SELECT min(ts) FROM events").rows[0][0]) == timedelta(hours=8)
    second.close()


HOLD = """
import duckdb, sys
read_only = len(sys.argv) > 2
con = duckdb.connect(sys.argv[1], read_only=read_only)
if not read_only:
    con.execute("CREATE TABLE IF NOT EXISTS held (x INT)")
print("ready", flush=True)
sys.stdin.read()
"""


def hold(cache_file, *extra):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(cache_file), *extra], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "ready"
    return holder


def release(holder):
    holder.stdin.close()
    holder.wait(timeout=30)


def test_a_cache_locked_by_another_process_gives_a_cacheless_run(logs, cache_file, capfd):
    cache_file.parent.mkdir(parents=True)
    holder = hold(cache_file)
    try:
        db = open_logs([str(logs)], cache=cache_file)
        assert db.ingest["cache"] is None and counts(db) == (42, 6)
        db.close()
        err = capfd.readouterr().err
        assert "in use by another dslogs process" in err and str(cache_file) in err
        assert err.count("\n") == 1
    finally:
        release(holder)


def test_a_cache_another_process_only_reads_is_used_read_only(logs, cache_file, capfd):
    open_cached(logs, cache_file)
    holder = hold(cache_file, "read-only")
    try:
        db = open_logs([str(logs)], cache=cache_file)
        assert db.ingest["cache"] == str(cache_file) and db.ingest["read_files"] == 0 and counts(db) == (42, 6)
        db.close()
        assert capfd.readouterr().err == ""
        # It cannot take a new file in while the other process reads: a cache-less run.
        write_lines(logs / "ds15b_20261125.jsonl", day_lines(2))
        db = open_logs([str(logs)], cache=cache_file)
        assert db.ingest["cache"] is None and counts(db) == (63, 9)
        db.close()
        assert "in use by another dslogs process" in capfd.readouterr().err
    finally:
        release(holder)


def test_no_cache_writes_nothing(logs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    db = open_logs([str(logs)], use_cache=False)
    assert db.ingest["cache"] is None
    assert not (tmp_path / "xdg").exists()
    db.close()


def test_default_cache_lives_under_the_user_cache_dir_not_the_logs(logs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    db = open_logs([str(logs)])
    path = Path(db.ingest["cache"])
    db.close()
    assert path.parent == tmp_path / "xdg" / "dslogs" and path.name.startswith("logs-")
    assert sorted(p.name for p in logs.iterdir()) == ["ds15b_20261123.jsonl", "ds15b_20261124.jsonl"]
    # The same folder named another way finds the same cache.
    assert cache_mod.default_cache_path([logs / "ds15b_20261123.jsonl"]) == path


def test_cached_requests_and_sessions_follow_the_file_set(logs, cache_file):
    for _ in range(3):
        db = open_logs([str(logs)], cache=cache_file, materialize=False)
        assert run_query(db, "SELECT count(*) FROM requests").rows == [(6,)]
        assert run_query(db, "SELECT sum(requests) FROM sessions").rows == [(6,)]
        db.close()
    # One day only: the cached tables are for two days, so they are not used.
    db = open_logs([str(logs / "ds15b_20261124.jsonl")], cache=cache_file)
    assert run_query(db, "SELECT count(*) FROM requests").rows == [(3,)]
    db.close()
    db = open_logs([str(logs)], cache=cache_file, since="2026-11-24T00:00:00+00:00")
    assert run_query(db, "SELECT count(*) FROM requests").rows == [(3,)]
    db.close()


def test_fingerprint_is_the_same_plain_and_gzipped(tmp_path):
    plain = write_lines(tmp_path / "a.jsonl", day_lines(0))
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert cache_mod.fingerprint(plain) == cache_mod.fingerprint(gz) is not None
    other = write_lines(tmp_path / "b.jsonl", day_lines(1))
    assert cache_mod.fingerprint(other) != cache_mod.fingerprint(plain)


def test_a_replaced_newest_file_does_not_reuse_stale_requests(logs, cache_file):
    for _ in range(2):
        open_cached(logs, cache_file, materialize=False)  # the second run stores requests/sessions
    newest = logs / "ds15b_20261124.jsonl"
    newest.unlink()
    open_cached(logs, cache_file, materialize=False)  # drops the file's rows
    write_lines(logs / "ds15b_20261125.jsonl", day_lines(2, 1))  # a later run: a new file, a new id
    db = open_logs([str(logs)], cache=cache_file, materialize=False)
    assert sorted(r for (r,) in run_query(db, "SELECT request_id FROM requests").rows) == [
        "r0-0", "r0-1", "r0-2", "r2-0"]  # fmt: skip
    db.close()


def test_a_change_to_the_event_columns_comes_with_a_new_cache_version():
    """A cache filled before a column was added has events without it: reading it fails (a
    BinderException on a column the views select) unless SCHEMA_VERSION moves with the columns,
    which makes every older cache rebuild. Change both together, and this digest with them."""
    import hashlib

    from dslogs.analyzer.ingest.cache import SCHEMA_VERSION
    from dslogs.analyzer.ingest.columns import EVENT_TYPES

    digest = hashlib.sha1(repr(sorted(EVENT_TYPES.items())).encode()).hexdigest()[:12]
    assert (SCHEMA_VERSION, digest) == (9, "755625e10ec3")
