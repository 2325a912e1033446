"""Fuzz: hostile Prometheus snapshots cost that value, that line or that file, never the run.

Seeded and reproducible: case k uses random.Random(f"prom-{k}"). Each case writes three scrapes
of one server (vLLM through the real prometheus_client, TGI and llama.cpp rebuilt from their
source: tests/prom_helpers.py) and damages them the ways the exposition format and a disk allow:
NaN, infinities, 1e400 and negatives as values, absurd sample timestamps, unparsable values and
labels, conflicting TYPE lines, over-long lines, NUL and invalid UTF-8, gzip bit flips and
truncation. For every case: reading completes without an exception; every number out is finite
(strict JSON) and no increase, rate or count is negative. One case in five also runs
``dslogs analyze --format json``: exit 0 or 2, never a traceback. DSLOGS_FUZZ_CASES scales the
number of cases (default 60, a few seconds).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("prometheus_client")

from prom_helpers import LlamaCppServer, TgiServer, VllmServer  # noqa: E402

from dslogs.analyzer.cli import app  # noqa: E402
from dslogs.analyzer.ingest import prometheus  # noqa: E402

CASES = max(int(os.environ.get("DSLOGS_FUZZ_CASES", "0") or 0) // 10, 60)
T0 = 1_796_000_000
VALUES = ["NaN", "+Inf", "-Inf", "1e400", "-1e400", "-5", "abc", "0x10", "1_000", "", "9" * 400, "-0", "nan",
          "Infinity", "1e-400"]  # fmt: skip
STAMPS = ["1" * 20, "9" * 400, "-" + "9" * 30, "1.5", "abc", "-1", "0", "253402300800000"]


def _texts(rng: random.Random) -> list[bytes]:
    kind = rng.choice(["vllm", "tgi", "llamacpp"])
    out = []
    if kind == "vllm":
        from prometheus_client import generate_latest

        srv = VllmServer()
        for _ in range(3):
            for _ in range(rng.randint(0, 8)):
                srv.finish(rng.uniform(0.01, 3), rng.uniform(0.1, 20), rng.uniform(0, 2), rng.randint(1, 4000),
                           rng.randint(1, 900))  # fmt: skip
            out.append(generate_latest(srv.registry))
    elif kind == "tgi":
        srv = TgiServer()
        for _ in range(3):
            for _ in range(rng.randint(0, 8)):
                srv.finish(rng.uniform(0.1, 20), rng.uniform(0, 2), rng.randint(1, 4000), rng.randint(1, 900))
            out.append(srv.text().encode())
    else:
        srv = LlamaCppServer()
        for _ in range(3):
            srv.serve([(rng.randint(1, 900), rng.randint(1, 90)) for _ in range(rng.randint(1, 6))], rng.randint(1, 4))
            out.append(srv.text().encode())
    return out


def _damage(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    samples = [i for i, line in enumerate(lines) if line and not line.startswith(b"#")]
    how = rng.choice(["value", "value", "stamp", "type", "label", "long", "bytes", "none"])
    if how == "value" and samples:
        for i in rng.sample(samples, min(len(samples), rng.randint(1, 3))):
            lines[i] = lines[i].rsplit(b" ", 1)[0] + b" " + rng.choice(VALUES).encode()
    elif how == "stamp" and samples:
        i = rng.choice(samples)
        lines[i] += b" " + rng.choice(STAMPS).encode()
    elif how == "type":
        types = [i for i, line in enumerate(lines) if line.startswith(b"# TYPE")]
        if types:
            i = rng.choice(types)
            parts = lines[i].split(b" ")
            lines[i] = b" ".join(parts[:3] + [rng.choice([b"histogram", b"summary", b"counter", b"gauge", b"bogus"])])
    elif how == "label" and samples:
        i = rng.choice(samples)
        lines[i] = lines[i].replace(b"{", rng.choice([b"{le=\"x\",", b"{quantile=\"nan\",", b"{\"", b"{a=\"\\\""]), 1)
    elif how == "long":
        lines.insert(rng.randrange(len(lines)), b"vllm:x " + b"9" * rng.choice([100, (1 << 20) + 7]))
    elif how == "bytes":
        raw = bytearray(b"\n".join(lines))
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.choice([0, 0xFF, 0x80, ord("{"), ord("\n"), rng.randrange(256)])
        return bytes(raw)
    return b"\n".join(lines)


def _write(rng: random.Random, folder: Path) -> None:
    for k, text in enumerate(_texts(rng)):
        data = _damage(rng, text) if rng.random() < 0.7 else text
        name = f"metrics-{T0 + 60 * k}.prom"
        if rng.random() < 0.3:
            raw = bytearray(gzip.compress(data))
            if rng.random() < 0.5:
                if rng.random() < 0.5:
                    raw = raw[: rng.randrange(1, len(raw))]
                else:
                    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            (folder / (name + ".gz")).write_bytes(bytes(raw))
        else:
            (folder / name).write_bytes(data)


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, float | int) and not isinstance(obj, bool):
        yield obj


@pytest.mark.parametrize("k", range(CASES))
def test_hostile_snapshots(tmp_path, k):
    rng = random.Random(f"prom-{k}")
    _write(rng, tmp_path)
    files = sorted(tmp_path.iterdir())
    servers, bad = prometheus.read_servers([(f, f.name) for f in files])
    json.dumps(servers, allow_nan=False)
    assert all(math.isfinite(x) for x in _numbers(servers))
    for sv in servers:
        assert sv["restarts"] >= 0
        assert all((c["increase"] or 0) >= 0 and (c["per_s"] or 0) >= 0 for c in sv["counters"])
        assert all(h["count"] >= 0 for h in sv["histograms"])
    assert all(isinstance(no, int) and no >= 0 and why for _, no, why in bad)
    if k % 5 == 0:
        res = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json", "--no-cache"])
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        assert res.exit_code in (0, 2) and "Traceback" not in res.output, res.output[-2000:]
