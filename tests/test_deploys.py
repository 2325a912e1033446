"""Deploys: the collector's record, deploys read back, and each judged against the one before.

The simulator runs 3 h with deploy records at 0 h, 1 h (a restart, nothing changed) and 2 h (a
new torch) and prefill +40 % from 2 h: in 5 of 5 seeds the new torch is the regression and the
restart is no deploy of its own. Without records, a pure prompt shift is no regression and the upgrade is found
as a change point with no deploy there; OTLP service versions, weekly and the API. 45-75 s on a
busy 2-core box.
"""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.render.deploys import render_deploys
from dslogs.analyzer.render.weekly import render_weekly
from dslogs.analyzer.usecases.deploys import deploys_logs
from dslogs_collector import Tracer
from dslogs_collector.deploy import find_git_dir, git_info, label_from_env
from dslogs_collector.schema import json_schema
from tests.deploy_helpers import simulated

SEEDS = range(5)
OLD, NEW = {"pkg.torch": "2.4.1", "generate.use_cache": True}, {"pkg.torch": "2.5.0", "generate.use_cache": True}


# -- the collector's record ---------------------------------------------------------------------


def test_git_commit_is_read_from_files(tmp_path):
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    (repo / "app" / "sub").mkdir(parents=True)
    assert git_info(str(repo / "app" / "sub")) == {"git.branch": "main", "git.commit": sha}
    # a loose ref wins over packed-refs; a worktree's .git file points at its own HEAD
    loose = "f" * 40
    (repo / ".git" / "refs" / "heads" / "main").write_text(loose + "\n")
    assert git_info(str(repo))["git.commit"] == loose
    wt = repo / ".git" / "worktrees" / "w"
    wt.mkdir(parents=True)
    (wt / "HEAD").write_text(sha + "\n")  # detached
    (wt / "commondir").write_text("../..\n")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / ".git").write_text(f"gitdir: {wt}\n")
    assert find_git_dir(str(tmp_path / "w")) == (str(wt), str(repo / ".git"))
    assert git_info(str(tmp_path / "w")) == {"git.commit": sha}


def test_label_from_env():
    assert label_from_env({"DSLOGS_DEPLOY": "v7", "OTEL_SERVICE_VERSION": "x"}) == "v7"
    assert label_from_env({"OTEL_RESOURCE_ATTRIBUTES": "service.name=chat,service.version=1.4.2%2Brc1"}) == "1.4.2+rc1"
    assert label_from_env({}) is None


def test_tracer_writes_its_record_first(tmp_path, monkeypatch):
    monkeypatch.setenv("DSLOGS_DEPLOY", "release-12")
    t = Tracer(tmp_path / "logs", handle_signals=False)
    t.event("queue", 1.0, session_id="s", request_id="r")
    t.close()
    lines = [json.loads(x) for f in sorted((tmp_path / "logs").glob("*.jsonl")) for x in f.read_text().splitlines()]
    first = next(x for x in lines if x["stage"] != "collector")  # the writer's heartbeat may come first
    assert first["stage"] == "deploy" and first["label"] == "release-12" and first["pid"] == os.getpid()
    cfg = json.loads(first["config"])
    assert cfg["python"].count(".") == 2 and cfg["trigger"] == "start"
    assert "git.commit" in cfg  # the tests run in a repository (a clean clone, or a worktree)
    jsonschema.Draft202012Validator(json_schema()).validate(first)
    off = Tracer(tmp_path / "off", handle_signals=False, deploy_record=False)
    off.close()
    assert not any("deploy" in f.read_text() for f in (tmp_path / "off").glob("*.jsonl"))


# -- the simulator ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory):
    return tmp_path_factory.mktemp("deploys")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_regression_at_a_deploy_is_found_there(sim_root, seed):
    folder = sim_root / f"upgrade-{seed}"
    simulated(folder, seed, "prefill_slower", [(0, OLD), (1, OLD), (2, NEW)])
    m = deploys_logs([str(folder)], tz="UTC", use_cache=False)
    assert m["source"] == "records"
    got = [(d["id"], d["verdict"]) for d in m["deploys"]]
    assert got == [("d1", "first"), ("d2", "regression")], (seed, got, m["deploys"][1]["reasons"])
    d1, d3 = m["deploys"]
    # the restart at 1 h with nothing changed is part of d1, not a deploy of its own
    assert [p["key"] for p in d1["processes"]] == [f"sim-{seed}-0", f"sim-{seed}-1"]
    assert d3["changes"] == [{"key": "pkg.torch", "before": "2.4.1", "after": "2.5.0"}]
    assert d3["start"].startswith("2026-11-23T02:00")
    behind = {(c["label"], c["verdict"]) for c in d3["metric_changes"]}
    assert ("prefill", "regression") in behind and ("TTFT", "regression") in behind
    # the same requests are slower: the service, not the mix
    ttft = next(c for c in d3["metric_changes"] if c["label"] == "TTFT" and c["quantile"] == "p50")
    assert ttft["service_pct"] > 20


def test_a_prompt_shift_without_a_deploy_is_not_a_regression(sim_root):
    folder = sim_root / "shift"
    simulated(folder, 3, "prompt_shift", None)
    m = deploys_logs([str(folder)], tz="UTC", use_cache=False)
    assert m["source"] == "processes" and m["change_point"] is None
    assert all(d["verdict"] in ("first", "steady", "too few") for d in m["deploys"])
    assert "no deploy records" in m["notes"][0]


def test_without_records_a_change_point_says_when_and_that_no_deploy_was_there(sim_root):
    folder = sim_root / "no-records"
    simulated(folder, 1, "prefill_slower", None)
    m = deploys_logs([str(folder)], tz="UTC", use_cache=False)
    cp = m["change_point"]
    assert cp is not None and cp["verdict"] == "regression"
    assert "2026-11-23T01:30" <= cp["at"][:16] <= "2026-11-23T02:30", cp["at"]
    assert "no deploy found there" in cp["summary"][0]


def test_cli_deploys_and_diff_by_deploy(sim_root):
    folder = sim_root / "upgrade-0"
    if not folder.exists():
        simulated(folder, 0, "prefill_slower", [(0, OLD), (1, OLD), (2, NEW)])
    run = CliRunner()
    r = run.invoke(app, ["deploys", str(folder), "--format", "json", "--no-cache", "--tz", "UTC"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    jsonschema.Draft202012Validator(json.loads(open("analyzer/model/schemas/deploys.json").read())).validate(m)
    assert [d["verdict"] for d in m["deploys"]] == ["first", "regression"]
    md, page = render_deploys(m, "md"), render_deploys(m, "html")
    assert "pkg.torch 2.4.1 → 2.5.0" in md and "**▲ regression**" in md
    assert page.startswith("<!doctype html>") and '<tr class="regression">' in page
    r = run.invoke(app, ["diff", str(folder), "--deploy", "d1", "--deploy", "d2", "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert "TTFT p50" in d["regressions"] and d["after"]["first_event"].startswith("2026-11-23T02:00")
    r = run.invoke(app, ["diff", str(folder), "--deploy", "d1", "--deploy", "d9", "--no-cache"])
    assert r.exit_code == 2 and "--deploy d9: no such deploy" in r.output
    r = run.invoke(app, ["diff", str(folder), "--deploy", "d1", "--no-cache"])
    assert r.exit_code == 2 and "give it twice" in r.output


def test_otlp_service_versions_are_deploys(tmp_path):
    """vLLM's spans under service.version 0.6.1, then 0.6.2 with decode 60 % slower."""
    from dataclasses import replace

    from tests.otlp_helpers import VLLM_RESOURCE, vllm_workload, write_vllm

    old = vllm_workload(n=150, seed=1)
    new = [replace(r, arrival=r.arrival + 200.0, decode=r.decode * 1.6, request_id=r.request_id + "b")
           for r in vllm_workload(n=150, seed=2, start=old[-1].arrival)]
    (tmp_path / "logs").mkdir()
    write_vllm(tmp_path / "logs" / "a.json", old, dict(VLLM_RESOURCE, **{"service.version": "0.6.1"}))
    write_vllm(tmp_path / "logs" / "b.json", new, dict(VLLM_RESOURCE, **{"service.version": "0.6.2", "process.pid": 4343}))
    m = deploys_logs([str(tmp_path / "logs")], use_cache=False)
    assert m["source"] == "otlp"
    assert [(d["label"], d["requests"]) for d in m["deploys"]] == [("0.6.1", 150), ("0.6.2", 150)]
    d2 = m["deploys"][1]
    assert {"key": "service.version", "before": "0.6.1", "after": "0.6.2"} in d2["changes"]
    assert d2["verdict"] == "regression" and any(c["label"] == "decode" for c in d2["metric_changes"])


def test_weekly_lists_the_weeks_deploys(sim_root):
    """Sunday 2026-11-29 (the end of ISO week 48) and Monday (week 49), a new torch with prefill
    40 % slower from Monday: week 49's report lists that deploy, a regression against Sunday's."""
    folder = sim_root / "weeks"
    simulated(folder, 2, "prefill_slower", [(0, OLD), (24, NEW)], hours=48, change_hour=24, events=60_000,
              start="2026-11-29T00:00")
    r = CliRunner().invoke(app, ["report", "weekly", str(folder), "--week", "2026-W49", "--format", "json", "--no-cache",
                                 "--tz", "UTC"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.stdout)
    assert [(d["start"][:10], d["verdict"], d["changes"]) for d in w["deploys"]] == [
        ("2026-11-30", "regression", [{"key": "pkg.torch", "before": "2.4.1", "after": "2.5.0"}])]
    md = render_weekly(w, "md")
    assert "## Deploys" in md and "pkg.torch 2.4.1 → 2.5.0" in md
    page = render_weekly(w, "html")
    row = page[page.index('id="sec-deploys"'):]
    assert '<tr class="regression" data-deploy="d2" data-first-event="2026-11-30T00:00' in row
    assert "changed: pkg.torch" in row.split("</table>")[0]


def test_python_api_deploys(sim_root):
    import dslogs

    folder = sim_root / "upgrade-0"
    if not folder.exists():
        simulated(folder, 0, "prefill_slower", [(0, OLD), (1, OLD), (2, NEW)])
    with dslogs.open(str(folder), tz="UTC", use_cache=False) as logs:
        m = logs.deploys()
    assert m["schema"] == "dslogs.deploys/1" and [d["verdict"] for d in m["deploys"]] == ["first", "regression"]


# -- the report's timelines ---------------------------------------------------------------------


def _upgrade_0(sim_root):
    folder = sim_root / "upgrade-0"
    if not folder.exists():
        simulated(folder, 0, "prefill_slower", [(0, OLD), (1, OLD), (2, NEW)])
    return folder


def _vertical_rules(spec: dict) -> list[dict]:
    """The rows of the rule layers drawn at an x (no y): the deploy marks of a chart."""
    out = []
    for part in spec.get("vconcat") or [spec]:
        for layer in part.get("layer") or []:
            mark = layer.get("mark") or {}
            enc = layer.get("encoding") or {}
            if (mark.get("type") if isinstance(mark, dict) else mark) == "rule" and "x" in enc and "y" not in enc:
                out += layer["data"]["values"]
    return out


def test_the_report_marks_each_deploy_on_its_timelines(sim_root):
    """Recorded starts at 0 h, 1 h (a restart) and 2 h (a new torch, a regression): the report carries two deploys as
    ``dslogs deploys`` judges them, the traffic, latency and GPU timelines draw a rule at each
    one's first event, and the HTML and Markdown list them."""
    from dslogs.analyzer.model.load import first_error, shipped_schema
    from dslogs.analyzer.render.charts.specs import build_charts, time_axis
    from dslogs.analyzer.render.charts.svg import render_svg
    from dslogs.analyzer.render.report import render_report

    r = CliRunner().invoke(app, ["analyze", str(_upgrade_0(sim_root)), "--format", "json", "--no-cache", "--tz", "UTC"])
    assert r.exit_code == 0, r.output
    model = json.loads(r.stdout)
    assert first_error(model, shipped_schema("report")) is None
    got = [(d["id"], d["first_event"][:19], d["verdict"]) for d in model["deploys"]]
    assert got == [("d1", "2026-11-23T00:00:00", "first"), ("d2", "2026-11-23T02:00:00", "regression")]
    assert "prefill p50" in model["deploys"][1]["reasons"]
    tx = time_axis(model)
    want = sorted((tx.ms(d["first_event"]), d["id"], d["verdict"]) for d in model["deploys"])
    charts = {c.id: c for c in build_charts(model)}
    for chart_id in ("overview", "stage_latency_by_hour", "gpu_timeline"):
        rows = _vertical_rules(charts[chart_id].spec)
        panels = len(charts[chart_id].spec.get("vconcat") or [1])
        assert sorted((r["bucket"], r["deploy"], r["verdict"]) for r in rows) == sorted(want * panels), chart_id
    # the page without JavaScript draws them too: one vertical line per deploy in the overview
    svg = render_svg(charts["overview"].spec) or ""
    lines = re.findall(r'<line x1="([\d.]+)" x2="\1" y1="0" y2="\d+" stroke="(#\w+)"', svg)
    width = charts["overview"].spec["width"]
    assert [(round(float(x) / width, 2), c) for x, c in lines] == [(0, "#6941c6"), (0.67, "#b42318")]
    page = render_report(model, "html")
    section = page[page.index('id="sec-deploys"'):].split("</section>")[0]
    assert [row.split('"')[0] for row in section.split('data-deploy="')[1:]] == ["d1", "d2"]
    assert '<tr class="regression" data-deploy="d2" data-first-event="2026-11-23T02:00:00' in section
    md = render_report(model, "md")
    assert "## Deploys" in md and "- d2, first event 2026-11-23T02:00:00" in md and ": regression (prefill p50" in md


def test_a_report_without_deploys_marks_none_and_analyses_nothing_more(sim_root):
    """Logs without records from one process: no ``deploys`` in the report, no rule on a chart,
    no Deploys section, and the deploys analysis is never called."""
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.render.charts.specs import build_charts
    from dslogs.analyzer.render.report import render_report
    from dslogs.analyzer.usecases.analyze import analyze

    folder = sim_root / "shift"
    if not folder.exists():
        simulated(folder, 3, "prompt_shift", None)

    def never(selection, read=None):
        raise AssertionError("one process start: no deploys analysis")

    model = analyze(Selection.build([str(folder)], tz="UTC", use_cache=False), never)
    assert "deploys" not in model and model["requests"]["count"] > 0
    assert all(not _vertical_rules(c.spec) for c in build_charts(model))
    assert 'id="sec-deploys"' not in render_report(model, "html") and "## Deploys" not in render_report(model, "md")


# -- one truth: ids, restarts, the result cache, Spark --------------------------------------------


def test_weekly_numbers_deploys_as_dslogs_deploys_does(sim_root):
    """A week whose window opens after the first recorded start: weekly's deploy is d2, as
    `dslogs deploys` calls it, not d1 of the records its window holds."""
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.usecases.deploys import week_deploys

    folder = _upgrade_0(sim_root)
    whole = {d["start"][:16]: d["id"] for d in deploys_logs([str(folder)], tz="UTC", use_cache=False)["deploys"]}
    week = {"previous": {"since": "2026-11-23T01:30:00+00:00"},
            "this": {"since": "2026-11-23T01:45:00+00:00", "until": "2026-11-23T03:05:00+00:00"}}
    got = week_deploys(Selection.build([str(folder)], tz="UTC", use_cache=False), week)
    assert [(d["id"], d["verdict"]) for d in got] == [(whole["2026-11-23T02:00"], "regression")] == [("d2", "regression")]


def test_two_hosts_without_records_are_one_deploy(tmp_path):
    """sample_logs/collector_drops: two hosts of one service (gpu-02 writes +08:00, so its run
    is 14:00-16:03Z and gpu-01's 22:00Z-00:03Z), no deploy records. Neither start is known to
    change anything: one deploy with both processes, and no deploys on the report."""
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys

    m = deploys_logs(["sample_logs/collector_drops"], use_cache=False)
    assert m["source"] == "processes" and len(m["deploys"]) == 1
    assert sorted(p["host"] for p in m["deploys"][0]["processes"]) == ["collector-drops-gpu-01", "collector-drops-gpu-02"]
    model = analyze(Selection.build(["sample_logs/collector_drops"], use_cache=False), report_deploys)
    assert "deploys" not in model


def test_a_warm_report_reuses_its_deploys(sim_root, tmp_path):
    """The report's deploys are kept with the model in the result cache: a warm run analyses no
    deploy window again, and its JSON is the cold run's (but the run's own clock and counters)."""
    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.model.report import report_to_json
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys

    calls = []

    def counted(selection, read=None):
        calls.append(1)
        return report_deploys(selection, read)

    def text(model):
        m = json.loads(report_to_json(model))
        m.pop("generated_at")
        for k in ("seconds", "read_files", "cached_files", "renamed_files", "cache"):
            m["ingest"].pop(k, None)
        return json.dumps(m, sort_keys=True)

    selection = Selection.build([str(_upgrade_0(sim_root))], tz="UTC", cache=tmp_path / "c.duckdb")
    cold = analyze(selection, counted)
    warm = analyze(selection, counted)
    assert len(calls) == 1 and [d["id"] for d in warm["deploys"]] == ["d1", "d2"]
    assert text(warm) == text(cold)
    # the CLI prints the same JSON warm and cold too
    run = CliRunner()
    args = ["analyze", str(_upgrade_0(sim_root)), "--format", "json", "--tz", "UTC", "--cache", str(tmp_path / "cli.duckdb")]
    a, b = run.invoke(app, args), run.invoke(app, args)
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert text(json.loads(a.stdout)) == text(json.loads(b.stdout)) and json.loads(b.stdout)["deploys"]
    # a caller that does not ask for deploys gets the model it builds cold
    assert "deploys" not in analyze(selection)


# -- a window: the first deploy in it is judged against the deploy before it ----------------------


def test_the_first_deploy_of_a_window_is_judged_against_the_deploy_before_it(sim_root, monkeypatch):
    """Recorded deploys at 0 h, 1 h (a new torch), 2 h (another, prefill +40 %) and 2.5 h; the
    window opens at 2 h. d3 is the first deploy in it, but d2 ran before it (outside the window):
    d3 is a regression against d2's whole window, and the report and `dslogs deploys` say where
    that baseline came from. Only d1 of the whole log set is ever `first`."""
    from dslogs.analyzer.model.load import first_error, shipped_schema
    from dslogs.analyzer.render.report import render_report

    folder = sim_root / "window"
    mid, last = dict(OLD, **{"pkg.torch": "2.4.2"}), dict(NEW, **{"generate.use_cache": False})
    simulated(folder, 0, "prefill_slower", [(0, OLD), (1, mid), (2, NEW), (2.5, last)])
    window = ["--since", "2026-11-23T02:00", "--until", "2026-11-23T03:00", "--tz", "UTC", "--no-cache"]
    run = CliRunner()
    r = run.invoke(app, ["analyze", str(folder), "--format", "json", *window])
    assert r.exit_code == 0, r.output
    model = json.loads(r.stdout)
    assert first_error(model, shipped_schema("report")) is None
    assert [(d["id"], d["verdict"]) for d in model["deploys"]] == [("d3", "regression"), ("d4", "steady")]
    d3, d4 = model["deploys"]
    assert any(r.startswith("prefill p") for r in d3["reasons"]), d3["reasons"]
    assert d3["baseline"] == {"id": "d2", "since": "2026-11-23T01:00:00+00:00", "until": "2026-11-23T02:00:00+00:00",
                              "outside_window": True}
    assert d4["baseline"]["id"] == "d3" and d4["baseline"]["outside_window"] is False
    assert "against d2 (2026-11-23T01:00:00+00:00 to 2026-11-23T02:00:00+00:00), read from before the window" in \
        render_report(model, "md")
    r = run.invoke(app, ["deploys", str(folder), "--format", "md", *window])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.startswith("| d3 "))
    assert "pkg.torch 2.4.2 → 2.5.0" in row and "against d2" in row and "regression" in row
    # the whole log set: d1 is the first deploy, and nothing was read from outside a window
    whole = deploys_logs([str(folder)], tz="UTC", use_cache=False)["deploys"]
    assert [(d["id"], d["verdict"], (d["baseline"] or {}).get("outside_window")) for d in whole][:1] == [("d1", "first", None)]
    assert not any((d["baseline"] or {}).get("outside_window") for d in whole)
    # one wording: the page's Deploys section says where a baseline came from with baseline_text
    from dslogs.analyzer.render import html as rh

    monkeypatch.setattr(rh, "baseline_text", lambda d: f"baseline of {d['id']} as baseline_text words it")
    rh._env.cache_clear()  # its globals are bound when it is made
    try:
        page = render_report(model, "html")
    finally:
        rh._env.cache_clear()
    section = page[page.index('id="sec-deploys"'):].split("</section>")[0]
    assert "baseline of d3 as baseline_text words it" in section and "before the window" not in section


def _count_opens(monkeypatch) -> list[tuple]:
    """(since, until) of every open of the log set from here on."""
    from dslogs.analyzer.ingest import logs as ingest_logs

    opens = []
    real = ingest_logs.open_logs

    def counting(paths, since=None, until=None, **kw):
        opens.append((since, until))
        return real(paths, since=since, until=until, **kw)

    monkeypatch.setattr(ingest_logs, "open_logs", counting)
    return opens


def test_deploys_are_numbered_from_the_open_logs_when_they_hold_the_whole_log_set(sim_root, tmp_path, monkeypatch):
    """A report numbers its deploys from the logs it opened when those hold every file: without a
    window, and in a window whose cache holds the files it leaves out (a week of daily files, the
    window on its last two days). No open without a window is added for it, and the ids are
    those `dslogs deploys` prints over the whole log set."""
    import shutil

    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys

    folder = tmp_path / "days"
    src = _upgrade_0(sim_root)
    shutil.copytree(src / "gpu-01", folder / "gpu-01")
    # the deploy records as daily files (a window prunes a day's file by its name): d1 starts on
    # the 10th, restarts on the 22nd; d2 (the new torch) at 02:00 on the 23rd, the day of the requests
    day = {0: "20261110", 1: "20261122", 2: "20261123"}
    for n, line in enumerate((src / "deploys.jsonl").read_text().splitlines()):
        rec = json.loads(line)
        rec["ts"] = {0: "2026-11-10T10:00:00.000+00:00", 1: "2026-11-22T10:00:00.000+00:00"}.get(n, rec["ts"])
        (folder / f"deploy_{day[n]}.jsonl").write_text(json.dumps(rec) + "\n")
    whole_ids = [(d["id"], d["start"][:16]) for d in deploys_logs([str(folder)], tz="UTC", use_cache=False)["deploys"]]
    assert whole_ids == [("d1", "2026-11-10T10:00"), ("d2", "2026-11-23T02:00")]

    opens = _count_opens(monkeypatch)
    cache = tmp_path / "c.duckdb"
    model = analyze(Selection.build([str(folder)], tz="UTC", cache=cache), report_deploys)
    assert [(d["id"], d["verdict"]) for d in model["deploys"]] == [("d1", "first"), ("d2", "regression")]
    assert opens.count((None, None)) == 1, opens  # the report's own open
    # a window on the last two days (a restart of d1 and d2's start in it), its cache holding the 10th too
    opens.clear()
    window = Selection.build([str(folder)], tz="UTC", cache=cache, since="2026-11-22T00:00", until="2026-11-23T03:00",
                             use_cache=True)
    model = analyze(window, report_deploys)
    assert [(d["id"], d["verdict"]) for d in model["deploys"]] == [("d1", "first"), ("d2", "regression")]
    assert (None, None) not in opens, opens
    # without a cache the files outside the window are read to number them
    opens.clear()
    model = analyze(Selection.build([str(folder)], tz="UTC", use_cache=False, since="2026-11-22T00:00",
                                    until="2026-11-23T03:00"), report_deploys)
    assert [d["id"] for d in model["deploys"]] == ["d1", "d2"] and (None, None) in opens


def test_a_window_holding_one_deploy_start_marks_it(sim_root, tmp_path, monkeypatch):
    """The hourly cron right after a deploy: a window holding d2's start (and none other) marks d1,
    running when the window opens, and d2, a regression against d1's part of the window. d1's
    record lies in a daily file the window leaves out: with a cache holding it no open without a
    window is added, without one the whole log set is opened once to number them. A window that
    no deploy starts in marks nothing and, holding no deploy record, opens nothing more."""
    import shutil

    from dslogs.analyzer.core.selection import Selection
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys

    folder = tmp_path / "days"
    src = _upgrade_0(sim_root)
    shutil.copytree(src / "gpu-01", folder / "gpu-01")
    first, _restart, new = (json.loads(line) for line in (src / "deploys.jsonl").read_text().splitlines())
    first["ts"] = "2026-11-10T10:00:00.000+00:00"
    (folder / "deploy_20261110.jsonl").write_text(json.dumps(first) + "\n")
    (folder / "deploy_20261123.jsonl").write_text(json.dumps(new) + "\n")
    opens = _count_opens(monkeypatch)
    want = [("d1", "first", None), ("d2", "regression", {"id": "d1", "since": "2026-11-23T01:30:00+00:00",
                                                         "until": "2026-11-23T02:00:00+00:00", "outside_window": False})]
    cache = tmp_path / "c.duckdb"
    analyze(Selection.build([str(folder)], tz="UTC", cache=cache))  # the cache holds every file
    for options in ({"cache": cache}, {"use_cache": False}):
        opens.clear()
        model = analyze(Selection.build([str(folder)], tz="UTC", since="2026-11-23T01:30", until="2026-11-23T03:00",
                                        **options), report_deploys)
        assert [(d["id"], d["verdict"], d["baseline"]) for d in model.get("deploys", [])] == want, options
        assert "prefill p50" in model["deploys"][1]["reasons"]
        assert opens.count((None, None)) == (0 if "cache" in options else 1), (options, opens)
    # no deploy starts in the window: no deploys, and no open but the report's own
    for options in ({"cache": cache}, {"use_cache": False}):
        opens.clear()
        model = analyze(Selection.build([str(folder)], tz="UTC", since="2026-11-23T02:15", until="2026-11-23T03:00",
                                        **options), report_deploys)
        assert "deploys" not in model and len(opens) == 1, (options, opens)
