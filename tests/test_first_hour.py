"""A new user's edges: every one says what happened (empty windows, healthy data, CPU hosts,
session prefixes, progress, the cache)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app

HEALTHY = "sample_logs/healthy"


def test_empty_window_says_where_the_data_is():
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--since", "2027-01-01", "--tz", "UTC",
                                   "--format", "json", "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stderr.splitlines() if "no events in the window" in ln]
    assert len(warnings) == 1
    line = warnings[0]
    assert "2 log file(s) hold 5,215 events" in line and "2026-11-24 00:02:00" in line
    assert "--since 2026-11-23 would include them" in line  # the first event's day, not the last's
    model = json.loads(res.stdout)
    assert model["notes"][0]["id"] == "empty_window"
    # the hint is a window that holds all the data it names (the newest day's would hold 9 events)
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--since", "2026-11-23", "--tz", "UTC",
                                   "--format", "json", "--no-cache"])  # fmt: skip
    assert json.loads(res.stdout)["ingest"]["events"] == 5215
    assert "no events in the window" not in res.stderr


def test_empty_window_before_the_data_suggests_until():
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--until", "2026-01-01", "--tz", "UTC",
                                   "--format", "md", "--no-cache"])  # fmt: skip
    assert "--until 2026-11-25 would include them" in res.stderr
    assert "> **Note:** no events in the window" in res.stdout


@pytest.mark.parametrize("command", [["capacity", HEALTHY, "--format", "md"], ["query", HEALTHY, "SELECT count(*) AS n FROM requests"],
                                     ["session", HEALTHY, "no-such-id"]])  # fmt: skip
def test_every_command_over_an_empty_window_says_where_the_data_is(command):
    """capacity, query and session read a window too: one warning, as analyze gives, never a
    silent empty answer; and the answer itself is unchanged (stdout stays what it was)."""
    res = CliRunner().invoke(app, [*command, "--since", "2027-01-01", "--tz", "UTC", "--no-cache"])
    warnings = [ln for ln in res.stderr.splitlines() if "no events in the window" in ln]
    assert len(warnings) == 1 and "--since 2026-11-23 would include them" in warnings[0], res.output
    if command[0] == "capacity":
        assert "> **Note:** no events in the window" in res.stdout
    if command[0] == "query":
        assert res.exit_code == 0 and "no events in the window" not in res.stdout
    res = CliRunner().invoke(app, [*command, "--since", "2026-11-23", "--tz", "UTC", "--no-cache"])
    assert "no events in the window" not in res.stderr


def _analyze_json(*args: str) -> dict:
    res = CliRunner().invoke(app, ["analyze", *args, "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_sample_healthy_passes_every_checklist_item_and_fires_nothing():
    model = _analyze_json(HEALTHY)
    assert {c["id"]: c["status"] for c in model["checklist"]} == {c["id"]: "PASS" for c in model["checklist"]}
    assert model["findings"] == []


def test_make_demo_diagnoses_one_service():
    import re
    from pathlib import Path

    make = Path("Makefile").read_text()
    folder = re.search(r"^DEMO_LOGS \?= (\S+)$", make, re.M).group(1)
    assert "$(DEMO_LOGS) --out dslogs-report.html" in make
    model = _analyze_json(folder)
    assert len(model["hosts"]) == 1 and 1 <= len(model["findings"]) <= 2


def test_cpu_only_host_is_said_and_gpu_parts_do_not_apply(tmp_path):
    res = CliRunner().invoke(app, ["analyze", "sample_logs/cpu_only", "--format", "json", "--no-cache"])
    assert "dslogs: note: no GPU: the model ran on the CPU" in res.stderr
    model = json.loads(res.stdout)
    assert model["no_gpu"] is True and model["cpu_hosts"] == ["cpu-only-gpu-01"]
    assert model["notes"][0]["id"] == "no_gpu"
    items = {c["id"]: c for c in model["checklist"]}
    for cid in ("reserved_band", "gpu_util_peak"):
        assert items[cid]["status"] == "N/A" and items[cid]["note"] == "not applicable (no GPU)"
    assert all(s["gpu_wait_pct_p50"] is None for s in model["sessions"])
    from dslogs.analyzer.render.html import render_html

    page = render_html(model)
    assert "Not applicable (no GPU)" in page and "gpu wait p50" not in page
    # a GPU host keeps its GPU section and checks
    gpu = _analyze_json(HEALTHY)
    assert gpu["no_gpu"] is False and gpu["cpu_hosts"] == []
    assert "gpu wait p50" in render_html(gpu)


def test_gpu_wait_is_not_computed_on_a_cpu_device(tmp_path):
    """Logs that carry a negative gpu_wait_pct from a multi-threaded CPU host: the requests view
    leaves it out (it has no meaning there)."""
    lines = [
        {"v": 1, "ts": "2026-11-23T10:00:00+00:00", "session_id": "s", "request_id": "r", "stage": "decode",
         "duration_ms": 900.0, "output_len": 20, "cpu_time_ms": 3500.0, "gpu_wait_pct": -288.9, "device": "cpu"},
        {"v": 1, "ts": "2026-11-23T10:00:01+00:00", "session_id": "s", "request_id": "r", "stage": "request",
         "duration_ms": 1000.0, "status": "ok", "device": "cpu"},
    ]
    (tmp_path / "ds15b_20261123.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = CliRunner().invoke(app, ["query", str(tmp_path), "select gpu_wait_pct, cpu_time_ms from requests",
                                   "--format", "json", "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"gpu_wait_pct": None, "cpu_time_ms": 3500.0}]


def test_session_prefix_lookup_and_memory_columns():
    runner = CliRunner()
    # the short form the report shows ("653f6e4a-…") finds the session
    for given in ("653f6e4a", "653f6e4a-…"):
        res = runner.invoke(app, ["session", "sample_logs/memory_leak", given, "--no-cache"])
        assert res.exit_code == 0, res.output
        header = res.stdout.splitlines()[0].split()
        assert {"reserved_mb", "allocated_mb", "inflight"} <= set(header)
    from dslogs.analyzer.ingest.logs import open_logs, resolve_session, session_events

    with open_logs(["sample_logs/memory_leak"], use_cache=False, materialize=False) as db:
        rows = session_events(db, resolve_session(db, "653f6e4a")).dicts()
    assert (rows[0]["reserved_mb"], rows[0]["allocated_mb"]) == (4225.0, 3486.6)  # that request's snapshot
    res = runner.invoke(app, ["session", "sample_logs/memory_leak", "653f6e4a", "--format", "jsonl", "--no-cache"])
    assert {json.loads(ln)["session_id"] for ln in res.stdout.splitlines()} == {"653f6e4a-bcce-4162-8a16-f6998657429f"}
    # an ambiguous prefix lists the candidates, exit 2, no traceback
    res = runner.invoke(app, ["session", "sample_logs/memory_leak", "6", "--no-cache"])
    assert res.exit_code == 2
    assert "is ambiguous: 62dbb18c-aa4b-4254-bcf1-d1c1ddae4e0f, 653f6e4a-" in res.stderr
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["session", "sample_logs/memory_leak", "zzz", "--no-cache"])
    assert res.exit_code == 2 and "no events for session 'zzz'" in res.stderr
    # the usage line names the session id
    usage = runner.invoke(app, ["session", "--help"], env={"COLUMNS": "120"}).stdout
    (line,) = [ln for ln in usage.splitlines() if "Usage:" in ln]
    assert line.split()[-2:] == ["LOGS...", "SESSION_ID"], line
    assert "{" not in line


def test_memory_findings_carry_the_requests_that_kept_memory():
    model = _analyze_json("sample_logs/concurrent_leak")
    (leak,) = [f for f in model["findings"] if f["rule"] == "memory_leak" and f["scope"] == "session"]
    ev = leak["evidence"]
    assert ev["doc"] == "docs/rules.md#attribution-by-request"
    assert {e["session_id"] for e in ev["requests"]} == set(leak["session_ids"])
    for e in ev["requests"]:
        assert e["basis"].startswith("allocated before/after")
        rows = model["session_details"][e["session_id"]]
        by_id = {r["request_id"]: r for r in rows}
        for r in e["requests"]:
            src = by_id[r["request_id"]]
            assert r["kept_mb"] == round(src["allocated_mb_after"] - src["allocated_mb_before"], 1)
            assert r["inflight"] == src["inflight"] >= 1
    from dslogs.analyzer.render.html import render_html

    page = render_html(model)
    assert page.count('class="kept-chart"') == len(ev["requests"]) and "How a session is told apart" in page


def test_host_ram_findings_carry_the_requests_that_kept_it():
    """rss_growth names sessions too: each comes with the requests that kept host RAM, their RSS
    before and after and what else was in flight, as a GPU memory finding does."""
    model = _analyze_json("sample_logs/rss_staircase")
    (rss,) = [f for f in model["findings"] if f["rule"] == "rss_growth" and f["scope"] == "session"]
    ev = rss["evidence"]
    assert ev["doc"] == "docs/rules.md#attribution-by-request"
    assert {e["session_id"] for e in ev["requests"]} == set(rss["session_ids"])
    for e in ev["requests"]:
        assert e["basis"] == "host RAM (RSS) before/after each request" and e["requests"]
        by_id = {r["request_id"]: r for r in model["session_details"][e["session_id"]]}
        for r in e["requests"]:
            src = by_id[r["request_id"]]
            assert r["rss_before_mb"] == src["rss_mb_before"] and r["rss_after_mb"] == src["rss_mb_after"]
            assert r["kept_mb"] == round(src["rss_mb_after"] - src["rss_mb_before"], 1)
    from dslogs.analyzer.render.html import render_html

    page = render_html(model)
    assert "Evidence: the requests that kept memory, per session (host RAM (RSS) before/after each request)" in page


def test_oom_fix_names_only_the_causes_present():
    from dslogs.analyzer.core.thresholds import defaults
    from dslogs.analyzer.rules.evidence import fix_for, request_factors

    t = defaults()
    greedy_second_turn = [{"num_beams": 1, "input_len": 80, "turn_index": 2, "max_new_tokens": 1024,
                           "status": "error", "error_type": "OutOfMemoryError"}]  # fmt: skip
    factors = request_factors(greedy_second_turn, t)
    assert [f["present"] for f in factors] == [False, False, False, False]
    fix = fix_for("oom", factors, "")
    assert "num_beams=1" not in fix and "8 turns" not in fix and "bound max_new_tokens" not in fix
    assert "what else held GPU memory" in fix
    beams = request_factors([{"num_beams": 1, "failed_num_beams": 5, "input_len": 80, "turn_index": 12,
                              "max_new_tokens": 4096}], t)  # fmt: skip
    assert [f["present"] for f in beams] == [True, False, True, True]
    fix = fix_for("oom", beams, "")
    assert "num_beams=1" in fix and "8 turns" in fix and "max_new_tokens" in fix and "input length" not in fix
    # on real logs: the OOM card lists each factor and its fix follows them
    model = _analyze_json("sample_logs/oom")
    (oom,) = [f for f in model["findings"] if f["rule"] == "oom"]
    present = {f["factor"] for f in oom["evidence"]["factors"] if f["present"]}
    assert ("num_beams=1" in oom["fix"]) == ("beam search" in present)
    assert ("input length" in oom["fix"]) == ("long input" in present)


def _first_seconds(tmp_path, seconds: int):
    """The first ``seconds`` of sample_logs/concurrent_leak as a log folder of its own."""
    import gzip
    from datetime import datetime, timedelta
    from pathlib import Path

    (src,) = Path("sample_logs/concurrent_leak").glob("*/*.jsonl.gz")
    lines = gzip.open(src, "rt").read().splitlines()
    t0 = datetime.fromisoformat(json.loads(lines[0])["ts"])
    keep = [ln for ln in lines if datetime.fromisoformat(json.loads(ln)["ts"]) < t0 + timedelta(seconds=seconds)]
    (tmp_path / "h1").mkdir()
    (tmp_path / "h1" / src.name[:-3]).write_text("\n".join(keep) + "\n")
    return tmp_path


def test_time_fits_the_data(tmp_path):
    logs = _first_seconds(tmp_path, 90)
    model = _analyze_json(str(logs), "--since", "2026-11-23", "--tz", "UTC")
    # a minute and a half of data is bucketed by the second, not one column of a minute
    assert model["series_bucket"] == "second"
    buckets = {r["bucket"] for r in model["series"]["stage_latency_by_hour"]}
    assert len(buckets) >= 3 and any(not b.endswith(":00.000+00:00") for b in buckets)
    from dslogs.analyzer.render.html import fmt_ts_short, render_html

    page = render_html(model)
    # the data's own first and last event next to the requested window
    assert "Data: first event 2026-11-23 22:00:00 UTC" in page and "Requested window: 2026-11-23 00:00:00 UTC → now" in page
    assert "(1 min " in page
    assert fmt_ts_short("2026-11-23T22:07:21.557+00:00") == "11-23 22:07:21"
    # a week keeps hourly buckets, with the date on hour labels
    from dslogs.analyzer.metrics.registry import bucket_for_span
    from dslogs.analyzer.render.charts.specs import TIME_LABELS_DAYS, TimeAxis, _time_axis_def

    assert bucket_for_span("2026-11-23T00:00:00+00:00", "2026-11-30T00:00:00+00:00") == "hour"
    assert bucket_for_span("2026-11-23T00:00:00+00:00", "2026-11-23T00:09:00+00:00") == "second"
    week = TimeAxis(domain=[0, 7 * 86_400_000])
    assert _time_axis_def(week)["format"] == TIME_LABELS_DAYS and "%b %d" in TIME_LABELS_DAYS["hours"]
    assert "%b" not in _time_axis_def(TimeAxis(domain=[0, 3_600_000]))["format"]["hours"]


def _run_in_pty(args: list[str], terminal: str, env: dict) -> tuple[bytes, bytes, int]:
    """``python -m dslogs ARGS`` with ``terminal`` ("stdout" or "stderr") on a pseudo-terminal:
    (what the other stream wrote, what the terminal received, exit code)."""
    import os
    import pty
    import subprocess
    import sys
    import threading

    master, slave = pty.openpty()
    other = subprocess.PIPE if terminal == "stderr" else subprocess.DEVNULL
    streams = {"stdout": slave, "stderr": other} if terminal == "stdout" else {"stdout": other, "stderr": slave}
    proc = subprocess.Popen([sys.executable, "-m", "dslogs", *args], stdin=subprocess.DEVNULL,
                            env={**os.environ, **env}, **streams)  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def drain():  # the terminal must be read while the command runs, or its writes block
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out = proc.stdout.read() if proc.stdout is not None else b""
    rc = proc.wait(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return out, b"".join(chunks), rc


def _run_with_pty_stderr(args: list[str], env_extra: dict | None = None) -> tuple[bytes, bytes]:
    """(stdout, what the terminal on stderr received) of ``python -m dslogs ARGS``."""
    env = {"TERM": "xterm-256color", "COLUMNS": "120", "DSLOGS_PROGRESS_DELAY": "0", **(env_extra or {})}
    out, seen, rc = _run_in_pty(args, "stderr", env)
    assert rc == 0, seen[-2000:]
    return out, seen


def test_progress_on_a_terminal_only(tmp_path):
    args = ["analyze", "sample_logs/mixed", "--no-cache", "--format", "json"]
    out, seen = _run_with_pty_stderr(args)
    text = seen.decode("utf-8", "replace")
    assert "dslogs analyze:" in text and "computing" in text and "rendering" in text
    assert "file" in text  # files and bytes read
    json.loads(out)  # stdout holds the report alone
    assert b"\x1b" not in out
    # --quiet: nothing drawn
    out, seen = _run_with_pty_stderr([*args, "--quiet"])
    assert b"dslogs analyze:" not in seen
    json.loads(out)
    # stderr not a terminal: nothing drawn
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dslogs", *args], capture_output=True, timeout=120,
                          env={**__import__("os").environ, "DSLOGS_PROGRESS_DELAY": "0"})  # fmt: skip
    assert proc.returncode == 0 and b"dslogs analyze:" not in proc.stderr


def test_cache_command_lists_prunes_and_clears(tmp_path, monkeypatch):
    import os
    import shutil
    import time

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    runner = CliRunner()
    assert "no caches in" in runner.invoke(app, ["cache"]).stdout
    logs = {}
    for name in ("kept", "gone", "old"):
        logs[name] = tmp_path / name
        shutil.copytree("sample_logs/healthy", logs[name])
        assert runner.invoke(app, ["analyze", str(logs[name]), "--format", "json"]).exit_code == 0
    listing = runner.invoke(app, ["cache"]).stdout
    assert listing.startswith("3 cache(s) in " + str(tmp_path / "xdg" / "dslogs"))
    for name in logs:
        assert str(logs[name] / "healthy-gpu-01") in listing
    shutil.rmtree(logs["gone"])
    assert "(gone)" in runner.invoke(app, ["cache"]).stdout
    (old,) = [p for p in (tmp_path / "xdg" / "dslogs").glob("*.duckdb")
              if _cache_folder(p) == str(logs["old"] / "healthy-gpu-01")]  # fmt: skip
    os.utime(old, (time.time() - 40 * 86400,) * 2)
    res = runner.invoke(app, ["cache", "--prune"])
    assert "pruned 1 cache(s)" in res.stdout and "its log folder no longer exists" in res.stdout
    res = runner.invoke(app, ["cache", "--prune", "--unused-days", "30"])
    assert "pruned 1 cache(s)" in res.stdout and "unused for over 30 days" in res.stdout and not old.exists()
    # a run marks its cache used: the kept one survives
    assert runner.invoke(app, ["cache"]).stdout.startswith("1 cache(s)")
    assert runner.invoke(app, ["cache", "--unused-days", "3"]).exit_code == 2
    res = runner.invoke(app, ["cache", "--clear"])
    assert res.stdout.startswith("removed 1 cache(s)") and not list((tmp_path / "xdg" / "dslogs").glob("*.duckdb"))


def _cache_folder(path) -> str | None:
    from dslogs.analyzer.ingest.cache import cache_info

    return cache_info(path)["folder"]


def test_requests_are_counted_from_traces_without_an_input_stage(tmp_path):
    from pathlib import Path

    from dslogs.analyzer.ingest.logs import open_logs, run_query

    def count(folder):
        with open_logs([str(folder)], tz="UTC", use_cache=False, materialize=False) as db:
            return run_query(db, "SELECT count(*), count(output_len) FROM requests").rows[0]

    # article 003's own logger, its input lines removed (003 §3.2's traces start at tokenize)
    lines = Path("sample_logs/seed_format/ds15b_20261123.jsonl").read_text().splitlines()
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "ds15b_20261123.jsonl").write_text(
        "\n".join(ln for ln in lines if '"stage": "input"' not in ln) + "\n")
    assert count(tmp_path / "legacy") == count("sample_logs/seed_format") == (270, 270)
    # the collector's drop-in log_event, used as the article uses its logger
    import dslogs_collector.tracer as tracer_mod
    from dslogs_collector import Tracer, log_event

    t = Tracer(log_dir=str(tmp_path / "dropin"))
    saved, tracer_mod._default = tracer_mod._default, t
    try:
        for sid in ("a1b2c3", "d4e5f6"):
            for with_input in (False, True, False):
                if with_input:
                    log_event("input", session_id=sid, input_len=42)
                log_event("tokenize", 12.3, session_id=sid, input_len=42)
                log_event("inference", 4820.7, session_id=sid, output_len=156)
                log_event("format", -1, session_id=sid)
    finally:
        tracer_mod._default = saved
        t.close()
    assert count(tmp_path / "dropin") == (6, 6)


def test_try_collector_example_runs_without_weights(tmp_path):
    """examples/try_collector.py as docs/collector.md shows it: a tiny random Qwen2, traced, then
    analysed; the beam-search session it runs is the one the report names."""
    import os
    import subprocess
    import sys

    pytest.importorskip("transformers")
    proc = subprocess.run([sys.executable, "examples/try_collector.py", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote the trace to {tmp_path / 'logs'}" in proc.stdout
    assert "9 requests (0 errors) in 3 sessions on 1 host" in proc.stdout
    assert "- **beam_search** (session): generate runs beam search (num_beams = 2 in 1 session) — sessions " \
           "00000000-0000-0000-0000-000000000003" in proc.stdout


def test_help_has_no_type_tags_and_markdown_on_a_terminal_has_no_entities():
    res = CliRunner().invoke(app, ["analyze", "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0
    for tag in ("<bool>", "<str>", "<list[str]>", "<path>"):
        assert tag not in res.stdout
    assert "html|json|md" in res.stdout and "--no-cache" in res.stdout
    # the usage line names its arguments as click does, not as a set ({logs}...)
    (usage,) = [ln for ln in res.stdout.splitlines() if "Usage:" in ln]
    assert usage.split()[-2:] == ["[OPTIONS]", "LOGS..."], usage
    out, _ = _run_with_pty_stdout(["analyze", HEALTHY, "--format", "md", "--no-cache"])
    assert "&lt;" not in out and "tokenize p50 < 100 ms" in out
    # to a file or a pipe it stays Markdown (entities keep `<` literal when rendered)
    res = CliRunner().invoke(app, ["analyze", HEALTHY, "--format", "md", "--no-cache"])
    assert "tokenize p50 &lt; 100 ms" in res.stdout


def _run_with_pty_stdout(args: list[str]) -> tuple[str, int]:
    _, seen, rc = _run_in_pty(args, "stdout", {"TERM": "xterm"})
    return seen.decode("utf-8", "replace").replace("\r\n", "\n"), rc


def test_long_session_lists_collapse_to_a_copyable_list(tmp_path):
    """A finding naming many sessions shows a few links and a folded, copyable list of them all;
    the page fits 1280 px in headless Chromium."""
    import re
    import shutil
    from pathlib import Path

    from dslogs.analyzer.render.html import render_html

    model = _analyze_json("sample_logs/concurrent_leak")
    ids = [f"{i:08x}-0000-4000-8000-000000000000" for i in range(41)]
    model["findings"][0]["session_ids"] = ids
    page = render_html(model)
    (box,) = re.findall(r'<details class="all-ids">.*?</details>', page, re.S)
    assert "all 41 session ids, to copy" in box
    assert re.search(r"<textarea readonly[^>]*>(.*?)</textarea>", box, re.S).group(1).split() == ids
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from browser_helpers import open_offline

    target = tmp_path / "report.html"
    target.write_text(page, encoding="utf-8")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            loaded = open_offline(browser, target)
            summary = loaded.page.locator("details.all-ids summary").first
            assert not loaded.page.locator("details.all-ids textarea").first.is_visible()
            summary.click()
            area = loaded.page.locator("details.all-ids textarea").first
            assert area.is_visible()
            # copyable: the rendered box holds every id, one selection away from the clipboard
            assert area.input_value().split() == ids
            area.select_text()
            assert loaded.page.evaluate("document.getSelection().toString() || "
                                        "document.activeElement.value.substring(document.activeElement.selectionStart,"
                                        " document.activeElement.selectionEnd)").split() == ids
            # the card fits 1280 px: wide tables scroll inside their box
            box = loaded.page.locator("details.all-ids").first.locator("xpath=ancestor::article").bounding_box()
            assert box["x"] + box["width"] <= 1280
            loaded.page.locator("details.all-ids").first.locator("xpath=ancestor::article").screenshot(
                path=str(tmp_path / "ids.png"))
            assert loaded.errors == []
        finally:
            browser.close()


def test_words_the_report_uses_are_defined():
    from dslogs.analyzer.render.glossary import GLOSSARY
    from dslogs.analyzer.render.html import render_html
    from dslogs.analyzer.render.markdown import render_markdown

    for word in ("TTFT", "TPOT", "TTFA", "reasoning share", "goodput", "gpu_wait", "kept", "in flight", "rise"):
        assert GLOSSARY.get(word), word
    model = _analyze_json(HEALTHY)
    page = render_html(model)
    assert 'id="sec-glossary"' in page and "time to first answer token" in page
    assert f'title="{GLOSSARY["goodput"]}"' in page
    md = render_markdown(model)
    assert "## Glossary" in md and "- **goodput**: the share of requests" in md


def test_every_citation_is_explained_and_documented():
    """Each section a rule or checklist item cites has a one-line meaning (the report's tooltip)
    and a section of docs/sources.md; no user-facing threshold cites a document that does not ship."""
    from pathlib import Path

    from dslogs.analyzer import rules  # noqa: F401  (its rules declare their threshold tables)
    from dslogs.analyzer.core.thresholds import SOURCES as WHYS
    from dslogs.analyzer.render.glossary import _CITATION, SOURCES
    from dslogs.analyzer.render.html import cite, render_html
    from dslogs.analyzer.rules.registry import RULE_SPECS
    from tests.test_lint import UNSHIPPED_REFERENCE

    cited = [s.source for s in RULE_SPECS.values()] + [c["source"] for c in _analyze_json(HEALTHY)["checklist"]]
    docs = Path("docs/sources.md").read_text(encoding="utf-8")
    cited_ids: set[str] = set()
    for source in cited:
        article = None
        for m in _CITATION.finditer(source):
            article = m.group(1) or article
            key = f"{article} §{m.group(2)}"
            assert key in SOURCES, (source, key)
            assert f'<a id="{article}-{m.group(2).replace(".", "-")}"></a>' in docs, key
        # each citation links to the report's own list of sources, which holds the section
        page_ids = {f"src-{a}-{m.group(2).replace('.', '-')}" for m in _CITATION.finditer(source) for a in ("000", "003")}
        links = re.findall(r'<a class="cite" href="#(src-[0-9-]+)"', str(cite(source)))
        assert len(links) == len(_CITATION.findall(source)) and set(links) <= page_ids, (source, links)
        cited_ids.update(links)
    page = render_html(_analyze_json(HEALTHY))
    assert cited_ids and all(f'id="{i}"' in page for i in cited_ids), cited_ids - set(re.findall(r'id="(src-[0-9-]+)"', page))
    whys = [why for table in WHYS.values() for why in table.values()]
    assert whys and not [w for w in whys if UNSHIPPED_REFERENCE.search(str(w))]


@pytest.mark.parametrize("command", ["capacity", "compact", "diff", "report weekly", "simulate"])
def test_progress_on_a_terminal_for_every_long_command(tmp_path, command):
    """The other commands that can run long draw the same reporter on a terminal, phase included,
    and keep it out of their stdout."""
    leak = "sample_logs/memory_leak"
    args = {"capacity": ["capacity", "sample_logs/concurrency_cliff", "--format", "json", "--no-cache"],
            "compact": ["compact", leak, "--out", str(tmp_path / "pq")],
            "diff": ["diff", "sample_logs/healthy", leak, "--format", "json", "--no-cache"],
            "report weekly": ["report", "weekly", leak, "--format", "json", "--no-cache"],
            "simulate": ["simulate", str(tmp_path / "sim"), "--events", "3000"]}[command]  # fmt: skip
    out, seen = _run_with_pty_stderr(args)
    text = seen.decode("utf-8", "replace")
    assert f"dslogs {command}:" in text, text[-1000:]
    assert b"\x1b" not in out and f"dslogs {command}:".encode() not in out
    if command in ("capacity", "diff", "report weekly"):
        json.loads(out)
    if command == "capacity":  # read, computed, rendered; and --quiet draws nothing
        assert "file" in text and "computing" in text and "rendering" in text, text[-1000:]
        out, seen = _run_with_pty_stderr([*args, "--quiet"])
        assert b"dslogs capacity:" not in seen
        json.loads(out)
