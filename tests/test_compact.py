"""`dslogs compact`: hive-partitioned Parquet that reads back exactly like the JSONL it came from,
and re-runs that add only what is new (never a duplicated row)."""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import compute_metrics
from dslogs.analyzer.ingest.compact import LOCK, MANIFEST, _locked, compact_logs, load_manifest
from dslogs.analyzer.ingest.logs import open_logs, run_query
from tests.engine_compare import INGEST_KEYS, assert_same
from tests.ingest_lines import legacy_turn, v1_request, write_lines

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 23, 10, 0, 0)


def count(source, tz=None, **window) -> int:
    db = open_logs([str(source)], tz=tz, use_cache=False, **window)
    return run_query(db, "SELECT count(*) FROM events").rows[0][0]


def parquet_files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*.parquet")}


def request_ids(source, tz=None) -> list[tuple]:
    db = open_logs([str(source)], tz=tz, use_cache=False)
    sql = "SELECT session_id, request_id, stage, ts FROM events WHERE session_id IS NOT NULL ORDER BY ts, stage"
    return [tuple(r) for r in run_query(db, sql).rows]


def v1_file(path: Path, sessions: int, start: datetime = T0, host: str = "h1") -> Path:
    lines = []
    for i in range(sessions):
        for line in v1_request(f"s{i}", f"r{i}", start + timedelta(minutes=i)):
            lines.append({**line, "host": host})
    return write_lines(path, lines)


# -- reading back ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folders", "tz"),
    [(["bad_lines", "mixed"], None), (["seed_format"], "Asia/Shanghai")],
    ids=["v1-damaged-multi", "legacy-tz"],
)
def test_compacted_folder_reads_like_its_jsonl(tmp_path, folders, tz):
    logs = tmp_path / "logs"
    for name in folders:
        shutil.copytree(REPO / "sample_logs" / name, logs / name)
    summary = compact_logs([str(logs)], tmp_path / "pq", tz=tz)
    jsonl = open_logs([str(logs)], tz=tz, use_cache=False)
    parquet = open_logs([str(tmp_path / "pq")], tz=tz, use_cache=False)
    assert summary["events"] == jsonl.ingest["events"] > 0
    assert {k: jsonl.ingest[k] for k in INGEST_KEYS} == {k: parquet.ingest[k] for k in INGEST_KEYS}
    assert jsonl.ingest["bad_line_samples"] == parquet.ingest["bad_line_samples"]
    # Every metric table: the Parquet holds the events view itself (rows come back in another
    # order, so float sums may differ in the last bits).
    t = defaults()
    assert_same(compute_metrics(jsonl.con, t), compute_metrics(parquet.con, t), "metric tables")
    sql = "SELECT * FROM events ORDER BY source_file, ts, stage, request_id"
    assert run_query(jsonl, sql).rows == run_query(parquet, sql).rows


def test_layout_is_hive_partitioned_by_utc_day_and_host(tmp_path):
    v1_file(tmp_path / "logs" / "a" / "ds15b_20261123.jsonl", 2, start=datetime(2026, 11, 23, 23, 59), host="gpu 01/a")
    write_lines(tmp_path / "logs" / "b" / "ds15b_20261123.jsonl", legacy_turn("L1", T0, 10.0, 5.0), legacy_style=True)
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq", tz="UTC")
    files = parquet_files(tmp_path / "pq")
    # A request that crosses midnight UTC lands in both days; odd host names are escaped.
    assert any(f.startswith("date=2026-11-23/host=gpu%2001%2Fa/") for f in files)
    assert any(f.startswith("date=2026-11-24/host=gpu%2001%2Fa/") for f in files)
    assert any(f.startswith("date=2026-11-23/host=__HIVE_DEFAULT_PARTITION__/") for f in files)
    db = open_logs([str(tmp_path / "pq")], use_cache=False)
    hosts = {r[0] for r in run_query(db, "SELECT DISTINCT host FROM events").rows}
    assert hosts == {"gpu 01/a", None}


# -- idempotence -------------------------------------------------------------------------------


def test_rerun_adds_nothing(tmp_path):
    v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 3)
    first = compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    files, manifest = parquet_files(tmp_path / "pq"), load_manifest(tmp_path / "pq")
    second = compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    assert first["new_files"] == 1 and second["new_files"] == 0 and second["unchanged_files"] == 1
    assert second["events"] == 0
    assert parquet_files(tmp_path / "pq") == files
    assert load_manifest(tmp_path / "pq")["sources"] == manifest["sources"]
    assert count(tmp_path / "pq") == count(tmp_path / "logs")


def test_a_growing_file_is_replaced_never_duplicated(tmp_path):
    log = v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 2)
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    before = parquet_files(tmp_path / "pq")
    more = [json.dumps(line) for line in v1_request("s9", "r9", T0 + timedelta(minutes=30))]
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("\n".join(more) + "\n")
    summary = compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    assert summary["replaced_files"] == 1 and summary["new_files"] == 0
    assert count(tmp_path / "pq") == count(tmp_path / "logs") == 3 * 7
    assert not before & parquet_files(tmp_path / "pq"), "the old version's files are gone"


def test_gzip_move_and_copy_are_not_new_rows(tmp_path):
    log = v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 2)
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    files = parquet_files(tmp_path / "pq")
    # The writer closes the day and gzips it (logrotate's compress): same content.
    gz = log.with_name(log.name + ".gz")
    gz.write_bytes(gzip.compress(log.read_bytes()))
    log.unlink()
    # And someone copies it into a second folder.
    shutil.copy(gz, tmp_path / "logs" / "copy.jsonl.gz")
    summary = compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    assert summary["renamed_files"] == 1 and summary["duplicate_files"] == 1 and summary["new_files"] == 0
    assert parquet_files(tmp_path / "pq") == files
    assert count(tmp_path / "pq") == 14


def test_a_source_gone_from_disk_keeps_its_rows(tmp_path):
    v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 2)
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    (tmp_path / "logs" / "ds15b_20261123.jsonl").unlink()
    v1_file(tmp_path / "logs" / "ds15b_20261124.jsonl", 1, start=T0 + timedelta(days=1))
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    assert count(tmp_path / "pq") == 21


def test_legacy_request_ids_continue_across_files_and_runs(tmp_path):
    """A legacy session crossing midnight: ids numbered over both days, as one read of both
    files gives, although the second day was compacted by a later run."""
    logs = tmp_path / "logs"
    turns = [legacy_turn("L1", T0 + timedelta(hours=13, minutes=58 + i), 100.0 + i, 50.0) for i in range(4)]
    day1 = [line for turn in turns[:2] for line in turn]
    day2 = [line for turn in turns[2:] for line in turn]
    # The first day's file ends with the third turn's input (the rest is written after midnight).
    day1 += day2[:1]
    write_lines(logs / "ds15b_20261123.jsonl", day1, legacy_style=True)
    compact_logs([str(logs)], tmp_path / "pq", tz="Asia/Shanghai")
    write_lines(logs / "ds15b_20261124.jsonl", day2[1:], legacy_style=True)
    compact_logs([str(logs)], tmp_path / "pq", tz="Asia/Shanghai")
    expected = request_ids(logs, tz="Asia/Shanghai")
    assert {r[1] for r in expected} == {"L1#1", "L1#2", "L1#3", "L1#4"}
    assert request_ids(tmp_path / "pq", tz="Asia/Shanghai") == expected
    with pytest.raises(UsageError, match="same --tz"):
        compact_logs([str(logs)], tmp_path / "pq", tz="UTC")


# -- what readers trust ------------------------------------------------------------------------


def test_window_on_a_dataset_matches_the_jsonl(tmp_path):
    for day in range(3):
        v1_file(tmp_path / "logs" / f"ds15b_2026112{3 + day}.jsonl", 2, start=T0 + timedelta(days=day))
    compact_logs([str(tmp_path / "logs")], tmp_path / "pq")
    window = {"since": "2026-11-24T00:00:00+00:00", "until": "2026-11-25T00:00:00+00:00"}
    assert count(tmp_path / "pq", **window) == count(tmp_path / "logs", **window) == 14


def test_readers_use_the_manifest_and_reruns_clean_leftovers(tmp_path):
    v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 2)
    out = tmp_path / "pq"
    compact_logs([str(tmp_path / "logs")], out)
    (real,) = out.rglob("*.parquet")
    stray = real.with_name("part-000000000000-000000000000-0.parquet")
    shutil.copy(real, stray)  # e.g. left by a run killed between writing and the manifest
    (out / "_staging-dead").mkdir()
    assert count(out) == 14, "a file the manifest does not name is not read"
    compact_logs([str(tmp_path / "logs")], out)
    assert not stray.exists() and not (out / "_staging-dead").exists()
    assert count(out) == 14


def test_one_compaction_per_folder_at_a_time(tmp_path):
    v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 1)
    out = tmp_path / "pq"
    out.mkdir()
    with _locked(out), pytest.raises(UsageError, match="another dslogs compact"):
        compact_logs([str(tmp_path / "logs")], out)
    assert (out / LOCK).exists() and not (out / MANIFEST).exists()


def test_cli_compact_then_query_and_session(tmp_path):
    v1_file(tmp_path / "logs" / "ds15b_20261123.jsonl", 2)
    runner = CliRunner()
    r = runner.invoke(app, ["compact", str(tmp_path / "logs"), "--out", str(tmp_path / "pq")])
    assert r.exit_code == 0, r.output
    assert r.output.strip().startswith("1 new files, 14 events ->")
    r = runner.invoke(app, ["query", str(tmp_path / "pq"), "SELECT count(*) AS n FROM requests", "--format", "csv", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert r.output.split() == ["n", "2"]
    r = runner.invoke(app, ["session", str(tmp_path / "pq"), "s1", "--format", "jsonl", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 7
    r = runner.invoke(app, ["compact", str(tmp_path / "missing"), "--out", str(tmp_path / "pq")])
    assert r.exit_code == 2 and "no such file or directory" in r.output
