"""The collector runs inside the user's inference process: importing it, creating a Tracer and
writing events loads the standard library only (docs/collector.md). Optional packages come in only
when a sampler or the HF integration asks for them; the analyzer stack never. A JSON analyze (the
hourly cron's command) loads none of what only other outputs or commands use."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEVER = ("analyzer", "duckdb", "pandas", "altair", "jinja2", "typer", "rich", "pyarrow", "streamlit", "gradio")
OPTIONAL = ("torch", "numpy", "pynvml", "psutil", "transformers")


def _loaded_after(code: str, tmp_path) -> set[str]:
    script = (
        "import json, sys\n"
        + textwrap.dedent(code).strip()
        + '\nprint(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))\n'
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_tracer_and_log_event_load_no_third_party(tmp_path):
    loaded = _loaded_after(f"""
        from dslogs_collector import Tracer, log_event, SCHEMA_VERSION, STAGES
        t = Tracer({str(tmp_path / "logs")!r})
        t.event("tokenize", duration_ms=1.0, session_id="s", input_len=3)
        with t.stage("format", session_id="s"):
            pass
        log_event("input", input_len=3, session_id="s")
        log_event("input", input_len=4)  # no Streamlit: the article's "unknown"
        assert t.flush()
        t.close()
    """, tmp_path)
    assert not loaded & set(NEVER + OPTIONAL), loaded & set(NEVER + OPTIONAL)
    assert any(p.name.startswith("ds15b_") for p in (tmp_path / "logs").iterdir())
    logged = [json.loads(x) for p in tmp_path.glob("logs/ds15b_*") for x in p.read_text().splitlines()]
    assert {e.get("session_id") for e in logged if e["stage"] == "input"} == {"s", "unknown"}


def test_process_sampler_loads_psutil_only(tmp_path):
    loaded = _loaded_after(f"""
        from dslogs_collector import Tracer
        t = Tracer({str(tmp_path)!r}, samplers=("process",), sample_interval_s=0.05)
        t.close()
    """, tmp_path)
    assert not loaded & set(NEVER + ("torch", "numpy", "pynvml", "transformers"))


def test_gpu_sampler_never_loads_the_analyzer_stack(tmp_path):
    loaded = _loaded_after(f"""
        from dslogs_collector import Tracer
        t = Tracer({str(tmp_path)!r}, samplers=True, sample_interval_s=0.05)
        t.close()
    """, tmp_path)
    assert not loaded & set(NEVER)


def test_collector_sources_import_stdlib_only_at_module_level():
    allowed = set(sys.stdlib_module_names) | {"dslogs_collector", "__future__"}
    for path in sorted((REPO / "collector").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:  # module level; lazy imports inside functions are the point
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Try):
                names = [a.name for n in node.body if isinstance(n, ast.Import) for a in n.names]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name}: module-level import of {name}"



def test_json_analyze_loads_none_of_the_deferred_modules(tmp_path):
    # each would cost the hourly `analyze --since 1d --format json` its import on every run: pydantic
    # through typer's value coercion, the HTML stack, the Arrow path of large results, the
    # simulators, the collector's tracer (the analyzer reads only its version and schema)
    out = tmp_path / "r.json"
    script = textwrap.dedent(f"""
        import contextlib, json, sys
        sys.argv = ["dslogs", "analyze", {str(REPO / "sample_logs" / "memory_leak")!r}, "--format", "json",
                    "--since", "2000-01-01", "--engine", "duckdb", "--out", {str(out)!r}]
        from dslogs.analyzer.cli import app
        with contextlib.suppress(SystemExit):
            app()
        print(json.dumps(sorted(sys.modules)))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["findings"]  # the run did analyze
    loaded = set(json.loads(r.stdout.strip().splitlines()[-1]))
    deferred = {"pydantic", "pyarrow", "numpy", "pandas", "jinja2", "markupsafe", "rich", "vl_convert", "altair",
                "dslogs.analyzer.simulate", "dslogs.analyzer.render.html", "dslogs.analyzer.render.markdown",
                "dslogs_collector.tracer", "dslogs_collector.writer"}
    assert not loaded & deferred, loaded & deferred
