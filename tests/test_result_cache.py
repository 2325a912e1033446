"""Warm `analyze` reuses the stored report model (analyzer/model/result_cache.py) only when nothing that
determines it changed: the model equals a cold run's, and files, window, zone and thresholds
each make it compute again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from dslogs.analyzer.ingest.logs import open_logs, run_query, session_events
from dslogs.analyzer.model import report, result_cache
from dslogs.analyzer.usecases import analyze as analyze_module
from dslogs.analyzer.usecases.analyze import analyze_logs
from tests.ingest_lines import v1_request
from tests.model_helpers import stable

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def computed(monkeypatch):
    """Counts the models really computed (build_report calls); a reused model computes none."""
    calls = []
    original = analyze_module.build_report

    def counting(source, thresholds=None):
        calls.append(1)
        return original(source, thresholds)

    monkeypatch.setattr(analyze_module, "build_report", counting)
    return calls


@pytest.fixture
def mixed(tmp_path):
    folder = tmp_path / "logs"
    shutil.copytree(ROOT / "sample_logs" / "mixed", folder)
    return folder


@pytest.fixture
def legacy(tmp_path):
    folder = tmp_path / "legacy"
    folder.mkdir()
    shutil.copy(ROOT / "sample_logs" / "seed_format" / "ds15b_20261123.jsonl", folder)
    return folder


def analyze(logs, cache, **kw) -> dict:
    return analyze_logs([str(logs)], cache=cache, **kw)


def stored_keys(cache: Path) -> list[str]:
    con = duckdb.connect(str(cache), read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT key FROM results").fetchall()]
    finally:
        con.close()


def test_a_warm_model_equals_the_cold_one_and_is_not_recomputed(mixed, tmp_path, computed):
    cold = analyze(mixed, None, use_cache=False)
    cache = tmp_path / "c.duckdb"
    first = analyze(mixed, cache)
    assert len(computed) == 2 and len(stored_keys(cache)) == 1
    # the text kept is printed as it is: the same as rendering the model again (its ingest block
    # and time included, the two keys stored as null)
    assert result_cache.json_text(first) == report.report_to_json(first)
    warm = analyze(mixed, cache)
    assert len(computed) == 2, "the stored model was not reused"
    assert warm["findings"] and stable(warm) == stable(first) == stable(cold)
    assert warm["ingest"]["cached_files"] == warm["ingest"]["files"] > 0
    assert warm["generated_at"] >= first["generated_at"]
    # the CLI prints the stored text: the same as rendering the model again
    assert result_cache.json_text(warm) == report.report_to_json(warm)
    assert result_cache.json_text(first) is None and result_cache.json_text(dict(warm)) is None


def test_a_window_is_reused_as_is_and_another_window_is_not(legacy, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    win = {"since": "2026-11-23T09:30", "until": "2026-11-23T11:00", "tz": "Asia/Shanghai"}
    cold = analyze(legacy, None, use_cache=False, **win)
    analyze(legacy, cache, **win)
    warm = analyze(legacy, cache, **win)
    assert len(computed) == 2 and stable(warm) == stable(cold)
    assert 0 < warm["requests"]["count"]

    other = analyze(legacy, cache, **{**win, "since": "2026-11-23T10:00"})
    assert len(computed) == 3
    assert other["requests"]["count"] < warm["requests"]["count"]
    assert stable(other) == stable(
        analyze(legacy, None, use_cache=False, **{**win, "since": "2026-11-23T10:00"})
    )


def test_another_zone_is_computed_again(mixed, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    utc = analyze(mixed, cache, tz="UTC")
    shanghai = analyze(mixed, cache, tz="Asia/Shanghai")
    assert len(computed) == 2
    assert utc["window"]["first_event"] != shanghai["window"]["first_event"]
    assert stable(shanghai) == stable(analyze(mixed, None, use_cache=False, tz="Asia/Shanghai"))
    assert stable(analyze(mixed, cache, tz="UTC")) == stable(utc)
    assert len(computed) == 3, "each zone's model is kept: the UTC one is reused"


def test_an_appended_line_and_a_new_file_make_it_compute_again(mixed, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    before = analyze(mixed, cache)
    log = mixed / "mixed-gpu-01" / "ds15b_20261124.jsonl"  # the open day's plain file
    added_request = v1_request("s-new", "r-new", datetime(2026, 11, 24, 0, 1))
    with open(log, "a") as fh:
        # its last line is cut (a writer mid-line), as the open day's file can be
        fh.write("\n" + "".join(json.dumps(e) + "\n" for e in added_request))
    grown = analyze(mixed, cache)
    assert len(computed) == 2
    assert grown["ingest"]["events"] == before["ingest"]["events"] + len(added_request)
    assert grown["requests"]["count"] == before["requests"]["count"] + 1
    assert stable(grown) == stable(analyze(mixed, None, use_cache=False))

    extra = mixed / "mixed-gpu-01" / "ds15b_20261124.5.jsonl"
    shutil.copy(ROOT / "sample_logs" / "seed_format" / "ds15b_20261123.jsonl", extra)
    added = analyze(mixed, cache)
    assert len(computed) == 4
    assert added["ingest"]["files"] == grown["ingest"]["files"] + 1
    assert added["ingest"]["formats"].get("legacy")


def test_a_changed_threshold_changes_the_findings(mixed, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    default = analyze(mixed, cache)
    assert "slow_tokenize" not in {f["rule"] for f in default["findings"]}
    strict = tmp_path / "strict.toml"
    strict.write_text("[slow_tokenize]\np50_ms = 0.001\n")
    flagged = analyze(mixed, cache, thresholds_file=strict)
    assert "slow_tokenize" in {f["rule"] for f in flagged["findings"]}
    assert len(computed) == 2
    strict.write_text("[slow_tokenize]\np50_ms = 0.002\n")  # the same file, edited
    edited = analyze(mixed, cache, thresholds_file=strict)
    assert len(computed) == 3 and edited["thresholds"]["slow_tokenize"]["p50_ms"] == 0.002
    again = analyze(mixed, cache)
    assert len(computed) == 3 and stable(again) == stable(default)


def test_no_cache_computes_every_time_and_writes_nothing(mixed, tmp_path, computed, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    analyze(mixed, None, use_cache=False)
    analyze(mixed, None, use_cache=False)
    assert len(computed) == 2 and not (tmp_path / "xdg").exists()


def test_no_cache_on_the_command_line(mixed, tmp_path):
    env = {
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
    }
    cmd = [sys.executable, "-m", "dslogs", "analyze", str(mixed), "--format", "json"]
    cached = [
        subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        for _ in range(2)
    ]
    bare = subprocess.run(
        [*cmd, "--no-cache"], capture_output=True, text=True, env=env, check=True
    ).stdout
    models = [stable(json.loads(text)) for text in (*cached, bare)]
    assert models[0] == models[1] == models[2]
    caches = list((tmp_path / "xdg" / "dslogs").glob("*.duckdb"))
    assert len(caches) == 1 and len(stored_keys(caches[0])) == 1


def test_query_and_session_read_a_cache_holding_models(mixed, tmp_path):
    cache = tmp_path / "c.duckdb"
    model = analyze(mixed, cache)
    sid = model["sessions"][0]["session_id"]
    with open_logs([str(mixed)], cache=cache, materialize=False) as db:
        assert (
            run_query(db, "SELECT count(*) FROM requests").rows[0][0] == model["requests"]["count"]
        )
        assert session_events(db, sid).rows
    analyze(mixed, cache)
    assert len(stored_keys(cache)) == 1


def test_only_the_last_models_are_kept(legacy, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    for minute in range(result_cache.KEEP + 2):
        analyze(legacy, cache, since=f"2026-11-23T09:{minute:02d}", tz="UTC")
    assert len(stored_keys(cache)) == result_cache.KEEP
    analyze(legacy, cache, since=f"2026-11-23T09:{result_cache.KEEP + 1:02d}", tz="UTC")
    assert len(computed) == result_cache.KEEP + 2, "the newest model was dropped"


def test_a_cache_another_process_reads_still_gives_the_model(mixed, tmp_path, computed):
    cache = tmp_path / "c.duckdb"
    first = analyze(mixed, cache)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); "
         "print('ok', flush=True); time.sleep(30)", str(cache)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ok"
        warm = analyze(mixed, cache)
    finally:
        holder.kill()
        holder.wait()
    assert stable(warm) == stable(first)
