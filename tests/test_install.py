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

The wheel is built once, stamped with SOURCE_DATE_EPOCH as `make wheels` does; a copy of its
sources elsewhere builds the same bytes. Each extra gets a venv of its own (the wheel with that
extra, nothing else) and runs what it is there for.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from test_readme import README, _expected_rc, _strip_comment, readme_sessions

from tests.wheels import EPOCH, build

REPO = Path(__file__).resolve().parents[1]
# Output the README shows that comes from a live service and the clock, not from sample_logs:
# only its first line's command part is compared.
LIVE = ("dslogs watch ",)

# Third-party modules the analyzer and the collector may import although no base dependency
# provides them: each only inside a function, in the modules named, for a reason a user opts into.
OPTIONAL_IMPORTS = {
    # read large results through Arrow when both are there; the cursor path otherwise
    "numpy": ("dslogs.analyzer.metrics.results",),
    "pyarrow": ("dslogs.analyzer.metrics.results", "dslogs.analyzer.ingest.columns", "dslogs.analyzer.engines.merge",
                "dslogs.analyzer.engines.spark.*"),
    "pyspark": ("dslogs.analyzer.engines.spark.*",),  # --engine spark: the spark extra
    # the collector runs in the user's app and uses what the app has (gpu and hf extras)
    "torch": ("dslogs_collector.hf", "dslogs_collector.samplers"),
    "transformers": ("dslogs_collector.hf",),
    "pynvml": ("dslogs_collector.samplers",),
    "psutil": ("dslogs_collector.samplers",),
    "streamlit": ("dslogs_collector.tracer",),
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
    sys.path.insert(0, str(REPO / "scripts"))
    from layermap import modules

    for module, path in modules(REPO).items():
        if module.split(".")[0] == "dslogs" and not module.startswith("dslogs.analyzer"):
            continue  # the Python API: its own extra (notebook)
        if True:
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
                    if top not in sys.stdlib_module_names and top not in ("dslogs", "dslogs_collector"):
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


# What the root pyproject's wheel is built from: a copy of these is another clone.
WHEEL_SOURCES = ("pyproject.toml", "hatch_build.py", "README.md", "collector", "analyzer", "dslogs", "queries",
                 "templates")


@pytest.fixture(scope="module")
def wheel(wheels) -> Path:
    """The dslogs-llm wheel of this tree, stamped as `make wheels` stamps it, beside the
    dslogs-collector wheel it depends on (pip finds it there: --find-links)."""
    return wheels[0]


def _venv(where: Path, *requirements: str) -> Path:
    """A new venv with ``requirements`` installed by pip from its configured index, one line
    each, in order: nothing of this interpreter's site-packages or of the checkout."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300, env=_clean_env())
    for req in requirements:
        # a wheel's folder holds the dslogs-collector wheel it depends on
        links = ["--find-links", str(Path(req.split("[")[0]).parent)] if req.split("[")[0].endswith(".whl") else []
        pip = subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", *links, req],
                             capture_output=True, text=True, timeout=900, env=_clean_env())
        assert pip.returncode == 0, f"pip install {req}\n{pip.stdout}{pip.stderr}"
    print(f"\n{where.name}: {' '.join(Path(r).name for r in requirements)} installed in a new venv in "
          f"{time.monotonic() - started:.1f} s")
    return where


@pytest.fixture(scope="module")
def bare_venv(wheel, tmp_path_factory) -> Path:
    """A venv holding dslogs from its wheel and what pip resolves for its base dependencies."""
    return _venv(tmp_path_factory.mktemp("install") / "venv", str(wheel))


def test_wheels_are_byte_identical_from_another_clone(wheel, tmp_path):
    # another clone: the same files written at another time (fresh mtimes), under another path
    clone = tmp_path / "elsewhere" / "dslogs"
    for name in WHEEL_SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, clone / name, copy_function=shutil.copy, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            clone.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, clone / name)
    again = build(clone, tmp_path / "dist", "dslogs_llm-*.whl")
    assert again.name == wheel.name
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(wheel.read_bytes()).hexdigest()
    stamp = time.gmtime(EPOCH)[:6]
    assert {i.date_time for i in zipfile.ZipFile(wheel).infolist()} == {stamp}


def test_the_installed_package_says_its_version(bare_venv, wheel, tmp_path):
    meta = zipfile.ZipFile(wheel).read(wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                                       + ".dist-info/METADATA").decode()
    version = re.search(r"^Version: (.+)$", meta, re.M).group(1)
    assert wheel.name.startswith(f"dslogs_llm-{version}-")
    env = _clean_env(PATH=f"{bare_venv / 'bin'}:{os.environ.get('PATH', '')}")
    cli = subprocess.run(["dslogs", "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert (cli.returncode, cli.stdout, cli.stderr) == (0, f"dslogs {version}\n", "")
    api = subprocess.run(["python", "-c", "import dslogs, importlib.metadata as m; "
                          "print(dslogs.__version__, m.version('dslogs-llm'))"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert api.returncode == 0 and api.stdout.split() == [version, version], api.stdout + api.stderr


def test_the_bare_venv_has_the_base_dependencies_only(bare_venv, tmp_path):
    r = subprocess.run([str(bare_venv / "bin" / "python"), "-c",
                        "import importlib.util as u, dslogs.analyzer; print(dslogs.analyzer.__file__); "
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


# -- each extra on its own ------------------------------------------------------------------------
# A new venv per extra, holding the wheel with that extra and nothing else, runs what the extra is
# for: a dependency an extra forgets (pandas under PySpark's Arrow path, say) fails here, where
# the test extras installed together would hide it.


@pytest.fixture
def new_venv(tmp_path):
    """_venv in this test's folder, removed after the test (torch's alone is 1.4 GB)."""
    made = []

    def make(name: str, *requirements: str) -> Path:
        made.append(_venv(tmp_path / name, *requirements))
        return made[-1]

    yield make
    for venv in made:
        shutil.rmtree(venv, ignore_errors=True)


def _python(venv: Path, script: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    # -I: neither PYTHONPATH, the user's site nor the working folder; the venv's site-packages only
    return subprocess.run([str(venv / "bin" / "python"), "-I", "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=_clean_env(TZ="UTC"))


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.skipif(shutil.which("java") is None, reason="--engine spark needs a Java runtime")
def test_the_spark_extra_runs_analyze_on_spark(wheel, new_venv, tmp_path):
    venv = new_venv("venv-spark", f"{wheel}[spark]")
    logs = REPO / "sample_logs" / "oom_fallback"  # small, and with findings to compare
    reports = {}
    for engine in ("duckdb", "spark"):
        r = subprocess.run([str(venv / "bin" / "dslogs"), "analyze", str(logs), "--engine", engine, "--no-cache",
                            "--format", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           env=_clean_env(TZ="UTC"))
        assert r.returncode == 0 and "Traceback" not in r.stderr, f"--engine {engine}\n{r.stderr[-3000:]}"
        reports[engine] = json.loads(r.stdout)
    spark, duck = reports["spark"], reports["duckdb"]
    assert spark["requests"]["count"] > 0
    assert spark["requests"] == duck["requests"]
    assert [f["rule"] for f in spark["findings"]] == [f["rule"] for f in duck["findings"]] != []


@pytest.mark.slow
def test_the_notebook_extra_gives_the_api_its_dataframes(wheel, new_venv, tmp_path):
    venv = new_venv("venv-notebook", f"{wheel}[notebook]")
    logs = REPO / "sample_logs" / "capacity_small"
    r = _python(venv, f"""
import json, dslogs, pandas
logs = dslogs.open({str(logs)!r}, use_cache=False)
df = logs.requests
chart = logs.report().chart("latency_hist")
print(json.dumps({{"frame": isinstance(df, pandas.DataFrame), "rows": len(df),
                   "chart": type(chart).__module__.split(".")[0], "file": dslogs.__file__}}))
""", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    count = subprocess.run([str(venv / "bin" / "dslogs"), "query", str(logs), "SELECT count(*) AS n FROM requests",
                            "--format", "json", "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, env=_clean_env(TZ="UTC"))
    assert count.returncode == 0, count.stderr
    assert got["frame"] and got["chart"] == "altair"
    assert got["rows"] == json.loads(count.stdout)[0]["n"] > 0
    assert str(REPO) not in got["file"]


GPU_SCRIPT = """
import json, sys, time
from dslogs_collector import Tracer
t = Tracer("logs")
status = t.start_samplers(["gpu", "process"], interval_s=0.05)
time.sleep(0.3)
t.close()
lines = [json.loads(x) for p in __import__("pathlib").Path("logs").glob("*.jsonl") for x in p.read_text().splitlines()]
print(json.dumps({"status": status, "stages": sorted({e["stage"] for e in lines}),
                  "loaded": sorted(m for m in ("pynvml", "psutil") if m in sys.modules)}))
"""


@pytest.mark.slow
def test_the_gpu_extra_samples_or_says_why_not(wheel, new_venv, tmp_path):
    venv = new_venv("venv-gpu", f"{wheel}[gpu]")
    r = _python(venv, GPU_SCRIPT, tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    # both packages of the extra were there and used; a host without a GPU or driver gets one
    # line saying so, never an exception
    assert got["loaded"] == ["psutil", "pynvml"], got
    assert got["status"]["process"] == "on" and "process_sample" in got["stages"], got
    gpu = got["status"]["gpu"]
    if gpu == "on":
        assert "gpu_sample" in got["stages"], got
    else:
        assert gpu.startswith("off: NVML") and "gpu_sample" not in got["stages"], got
        assert "dslogs collector: " in r.stderr and "NVML" in r.stderr, r.stderr


HF_SCRIPT = """
import json, pathlib, torch, transformers
from dslogs_collector import Tracer
torch.manual_seed(0)
cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256,
                               eos_token_id=2, pad_token_id=0)
model = transformers.Qwen2ForCausalLM(cfg).eval()
ids = torch.randint(4, 96, (1, 12))
with Tracer("logs") as t:
    out = t.generate(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, session_id="s1",
                     max_new_tokens=6, min_new_tokens=6, do_sample=False)
lines = [json.loads(x) for p in pathlib.Path("logs").glob("*.jsonl") for x in p.read_text().splitlines()]
print(json.dumps({"new_tokens": out.shape[1] - 12, "events": [(e["stage"], e.get("output_len")) for e in lines
                                                              if e.get("session_id") == "s1"]}))
"""


@pytest.mark.slow
@pytest.mark.hf
def test_the_hf_extra_traces_generate(wheel, new_venv, tmp_path):
    # torch first, as the Makefile does: the extra leaves torch's build to the user, and pip
    # takes the CPU wheel from its index here rather than a CUDA build of several GB
    torch = re.search(r"^TORCH \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    venv = new_venv("venv-hf", torch, f"{wheel}[hf]")
    r = _python(venv, HF_SCRIPT, tmp_path, timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    stages = [s for s, _ in got["events"]]
    assert got["new_tokens"] == 6
    assert {"prefill", "decode", "request"} <= set(stages), stages
    assert dict(got["events"])["request"] == 6, got["events"]


# -- two distributions, two import roots: next to anything ------------------------------------------

APP = """
import os
from dslogs_collector import Tracer, log_event
import collector, analyzer  # the app's own modules, not dslogs'
assert collector.MINE and analyzer.MINE
log_event("tokenize", 12.5, session_id="s1", input_len=30)
log_event("inference", 480.0, session_id="s1", output_len=64)
tracer = Tracer(log_dir="logs")
with tracer.stage("tokenize", session_id="s2", request_id="r1", input_len=7):
    pass
tracer.close()
import dslogs_collector
print(os.path.dirname(dslogs_collector.__file__))
"""


def test_an_app_with_its_own_collector_and_analyzer_runs_the_readme_example(bare_venv, tmp_path):
    """The README's collector lines run in an app folder that holds a `collector.py` and an
    `analyzer/` of its own: dslogs ships `dslogs` and `dslogs_collector` only, so neither shadows
    the other, and `dslogs analyze` reads what the app logged."""
    app = tmp_path / "app"
    (app / "analyzer").mkdir(parents=True)
    (app / "collector.py").write_text("MINE = True\n")
    (app / "analyzer" / "__init__.py").write_text("MINE = True\n")
    (app / "main.py").write_text(APP)
    r = subprocess.run([str(bare_venv / "bin" / "python"), "main.py"], cwd=app, capture_output=True, text=True,
                       timeout=120, env=_clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(bare_venv))
    site = Path(r.stdout.strip()).parent
    assert not (site / "collector").exists() and not (site / "analyzer").exists()
    logged = [json.loads(line) for p in (app / "logs").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert {"tokenize", "inference"} <= {e["stage"] for e in logged}
    res = subprocess.run([str(bare_venv / "bin" / "dslogs"), "analyze", "logs", "--format", "json", "--no-cache"],
                         cwd=app, capture_output=True, text=True, timeout=300, env=_clean_env(XDG_CACHE_HOME=str(tmp_path)))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ingest"]["events"] >= 2


def test_installing_upgrading_and_uninstalling_either_distribution(wheel, new_venv, tmp_path):
    """dslogs-llm depends on dslogs-collector and ships none of its files: the collector alone
    installs and runs; the CLI added beside it leaves it as it was; an upgraded collector (a newer
    version of the same files) keeps the CLI working; uninstalling the CLI leaves the collector
    working; uninstalling the collector is refused by nothing but leaves the CLI without a
    dependency, which `pip check` names."""
    collector_whl = next(wheel.parent.glob("dslogs_collector-*.whl"))
    venv = new_venv("venv-two", str(collector_whl))
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip"]

    def run(*args):
        return subprocess.run(list(args), capture_output=True, text=True, timeout=300, cwd=tmp_path, env=_clean_env())

    probe = "from dslogs_collector import log_event, __version__; log_event('tokenize', 1.0); print(__version__)"
    assert run(py, "-c", probe).returncode == 0
    r = run(*pip, "install", "-q", "--find-links", str(wheel.parent), str(wheel))
    assert r.returncode == 0, r.stderr
    files = run(*pip, "show", "-f", "dslogs-llm").stdout
    assert "dslogs_collector/" not in files and "dslogs/analyzer/cli.py" in files
    assert run(py, "-c", probe).returncode == 0 and run(str(venv / "bin" / "dslogs"), "--version").returncode == 0
    # an upgrade of the collector: the same sources as a newer version
    newer = tmp_path / "newer"
    shutil.copytree(REPO / "packaging" / "collector", newer / "packaging" / "collector", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "dslogs_collector"))
    shutil.copytree(REPO / "collector", newer / "collector", ignore=shutil.ignore_patterns("__pycache__"))
    version = (newer / "collector" / "_version.py").read_text()
    (newer / "collector" / "_version.py").write_text(re.sub(r'"(\d+)\.(\d+)\.(\d+)"',
                                                            lambda m: f'"{m[1]}.{m[2]}.{int(m[3]) + 1}"', version))
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "w"),
                str(newer / "packaging" / "collector"))
    assert built.returncode == 0, built.stderr
    r = run(*pip, "install", "-q", "--upgrade", str(next((tmp_path / "w").glob("*.whl"))))
    assert r.returncode == 0, r.stderr
    assert run(py, "-c", probe).stdout.strip() != version and run(str(venv / "bin" / "dslogs"), "schema").returncode == 0
    assert run(*pip, "check").returncode == 0
    # uninstall the CLI: the collector stays whole
    assert run(*pip, "uninstall", "-y", "dslogs-llm").returncode == 0
    assert run(py, "-c", probe).returncode == 0
    # and the other way round: without its collector the CLI is a broken install, which pip names
    assert run(*pip, "install", "-q", "--find-links", str(wheel.parent), str(wheel)).returncode == 0
    assert run(*pip, "uninstall", "-y", "dslogs-collector").returncode == 0
    check = run(*pip, "check")
    assert check.returncode != 0 and "dslogs-collector" in check.stdout, check.stdout
