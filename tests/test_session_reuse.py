"""The per-session metric queries of a window over the cache's derived tables
(analyzer/ingest/session_tables.py): the rows of the sessions wholly inside the window come from the
stored ``<query>_all`` tables, only the sessions the window's edges cut are computed again. Every
such table, and the report, must equal what the logs alone (--no-cache) give for the window: the
report's JSON text byte for byte (less generated_at and the run counters), the tables row for
row. Also kept in step when a file grows (tail read) or goes, and stale when the derived tables
are built again or a query's text changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.core.thresholds import load_thresholds
from dslogs.analyzer.engines.duckdb import DuckDBSource
from dslogs.analyzer.ingest import session_tables
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.model.report import report_to_json
from dslogs.analyzer.simulate import simulate
from dslogs.analyzer.usecases.analyze import analyze_logs
from tests.model_helpers import record_windows, stable

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (REPO / "sample_logs").iterdir() if p.is_dir())


def _snapshots_only(folder: Path) -> bool:
    return all(p.name.endswith(".prom") for p in folder.iterdir() if p.name != "truth.json")


# Prometheus snapshots alone have no events to cut a window in
EVENT_SAMPLES = [p for p in SAMPLES if not _snapshots_only(p)]
SCENARIOS = ["healthy", "memory_leak", "oom", "kv_cache_bloat", "beam_search", "bad_lines"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reuse") / "logs"
    # 40 hours on two hosts in daily files (the last one plain), sessions crossing midnight
    simulate(out, SCENARIOS, seed=11, fmt="v1", events=40000, hosts=2, start="2026-11-23T20:00",
             hours=40, max_turns=6)  # fmt: skip
    return out


def cuts_of(folder: Path, n: int = 3) -> list[str]:
    """Instants in the middle of sessions of ``folder`` (a window edge there cuts a session)."""
    with open_logs([str(folder)], use_cache=False, materialize=False) as db:
        rows = db.con.execute(
            "SELECT first_ts + (last_ts - first_ts) / 2 FROM sessions "
            "WHERE last_ts > first_ts ORDER BY first_ts, session_id"
        ).fetchall()
        if len({r[0] for r in rows}) < n:
            # no sessions to cut (vLLM spans carry none): cut the events' time span instead
            rows = db.con.execute(
                "SELECT ts FROM events WHERE ts IS NOT NULL ORDER BY ts"
            ).fetchall()
    if not rows:
        return []
    # in time order: a long early session's middle can fall after a later session's middle
    picked = {rows[min(len(rows) - 1, int(len(rows) * (i + 1) / (n + 1)))][0] for i in range(n)}
    return [t.isoformat() for t in sorted(picked)]


@pytest.fixture(scope="module")
def cuts(logs) -> list[str]:
    return cuts_of(logs)


@pytest.fixture
def reused(monkeypatch):
    """The session queries each metric run read from the stored tables, and how (window/whole)."""
    calls: list[dict[str, str]] = []
    original = session_tables.metric_sql

    def recording(*args, **kw):
        got = original(*args, **kw)
        calls.append({n: ("window" if "_dslogs_inner" in sql else "whole") for n, sql in got.items()})
        return got

    monkeypatch.setattr(session_tables, "metric_sql", recording)
    return calls


def text(model: dict) -> str:
    return report_to_json(stable(model))


def uncached(folder: Path, **kw) -> str:
    return text(analyze_logs([str(folder)], use_cache=False, **kw))


def tables(folder: Path, **kw) -> dict[str, list]:
    """Each session query's rows over ``folder`` as the DuckDB source gives them (``kw``: the
    window and the cache or use_cache=False)."""
    with open_logs([str(folder)], **kw) as db:
        out = DuckDBSource.of(db).run(session_tables.SESSION_QUERIES, {})
        return {n: json.dumps(list(rows), default=str) for n, rows in out.items()}


def all_window(calls) -> bool:
    return bool(calls) and calls[-1] == {n: "window" for n in session_tables.SESSION_QUERIES}


def stored_equal_fresh(cache: Path) -> None:
    """Every stored table equals the query over the cache's events and derived tables now."""
    con = duckdb.connect(str(cache), read_only=True)
    try:
        key = con.execute("SELECT value FROM meta WHERE key = 'derived_key'").fetchall()[0][0]
        (db,) = con.execute("SELECT current_database()").fetchone()
        tags = dict(con.execute("SELECT key, value FROM meta").fetchall())
        for name in session_tables.SESSION_QUERIES:
            assert tags.get(f"session_table:{name}") == session_tables._tag(key, name), name
            got = con.execute(f"SELECT * FROM {name}_all ORDER BY ALL").fetchall()
            fresh = session_tables._under(
                name, f'"{db}".main.events', f'"{db}".main.requests_all', f'"{db}".main.sessions_all'
            )
            want = con.execute(f"SELECT * FROM ({fresh}) ORDER BY ALL").fetchall()
            assert repr(got) == repr(want), name
    finally:
        con.close()


# (since, until): an index into ``cuts`` (an instant inside a session), an ISO text, or None
WINDOWS = [
    (0, None),  # cuts the sessions running then, open end (an hourly cron's --since)
    (0, 2),  # both edges
    (None, 1),  # until only
    ("2026-11-24T23:00:00+00:00", None),  # the first day's file pruned
]


def edge(value, cuts):
    return cuts[value] if isinstance(value, int) else value


@pytest.mark.parametrize(("since", "until"), WINDOWS)
def test_a_window_reads_the_stored_rows_and_equals_the_logs_alone(
    logs, cuts, tmp_path, reused, since, until
):
    since, until = edge(since, cuts), edge(until, cuts)
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)  # unwindowed: derived and session tables
    stored_equal_fresh(cache)
    warm = analyze_logs([str(logs)], since=since, until=until, cache=cache)
    assert all_window(reused)
    assert text(warm) == uncached(logs, since=since, until=until)
    got = tables(logs, since=since, until=until, cache=cache)
    assert all_window(reused)
    assert got == tables(logs, since=since, until=until, use_cache=False)


def test_the_edges_cut_sessions_on_both_sides(logs, cuts, tmp_path):
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)
    with open_logs([str(logs)], since=cuts[0], until=cuts[2], cache=cache, materialize=False) as db:
        lo, hi = db.con.execute(
            "SELECT count(*) FILTER (WHERE s.first_ts < $lo), count(*) FILTER (WHERE s.last_ts >= $hi) "
            "FROM _dslogs_edge JOIN dslogs_cache.sessions_all AS s USING (session_id)",
            {"lo": cuts[0], "hi": cuts[2]},
        ).fetchall()[0]
        inner = db.con.execute("SELECT count(*) FROM _dslogs_inner").fetchall()[0][0]
    assert lo >= 1 and hi >= 1 and inner > 10


def test_the_unwindowed_recompute_reads_the_stored_tables(logs, tmp_path, reused):
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)
    th = tmp_path / "t.toml"
    th.write_text("[slo]\nttft_ms = 1234\n")  # no stored model: metrics computed again
    warm = analyze_logs([str(logs)], cache=cache, thresholds_file=th)
    assert reused[-1] == {n: "whole" for n in session_tables.SESSION_QUERIES}
    assert text(warm) == uncached(logs, thresholds_file=th)


@pytest.mark.parametrize("folder", EVENT_SAMPLES, ids=[p.name for p in EVENT_SAMPLES])
def test_sample_logs_windows_equal_the_logs_alone(folder, tmp_path, reused):
    cuts = cuts_of(folder, 2)
    assert len(cuts) == 2, f"{folder.name}: no two distinct instants to cut at"
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(folder)], cache=cache)
    for since, until in ((cuts[0], None), (cuts[0], cuts[1])):
        warm = analyze_logs([str(folder)], since=since, until=until, cache=cache)
        assert all_window(reused)
        assert text(warm) == uncached(folder, since=since, until=until)


def test_non_default_thresholds(logs, cuts, tmp_path, reused):
    th = tmp_path / "t.toml"
    th.write_text(
        "[slo]\nttft_ms = 150\ntpot_ms = 20\n[memory_leak]\nslope_mb_per_min = 0.5\n"
        "[report]\ntimeline_sessions = 7\nslowest_sessions = 3\n"
    )
    load_thresholds(th)  # a valid file
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)
    warm = analyze_logs([str(logs)], since=cuts[1], cache=cache, thresholds_file=th)
    assert all_window(reused)
    assert text(warm) == uncached(logs, since=cuts[1], thresholds_file=th)


def _free_requests(plain: Path, into: Path) -> None:
    """A file of requests without a session: one session's lines of ``plain`` with session_id
    null and their own request ids."""
    rows = []
    for line in plain.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a bad line
    rows = [r for r in rows if isinstance(r, dict) and r.get("session_id") and r.get("request_id")]
    sid = rows[len(rows) // 2]["session_id"]
    out = []
    for r in rows:
        if r["session_id"] == sid:
            out.append(json.dumps({**r, "session_id": None, "request_id": r["request_id"] + "-free"}))
    assert len(out) > 3
    into.write_text("\n".join(out) + "\n")


def test_grown_and_dropped_files_and_requests_without_a_session(logs, cuts, tmp_path, reused):
    copy_ = tmp_path / "logs"
    shutil.copytree(logs, copy_)
    cache = tmp_path / "c.duckdb"
    plain = sorted(copy_.rglob("*.jsonl"))[-1]
    lines = plain.read_bytes().splitlines(keepends=True)
    plain.write_bytes(b"".join(lines[: len(lines) * 2 // 3]))  # as it was earlier
    analyze_logs([str(copy_)], cache=cache)  # derived and session tables of it
    warm = analyze_logs([str(copy_)], since=cuts[0], cache=cache)
    assert all_window(reused)
    assert text(warm) == uncached(copy_, since=cuts[0])

    plain.write_bytes(b"".join(lines))  # grown: only its tail read, the tables kept in step
    warm = analyze_logs([str(copy_)], since=cuts[0], cache=cache)
    assert all_window(reused)
    stored_equal_fresh(cache)
    assert text(warm) == uncached(copy_, since=cuts[0])

    _free_requests(plain, plain.parent / "extra_free.jsonl")  # a new file, requests without a session
    warm = analyze_logs([str(copy_)], since=cuts[1], cache=cache)
    assert all_window(reused)
    stored_equal_fresh(cache)
    assert text(warm) == uncached(copy_, since=cuts[1])

    first = sorted(copy_.rglob("*.jsonl.gz"))[0]  # the first day's, sessions crossing midnight
    first.unlink()  # a file gone: its sessions' rows computed again (or gone)
    warm = analyze_logs([str(copy_)], since=cuts[0], until=cuts[2], cache=cache)
    assert all_window(reused)
    stored_equal_fresh(cache)
    assert text(warm) == uncached(copy_, since=cuts[0], until=cuts[2])
    got = tables(copy_, since=cuts[0], until=cuts[2], cache=cache)
    assert all_window(reused)
    assert got == tables(copy_, since=cuts[0], until=cuts[2], use_cache=False)


def test_stale_when_the_derived_tables_are_built_again_or_a_query_changes(
    logs, cuts, tmp_path, monkeypatch, reused
):
    cache = tmp_path / "c.duckdb"
    analyze_logs([str(logs)], cache=cache)
    con = duckdb.connect(str(cache))
    key = con.execute("SELECT value FROM meta WHERE key = 'derived_key'").fetchall()[0][0]
    assert session_tables.in_step(con, "main", key) == list(session_tables.SESSION_QUERIES)
    assert session_tables.in_step(con, "main", key + "x") == []
    con.close()
    # an edited query: its table is stale, built again by the next run that computes it
    original = session_tables.load_query
    edited = lambda name: original(name) + "\n-- edited"  # noqa: E731
    monkeypatch.setattr(session_tables, "load_query", edited)
    session_tables._order.cache_clear()
    warm = analyze_logs([str(logs)], since=cuts[0], cache=cache)
    assert all_window(reused)
    con = duckdb.connect(str(cache), read_only=True)
    assert session_tables.in_step(con, "main", key) == list(session_tables.SESSION_QUERIES)
    con.close()
    monkeypatch.setattr(session_tables, "load_query", original)
    assert text(warm) == uncached(logs, since=cuts[0])


def test_a_query_run_and_a_windowed_run_without_derived_tables_build_nothing(
    logs, cuts, tmp_path, monkeypatch, reused
):
    from dslogs.analyzer.ingest.logs import run_query

    used = record_windows(monkeypatch)
    cache = tmp_path / "c.duckdb"
    # only windowed runs: no derived tables, so nothing to build the session tables from
    analyze_logs([str(logs)], since=cuts[0], cache=cache)
    assert used == [False] and reused == [{}]
    with open_logs([str(logs)], cache=cache, materialize=False) as db:  # `dslogs query`
        run_query(db, "SELECT count(*) FROM sessions")
    con = duckdb.connect(str(cache), read_only=True)
    names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    con.close()
    assert not {f"{n}_all" for n in session_tables.SESSION_QUERIES} & names


def test_every_session_query_ends_in_a_total_order():
    for name in session_tables.SESSION_QUERIES:
        assert session_tables._order(name).split(", ")[-1] == "session_id"
