"""watch reads with analyze's definitions: the same files (discovery, ``.jsonl.1`` included),
the same line judge (every hostile line analyze counts as bad is an unreadable line here, never a
crash), the same TTFT/TPOT/end-to-end (request lines without ``ttft_ms`` take it from their
stages, as analyze/ingest/views/requests.sql does) and the same rules."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.format import terminal as _ms
from dslogs.analyzer.live.watch import Window

runner = CliRunner()


def _lines(path) -> list[bytes]:
    import gzip

    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).splitlines()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def _request_lines(t: float, sid: str, rid: str, k: int) -> list[dict]:
    """A request of stages and a request line without ttft_ms (a collector that does not stream)."""
    base = {"v": 1, "host": "gpu-a", "pid": 7, "session_id": sid, "request_id": rid}
    tok, queue, prefill, decode, out = 5.0 + k % 3, 2.0 * (k % 5), 80.0 + 13 * (k % 11), 2000.0 + 37 * k, 64 + k
    return [
        {**base, "ts": _iso(t), "stage": "tokenize", "duration_ms": tok, "input_len": 300},
        {**base, "ts": _iso(t + 0.01), "stage": "queue", "duration_ms": queue},
        {**base, "ts": _iso(t + 0.1), "stage": "prefill", "duration_ms": prefill, "input_len": 300},
        {**base, "ts": _iso(t + 2.0), "stage": "decode", "duration_ms": decode, "output_len": out,
         "params": {"num_beams": 1, "max_new_tokens": 512}},
        {**base, "ts": _iso(t + 2.1), "stage": "request", "duration_ms": tok + queue + prefill + decode + 20,
         "input_len": 300, "output_len": out, "status": "ok"},
    ]  # fmt: skip


def _write(path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def _logs(tmp_path):
    """Two files as logrotate leaves them (app.jsonl.1 older, app.jsonl current), events of the
    last few minutes, and one request two hours old (outside both windows)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    now = time.time()
    old = _request_lines(now - 7200, "s-old", "r-old", 99)
    rotated = [e for k in range(20) for e in _request_lines(now - 600 + 10 * k, f"s{k % 4}", f"a{k}", k)]
    current = [e for k in range(20, 37) for e in _request_lines(now - 300 + 10 * (k - 20), f"s{k % 4}", f"b{k}", k)]
    _write(logs / "app.jsonl.1", old + rotated)
    _write(logs / "app.jsonl", current)
    return logs, now


def _latency_rows(out: str) -> dict[str, tuple[str, str, str]]:
    rows = {}
    for label in ("TTFT", "TPOT", "end-to-end"):
        m = re.search(rf"^{label}\s+(\S+)\s+(\S+)\s+(\d+)", out, re.M)
        assert m, out
        rows[label] = m.groups()
    return rows


def test_watch_once_agrees_with_analyze_on_latency(tmp_path):
    logs, now = _logs(tmp_path)
    res = runner.invoke(app, ["watch", str(logs), "--once", "--window", "1h"])
    assert res.exit_code == 0, res.output
    watched = _latency_rows(res.output)
    res = runner.invoke(app, ["analyze", str(logs), "--since", _iso(now - 3600), "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    req = json.loads(res.stdout)["requests"]
    assert req["count"] == 37  # both files, not the old request
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("end-to-end", "e2e_ms")):
        p = req[key]
        assert watched[label] == (_ms(p["p50"]), _ms(p["p95"]), str(p["count"])), (label, p)
    assert watched["TTFT"][0] != "—"


def test_window_equals_analyze_numbers_and_rules(tmp_path):
    logs, now = _logs(tmp_path)
    win = Window(3600)
    for f in sorted(logs.iterdir()):
        win.add(f.read_bytes().splitlines())
    frame = win.frame(now)
    res = runner.invoke(app, ["analyze", str(logs), "--since", _iso(now - 3600), "--format", "json", "--no-cache"])
    model = json.loads(res.stdout)
    req = model["requests"]
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert frame[key]["p50"] == pytest.approx(req[key]["p50"]) and frame[key]["p95"] == pytest.approx(req[key]["p95"])
    assert frame["requests"] == req["count"] and frame["errors"] == req["errors"]
    fired = sorted(f["rule"] for f in model["findings"] if f["rule"] != "bad_lines")
    assert sorted(f["rule"] for f in frame["findings"]) == fired
    win.close()


def _deep(n: int) -> str:
    return "[" * n + "]" * n


HOSTILE = {
    "list as pid": '{"v":1,"ts":"%s","stage":"request","session_id":"s","request_id":"r1","pid":[1,2]}',
    "dict as host": '{"v":1,"ts":"%s","stage":"request","session_id":"s","request_id":"r2","host":{"a":1}}',
    "list as session_id": '{"v":1,"ts":"%s","stage":"request","session_id":["x"],"request_id":"r3"}',
    "400-digit number": '{"v":1,"ts":"%s","stage":"request","session_id":"s","request_id":"r4","pid":' + "9" * 400 + "}",
    "year-1 timestamp": '{"v":1,"ts":"0001-01-01T00:00:00+00:00","stage":"request","session_id":"s","request_id":"r5"}%s',
    "deep nesting": '{"v":1,"ts":"%s","stage":"request","session_id":"s","request_id":"r6","params":' + _deep(100_000) + "}",
    "lone surrogate": '{"v":1,"ts":"%s","stage":"request","session_id":"\\ud800","request_id":"r7"}',
    "not an object": "[1, 2, 3]%s",
    "no stage": '{"v":1,"ts":"%s","session_id":"s"}',
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_line_is_unreadable_as_in_analyze(tmp_path, kind):
    now = time.time()
    ok = _request_lines(now - 60, "s", "good", 1)
    line = HOSTILE[kind] % ("" if kind in ("year-1 timestamp", "not an object") else _iso(now - 30))
    path = tmp_path / "app.jsonl"
    path.write_text(json.dumps(ok[0]) + "\n" + line + "\n" + "".join(json.dumps(e) + "\n" for e in ok[1:]))
    res = runner.invoke(app, ["analyze", str(path), "--format", "json", "--no-cache"])
    bad = json.loads(res.stdout)["ingest"]["bad_lines"]
    # DuckDB reads a dict host or a list session_id as text, and year 1 is a time: analyze keeps them
    assert bad == (0 if kind in ("dict as host", "list as session_id", "year-1 timestamp") else 1)
    win = Window(900)
    win.add(path.read_bytes().splitlines())
    frame = win.frame(time.time())
    assert frame["bad_lines"] == bad and frame["requests"] >= 1
    win.close()


def test_mixed_host_types_and_every_hostile_line_at_once(tmp_path):
    now = time.time()
    lines = [json.dumps(e) for e in _request_lines(now - 60, "s", "good", 1)]
    lines.append(json.dumps({"v": 1, "ts": _iso(now - 50), "stage": "gpu_sample", "host": 5, "gpu_index": 0,
                             "gpu_util_pct": 50}))  # fmt: skip
    lines.append(json.dumps({"v": 1, "ts": _iso(now - 50), "stage": "gpu_sample", "host": "b", "gpu_index": "0",
                             "gpu_util_pct": 50}))  # fmt: skip
    for kind, text in HOSTILE.items():
        lines.append(text % ("" if kind in ("year-1 timestamp", "not an object") else _iso(now - 30)))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "app.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "logs" / "dir.jsonl").mkdir()  # a folder with a log file's name: not followed
    res = runner.invoke(app, ["analyze", str(tmp_path / "logs"), "--format", "json", "--no-cache"])
    bad = json.loads(res.stdout)["ingest"]["bad_lines"]
    res = runner.invoke(app, ["watch", str(tmp_path / "logs"), "--once"])
    assert res.exit_code == 0, res.output
    assert f"{bad} unreadable lines" in res.output and "Traceback" not in res.output


def test_watch_follows_otlp_traces_and_skips_prometheus_snapshots():
    """sample_logs/vllm: OTLP/JSON spans written by the OpenTelemetry SDK beside Prometheus
    snapshots. watch reads the spans as analyze does (same requests, errors, latency and the
    overload rule) and takes the snapshots for what they are, not for unreadable lines."""
    logs = "sample_logs/vllm"
    res = runner.invoke(app, ["watch", logs, "--once", "--window", "3650d"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert re.search(r"since start: 533 requests, 2 errors, \d+ error events .*?, 0 unreadable lines", flat), res.output
    watched = _latency_rows(res.output)
    model = json.loads(runner.invoke(app, ["analyze", logs, "--format", "json", "--no-cache"]).stdout)
    req = model["requests"]
    assert req["count"] == 533 and req["errors"] == 2
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("end-to-end", "e2e_ms")):
        p = req[key]
        assert watched[label] == (_ms(p["p50"]), _ms(p["p95"]), str(p["count"])), (label, p)
    assert "queue_wait" in res.output and "queue_wait" in {f["rule"] for f in model["findings"]}


def test_a_batch_of_mixed_lines_reads_the_traces_and_the_events_each_by_its_own_statement(tmp_path):
    logs, now = _logs(tmp_path)
    traces = [line for f in sorted(Path("sample_logs/vllm").glob("otel-traces*")) for line in _lines(f)]
    win = Window(3650 * 86400)
    mixed = [line for f in sorted(logs.iterdir()) for line in f.read_bytes().splitlines()] + traces
    win.add(mixed)
    frame = win.frame(now)
    assert win.bad_lines == 0 and frame["requests"] == 533 + 37 + 1
    win.close()


def test_watch_counts_errors_as_analyze_does():
    """One definition of an error, a failed request: sample_logs/oom has 8 failed requests and 14
    OOM error events (some requests failed an attempt and then succeeded on the greedy
    fallback). The frame's table, its since-start line and analyze all say 8; the 14 events are
    their own, labelled count."""
    logs = "sample_logs/oom"
    res = runner.invoke(app, ["watch", logs, "--once", "--window", "3650d"])
    assert res.exit_code == 0, res.output
    model = json.loads(runner.invoke(app, ["analyze", logs, "--format", "json", "--no-cache"]).stdout)
    count, errors = model["requests"]["count"], model["requests"]["errors"]
    flat = " ".join(res.output.split())
    assert f"since start: {count} requests, {errors} errors, 14 error events (OOMs" in flat, res.output
    row = re.search(r"^\s*\S+\s+\S+\s+(\d+)\s+\d+\s+(\d+)\s+[\d.]+ ?%", res.output, re.M)
    assert row and (int(row.group(1)), int(row.group(2))) == (count, errors), res.output
