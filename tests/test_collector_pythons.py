"""The collector on every Python it supports (3.9 to 3.13), as an inference app gets it.

For each pyenv Python of the range, its wheel (built once from packaging/collector) is installed
by that Python's own pip into a fresh venv, with no index: pip checks the wheel's Requires-Python
there, as it would in the app's environment. Then a real app script runs with `-I` (the standard
library and the wheel only): spans, a request with its stages, article 003's `log_event`, the
process sampler, rotation with gzip, flush on close; and a child killed by SIGTERM whose queued
events must be on disk. The lines are read back here and checked against schema v1, and the
line of odd values against the one the suite's Python writes. What the run cannot reach is
checked by name: every module the package imports and every `module.attr` it reads exists on
that Python.

The analyzer's range is its own (3.11+): the dslogs wheel installs with its dependencies and
runs `dslogs analyze` on 3.12 and 3.13 (3.11 is the suite's own Python), and pip refuses it on
3.9 and 3.10.

A Python of the range missing on the machine fails the test under CI (the machine image has
all five) and skips it elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.collector_helpers import log_files, read_lines, validate

REPO = Path(__file__).resolve().parents[1]
COLLECTOR_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
ANALYZER_PYTHONS = ("3.12", "3.13")  # 3.11: the suite's own
ANALYZER_REFUSED = ("3.9", "3.10")
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

pytestmark = pytest.mark.skipif(os.name != "posix", reason="pyenv Pythons and POSIX signals")


def _pyenv_root() -> Path:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    pyenv = shutil.which("pyenv")
    if pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    return Path.home() / ".pyenv"


def _find_python(minor: str) -> Path | None:
    """The newest pyenv CPython `minor`.N, else a `python<minor>` on PATH that really is it (a
    pyenv shim for a version not selected answers with an error, not a Python)."""
    found = []
    for d in (_pyenv_root() / "versions").glob(f"{minor}.*"):
        m = re.fullmatch(re.escape(minor) + r"\.(\d+)", d.name)
        exe = d / "bin" / f"python{minor}"
        if m and exe.is_file():
            found.append((int(m[1]), exe))
    if found:
        return max(found)[1]
    exe = shutil.which(f"python{minor}")
    if exe:
        r = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == minor:
            return Path(exe)
    return None


def _python_or_skip(minor: str) -> Path:
    exe = _find_python(minor)
    if exe is None:
        msg = (f"Python {minor} not found (looked in {_pyenv_root() / 'versions'} and for python{minor} "
               f"on PATH): install it with `pyenv install {minor}`")
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH/PYTHONHOME of the suite, no pyenv selection leaking into the child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYENV_VERSION", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def _venv(python: Path, where: Path) -> Path:
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(where)], check=True, timeout=120,
                   env=_clean_env())
    return where / "bin" / "python"


def _pip_install(python: Path, venv_python: Path, *args: str) -> subprocess.CompletedProcess:
    """`python`'s own pip installing into the venv (`--python`): no pip bootstrap per venv."""
    return subprocess.run([str(python), "-m", "pip", "--python", str(venv_python), "install", "-q",
                           "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600, env=_clean_env())


@pytest.fixture(scope="module")
def collector_wheel(wheels) -> Path:
    return wheels[1]


# What an app does with the collector, every public path once. Runs on the Python under test.
APP = r"""
import json, sys, time
import dslogs_collector
# every module imports on this Python (hf and samplers load torch/pynvml lazily, not here)
import dslogs_collector.files, dslogs_collector.hf, dslogs_collector.request, dslogs_collector.samplers, dslogs_collector.schema
import dslogs_collector.values, dslogs_collector.writer
from dslogs_collector import SCHEMA_VERSION, Tracer, log_event, set_default_tracer

t = Tracer(sys.argv[1], max_bytes=4096, gzip=True, flush_interval_s=0.02,
           samplers=("process",), sample_interval_s=0.05)
set_default_tracer(t)
with t.request(session_id="s1", request_id="r1", route="chat"):
    t.queue_wait(12.5, session_id="s1", request_id="r1", source="app")
    with t.stage("tokenize", session_id="s1", request_id="r1") as span:
        span.set(input_len=12)
    t.event("prefill", 3.5, session_id="s1", request_id="r1", tokens=12)
    t.event("decode", 20.25, session_id="s1", request_id="r1", tokens=40, finish="eos")
try:
    with t.stage("format", session_id="s1", request_id="r2"):
        raise ValueError("no closing tag")
except ValueError:
    pass
log_event("input", input_chars=5, session_id="s2")
log_event("tokenize", 1.5, input_len=3, session_id="s2")
log_event("format", session_id="s2")
for i in range(300):
    t.event("queue", 1.0, seq=i, session_id="s3", note="x" * 40)
# values off the writer's fast path (collector/values.py): the same line on every Python
import decimal, enum
class Kind(enum.IntEnum):
    A = 7
nested = []
for _ in range(9):
    nested = [nested]
t.event("inference", float("nan"), session_id="s4", pair=(1, 2.5), one={"b"}, raw=b"\xff\x00",
        meta={"k": [1, None, float("inf")], 3: {"e": (3,)}}, big=2 ** 70, dec=decimal.Decimal("1.25"),
        kind=Kind.A, many=list(range(150)), long="y" * 5000, nested=nested, ts=1, stage="x")
time.sleep(0.3)
t.close()
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "file": dslogs_collector.__file__,
                  "schema": SCHEMA_VERSION}))
"""

# Code the app run does not reach (the HF integration without torch, error paths) still must not
# name what this Python lacks: every module the installed package imports, at any depth, and
# every `module.attr` it reads from one, must exist here. The optional third-party packages are
# imported lazily and only where present.
NAMES = r"""
import ast, importlib, inspect, json, sys
from pathlib import Path
import dslogs_collector

OPTIONAL = {"torch", "transformers", "pynvml", "psutil", "streamlit", "gradio", "numpy"}
missing, checked = [], 0


def load(name, where):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing.append(f"{where}: import {name}: {e}")


for path in sorted(Path(dslogs_collector.__file__).parent.glob("*.py")):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules = {}
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OPTIONAL | {"collector"}:
                    continue
                mod = load(a.name, where)
                if mod is not None:
                    modules[a.asname or a.name.split(".")[0]] = mod if a.asname else load(a.name.split(".")[0], where)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module.split(".")[0] in OPTIONAL | {"collector"}:
                continue
            mod = load(node.module, where)
            for a in node.names if mod is not None else ():
                value = getattr(mod, a.name, None)
                if value is None and not hasattr(mod, a.name):
                    try:
                        value = importlib.import_module(f"{node.module}.{a.name}")
                    except ImportError:
                        missing.append(f"{where}: from {node.module} import {a.name}: no such name")
                if inspect.ismodule(value):
                    modules[a.asname or a.name] = value
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            checked += 1
            if not hasattr(modules[node.value.id], node.attr):
                missing.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr} does not exist")
print(json.dumps({"missing": missing, "checked": checked}))
"""

# Events queued just after the writer's first wake-up (it sleeps 1 s, its longest), then
# SIGTERM: only the collector's handler can put them on disk before the process dies (with
# handle_signals=False the file holds the start heartbeat alone).
KILLED_APP = r"""
import sys, time
from dslogs_collector import Tracer
t = Tracer(sys.argv[1], flush_interval_s=1.0)
time.sleep(0.05)
for i in range(500):
    t.event("queue", 1.0, seq=i, session_id="k")
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def odd_line_here(tmp_path_factory) -> dict:
    """APP's "inference" line (odd values) as the suite's Python writes it from this checkout."""
    logs = tmp_path_factory.mktemp("odd_here")
    run = subprocess.run([sys.executable, "-c", APP, str(logs)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr
    return _odd(read_lines(logs))


def _odd(events: list[dict]) -> dict:
    (line,) = [e for e in events if e["stage"] == "inference"]
    return {k: v for k, v in line.items() if k not in ("ts", "pid", "host")}


def _data(events: list[dict]) -> list[dict]:
    return [e for e in events if e["stage"] not in ("collector", "deploy")]


@pytest.mark.parametrize("minor", COLLECTOR_PYTHONS)
def test_collector_wheel_installs_and_traces_on(minor, collector_wheel, odd_line_here, tmp_path):
    python = _python_or_skip(minor)
    started = time.monotonic()
    venv_py = _venv(python, tmp_path / "venv")
    r = _pip_install(python, venv_py, "--no-index", "--no-deps", str(collector_wheel))
    assert r.returncode == 0, f"pip on {minor} refused the collector wheel:\n{r.stderr}"

    logs = tmp_path / "logs"
    run = subprocess.run([str(venv_py), "-I", "-c", APP, str(logs)], cwd=tmp_path, capture_output=True,
                         text=True, env=_clean_env(), timeout=120)
    assert run.returncode == 0, run.stderr
    # the collector reports its own trouble (a field it could not encode, a failed write) on stderr
    assert run.stderr == "", run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["version"] == minor
    assert got["file"].startswith(str(tmp_path / "venv")), got["file"]

    events = read_lines(logs)
    for e in events:
        validate(e)
    assert {e["v"] for e in events} == {got["schema"]}
    files = [p.name for p in log_files(logs)]
    assert len(files) > 2 and any(n.endswith(".jsonl.gz") for n in files), files  # rotated, gzipped

    data = _data(events)
    r1 = [e for e in data if e.get("request_id") == "r1"]
    assert [e["stage"] for e in r1] == ["queue", "tokenize", "prefill", "decode", "request"], r1
    queue, tokenize, prefill, decode, request = r1
    assert queue["duration_ms"] == 12.5 and queue["source"] == "app"
    assert tokenize["input_len"] == 12 and tokenize["duration_ms"] >= 0 and "cpu_time_ms" in tokenize
    assert prefill["duration_ms"] == 3.5 and decode["tokens"] == 40 and decode["finish"] == "eos"
    assert request["route"] == "chat" and request["session_id"] == "s1"
    assert request["duration_ms"] >= 12.5  # the queue wait belongs to the request

    err = [e for e in data if e["stage"] == "error"]
    assert [(e["error_type"], e["error_msg"], e["failed_stage"], e["request_id"]) for e in err] == [
        ("ValueError", "no closing tag", "format", "r2")]
    failed = [e for e in data if e["stage"] == "format" and e.get("request_id") == "r2"]
    assert [e["status"] for e in failed] == ["error"]

    s2 = [e for e in data if e.get("session_id") == "s2"]  # article 003's logger, drop-in
    assert [(e["stage"], e["duration_ms"]) for e in s2] == [("input", -1), ("tokenize", 1.5), ("format", -1)]
    assert s2[0]["input_chars"] == 5 and len({e["request_id"] for e in s2}) == 1

    odd = _odd(events)
    assert odd["ts_"] == 1 and odd["stage_"] == "x" and odd["duration_ms"] is None and odd["big"] == 2 ** 70
    assert odd == odd_line_here
    seqs = [e["seq"] for e in data if e["stage"] == "queue" and e.get("session_id") == "s3"]
    assert seqs == list(range(300))
    samples = [e for e in data if e["stage"] == "process_sample"]
    assert samples and all(e["rss_mb"] > 0 and e["threads"] >= 2 for e in samples), samples
    health = [e for e in events if e["stage"] == "collector"]
    assert health[-1]["dropped"] == 0 and health[-1]["written"] == len(events) - 1, health[-1]

    names = subprocess.run([str(venv_py), "-I", "-c", NAMES], cwd=tmp_path, capture_output=True, text=True,
                           env=_clean_env(), timeout=120)
    assert names.returncode == 0, names.stderr
    names_got = json.loads(names.stdout)
    assert names_got["missing"] == [] and names_got["checked"] > 100, names_got

    killed = tmp_path / "killed"
    p = subprocess.Popen([str(venv_py), "-I", "-c", KILLED_APP, str(killed)], cwd=tmp_path, env=_clean_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGTERM, (p.returncode, stderr)  # the signal still ends the app
    written = read_lines(killed)
    for e in written:
        validate(e)
    assert [e["seq"] for e in _data(written)] == list(range(500))
    health = [e for e in written if e["stage"] == "collector"]
    assert len(health) == 2 and health[-1]["dropped"] == 0, health  # start and exit heartbeats
    print(f"\nPython {minor}: venv, install and the runs in {time.monotonic() - started:.1f} s")


def test_collector_installs_from_the_checkout_on_the_oldest_python(tmp_path):
    """docs/collector.md's `pip install ./packaging/collector`, run by the app's own 3.9 pip:
    the build backend comes from the index for that Python (build isolation), as in the app's
    environment."""
    python = _python_or_skip(COLLECTOR_PYTHONS[0])
    venv_py = _venv(python, tmp_path / "venv")
    r = _pip_install(python, venv_py, str(REPO / "packaging" / "collector"))
    assert r.returncode == 0, r.stderr
    run = subprocess.run([str(venv_py), "-I", "-c", "import dslogs_collector, sys; print(dslogs_collector.__file__, *sys.version_info[:2])"],
                         cwd=tmp_path, capture_output=True, text=True, env=_clean_env(), timeout=60)
    assert run.returncode == 0, run.stderr
    where, major, minor = run.stdout.split()
    assert where.startswith(str(tmp_path / "venv")) and f"{major}.{minor}" == COLLECTOR_PYTHONS[0], run.stdout


def test_collector_declares_the_range_it_is_tested_on(collector_wheel):
    import zipfile

    zf = zipfile.ZipFile(collector_wheel)
    meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Python: >=3.9" in meta.splitlines(), meta
    listed = {line.rsplit(":: ", 1)[1] for line in meta.splitlines()
              if re.fullmatch(r"Classifier: Programming Language :: Python :: 3\.\d+", line)}
    assert listed == set(COLLECTOR_PYTHONS), listed


def test_ruff_checks_the_collector_as_python_3_9():
    """A 3.10+ construct in collector/ fails the lint (pyproject's per-file-target-version);
    the same code elsewhere in the tree (3.11+) passes."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is in the test extra"
    newer = textwrap.dedent("""\
        def f(x: int | None):
            match x:
                case 1:
                    return 1
            return 0
    """)

    def check(path: str) -> subprocess.CompletedProcess:
        return subprocess.run([ruff, "check", "--no-cache", "--stdin-filename", path, "-"], input=newer,
                              cwd=REPO, capture_output=True, text=True)

    in_collector = check("collector/_probe.py")
    assert in_collector.returncode == 1, in_collector.stdout
    assert "Cannot use `match` statement on Python 3.9" in in_collector.stdout, in_collector.stdout
    assert "FA102" in in_collector.stdout, in_collector.stdout
    elsewhere = check("analyzer/_probe.py")
    assert elsewhere.returncode == 0, elsewhere.stdout


# -- the analyzer's own range: 3.11+ ---------------------------------------------------------


@pytest.fixture(scope="module")
def dslogs_wheel(wheels) -> Path:
    """The dslogs-llm wheel, beside the dslogs-collector wheel it depends on."""
    return wheels[0]


@pytest.mark.parametrize("minor", ANALYZER_PYTHONS)
def test_analyzer_installs_and_analyzes_on(minor, dslogs_wheel, tmp_path):
    python = _python_or_skip(minor)
    started = time.monotonic()
    venv_py = _venv(python, tmp_path / "venv")
    # the base dependencies from the configured index, for this Python (wheels for its ABI)
    r = _pip_install(python, venv_py, "--find-links", str(dslogs_wheel.parent), str(dslogs_wheel))
    assert r.returncode == 0, f"dslogs and its dependencies do not install on {minor}:\n{r.stderr}"
    logs = str(REPO / "sample_logs" / "concurrent_leak")
    args = ["analyze", logs, "--format", "json", "--no-cache", "-q", "--out"]
    run = subprocess.run([str(tmp_path / "venv" / "bin" / "dslogs"), *args, str(tmp_path / "there.json")],
                         cwd=tmp_path, capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    # the same report as the suite's Python gives from this checkout
    here = subprocess.run([sys.executable, "-m", "dslogs.analyzer.cli", *args, str(tmp_path / "here.json")],
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=300)
    assert here.returncode == 0, here.stderr
    there, ours = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("there", "here"))
    for report in (there, ours):
        report.pop("generated_at")
        report["ingest"].pop("seconds")  # the only measured numbers: wall-clock time
    assert there["findings"] and there["requests"]["count"] > 0
    assert there == ours
    print(f"\nPython {minor}: dslogs installed and analyzed in {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize("minor", ANALYZER_REFUSED)
def test_analyzer_refuses_older_pythons_at_install(minor, dslogs_wheel, tmp_path):
    python = _python_or_skip(minor)
    venv_py = _venv(python, tmp_path / "venv")
    r = _pip_install(python, venv_py, "--no-index", "--no-deps", str(dslogs_wheel))
    assert r.returncode != 0 and "requires a different Python" in r.stderr, r.stderr
