"""The Python API (`import dslogs`, docs/python.md): cheap to import, DataFrames equal to what
`dslogs query` prints, the same sandbox, the same report as `dslogs analyze`, typed."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

import dslogs  # noqa: E402
from dslogs.analyzer.core.errors import UsageError  # noqa: E402
from dslogs.analyzer.core.jsonable import jsonable  # noqa: E402
from dslogs.analyzer.model.result_cache import RUN_KEYS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OOM = REPO / "sample_logs" / "oom"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def _python(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path), cwd=tmp_path)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    opened = dslogs.open(OOM, cache=tmp_path_factory.mktemp("cache") / "c.duckdb")
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def report(logs):
    return logs.report()


def test_import_is_cheap_and_loads_nothing_heavy(tmp_path):
    r = _python("import json, sys, time\nt = time.perf_counter()\nimport dslogs\n"
                "print(json.dumps([time.perf_counter() - t, sorted(sys.modules)]))", tmp_path)
    assert r.returncode == 0, r.stderr
    seconds, modules = json.loads(r.stdout)
    heavy = {m.split(".")[0] for m in modules} & {"pandas", "altair", "duckdb", "jinja2", "typer", "numpy", "pyarrow"}
    assert not heavy, heavy
    r = _python("import dslogs", tmp_path, "-X", "importtime")
    own = [int(line.split("|")[1]) for line in r.stderr.splitlines() if line.rstrip().endswith("| dslogs")]
    assert own and own[0] < 200_000, (seconds, r.stderr[-2000:])  # cumulative µs


def test_the_cli_path_loads_neither_pandas_nor_altair(tmp_path):
    runs = [
        ["analyze", str(OOM), "--format", "json"],
        ["analyze", str(OOM), "--format", "md"],
        ["analyze", str(OOM), "--out", str(tmp_path / "r.html")],
        ["query", str(OOM), "SELECT count(*) FROM requests"],
        ["session", str(OOM), "53105a10-b2d1-4906-a443-ff21df9f05f4"],
    ]
    for args in runs:
        code = ("import json, sys\nfrom dslogs.analyzer.cli import app\n"
                f"try:\n    app({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
                "sys.stderr.write(json.dumps(sorted(sys.modules)))")
        r = _python(code, tmp_path)
        assert r.returncode == 0, r.stderr
        loaded = set(json.loads(r.stderr.strip().splitlines()[-1]))
        # the CLI is dslogs.analyzer: the package dslogs is its parent, the API's modules stay out
        api = {m for m in loaded if m.startswith("dslogs._")}
        assert not {m.split(".")[0] for m in loaded} & {"pandas", "altair"} and not api, (args, api)


def _cell(value):
    """A DataFrame cell as `dslogs query --format json` writes it."""
    import numpy as np

    if isinstance(value, np.ndarray | list | tuple):
        return [_cell(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, dict):
        return {k: _cell(v) for k, v in value.items()}
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return jsonable(value.to_pydatetime())  # the one JSON form of a time
    if isinstance(value, np.generic):
        return value.item()
    return value


def frame_rows(df) -> list[dict]:
    return [{c: _cell(v) for c, v in zip(df.columns, row, strict=True)} for row in df.itertuples(index=False)]


def cli_query(paths: list[str], sql: str, env: dict[str, str], cwd: Path = REPO) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "dslogs", "query", *paths, sql, "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_frame_is_query(df, rows: list[dict]) -> None:
    assert list(df.columns) == list(rows[0]), "columns differ from dslogs query's"
    key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
    assert sorted(map(key, frame_rows(df))) == sorted(map(key, rows))


def test_views_are_the_dataframes_of_dslogs_query(logs, tmp_path):
    for view in ("events", "requests", "sessions"):
        df = getattr(logs, view)
        assert getattr(logs, view) is df  # computed once
        assert_frame_is_query(df, cli_query([str(OOM)], f"SELECT * FROM {view}", _env(tmp_path)))
    assert str(logs.requests["start_ts"].dtype).startswith("datetime64")
    assert pd.api.types.is_integer_dtype(logs.requests["turn_index"])


def test_query_takes_named_parameters_and_keeps_the_sandbox(logs, tmp_path):
    df = logs.query("SELECT session_id, count(*) AS n FROM requests WHERE status = $s GROUP BY 1", s="error")
    assert df["n"].sum() == int((logs.requests["status"] == "error").sum()) > 0
    outside = tmp_path / "x.csv"
    for sql in (f"COPY requests TO '{outside}'", "SELECT * FROM read_csv('/etc/passwd')",
                "SET enable_external_access = true", "SELECT 1; SELECT 2", "DROP VIEW requests"):
        with pytest.raises(UsageError):
            logs.query(sql)
    assert not outside.exists()
    assert logs.query("SELECT count(*) AS n FROM events")["n"][0] == len(logs.events)


def test_session_by_prefix(logs):
    sid = "53105a10-b2d1-4906-a443-ff21df9f05f4"
    events = logs.session(sid[:8])
    assert set(events["session_id"]) == {sid} and len(events) == int((logs.events["session_id"] == sid).sum())
    assert list(logs.session(sid, timeline=True)["turn_index"]) == sorted(logs.requests.query("session_id == @sid")["turn_index"])
    with pytest.raises(UsageError, match="ambiguous"):
        logs.session("")
    assert logs.session("no-such-session").empty


def test_report_is_the_analyze_model_typed(report, tmp_path):
    r = subprocess.run([sys.executable, "-m", "dslogs", "analyze", str(OOM), "--format", "json", "--no-cache"],
                       capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=REPO)
    cli = json.loads(r.stdout)
    api = json.loads(report.to_json())
    for m in (cli, api):
        m.pop("generated_at")
        m["ingest"] = {k: v for k, v in m["ingest"].items() if k not in RUN_KEYS and k != "cache"}
    assert api == cli
    assert [f.rule for f in report.findings] == [f["rule"] for f in cli["findings"]] == ["oom"]
    oom = report.findings[0]
    # the fix names the causes the evidence found (rules/evidence.py), with the article's section
    assert oom.severity == "critical" and oom.session_count == 6
    assert oom.fix == cli["findings"][0]["fix"] and "003 §" in oom.fix
    failing = {c.id for c in report.checklist if not c.passed and c.status == "FAIL"}
    assert "no_oom" in failing or any("oom" in c for c in failing)
    assert report.requests.count == 93 and report.requests.ttft_ms is not None
    assert report.requests.ttft_ms.p50 == cli["requests"]["ttft_ms"]["p50"]
    assert {s.stage for s in report.stages} >= {"tokenize", "prefill", "decode"}


def test_repr_html_is_the_report_page_in_its_own_frame(report):
    out = report._repr_html_()
    m = re.fullmatch(r'<iframe [^>]*srcdoc="([^"]*)"[^>]*></iframe>', out)
    assert m, out[:300]
    page = html.unescape(m.group(1))
    assert page == report.render("html")
    assert "vegaEmbed" in page and "https://" not in out.replace(m.group(1), "")
    # the page's styles and scripts stay inside the frame: nothing outside it
    outside = out.replace(m.group(1), "")
    assert "<style" not in outside and "<script" not in outside
    assert 'sandbox="allow-scripts' in outside


def test_save_by_suffix(report, tmp_path):
    assert report.save(tmp_path / "r.html").read_text().startswith("<!doctype html>")
    assert report.save(tmp_path / "r.md").read_text().startswith("# dslogs")
    assert json.loads(report.save(tmp_path / "r.json").read_text())["schema"] == "dslogs.report/1"
    assert dslogs.load_report(tmp_path / "r.json").findings == report.findings
    with pytest.raises(UsageError, match="suffix"):
        report.save(tmp_path / "r.pdf")


def test_chart_is_altair_built_from_the_registered_spec(report):
    alt = pytest.importorskip("altair")
    assert "latency_hist" in report.chart_ids and "errors_timeline" in report.chart_ids
    for cid in report.chart_ids:
        spec = report.chart_spec(cid)
        chart = report.chart(cid)
        assert isinstance(chart, alt.TopLevelMixin)
        with alt.data_transformers.enable(consolidate_datasets=False):
            drawn = chart.to_dict()
        for key in ("vconcat", "hconcat", "mark", "encoding", "data", "transform"):
            assert drawn.get(key) == spec.get(key), (cid, key)
        for mine, theirs in zip(drawn.get("layer") or [], spec.get("layer") or [], strict=True):
            assert mine["mark"] == theirs["mark"] and mine["encoding"] == theirs["encoding"], cid
    # the overview's brush still selects on its view (altair alone would bind it to none)
    brush = report.chart("overview").to_dict()["params"]
    assert [p["name"] for p in brush] == ["brush"] and brush[0]["views"] != []
    single = next(c for c in report.chart_ids if "mark" in report.chart_spec(c) or "layer" in report.chart_spec(c))
    assert report.chart(single).properties(width=900).to_dict()["width"] == 900
    with pytest.raises(UsageError, match="no chart"):
        report.chart("nope")


CLIFF = REPO / "sample_logs" / "concurrency_cliff"


def test_capacity_is_the_capacity_command_typed(tmp_path):
    """logs.capacity() is `dslogs capacity`'s model, typed, with the Report's outputs."""
    alt = pytest.importorskip("altair")
    with dslogs.open(CLIFF, use_cache=False) as opened:
        cap = opened.capacity()
    r = subprocess.run([sys.executable, "-m", "dslogs", "capacity", str(CLIFF), "--format", "json", "--no-cache"],
                       capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=REPO)
    assert r.returncode == 0, r.stderr
    cli, api = json.loads(r.stdout), json.loads(cap.to_json())
    cli.pop("generated_at"), api.pop("generated_at")
    assert api == cli and api["schema"] == "dslogs.capacity/1"
    truth = json.loads((CLIFF / "truth.json").read_text())["scenarios"]["concurrency_cliff"]["details"]["capacity"]
    [proc] = cap.processes
    assert proc.knee == truth["knee"] and proc.recommendation is not None
    assert cap.recommendations == {proc.process: proc.recommendation}
    assert proc.recommendation.limit == truth["safe_level"] and proc.recommendation.text.startswith("set ")
    assert [lv.level for lv in proc.levels] == [lv["level"] for lv in cli["capacity"][0]["levels"]]
    assert proc.levels[0].tokens_per_s == cli["capacity"][0]["levels"][0]["tokens_per_s"]
    assert {f.rule for f in cap.findings} == {f["rule"] for f in cli["findings"]} and cap.findings
    frame = cap.levels()
    assert len(frame) == len(proc.levels) and list(frame["level"]) == [lv.level for lv in proc.levels]
    # the page, inline and saved, and its charts
    page = html.unescape(re.fullmatch(r'<iframe [^>]*srcdoc="([^"]*)"[^>]*></iframe>', cap._repr_html_()).group(1))
    assert page == cap.render("html") and 'id="sec-capacity"' in page
    assert cap.save(tmp_path / "c.md").read_text().startswith("# dslogs capacity")
    assert json.loads(cap.save(tmp_path / "c.json").read_text())["capacity"] == cli["capacity"]
    assert sorted(cap.chart_ids) == ["capacity_memory", "capacity_throughput"]
    assert isinstance(cap.chart("capacity_throughput"), alt.HConcatChart)
    with pytest.raises(UsageError, match="no chart 'latency_hist'"):
        cap.chart("latency_hist")
    assert "limit 3" in repr(cap)


def test_a_frame_over_the_budget_is_refused_with_the_relation_way(logs, monkeypatch):
    import dslogs._logs as api_logs

    monkeypatch.setattr(api_logs, "FRAME_BUDGET_BYTES", 1_000)
    logs._frames.pop("sessions", None)
    with pytest.raises(UsageError, match=r"logs\.relation\('sessions'\)"):
        _ = logs.sessions
    rel = logs.relation("sessions")
    assert rel.aggregate("count(*)").fetchall()[0][0] == 24


def test_without_pandas_the_error_names_the_extra(tmp_path):
    r = _python(f"import sys\nsys.modules['pandas'] = None\nimport dslogs\n"
                f"logs = dslogs.open({str(OOM)!r}, use_cache=False)\nprint(logs.ingest['events'])\nlogs.requests",
                tmp_path)
    assert r.returncode == 1 and r.stdout.strip() == "5110"
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError") and "dslogs-llm[notebook]" in last, last


def test_the_api_passes_mypy_strict(tmp_path):
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "mypy"), "dslogs"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (REPO / "dslogs" / "py.typed").exists()


def test_diff_renders_in_every_format_as_the_cli_does():
    change = dslogs.diff(str(REPO / "sample_logs" / "healthy"), str(REPO / "sample_logs" / "slow_decode"))
    assert change.has_regression()
    assert json.loads(change.to_json())["schema"] == change.model["schema"]
    assert "decode" in change.render("md")
    assert change._repr_html_().startswith("<iframe title=\"dslogs diff\"")


def test_diff_has_typed_parts_that_say_what_its_model_says():
    """Diff's typed parts carry the model's numbers as they are: every stage and request metric
    with its percentiles, every rate, every finding change, and one DataFrame of them all."""
    change = dslogs.diff(str(REPO / "sample_logs" / "healthy"), str(REPO / "sample_logs" / "slow_decode"))
    m = change.model
    rows = m["stages"] + m["request_metrics"]
    assert [c.metric for c in change.changes] == [r["metric"] for r in rows]
    for c, r in zip(change.changes, rows, strict=True):
        assert c.verdict == r["verdict"] and c.count_before == r["count_before"]
        for q, pc in c.percentiles.items():
            assert (pc.before, pc.after, pc.change_pct, pc.verdict) == (
                r[q]["before"], r[q]["after"], r[q]["change_pct"], r[q]["verdict"])
            assert pc.ci_pct is None or list(pc.ci_pct) == r[q]["ci_pct"]
    assert [(x.metric, x.after, x.verdict) for x in change.rates] == [(r["metric"], r["after"], r["verdict"]) for r in m["rates"]]
    assert change.regressions == m["regressions"] == ["goodput"]
    assert [(f.change, f.rule, f.sessions) for f in change.findings] == [("new", "slow_decode", 4)]
    table = change.table()
    assert len(table) == sum(len(c.percentiles) for c in change.changes)
    tpot = table[(table.metric == "tpot_ms") & (table.percentile == "p95")].iloc[0]
    assert tpot.before == m["request_metrics"][[r["metric"] for r in m["request_metrics"]].index("tpot_ms")]["p95"]["before"]
    assert "regression=True" in repr(change) and "1 new finding" in repr(change)


def test_save_to_a_path_it_cannot_write_names_it_and_leaves_nothing(report, tmp_path):
    from dslogs.analyzer.core.errors import UsageError

    with pytest.raises(UsageError, match=r"^save .*nowhere/r\.html: cannot write \(its folder does not exist\)"):
        report.save(tmp_path / "nowhere" / "r.html")
    (tmp_path / "r.html").write_text("kept\n")
    (tmp_path / "d.html").mkdir()
    with pytest.raises(UsageError, match="it is a directory"):
        report.save(tmp_path / "d.html")
    assert (tmp_path / "r.html").read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == ["d.html", "r.html"]
