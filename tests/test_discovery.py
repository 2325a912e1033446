"""Which files LOGS names: recursion, rotation names, gzip, globs, name dates, window pruning."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest.discovery import (
    discover,
    discover_log_files,
    is_log_name,
    name_date,
    name_sort_key,
    outside_window,
)


def touch(path, data=b"{}\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("ds15b_20261123.jsonl", True), ("ds15b_20261123.2.jsonl", True), ("app.jsonl.1", True),
        ("ds15b_20261123.jsonl.gz", True), ("ds15b_20261123.3.jsonl.gz", True), ("app.jsonl.2.gz", True),
        ("notes.txt", False), ("x.json", False), ("x.jsonl.tmp", False), (".hidden.jsonl", False),
        ("x.jsonl.gz.part", False),
    ],
)  # fmt: skip
def test_log_names(name, ok):
    assert is_log_name(name) is ok


def test_directories_are_searched_recursively_in_write_order(tmp_path):
    for rel in ["h1/ds15b_20261124.jsonl", "h1/ds15b_20261123.1.jsonl", "h1/ds15b_20261123.jsonl.gz",
                "h1/ds15b_20261123.jsonl.x", "h2/deep/ds15b_20261123.jsonl", "h1/readme.md",
                ".git/ds15b_20261101.jsonl", "h1/.cache/ds15b_20261101.jsonl"]:  # fmt: skip
        touch(tmp_path / rel)
    names = [p.replace(str(tmp_path) + "/", "") for p in discover_log_files([str(tmp_path)])]
    assert names == ["h1/ds15b_20261123.jsonl.gz", "h1/ds15b_20261123.1.jsonl", "h1/ds15b_20261124.jsonl",
                     "h2/deep/ds15b_20261123.jsonl"]  # fmt: skip


def test_files_globs_and_duplicates(tmp_path):
    a = touch(tmp_path / "ds15b_20261123.jsonl")
    b = touch(tmp_path / "odd-name.log")  # named explicitly: read whatever its name
    found = discover([str(a), str(b), str(tmp_path / "*.jsonl"), str(tmp_path)])
    # Each file once, as first named; no date in a name sorts first.
    assert [f.display for f in found.files] == [str(b), str(a)]
    assert found.files[0].size == 3


def test_missing_paths_and_empty_folders_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"nope: no such file or directory"):
        discover([str(tmp_path / "nope")])
    with pytest.raises(InputError, match="no file matches"):
        discover([str(tmp_path / "*.jsonl")])
    touch(tmp_path / "x.txt")
    with pytest.raises(InputError, match="no log files found under"):
        discover([str(tmp_path)])


def test_name_dates_and_order():
    assert name_date("ds15b_20261123.jsonl") == date(2026, 11, 23)
    assert name_date("ds15b_20261123.2.jsonl.gz") == date(2026, 11, 23)
    assert name_date("app-2026-11-23.jsonl") == date(2026, 11, 23)
    assert name_date("app.jsonl.1") is None and name_date("ds15b_20261399.jsonl") is None
    names = ["d/ds15b_20261124.jsonl", "d/ds15b_20261123.2.jsonl", "d/ds15b_20261123.jsonl.gz",
             "d/ds15b_20261123.10.jsonl", "d/ds15b_20261123.1.jsonl.gz"]  # fmt: skip
    assert sorted(names, key=name_sort_key) == [
        "d/ds15b_20261123.jsonl.gz", "d/ds15b_20261123.1.jsonl.gz", "d/ds15b_20261123.2.jsonl",
        "d/ds15b_20261123.10.jsonl", "d/ds15b_20261124.jsonl"]  # fmt: skip
    assert sorted(["d/app.jsonl", "d/app.jsonl.1", "d/app.jsonl.2.gz"], key=name_sort_key) == [
        "d/app.jsonl.2.gz", "d/app.jsonl.1", "d/app.jsonl"]  # logrotate: .2 is the oldest


def test_window_pruning_keeps_a_day_of_margin():
    day = date(2026, 11, 23)
    at = lambda text: datetime.fromisoformat(text).astimezone(UTC)  # noqa: E731
    # A writer at UTC+14 starts the 23rd at 22-10:00 UTC; at UTC-12 the 23rd ends 25-00:00 UTC.
    assert not outside_window(day, at("2026-11-24T23:59:00+00:00"), None)
    assert outside_window(day, at("2026-11-25T00:00:00+00:00"), None)
    assert not outside_window(day, None, at("2026-11-22T00:00:01+00:00"))
    assert outside_window(day, None, at("2026-11-22T00:00:00+00:00"))
    assert not outside_window(None, at("2030-01-01T00:00:00+00:00"), None)  # no date in the name: read


def test_discover_prunes_by_name_date(tmp_path):
    for d in ("20261120", "20261122", "20261123", "20261126"):
        touch(tmp_path / f"ds15b_{d}.jsonl")
    touch(tmp_path / "app.jsonl.1")
    found = discover([str(tmp_path)], since=datetime(2026, 11, 23, tzinfo=UTC), until=datetime(2026, 11, 24, tzinfo=UTC))
    assert sorted(f.path.name for f in found.files) == ["app.jsonl.1", "ds15b_20261122.jsonl", "ds15b_20261123.jsonl"]
    assert sorted(f.path.name for f in found.pruned) == ["ds15b_20261120.jsonl", "ds15b_20261126.jsonl"]
    assert found.skipped_files == 2


def test_only_pruned_files_is_not_an_error(tmp_path):
    touch(tmp_path / "ds15b_20200101.jsonl")
    found = discover([str(tmp_path)], since=datetime(2026, 1, 1, tzinfo=UTC))
    assert found.files == [] and len(found.pruned) == 1
