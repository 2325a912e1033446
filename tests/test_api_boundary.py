"""The Python API shared between threads, and its arguments checked where they come in.

Four threads reading through one ``dslogs.open()`` object each get their own rows (the object
orders its uses of the one DuckDB connection); ``since``/``until`` take text, a ``datetime``, a
``date`` or a ``timedelta``, and a value of another type is one ``UsageError`` line naming the
argument, not an AttributeError from deep inside.
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("pandas")

import dslogs  # noqa: E402
from dslogs.analyzer.core.errors import UsageError  # noqa: E402
from tests.ingest_lines import v1_request, write_lines  # noqa: E402

SESSIONS = [f"sess-{k}" for k in range(4)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("apilogs")
    lines = []
    t0 = datetime(2026, 11, 23, 10)
    for k, sid in enumerate(SESSIONS):
        for i in range(k + 2):  # a different number of requests per session
            lines += v1_request(sid, f"{sid}-r{i}", t0 + timedelta(minutes=10 * k + i))
    write_lines(root / "ds15b_20261123.jsonl", lines)
    return root


def test_four_threads_sharing_one_object_get_their_own_rows(logs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    opened = dslogs.open(str(logs))
    errors: list[str] = []
    start = threading.Barrier(len(SESSIONS))

    def reader(k: int, sid: str) -> None:
        try:
            start.wait()
            for _ in range(15):
                rows = opened.query("SELECT session_id, request_id FROM requests WHERE session_id = $s", s=sid)
                if len(rows) != k + 2 or set(rows["session_id"]) != {sid}:
                    errors.append(f"{sid}: query gave {rows.to_dict('records')}")
                timeline = opened.session(sid, timeline=True)
                if len(timeline) != k + 2:
                    errors.append(f"{sid}: session gave {len(timeline)} rows")
                if len(opened.requests) != sum(j + 2 for j in range(len(SESSIONS))):
                    errors.append(f"{sid}: requests view had {len(opened.requests)} rows")
        except Exception as exc:  # any exception in a thread is a failure of the test
            errors.append(f"{sid}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reader, args=(k, sid)) for k, sid in enumerate(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    opened.close()
    assert not errors, errors[:5]


@pytest.mark.parametrize(("since", "expected"), [
    ("2026-11-23T10:20:00+00:00", 4 + 5),
    (datetime(2026, 11, 23, 10, 20, tzinfo=UTC), 4 + 5),
    (datetime(2026, 11, 23, 18, 20), 4 + 5),  # naive: wall clock in tz (Asia/Shanghai, UTC+8)
    (date(2026, 11, 23), 2 + 3 + 4 + 5),
    (timedelta(days=365 * 200), 2 + 3 + 4 + 5),
])  # fmt: skip
def test_since_takes_text_datetime_date_and_timedelta(logs, since, expected):
    with dslogs.open(str(logs), since=since, tz="Asia/Shanghai", use_cache=False) as opened:
        assert len(opened.requests) == expected


def test_tz_takes_a_zoneinfo(logs):
    with dslogs.open(str(logs), until=date(2026, 11, 24), tz=ZoneInfo("Asia/Shanghai"), use_cache=False) as opened:
        assert len(opened.requests) == 14


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"since": 5}, "since="), ({"until": 1.5}, "until="), ({"since": timedelta(0)}, "since="),
    ({"tz": 8}, "tz="), ({"thresholds": 5}, "thresholds="), ({"cache": 5}, "cache="),
    ({"session_attr": 5}, "session_attr="),
])  # fmt: skip
def test_a_wrong_type_is_one_usage_error(logs, kwargs, word):
    with pytest.raises(UsageError) as caught:
        dslogs.open(str(logs), use_cache=False, **kwargs)
    assert word in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("paths", [5, None, [], [5]])
def test_wrong_paths_are_one_usage_error(paths):
    with pytest.raises(UsageError, match=r"^paths="):
        dslogs.open(paths)
    with pytest.raises(UsageError, match=r"^diff: a side"):
        dslogs.diff(paths, paths)


def test_methods_check_their_arguments(logs):
    with dslogs.open(str(logs), use_cache=False) as opened:
        for bad in (None, 5, b"sess"):
            with pytest.raises(UsageError, match=r"^session: id_or_prefix"):
                opened.session(bad)
        with pytest.raises(UsageError, match=r"^query: sql is int"):
            opened.query(5)
        with pytest.raises(UsageError, match=r"^unknown view"):
            opened.relation(5)
    with pytest.raises(UsageError, match=r"^load_report: path is int"):
        dslogs.load_report(5)
