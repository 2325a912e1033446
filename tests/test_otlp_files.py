"""OTLP files as the OTel Collector's file exporter writes them, and what one bad value costs.

The spans are recorded by the OpenTelemetry SDK and encoded by its own OTLP encoder
(tests/otlp_helpers.py); the metrics by the SDK's MeterProvider and its OTLP metrics encoder
(opentelemetry-exporter-otlp-proto-common). The exporter's framings are built as its source
writes them (opentelemetry-collector-contrib exporter/fileexporter/file_writer.go: each message
after its length as 4 big-endian bytes when `format: proto`, or `compression: zstd` without the
native-compression feature gate; one zstd stream of lines with it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")

from otlp_helpers import Recorder, vllm_request, vllm_workload, write_vllm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REQS = vllm_workload(6, seed=3)


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dslogs", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def _analyze(*paths):
    res = _cli("analyze", *paths, "--format", "json", "--no-cache", "--tz", "UTC")
    assert "Traceback" not in res.stderr, res.stderr
    return res, (json.loads(res.stdout) if res.returncode == 0 else None)


def _span_lines(reqs=REQS) -> list[str]:
    """One request a line (six lines), as the SDK's encoder writes them."""
    rec = Recorder({"service.name": "vllm", "host.name": "gpu-a", "process.pid": 4242}, seed=5)
    for r in reqs:
        vllm_request(rec, r)
    return rec.lines(per_line=1)


def _attr(span: dict, key: str) -> dict:
    return next(a for a in span["attributes"] if a["key"] == key)["value"]


def _damage(fn) -> str:
    """The file of six one-span lines with the span of line 3 changed by ``fn``."""
    lines = _span_lines()
    obj = json.loads(lines[2])
    fn(obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0])
    lines[2] = json.dumps(obj, separators=(",", ":"))
    return "\n".join(lines) + "\n"


# (name, change of one span, requests still read, what the reason says)
BAD_VALUES = [
    ("time_abc", lambda s: s.__setitem__("startTimeUnixNano", "abc"), 5, "startTimeUnixNano"),
    ("time_empty", lambda s: s.__setitem__("startTimeUnixNano", ""), 5, "startTimeUnixNano"),
    ("time_30_digits", lambda s: s.__setitem__("endTimeUnixNano", "9" * 30), 5, "endTimeUnixNano"),
    ("double_abc", lambda s: _attr(s, "gen_ai.latency.e2e").__setitem__("doubleValue", "abc"), 6, "doubleValue"),
    ("bool_wrong", lambda s: s["attributes"].append({"key": "x.flag", "value": {"boolValue": "maybe"}}), 6, "boolValue"),
    ("status_text", lambda s: s.__setitem__("status", "ERROR"), 6, "status"),
    ("events_text", lambda s: s.__setitem__("events", "x"), 6, "events"),
    ("lone_surrogate", lambda s: _attr(s, "gen_ai.response.model").__setitem__("stringValue", "q\ud800"), 6, "surrogate"),
]


@pytest.mark.parametrize("name, change, requests, says", BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_one_bad_value_costs_that_value_or_its_span(tmp_path, name, change, requests, says):
    alone = tmp_path / "alone"
    alone.mkdir()
    text = _damage(change)
    (alone / "t.json").write_bytes(text.encode("utf-8", "surrogatepass").replace(b"\xed\xa0\x80", b"\\ud800"))
    res, model = _analyze(alone)
    assert res.returncode == 0, res.stderr
    ing = model["ingest"]
    assert model["requests"]["count"] == requests
    assert ing["bad_lines"] == 1 and ing["unreadable_files"] == 0
    (sample,) = ing["bad_line_samples"]
    assert sample["line"] == 3 and says in sample["reason"] and sample["file"].endswith("t.json")
    # beside a good file: the same, and no message names a file of dslogs' own
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "t.json").write_bytes((alone / "t.json").read_bytes())
    write_vllm(beside / "good.json", vllm_workload(4, seed=9))
    res, model = _analyze(beside)
    assert res.returncode == 0 and model["requests"]["count"] == requests + 4
    assert model["ingest"]["bad_lines"] == 1 and not model["ingest"]["skipped"]
    assert "dslogs-" not in json.dumps(model["ingest"]) + res.stderr


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", 1e308])
def test_not_finite_doubles_are_bad_values_not_statistics(tmp_path, value):
    (tmp_path / "t.json").write_text(_damage(lambda s: _attr(s, "gen_ai.latency.e2e").__setitem__("doubleValue", value)))
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    e2e = model["requests"]["e2e_ms"]
    assert all(e2e[k] is not None for k in ("p50", "p95", "p99")), e2e
    assert e2e["p99"] < 60_000  # the span's own duration stands in for the dropped value
    assert model["ingest"]["bad_lines"] == 1 and "not a finite number" in model["ingest"]["bad_line_samples"][0]["reason"]


def test_v1_nan_is_a_bad_line_not_a_statistic(tmp_path):
    from ingest_lines import write_lines

    from tests.fuzz.mutate import base_events, encode

    events = base_events()
    request = next(i for i, e in enumerate(events) if e.get("stage") == "request" and "duration_ms" in e)
    events[request]["duration_ms"] = "NaN"
    write_lines(tmp_path / "a.jsonl", [encode([e]) for e in events])
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    assert model["ingest"]["bad_lines"] == 1
    sample = model["ingest"]["bad_line_samples"][0]
    assert sample["line"] == request + 1 and sample["reason"] == 'not a finite number: duration_ms="NaN"'
    e2e = model["requests"]["e2e_ms"]
    assert e2e["p95"] is not None and e2e["p99"] is not None


def _metrics_line() -> str:
    """An OTLP/JSON metrics export: the GenAI client duration histogram, from the SDK."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    hist = provider.get_meter("genai").create_histogram("gen_ai.client.operation.duration", unit="s")
    for v in (0.4, 1.2, 3.5):
        hist.record(v, {"gen_ai.operation.name": "chat"})
    return json.dumps(MessageToDict(encode_metrics(reader.get_metrics_data())), separators=(",", ":"))


def test_signal_judged_per_line_metrics_first(tmp_path):
    lines = _span_lines()
    (tmp_path / "otel.json").write_text("\n".join([_metrics_line(), *lines[:3], _metrics_line(), *lines[3:]]) + "\n")
    res, model = _analyze(tmp_path / "otel.json")
    assert res.returncode == 0, res.stderr
    assert model["requests"]["count"] == 6 and model["ingest"]["bad_lines"] == 0
    res, model = _analyze(tmp_path)  # found in a folder too
    assert res.returncode == 0 and model["requests"]["count"] == 6


def test_v1_lines_after_an_otlp_line_are_counted(tmp_path):
    from tests.fuzz.mutate import base_events, encode

    (tmp_path / "t.json").write_bytes("".join(line + "\n" for line in _span_lines()).encode() + encode(base_events()[:3]))
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    ing = model["ingest"]
    assert model["requests"]["count"] == 6 and ing["bad_lines"] == 3
    assert [s["line"] for s in ing["bad_line_samples"]] == [7, 8, 9]
    assert "v1 line in an OTLP file" in ing["bad_line_samples"][0]["reason"]


def test_pretty_printed_and_bom_files_read(tmp_path):
    obj = json.loads(_span_lines()[0])
    (tmp_path / "pretty.json").write_text(json.dumps(obj, indent=2) + "\n")
    (tmp_path / "t.json").write_bytes(b"\xef\xbb\xbf" + "\n".join(_span_lines(REQS[1:])).encode() + b"\n")
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    assert model["requests"]["count"] == 6 and model["ingest"]["bad_lines"] == 0


def _framed(messages: list[bytes]) -> bytes:
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


def _zstd_file(text: str, dst: Path) -> None:
    """A zstd stream of ``text`` (lines), written by DuckDB's zstd (no other dependency)."""
    src = dst.with_name(dst.name + ".src")
    src.write_text(text.rstrip("\n"))
    con = duckdb.connect()
    con.execute(f"COPY (SELECT content FROM read_text('{src}')) TO '{dst}' "
                "(FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01', COMPRESSION zstd)")  # fmt: skip
    con.close()
    src.unlink()


def _zstd_frame(data: bytes) -> bytes:
    """One zstd frame holding ``data`` in raw blocks (RFC 8878 3.1.1: a single-segment header
    with an 8-byte content size, blocks of at most 128 KiB, the last one marked)."""
    out = b"\x28\xb5\x2f\xfd" + b"\xe0" + len(data).to_bytes(8, "little")
    step = 128 << 10
    for i in range(0, max(len(data), 1), step):
        block = data[i : i + step]
        last = i + step >= len(data)
        out += ((len(block) << 3) | int(last)).to_bytes(3, "little") + block
    return out


def _protobuf_requests() -> list[bytes]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    rec = Recorder({"service.name": "vllm", "host.name": "gpu-a"}, seed=5)
    for r in REQS:
        vllm_request(rec, r)
    spans = list(rec.exporter.get_finished_spans())
    return [encode_spans(spans[i : i + 3]).SerializeToString() for i in (0, 3)]


def test_protobuf_named_in_a_folder_as_on_the_command_line(tmp_path):
    only = tmp_path / "only"
    only.mkdir()
    (only / "traces.json").write_bytes(_framed(_protobuf_requests()))
    res, _ = _analyze(only)
    assert res.returncode == 2
    assert "no log files found" not in res.stderr and "traces.json" in res.stderr
    assert "OTLP protobuf" in res.stderr and "format: json" in res.stderr, res.stderr
    res_file, _ = _analyze(only / "traces.json")
    assert res_file.returncode == 2 and "OTLP protobuf" in res_file.stderr
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "traces.json").write_bytes((only / "traces.json").read_bytes())
    write_vllm(beside / "good.json", vllm_workload(4, seed=9))
    # metrics without a GenAI histogram: named (the GenAI ones are read: the test below)
    (beside / "metrics.json").write_text(_metrics_line().replace("gen_ai.client.operation.duration", "http.server.duration") + "\n")
    res, model = _analyze(beside)
    assert res.returncode == 0, res.stderr
    skipped = {Path(s["file"]).name: s["reason"] for s in model["ingest"]["skipped"]}
    assert "OTLP protobuf" in skipped["traces.json"]
    assert "OTLP/JSON metrics" in skipped["metrics.json"]


def test_zstd_files_and_the_exporters_framed_zstd_read(tmp_path):
    lines = _span_lines()
    _zstd_file("\n".join(lines[:2]) + "\n", tmp_path / "a.json.zst")
    # the native-compression gate: one zstd stream of lines, under the configured name
    _zstd_file("\n".join(lines[2:4]) + "\n", tmp_path / "b.json")
    # legacy `compression: zstd`: each message its own zstd frame, after its length, no newline
    (tmp_path / "c.json").write_bytes(_framed([_zstd_frame(line.encode()) for line in lines[4:]]))
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    assert model["requests"]["count"] == 6 and model["ingest"]["bad_lines"] == 0
    assert model["ingest"]["files"] == 3


def test_many_one_span_files_cost_about_what_one_file_does(tmp_path):
    """300 files of one span each against the same spans in one file, in process CPU time (all
    threads): a statement a file made it ~12x (each file's typed read planned on its own)."""
    from dslogs.analyzer.ingest.logs import open_logs

    reqs = vllm_workload(300, seed=21)
    many, one = tmp_path / "many", tmp_path / "one"
    many.mkdir()
    one.mkdir()
    rec = Recorder({"service.name": "vllm", "host.name": "gpu-a", "process.pid": 4242}, seed=5)
    for r in reqs:
        vllm_request(rec, r)
    lines = rec.lines(per_line=1)
    for i, line in enumerate(lines):
        (many / f"t{i:04d}.json").write_text(line + "\n")
    (one / "t.json").write_text("".join(line + "\n" for line in lines))

    def cpu(folder):
        import time

        best = None
        for _ in range(2):
            t = time.process_time()
            with open_logs([str(folder)], use_cache=False, materialize=False) as db:
                assert db.con.execute("SELECT count(*) FROM requests").fetchall()[0][0] == 300
            took = time.process_time() - t
            best = took if best is None else min(best, took)
        return best

    cpu(one)  # warm: imports, the first connection
    assert cpu(many) < 4 * cpu(one) + 0.5


def test_genai_metrics_files_read_as_server_metrics(tmp_path):
    """Two exports of the SDK's cumulative GenAI histograms: a window, percentiles from the
    buckets; a metrics file without them is named, not read."""
    import time

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "chat"}))
    meter = provider.get_meter("genai")
    # the bucket boundaries the GenAI conventions advise for gen_ai.client.operation.duration
    bounds = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
    duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                      explicit_bucket_boundaries_advisory=bounds)  # fmt: skip
    other = meter.create_histogram("http.client.request.duration", unit="s")
    lines = []
    for batch in ([0.3, 0.4], [0.6, 1.5, 1.6, 1.7, 3.0, 4.0]):
        for v in batch:
            duration.record(v, {"gen_ai.operation.name": "chat"})
            other.record(v)
        lines.append(json.dumps(MessageToDict(encode_metrics(reader.get_metrics_data())), separators=(",", ":")))
        time.sleep(0.01)
    (tmp_path / "metrics.json").write_text("\n".join(lines) + "\n")
    write_vllm(tmp_path / "traces.json", vllm_workload(4, seed=9))
    res, model = _analyze(tmp_path)
    assert res.returncode == 0, res.stderr
    (server,) = model["server_metrics"]
    assert server["server"].endswith("chat") and server["snapshots"] == 2
    (hist,) = server["histograms"]
    assert hist["metric"] == "gen_ai.client.operation.duration" and hist["count"] == 6
    # the six values of the window: the median's rank (3) falls in (1.28, 2.56]
    assert hist["p50_bucket"] == [1.28, 2.56] and 1.28 <= hist["p50"] <= 2.56
    assert model["ingest"]["skipped"] == [] and model["requests"]["count"] == 4
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "metrics.json").write_text(_metrics_line().replace("gen_ai.client.operation.duration", "http.server.duration") + "\n")
    res, _ = _analyze(alone)
    assert res.returncode == 2 and "OTLP/JSON metrics" in res.stderr
