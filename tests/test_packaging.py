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
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    (whl,) = out.glob("dslogs-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed_env(wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # Install the wheel by unpacking it (what pip does for a pure wheel), then borrow deps.
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    entry = Path(site) / "dslogs_entry.py"
    entry.write_text("from analyzer.cli import main\nmain()\n")
    (env_dir / "bin" / "dslogs").write_text(f"#!/bin/sh\nexec {py} {entry} \"$@\"\n")
    (env_dir / "bin" / "dslogs").chmod(0o755)
    (Path(site) / "borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def test_wheel_ships_queries_templates_and_schema(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "collector/trace_schema_v1.json" in names
    assert "analyzer/cli.py" in names
    for sql in (REPO / "queries").glob("*.sql"):
        assert f"analyzer/_data/queries/{sql.name}" in names
    for tpl in (REPO / "templates").glob("*.html"):
        assert f"analyzer/_data/templates/{tpl.name}" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "dslogs = analyzer.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def _run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(env_dir / "bin" / "dslogs"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_installed_cli_runs_outside_checkout(installed_env, tmp_path):
    where = subprocess.run(
        [str(installed_env / "bin" / "python"), "-c", "import analyzer, collector, analyzer.resources as r; "
         "print(analyzer.__file__); print(collector.__file__); print(r.queries_dir()); print(r.templates_dir())"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
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
    shipped = json.loads((REPO / "collector" / "trace_schema_v1.json").read_text())
    assert schema == shipped

    sim_run = _run(installed_env, "simulate", "out", "--scenario", "memory_leak", "--seed", "3", cwd=tmp_path)
    assert sim_run.returncode == 0, sim_run.stderr
    assert (tmp_path / "out" / "truth.json").is_file()
    assert list((tmp_path / "out").rglob("*.jsonl*"))
