"""The documented install, as a user gets it: the wheel built from this tree, installed by pip
into a bare venv with its declared dependencies only (never the test extras), and every command
of README.md run there.

pip resolves the dependencies from its configured index (the machine's own, offline in CI), so
a module the CLI imports that is not a base dependency fails here as it would for a user; the
checkout's own interpreter, which has the test extras, is never on the path. One venv serves the
whole module. The README's `$ dslogs …` blocks are run in order in a scratch folder holding
sample_logs/: each exits as the README implies (0; the number a following `echo $?` shows; 2
where the README shows `dslogs: error:`), and the output the README shows (with `...` for lines
left out) is lines of the real output, in order.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from test_readme import README, _expected_rc, _strip_comment, readme_sessions

REPO = Path(__file__).resolve().parents[1]
# Output the README shows that comes from a live service and the clock, not from sample_logs:
# only its first line's command part is compared.
LIVE = ("dslogs watch ",)

# Third-party modules the analyzer and the collector may import although no base dependency
# provides them: each only inside a function, in the modules named, for a reason a user opts into.
OPTIONAL_IMPORTS = {
    # read large results through Arrow when both are there; the cursor path otherwise
    "numpy": ("analyzer.metrics.results",),
    "pyarrow": ("analyzer.metrics.results", "analyzer.ingest.columns", "analyzer.engines.merge",
                "analyzer.engines.spark.*"),
    "pyspark": ("analyzer.engines.spark.*",),  # --engine spark: the spark extra
    # the collector runs in the user's app and uses what the app has (gpu and hf extras)
    "torch": ("collector.hf", "collector.samplers"),
    "transformers": ("collector.hf",),
    "pynvml": ("collector.samplers",),
    "psutil": ("collector.samplers",),
    "streamlit": ("collector.tracer",),
}


def _declared() -> set[str]:
    """The import names of the base dependencies in pyproject.toml."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    dists = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}
    return {mod for mod, owners in packages_distributions().items()
            if any(o.lower().replace("_", "-") in dists for o in owners)}


def _third_party_imports():
    """(module, imported top-level name, line, inside a function) for every import of the
    analyzer and the collector outside the standard library and the project."""
    for package in ("analyzer", "collector"):
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            nested = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                      for n in ast.walk(f)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("analyzer", "collector", "dslogs"):
                        yield module, top, node.lineno, id(node) in nested


def test_every_import_of_the_cli_is_a_base_dependency():
    declared = _declared()
    assert {"duckdb", "jinja2", "markupsafe", "typer", "rich", "vl_convert"} <= declared, declared
    wrong = []
    for module, top, line, inside in _third_party_imports():
        if top in declared:
            continue
        allowed = any(fnmatch.fnmatchcase(module, p) for p in OPTIONAL_IMPORTS.get(top, ()))
        if not (allowed and inside):
            wrong.append(f"{module}:{line} imports {top}")
    assert not wrong, "not a base dependency of dslogs (pyproject.toml): " + "; ".join(wrong)


# -- the wheel in a bare venv ---------------------------------------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.pop("DSLOGS_TZ", None)
    return {**env, **extra}


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A venv holding dslogs from its wheel and what pip resolves for its base dependencies."""
    started = time.monotonic()
    out = tmp_path_factory.mktemp("install")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out / "dist"), str(REPO)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (out / "dist").glob("dslogs-*.whl")
    env_dir = out / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300, env=_clean_env())
    pip = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=600, env=_clean_env())
    assert pip.returncode == 0, pip.stdout + pip.stderr
    print(f"\nwheel built and installed into a bare venv in {time.monotonic() - started:.1f} s")
    return env_dir


def test_the_bare_venv_has_the_base_dependencies_only(bare_venv, tmp_path):
    r = subprocess.run([str(bare_venv / "bin" / "python"), "-c",
                        "import importlib.util as u, dslogs, analyzer; print(analyzer.__file__); "
                        "print(' '.join(m for m in ('numpy', 'pandas', 'pyarrow', 'altair', 'pytest') if u.find_spec(m)))"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_clean_env())
    assert r.returncode == 0, r.stderr
    where, *extras = r.stdout.splitlines()
    assert where.startswith(str(bare_venv)) and str(REPO) not in where
    assert extras == [""], f"the venv holds test or notebook extras, which would hide a missing dependency: {extras}"


def _run(cmd: str, cwd: Path, scratch: Path, venv: Path) -> subprocess.CompletedProcess:
    # `dslogs` is the installed console script; /tmp/ paths go to the test's scratch folder
    script = cmd.replace("/tmp/", f"{scratch}/")
    env = _clean_env(TZ="UTC", COLUMNS="200", PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
                     XDG_CACHE_HOME=str(scratch / "cache"))
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# Commands the README names in its prose but shows no `$` line for, so that every command of
# `dslogs --help` runs here: (command, text its output holds)
PROSE_COMMANDS = [
    ("dslogs --help", "analyze"),
    ("dslogs schema", '"$schema"'),
    ("dslogs schema --format md", "| output_len | BIGINT |"),
    ("dslogs analyze sample_logs/oom --format json > r.json && dslogs render r.json --out r.html && head -c 15 r.html",
     "<!doctype html>"),
    ("dslogs analyze sample_logs/memory_leak --format html --out rl.html && test -s rl.html && echo ok", "ok"),
    ("dslogs simulate --list", "memory_leak"),
    ("dslogs report weekly sample_logs/memory_leak --format md", "# dslogs weekly report"),
    ("dslogs capacity sample_logs/concurrency_cliff --format json", '"schema"'),
    ("dslogs diff sample_logs/healthy sample_logs/memory_leak --format md", "# "),
    ("dslogs cache", "cache(s) in"),
    ("dslogs cache --prune", "pruned"),
    ("dslogs cache --clear", "removed"),
]


@pytest.mark.slow  # a 14-day simulation and its weekly report among the README's commands
def test_every_readme_command_runs_as_shown_in_the_installed_package(bare_venv, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample_logs").symlink_to(REPO / "sample_logs")
    (work / "logs").symlink_to(REPO / "sample_logs" / "oom")  # `watch ./logs`: a folder of real-format logs
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    failed, verbs, timings = [], set(), []
    for steps in readme_sessions(README.read_text(encoding="utf-8")):
        for k, (cmd, shown) in enumerate(steps):
            if cmd == "echo $?":
                continue  # checked with the command before it
            started = time.monotonic()
            res = _run(_strip_comment(cmd), work, scratch, bare_venv)
            timings.append((time.monotonic() - started, cmd))
            verbs.add(shlex.split(_strip_comment(cmd))[1])
            out = (res.stdout + res.stderr).replace(f"{scratch}/", "/tmp/")
            if "Traceback" in out:
                failed.append(f"$ {cmd}\n{out[-1500:]}")
                continue
            if "|" not in cmd and not cmd.rstrip().endswith("echo $?") and res.returncode != _expected_rc(steps, k):
                failed.append(f"$ {cmd}\nexit {res.returncode}, README implies {_expected_rc(steps, k)}\n{out[-1500:]}")
                continue
            real = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
            want = [ln.rstrip() for ln in shown if ln.strip() and ln.strip() != "..."]
            if cmd.startswith(LIVE):
                want = [w.split("  ·  ")[0] for w in want[:1]]
                real = [r.split("  ·  ")[0] for r in real[:1]]
            pos = 0
            for line in want:
                if line not in real[pos:]:
                    failed.append(f"README shows a line the command does not print:\n$ {cmd}\n{line}\n--- real:\n"
                                  + "\n".join(real[:80]))
                    break
                pos = real.index(line, pos) + 1
    for cmd, expect in PROSE_COMMANDS:
        started = time.monotonic()
        res = _run(cmd, work, scratch, bare_venv)
        timings.append((time.monotonic() - started, cmd))
        verbs.update(re.findall(r"\bdslogs ([a-z]+)", cmd))
        if res.returncode != 0 or expect not in res.stdout or "Traceback" in res.stderr:
            failed.append(f"$ {cmd}\nexit {res.returncode}\n{(res.stdout + res.stderr)[-1500:]}")
    print("\n".join(f"{s:6.1f} s  {c[:100]}" for s, c in sorted(timings, reverse=True)[:8]))
    assert not failed, "\n\n".join(failed)
    helped = _run("dslogs --help && dslogs report --help", work, scratch, bare_venv).stdout
    commands = set(re.findall(r"^│ (\w+)\s", helped, re.M)) - {"weekly"}
    assert commands and commands <= verbs, f"commands of `dslogs --help` no test here runs: {commands - verbs}"
    assert len(timings) >= 25
