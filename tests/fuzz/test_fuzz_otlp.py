"""Fuzz: in OTLP/JSON files, one bad value costs that value or its span, never the file.

Seeded and reproducible: case k uses random.Random(f"otlp-{k}"). Each case writes vLLM
``llm_request`` spans (the OpenTelemetry SDK's own OTLP encoder, one span a line) and damages a
few of them with hostile values of the wrong type, NaN and infinities, unreadable times, lone
surrogates and wrong containers. The expectation is built here, span by span, independently of
the reader: a span whose start or end is no unix-nanosecond integer, or whose line's structure
DuckDB cannot type (attributes or spans that are no list), is lost; every other span is one
request; every damaged line is one bad line, named with its own number; nothing names a file of
dslogs' own. DSLOGS_FUZZ_CASES scales the number of cases (default 12, ~20 s).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("opentelemetry.sdk")

from otlp_helpers import Recorder, vllm_request, vllm_workload  # noqa: E402

from dslogs.analyzer.ingest.logs import open_logs  # noqa: E402
from dslogs.analyzer.ingest.validate import SAMPLES_PER_FILE  # noqa: E402

CASES = max(int(os.environ.get("DSLOGS_FUZZ_CASES", "0") or 0) // 20, 12)
SPANS = 10

BAD_TIMES = ["abc", "", "9" * 30, "-5", "1.7e18", " 1", "0x10", None, 17.5, True, [], {}]
BAD_DOUBLES = ["abc", "NaN", "Infinity", "-Infinity", "nan", 1e308, -1e300, "1e400", "", [1], {"a": 1}]
BAD_BOOLS = ["maybe", "", 2, "yes", [True], {"b": 1}]
BAD_INTS = ["abc", "1.5", 1e30, "", "99999999999999999999", [1], {"i": 1}]
BAD_STATUS = ["ERROR", 2, [], True]
BAD_EVENTS = ["x", 5, {"name": "exception"}, True]


def _lines() -> list[str]:
    rec = Recorder({"service.name": "vllm", "host.name": "gpu-a", "process.pid": 4242}, seed=11)
    for r in vllm_workload(SPANS, seed=4):
        vllm_request(rec, r)
    return rec.lines(per_line=1)


BASE = _lines()


def damage(span: dict, rng: random.Random) -> bool:
    """Damage ``span`` in place; whether it is lost (its time or its line's structure)."""
    kind = rng.choice(["time", "double", "bool", "int", "status", "events", "surrogate", "container"])
    if kind == "time":
        span[rng.choice(["startTimeUnixNano", "endTimeUnixNano"])] = rng.choice(BAD_TIMES)
        return True
    if kind == "status":
        span["status"] = rng.choice(BAD_STATUS)
    elif kind == "events":
        span["events"] = rng.choice(BAD_EVENTS)
    elif kind == "surrogate":
        span["attributes"].append({"key": "fuzz.text", "value": {"stringValue": "a\ud800b"}})
    elif kind == "container":
        span["attributes"] = rng.choice(["x", 5, {"key": "k"}])
        return True
    else:
        field, values = {"double": ("doubleValue", BAD_DOUBLES), "bool": ("boolValue", BAD_BOOLS),
                         "int": ("intValue", BAD_INTS)}[kind]  # fmt: skip
        attr = rng.choice(span["attributes"])
        attr["value"] = {field: rng.choice(values)}
    return False


def test_one_bad_value_costs_that_value_or_its_span(tmp_path):
    for k in range(CASES):
        rng = random.Random(f"otlp-{k}")
        lines = list(BASE)
        damaged = sorted(rng.sample(range(SPANS), rng.randint(1, 4)))
        lost = 0
        for i in damaged:
            obj = json.loads(lines[i])
            lost += damage(obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0], rng)
            lines[i] = json.dumps(obj, separators=(",", ":"))
        folder = tmp_path / f"case{k}"
        folder.mkdir()
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
        # json.dumps writes a lone surrogate as its escape: the bytes on disk are ASCII
        (folder / "traces.json").write_bytes(data)
        with open_logs([str(folder)], use_cache=False, tz="UTC") as db:
            requests = db.con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
            ingest = db.ingest
        where = f"case {k} (seed otlp-{k}), damaged lines {[i + 1 for i in damaged]}"
        assert requests == SPANS - lost, where
        assert ingest["bad_lines"] == len(damaged) and not ingest["skipped"], (where, ingest)
        samples = ingest["bad_line_samples"]
        assert [s["line"] for s in samples] == [i + 1 for i in damaged][:SAMPLES_PER_FILE], (where, samples)
        assert all(s["file"].endswith("traces.json") for s in samples), where
        assert "dslogs-" not in json.dumps(samples), (where, samples)
