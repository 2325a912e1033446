"""Fuzz: damaged logs cost exactly their own lines.

Seeded and reproducible: case k of a class uses random.Random(f"{class}-{k}"). A failing case
prints its seed and keeps its file under test-output/fuzz/. DSLOGS_FUZZ_CASES scales every
class (default: a few hundred cases in all, ~1-2 minutes); e.g. DSLOGS_FUZZ_CASES=5000.

For every case: the run completes without a traceback; the events kept equal the oracle's
line-by-line count (tests/fuzz/oracle.py, LINE_RULES); the bad lines counted and the first
ones named (file, line) are the oracle's. The plain cases of a class are read together, one
file per folder, in one read, and judged file by file; each .gz case and each case that also runs
`analyze` is read alone.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import InputError
from dslogs.analyzer.ingest.logs import open_logs
from dslogs.analyzer.ingest.validate import SAMPLES_PER_FILE
from tests.fuzz.mutate import (
    BYTE_MUTATIONS,
    base_events,
    byte_mutation,
    encode,
    field_cases,
    with_bad_value,
)
from tests.fuzz.oracle import Oracle, gunzip_prefix

REPO = Path(__file__).resolve().parents[2]
SCALE = int(os.environ.get("DSLOGS_FUZZ_CASES", "0") or 0)
BYTE_CASES = max(SCALE // len(BYTE_MUTATIONS), 16)  # per mutation kind: 8 x 16 = 128 by default
FIELD_STRIDE = 1 if SCALE >= 1000 else 11  # every 11th (field, value) pair by default: 133 of 1457
ANALYZE_EVERY = 10  # also a full `analyze --format json` for one case in ten

BASE = encode(base_events())


@pytest.fixture(scope="module")
def oracle():
    o = Oracle("UTC")
    yield o
    o.close()


def _keep(tmp: Path, name: str) -> str:
    out = REPO / "test-output" / "fuzz"
    out.mkdir(parents=True, exist_ok=True)
    for p in tmp.iterdir():
        shutil.copy(p, out / f"{name}-{p.name}")
    return str(out)


def check(tmp_path: Path, data: bytes, gz: bool, oracle: Oracle, case: str, analyze: bool) -> None:
    name = "ds15b_20261123.jsonl" + (".gz" if gz else "")
    path = tmp_path / name
    path.write_bytes(data)
    if gz:
        plain, complete = gunzip_prefix(data)
    else:
        plain, complete = data, True
    try:
        try:
            db = open_logs([str(path)], use_cache=False, tz="UTC", materialize=False)
            ingest = dict(db.ingest)
            db.close()
        except InputError as err:
            # a damaged .gz of which nothing is read: no file yields an event, which is refused
            # with the file's name and what it looks like
            assert gz and not complete, err
            assert str(err).splitlines()[-1].startswith(f"{path}: no events: it looks like a damaged gzip"), err
            ingest = {"events": 0}
        if complete:
            want = oracle.expect(plain)
            assert ingest["events"] == want.good, (ingest["events"], want.good)
            assert ingest["bad_lines"] == len(want.bad), (ingest["bad_line_samples"], want.bad)
            named = [(s["file"], s["line"]) for s in ingest["bad_line_samples"]]
            assert named == [(str(path), n) for n in want.bad[:SAMPLES_PER_FILE]], (named, want.bad)
            assert all(s["reason"] for s in ingest["bad_line_samples"])
        else:
            # A damaged .gz: the lines before the damage, never more than the whole file has,
            # and the file is reported as damaged unless nothing was lost.
            full = oracle.expect(gzip.decompress(gzip.compress(BASE)))
            assert ingest["events"] <= full.good
        if analyze:
            r = CliRunner().invoke(app, ["analyze", str(path), "--format", "json", "--no-cache", "--tz", "UTC"])
            assert r.exit_code in (0, 2), r.output
            assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
            assert "Traceback" not in r.output
    except BaseException:
        print(f"fuzz case {case} failed; files kept in {_keep(tmp_path, case)}")
        raise


def check_together(root: Path, cases: list[tuple[str, bytes]], oracle: Oracle) -> None:
    """Plain (not gzipped) cases read together, each file in a folder of its own, by one
    open_logs: each file's events and first bad lines (file, line) are the oracle's for that file
    alone, and the bad lines counted are all of theirs. (A damaged file costs its own lines, not
    its neighbours'.) One read for many cases: the read's fixed cost is paid once."""
    paths, wants = [], []
    for i, (_case, data) in enumerate(cases):
        path = root / f"{i}" / "ds15b_20261123.jsonl"
        path.parent.mkdir()
        path.write_bytes(data)
        paths.append(path)
        wants.append(oracle.expect(data))
    try:
        db = open_logs([str(root)], use_cache=False, tz="UTC", materialize=False)
        try:
            ingest, damaged = dict(db.ingest), dict(db.damaged)
            per_file = dict(db.con.execute("SELECT source_file, count(*) FROM events GROUP BY 1").fetchall())
        finally:
            db.close()
        assert ingest["files"] == len(paths) and ingest["duplicate_files"] == 0, ingest
        assert ingest["bad_lines"] == sum(len(w.bad) for w in wants), ingest["bad_lines"]
        for (case, _), path, want in zip(cases, paths, wants, strict=True):
            assert per_file.get(str(path), 0) == want.good, (case, per_file.get(str(path), 0), want.good)
            bad, samples, _ = damaged.get(str(path), (0, [], None))
            assert bad == len(want.bad), (case, samples, want.bad)
            named = [(s["file"], s["line"]) for s in samples]
            assert named == [(str(path), n) for n in want.bad[:SAMPLES_PER_FILE]], (case, named, want.bad)
            assert all(s["reason"] for s in samples)
    except BaseException:
        print(f"fuzz cases {[c for c, _ in cases]} read together failed; files kept in {_keep_tree(root)}")
        raise


def _keep_tree(root: Path) -> str:
    out = REPO / "test-output" / "fuzz"
    out.mkdir(parents=True, exist_ok=True)
    for p in root.glob("*/*"):
        shutil.copy(p, out / f"together-{p.parent.name}-{p.name}")
    return str(out)


@pytest.mark.parametrize("kind", BYTE_MUTATIONS)
def test_byte_mutations(tmp_path, oracle, kind):
    together, seen = [], set()
    for k in range(BYTE_CASES):
        rng = random.Random(f"{kind}-{k}")
        data, gz = byte_mutation(BASE, kind, rng)
        if gz or k % ANALYZE_EVERY == 0:
            # alone: a .gz is read to its damage, or refused when nothing of it reads; and the
            # full `analyze` runs on the one file
            case_dir = tmp_path / f"{k}"
            case_dir.mkdir()
            check(case_dir, data, gz, oracle, f"{kind}-{k}", analyze=k % ANALYZE_EVERY == 0)
        elif data not in seen:  # the same bytes twice are one case (and one file, to the reader)
            seen.add(data)
            together.append((f"{kind}-{k}", data))
    if together:  # none when every case of the kind is a .gz
        (tmp_path / "together").mkdir()
        check_together(tmp_path / "together", together, oracle)


def test_one_bad_value_per_field(tmp_path, oracle):
    cases = field_cases()[::FIELD_STRIDE]
    assert len(cases) > 100 or FIELD_STRIDE == 1
    events = base_events()
    together, seen = [], set()
    for k, (field_name, value) in enumerate(cases):
        rng = random.Random(f"field-{k}")
        bad_events, _index = with_bad_value(events, field_name, value, rng)
        data = encode(bad_events)
        if k % (3 * ANALYZE_EVERY) == 0:
            case_dir = tmp_path / f"{k}"
            case_dir.mkdir()
            check(case_dir, data, False, oracle, f"field-{k}-{field_name}", analyze=True)
        elif data not in seen:
            seen.add(data)
            together.append((f"field-{k}-{field_name}", data))
    (tmp_path / "together").mkdir()
    check_together(tmp_path / "together", together, oracle)


def test_the_oracle_itself_sees_damage(oracle):
    # The oracle must be able to fail: a clean file is all events, one garbage line is one bad line.
    assert oracle.expect(BASE).good == len(base_events()) and oracle.expect(BASE).bad == []
    want = oracle.expect(BASE.replace(b"\n", b"\n{oops\n", 1))
    assert want.bad == [2] and want.good == len(base_events())
    want = oracle.expect(BASE.replace(b'"ts":"2026-11-23T10:00:00.000+00:00"', b'"ts":"2026-W48-1"', 1))
    assert want.bad == [1]
