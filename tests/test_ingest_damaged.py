"""Damaged input never aborts a run: bad lines are skipped and counted with file, line, reason."""

from __future__ import annotations

import gzip

import pytest

from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest.logs import open_logs, run_query
from dslogs.analyzer.ingest.validate import MAX_LINE_BYTES, SAMPLES_PER_FILE
from tests.ingest_lines import dumps, legacy, v1, write_lines

GOOD = [v1(f"2026-11-23T10:00:{s:02d}.000+00:00", "gpu_sample", None, None, gpu_util_pct=float(s)) for s in range(6)]


def good(k: int) -> bytes:
    return dumps(GOOD[k]).encode() + b"\n"


def read(*paths, **kw):
    return open_logs([str(p) for p in paths], use_cache=False, **kw)


def samples(db):
    return [(s["line"], s["reason"]) for s in db.ingest["bad_line_samples"]]


def util_values(db):
    return [r[0] for r in run_query(db, "SELECT gpu_util_pct FROM events ORDER BY ts").rows]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"gpu_sa\n', "malformed JSON"),  # truncated mid-file
        (b"Traceback (most recent call last):\n", "malformed JSON"),
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"gpu_sample","gpu_util_pct":"87 %"}\n', "wrong value type: gpu_util_pct"),
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"gpu_sample","pid":1e30}\n', "wrong value type: pid"),
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"decode","params":7}\n', "wrong value type: params"),
        (b'{"v":1,"ts":"yesterday","stage":"gpu_sample"}\n', "unreadable time: ts"),
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"error","error_msg":"\xe5\x9c"}\n', "invalid UTF-8"),
        (b'[1, 2, 3]\n', "not a JSON object"),
        (b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00"}\n', "no stage"),
        (b'{"v":1,"stage":"gpu_sample"}\n', "no ts"),
        (b'{"session_id":"x","stage":"input"}\n', "no timestamp"),
        (b'{"session_id":"x","timestamp":"noon","stage":"input"}\n', "unreadable time (timestamp)"),
    ],
)
def test_one_bad_line_is_skipped_and_counted(tmp_path, bad, reason):
    path = tmp_path / "ds15b_20261123.jsonl"
    path.write_bytes(good(0) + good(1) + bad + good(2) + good(3))
    db = read(path)
    assert db.ingest["bad_lines"] == 1 and db.ingest["events"] == 4
    (line, why), = samples(db)
    assert line == 3 and why.startswith(reason), why
    assert db.ingest["bad_line_samples"][0]["file"] == str(path)
    assert util_values(db) == [0, 1, 2, 3]


def test_blank_lines_are_not_bad_and_line_numbers_count_them(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(good(0) + b"\n" + b"  \t \n" + b"{oops}\n" + good(1) + b"\r\n")
    db = read(path)
    assert db.ingest["bad_lines"] == 1 and samples(db)[0][0] == 4 and db.ingest["events"] == 2


def test_truncated_last_line_of_a_growing_file(tmp_path):
    path = tmp_path / "ds15b_20261123.jsonl"
    path.write_bytes(good(0) + good(1) + good(2)[:25])  # the writer is mid-line
    db = read(path)
    assert samples(db) == [(3, "truncated line at end of file")] and db.ingest["events"] == 2


def test_last_line_without_newline_is_kept_when_complete(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(good(0) + good(1).rstrip(b"\n"))
    db = read(path)
    assert db.ingest["bad_lines"] == 0 and db.ingest["events"] == 2


def test_line_over_16_mib_is_skipped_without_holding_it(tmp_path):
    path = tmp_path / "x.jsonl"
    huge = b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"error","error_msg":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n'
    path.write_bytes(good(0) + huge + good(1))
    db = read(path)
    assert samples(db) == [(2, "line over 16 MiB")] and util_values(db) == [0, 1]


def test_many_bad_lines_keep_a_few_samples_and_the_full_count(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(good(k % 6) if k % 3 else b"garbage\n" for k in range(60)))
    db = read(path)
    assert db.ingest["bad_lines"] == 20 and db.ingest["events"] == 40
    assert [s[0] for s in samples(db)] == [1, 4, 7, 10, 13][:SAMPLES_PER_FILE]


def test_legacy_wrong_type_and_bad_utf8_lines(tmp_path):
    lines = [
        legacy("2026-11-23T10:00:00.000", "input", input_len=3),
        b'{"session_id": "unknown", "timestamp": "2026-11-23T10:00:01.000", "stage": "gpu_memory", '
        b'"duration_ms": -1, "kv_cache_size_mb": "3412.5 MiB", "reserved_mb": 4200.0}\n',
        b'{"session_id": "unknown", "timestamp": "2026-11-23T10:00:02.000", "stage": "error", "error_msg": "\xe6\x8f\x90\xe7"}\n',
        legacy("2026-11-23T10:00:03.000", "format"),
    ]
    db = read(write_lines(tmp_path / "ds15b_20261123.jsonl", lines, legacy_style=True), tz="UTC")
    assert [line for line, _ in samples(db)] == [2, 3]
    assert samples(db)[0][1].startswith("wrong value type: kv_cache_size_mb")
    assert db.ingest["events"] == 2 and db.ingest["formats"] == {"legacy": 2}


def test_corrupt_gzip_keeps_what_came_before_the_damage(tmp_path):
    body = b"".join(good(k % 6) for k in range(3000))
    blob = gzip.compress(body)
    path = tmp_path / "ds15b_20261122.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])  # cut in the middle (a crash during gzip)
    other = write_lines(tmp_path / "ds15b_20261123.jsonl", GOOD[:2])
    db = read(tmp_path)
    assert db.ingest["skipped_files"] == 1 and db.ingest["unreadable_files"] == 1
    (skip,) = db.ingest["skipped"]
    assert skip["file"] == str(path) and skip["reason"].startswith("corrupt gzip after line")
    kept = int(skip["reason"].split("after line ")[1].split()[0])
    assert 0 < kept < 3000 and db.ingest["events"] == 2 + kept
    assert other.exists()


def test_not_a_gzip_and_an_empty_file_are_skipped(tmp_path):
    (tmp_path / "ds15b_20261121.jsonl.gz").write_bytes(b"this is not gzip at all\n")
    (tmp_path / "ds15b_20261122.jsonl").write_bytes(b"")
    write_lines(tmp_path / "ds15b_20261123.jsonl", GOOD[:3])
    db = read(tmp_path)
    assert db.ingest["events"] == 3 and db.ingest["skipped_files"] == 2
    reasons = sorted(s["reason"].split(" (")[0] for s in db.ingest["skipped"])
    assert reasons == ["corrupt gzip after line 0", "empty file"]


def test_a_run_whose_only_file_holds_no_event_is_refused_naming_the_file(tmp_path):
    # no line of it is an event: the user pointed at the wrong file, which an empty report hides
    path = tmp_path / "ds15b_20261122.jsonl"
    path.write_bytes(b"nothing useful\n{\n")
    with pytest.raises(InputError) as err:
        read(tmp_path)
    # one file: one line, naming it
    assert str(err.value).splitlines() == [f"{path}: no events: it looks like text, not JSON lines"]
    # several: a line each under one heading
    (tmp_path / "ds15b_20261123.jsonl").write_bytes(b"a,b\n1,2\n3,4\n")
    with pytest.raises(InputError) as err:
        read(tmp_path)
    assert str(err.value).splitlines() == [
        "no file yields an event",
        f"{path}: no events: it looks like text, not JSON lines",
        f"{tmp_path / 'ds15b_20261123.jsonl'}: no events: it looks like CSV",
    ]


def _damaged_v1() -> bytes:
    return (good(0)[:40] + b"\n"  # cut short
            + b'{"v":1,"ts":"2026-11-23T10:00:09.000+00:00","stage":"gpu_sample","gpu_util_pct":"87 %"}\n'
            + b'{"v":1,"ts":"yesterday","stage":"gpu_sample"}\n')  # fmt: skip


def _damaged_otlp(tmp_path) -> bytes:
    """vLLM's real OTLP/JSON output, each line cut in half."""
    from tests.otlp_helpers import vllm_workload, write_vllm

    whole = write_vllm(tmp_path / "whole.json", vllm_workload(6), per_line=2).read_bytes()
    (tmp_path / "whole.json").unlink()
    return b"".join(ln[: len(ln) // 2] + b"\n" for ln in whole.splitlines())


@pytest.mark.parametrize(
    ("name", "fmt", "first"),
    [
        ("ds15b_20261123.jsonl", "dslogs v1", "line 1: malformed JSON (Unterminated string"),
        ("ds15b_20261123.jsonl.gz", "dslogs v1", "line 1: malformed JSON (Unterminated string"),
        ("traces.json", "OTLP/JSON trace", "line 1: malformed JSON (Unterminated string"),
    ],
)
def test_a_file_of_damaged_lines_alone_says_so_in_one_line(tmp_path, name, fmt, first):
    """Every line damaged: refused as the damaged lines of its format, the first one's line and
    reason named (as any damaged line is counted), exit 2, one line on stderr."""
    import os
    import subprocess
    import sys

    data = _damaged_otlp(tmp_path) if name.startswith("traces") else _damaged_v1()
    path = tmp_path / "logs" / name
    path.parent.mkdir()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    res = subprocess.run([sys.executable, "-m", "dslogs", "analyze", str(path.parent), "--format", "json",
                          "--no-cache", "--quiet"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NO_COLOR": "1"})  # fmt: skip
    assert res.returncode == 2 and res.stdout == "", res.stderr
    n = len(data.splitlines())
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"dslogs: error: {path}: no events: it holds damaged {fmt} lines, {n} skipped "
                           f"(the first, {first}") and line.endswith(")"), line  # fmt: skip
    # next to a file with events: skipped and counted, the run goes on
    write_lines(path.parent / "ds15b_20261122.jsonl", GOOD[:3])
    db = read(path.parent)
    assert db.ingest["events"] == 3 and db.ingest["bad_lines"] == n
    assert {s["file"] for s in db.ingest["bad_line_samples"]} == {str(path)}
    db.close()


def test_damaged_format_reads_keys_of_a_line_cut_short():
    from dslogs.analyzer.ingest.formats import damaged_format

    assert damaged_format(b'{"v":1,"ts":"2026-11-23T10:00:0').name == "v1"
    assert damaged_format(b'{"timestamp":"2026-11-23 10:00:00","stage":"infer').name == "legacy"
    assert damaged_format(b'{"resourceSpans":[{"resource":{"attr').name == "otlp_traces"
    assert damaged_format(b'{"resourceMetrics":[]}\n') is None
    assert damaged_format(b"# README\n\ntext\n") is None
    assert damaged_format(b'{"name": "x", "value": 1}\n') is None


def test_damage_in_one_file_does_not_touch_its_neighbours(tmp_path):
    write_lines(tmp_path / "a" / "ds15b_20261122.jsonl", GOOD[:3])
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ds15b_20261122.jsonl").write_bytes(good(3) + b"{bad\n" + good(4))
    write_lines(tmp_path / "c" / "ds15b_20261122.jsonl.gz", GOOD[5:], gz=True)
    db = read(tmp_path)
    assert db.ingest["events"] == 6 and db.ingest["bad_lines"] == 1 and db.ingest["files"] == 3
    assert util_values(db) == [0, 1, 2, 3, 4, 5]
    per_file = dict(run_query(db, "SELECT regexp_extract(source_file, '/(a|b|c)/', 1), count(*) FROM events GROUP BY 1").rows)
    assert per_file == {"a": 3, "b": 2, "c": 1}


@pytest.mark.parametrize("blank", [b"   \n", b"\t\n", b"\n"])
def test_a_blank_line_in_one_file_keeps_every_line_length_in_step(tmp_path, blank):
    """A whitespace-only line is skipped by the JSON reader but is a line to the line-length pass:
    read in one batch with a neighbour, it once shifted that file's line_bytes by one line."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ds15b_20261122.jsonl").write_bytes(good(0) + blank + good(1) + good(2))
    write_lines(tmp_path / "b" / "ds15b_20261122.jsonl", GOOD[3:])
    db = read(tmp_path)
    assert db.ingest["events"] == 6 and util_values(db) == [0, 1, 2, 3, 4, 5]
    got = run_query(db, "SELECT gpu_util_pct, line_bytes FROM events ORDER BY ts").rows
    assert [(int(u), n) for u, n in got] == [(k, len(good(k))) for k in range(6)]


def test_a_first_line_nested_past_the_parsers_depth_is_a_bad_line_not_a_crash(tmp_path):
    # the format sniff reads the first line too: it must not raise where the line judge counts
    write_lines(tmp_path / "ds15b_20261122.jsonl", GOOD[:3])
    path = tmp_path / "ds15b_20261122.jsonl"
    path.write_bytes(b"[" * 100_000 + b"\n" + path.read_bytes())
    db = read(tmp_path)
    assert db.ingest["events"] == 3 and db.ingest["bad_lines"] == 1
