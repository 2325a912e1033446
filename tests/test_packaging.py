"""Build the wheel, install it into a fresh venv and run the CLI from outside the checkout.

The fresh venv gets dslogs from the wheel only (--no-deps); its third-party dependencies are
borrowed from the test interpreter's site-packages through a .pth line, which Python does not
scan for further .pth files — so the checkout's editable install cannot leak in. That keeps
the test offline and fast on a 2-core machine while still proving the wheel carries
queries/, templates/ and the schema file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.wheels import build

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(wheels) -> Path:
    return wheels[0]


@pytest.fixture(scope="module")
def installed_env(wheel, collector_wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # Install the wheel by unpacking it (what pip does for a pure wheel), then borrow deps.
    for whl in (collector_wheel, wheel):  # dslogs-llm depends on dslogs-collector
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(site)
    entry = Path(site) / "dslogs_entry.py"
    entry.write_text("from dslogs.analyzer.cli import main\nmain()\n")
    (env_dir / "bin" / "dslogs").write_text(f"#!/bin/sh\nexec {py} {entry} \"$@\"\n")
    (env_dir / "bin" / "dslogs").chmod(0o755)
    (Path(site) / "borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def test_wheel_ships_queries_templates_and_schema(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    # one import root, dslogs; the collector is the dslogs-collector distribution's
    assert {n.split("/")[0] for n in names if "dist-info" not in n} == {"dslogs"}
    assert "dslogs/analyzer/cli.py" in names
    for sql in (REPO / "queries").glob("*.sql"):
        assert f"dslogs/analyzer/_data/queries/{sql.name}" in names
    for tpl in (REPO / "templates").glob("*.html"):
        assert f"dslogs/analyzer/_data/templates/{tpl.name}" in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert re.search(r"^Requires-Dist: dslogs-collector[<>=]", meta, re.M), meta
    assert any(n.endswith("entry_points.txt") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "dslogs = dslogs.analyzer.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def _run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(env_dir / "bin" / "dslogs"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_installed_cli_runs_outside_checkout(installed_env, tmp_path):
    where = subprocess.run(
        [str(installed_env / "bin" / "python"), "-c", "import dslogs.analyzer, dslogs_collector, dslogs.analyzer.core.resources as r; "
         "print(dslogs.analyzer.__file__); print(dslogs_collector.__file__); print(r.queries_dir()); print(r.templates_dir())"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    ).stdout.split()
    assert all(str(REPO) not in p for p in where), where
    assert where[2].endswith("analyzer/_data/queries") and where[3].endswith("analyzer/_data/templates")

    help_run = _run(installed_env, "--help", cwd=tmp_path)
    assert help_run.returncode == 0, help_run.stderr
    for command in ("analyze", "query", "session", "render", "simulate", "schema", "report"):
        assert command in help_run.stdout

    schema_run = _run(installed_env, "schema", cwd=tmp_path)
    assert schema_run.returncode == 0, schema_run.stderr
    schema = json.loads(schema_run.stdout)
    assert schema["$schema"].endswith("2020-12/schema")
    shipped = json.loads((REPO / "collector" / "trace_schema_v1.json").read_text())  # dslogs_collector's
    assert schema == shipped

    sim_run = _run(installed_env, "simulate", "out", "--scenario", "memory_leak", "--seed", "3", cwd=tmp_path)
    assert sim_run.returncode == 0, sim_run.stderr
    assert (tmp_path / "out" / "truth.json").is_file()
    assert list((tmp_path / "out").rglob("*.jsonl*"))


def test_installed_python_api_imports_outside_checkout(wheel, installed_env, tmp_path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"dslogs/__init__.py", "dslogs/py.typed"} <= names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    # pandas and altair only with the notebook extra
    assert "Requires-Dist: pandas>=2.0; extra == 'notebook'" in meta
    assert not any(line.startswith("Requires-Dist: pandas") and "extra" not in line for line in meta.splitlines())
    r = subprocess.run(
        [str(installed_env / "bin" / "python"), "-c",
         f"import dslogs; r = dslogs.open({str(REPO / 'sample_logs' / 'healthy')!r}, use_cache=False).report(); "
         "print(dslogs.__file__); print(r.requests.count)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert r.returncode == 0, r.stderr
    where, count = r.stdout.split()
    assert str(REPO) not in where and int(count) > 0


# -- dslogs-collector: the collector alone, for inference environments ----------------------

COLLECTOR_SCRIPT = """
import json, os, sys
from dslogs_collector import Tracer, log_event
import dslogs_collector
t = Tracer("logs")
t.event("tokenize", 1.5, session_id="s", request_id="r", input_len=3)
with t.stage("format", session_id="s"):
    pass
log_event("input", input_len=3)
t.close()
third = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"dslogs_collector", "__main__"})
print(json.dumps({"file": dslogs_collector.__file__, "third_party": third, "path": sys.path, "stats": t.stats()}))
"""


@pytest.fixture(scope="module")
def collector_wheel(wheels) -> Path:
    return wheels[1]


def test_collector_wheel_declares_no_dependencies_and_ships_collector_only(collector_wheel):
    import tomllib

    zf = zipfile.ZipFile(collector_wheel)
    names = zf.namelist()
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert all(n.startswith(("dslogs_collector/", dist_info + "/")) for n in names), names
    shipped = {n.split("/", 1)[1] for n in names if n.startswith("dslogs_collector/")}
    sources = {p.name for p in (REPO / "collector").iterdir() if p.suffix in (".py", ".json")}
    assert shipped == sources
    for name in sources:  # one copy of the code: the wheel's files are the repository's
        assert zf.read(f"dslogs_collector/{name}") == (REPO / "collector" / name).read_bytes()
    meta = zf.read(f"{dist_info}/METADATA").decode()
    assert "Name: dslogs-collector" in meta
    assert not [line for line in meta.splitlines() if line.startswith(("Requires-Dist", "Provides-Extra"))], meta
    root = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    own = tomllib.loads((REPO / "packaging" / "collector" / "pyproject.toml").read_text())["project"]
    assert own["dependencies"] == []
    assert f"Version: {_written_version()}\n" in meta
    # no extra of dslogs pins torch: a user's CUDA build must survive `pip install dslogs[hf]`
    for extra, reqs in root["optional-dependencies"].items():
        for req in reqs:
            assert not (req.startswith("torch") and "==" in req), (extra, req)


def _written_version() -> str:
    (version,) = re.findall(r'^__version__ = "([^"]+)"$', (REPO / "collector" / "_version.py").read_text(), re.M)
    return version


def test_the_version_is_written_once():
    import tomllib

    # neither pyproject writes it: hatch reads collector/_version.py for both distributions
    for pyproject in (REPO / "pyproject.toml", REPO / "packaging" / "collector" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        assert "version" not in project and "version" in project["dynamic"], pyproject
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["version"] == {
        "path": "collector/_version.py"}
    written = [str(p.relative_to(REPO)) for package in ("analyzer", "collector", "dslogs")
               for p in (REPO / package).rglob("*.py") if re.search(r"^__version__ = ", p.read_text(), re.M)]
    assert written == ["collector/_version.py"]
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app

    out = CliRunner().invoke(app, ["--version"])
    assert (out.exit_code, out.output) == (0, f"dslogs {_written_version()}\n")


def test_the_collector_wheel_is_byte_identical_built_again(collector_wheel, tmp_path):
    whl = build(REPO / "packaging" / "collector", tmp_path, "dslogs_collector-*.whl")
    assert whl.name == collector_wheel.name and whl.read_bytes() == collector_wheel.read_bytes()


def test_collector_wheel_installs_into_a_fresh_venv_with_nothing_else(collector_wheel, tmp_path):
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    py = env_dir / "bin" / "python"
    # pip resolves dependencies (no --no-deps) with no index, no find-links, no config: a
    # declared dependency would fail to install here.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "-q",
                        str(collector_wheel)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    site = Path(subprocess.run([str(py), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    installed = sorted(p.name for p in site.iterdir() if p.name != "__pycache__")
    assert [n for n in installed if not n.endswith(".dist-info")] == ["dslogs_collector"], installed
    # -I: no PYTHONPATH, no user site, not the checkout; the standard library and the wheel only
    run = subprocess.run([str(py), "-I", "-c", COLLECTOR_SCRIPT], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(site)) and not any(str(REPO) in p for p in got["path"])
    assert got["third_party"] == [], got["third_party"]
    lines = [json.loads(x) for p in (tmp_path / "logs").glob("ds15b_*.jsonl") for x in p.read_text().splitlines()]
    stages = [e["stage"] for e in lines if e["stage"] not in ("collector", "deploy")]
    assert stages == ["tokenize", "format", "input"] and got["stats"]["dropped"] == 0
    assert sum(e["stage"] == "collector" for e in lines) == 4  # start and exit of t and log_event's tracer
    assert sum(e["stage"] == "deploy" for e in lines) == 2  # each tracer's record of what it runs with


def test_makefile_stamps_know_their_extras():
    # `make demo` then `make test` on one clone: the test target must not be satisfied by the
    # demo's install (one stamp per extras set), and it installs torch's CPU wheel itself.
    def plan(target: str) -> str:
        r = subprocess.run(["make", "-n", "-C", str(REPO), target, "VENV=/nonexistent-venv"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    demo, test = plan("demo"), plan("test")
    assert "/nonexistent-venv/.installed-base" in demo and "pip install -q -e '.'" in demo
    assert "/nonexistent-venv/.installed-test_gpu_hf_spark" in test
    assert "pip install -q 'torch==2.13.0'" in test and "-e '.[test,gpu,hf,spark]'" in test
    assert test.index("torch==2.13.0") < test.index("-e '.[test,gpu,hf,spark]'")
    assert "pytest" in test and "make test" in (REPO / ".ci" / "run").read_text()
