"""Every number the report shows in two places is one number.

Over every ``sample_logs/`` folder, a simulated 14-day memory_leak set naming more than 200
sessions, and a recorded run of the real Gradio app in which 4 of 16 concurrent sessions leak
host RAM (tests/fixtures/gradio_host_leak, recorded with tests/e2e/host_memory.py), each read
once by ``dslogs analyze --format json`` and rendered from that JSON as HTML and Markdown:

- a per-session figure (what a rule judged of a session) is the same in the finding's details,
  the sessions table, and the HTML and Markdown text of both; a per-process figure is the same in
  the finding and the processes table;
- a memory finding's evidence adds up to its verdict, or names each request it leaves out;
- the JSON's lists are whole, or say they are cut (``*_truncated``) with the full count;
- ``watch --once`` over a window holding every event shows the report's requests, errors and
  latency percentiles; ``capacity`` shows the report's capacity section; ``diff`` of two folders
  shows each side's report percentiles.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.render.html import MAX_SESSION_ROWS, anchor
from dslogs.analyzer.render.report import render_report
from dslogs.analyzer.rules.registry import RULE_SPECS, SESSION_SCANS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
HOST_LEAK = ROOT / "tests" / "fixtures" / "gradio_host_leak"
SIMULATED = "simulated_memory_leak_14d"
SETS = [*SAMPLES, SIMULATED, "gradio_host_leak"]
# the figure a memory rule's verdict on a session is, in its finding's details and in the
# sessions table's ``judged``; and that figure per request
FIGURE = {"memory_leak": "rise_mb", "rss_growth": "rss_kept_mb"}
PER_REQUEST = {"memory_leak": "leak_per_request_mb", "rss_growth": "rss_kept_per_request_mb"}
MAX_SESSIONS = 100  # the simulated set's sessions table: fewer than its sessions, more than none


def _analyze(path: Path, out: Path, *args: str) -> dict:
    res = CliRunner().invoke(app, ["analyze", str(path), "--format", "json", "--no-cache", "-q", "--out", str(out),
                                   *args])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """name -> (model read back from its JSON, HTML text, Markdown text), each set read once."""
    tmp = tmp_path_factory.mktemp("consistency")
    cache: dict[str, tuple[dict, str, str]] = {}

    def get(name: str):
        if name not in cache:
            if name == SIMULATED:
                logs = tmp / "ml14"
                # 14 days, events scaled down (seconds to write and read) to still name 200+ sessions
                res = CliRunner().invoke(app, ["simulate", str(logs), "--scenario", "memory_leak", "--days", "14",
                                               "--seed", "1", "--events", "340000", "-q"])
                assert res.exit_code == 0, res.output
                toml = tmp / "thresholds.toml"
                toml.write_text(f"[report]\nmax_sessions = {MAX_SESSIONS}\n", encoding="utf-8")
                model = _analyze(logs, tmp / f"{name}.json", "--thresholds", str(toml))
            elif name == "gradio_host_leak":
                model = _analyze(HOST_LEAK, tmp / f"{name}.json")
            else:
                model = _analyze(ROOT / "sample_logs" / name, tmp / f"{name}.json")
            cache[name] = (model, render_report(model, "html"), render_report(model, "md"))
        return cache[name]

    return get


def _session_findings(model: dict):
    return [f for f in model["findings"] if f.get("scope") == "session"]


def _detail_rows(f: dict) -> list[dict]:
    rows = ((f.get("evidence") or {}).get("details") or {}).get("sessions")
    return rows if isinstance(rows, list) and all(isinstance(r, dict) for r in rows) else []


def _close(a, b, tol: float = 0.0015) -> bool:
    return a is not None and b is not None and abs(a - b) <= tol


def _truncation_marks(obj, where: str = "") -> list[str]:
    """Every ``X_truncated`` in the model whose list ``X`` is not shorter than its ``X_total``."""
    bad = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_truncated") and v:
                base = k[: -len("_truncated")]
                total = obj.get(f"{base}_total")
                listed = obj.get(base)
                if isinstance(total, dict) and isinstance(listed, dict):
                    # a list per key (the drill-down's requests per session): each one named is cut
                    if not total or any(len(listed.get(key) or []) >= n for key, n in total.items()):
                        bad.append(f"{where}.{k}")
                elif not (isinstance(total, int) and isinstance(listed, list) and len(listed) < total):
                    bad.append(f"{where}.{k}")
            bad += _truncation_marks(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad += _truncation_marks(v, f"{where}[{i}]")
    return bad


# -- lists are whole -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SETS)
def test_json_lists_are_whole_or_say_they_are_cut(reports, name):
    model, _html, _md = reports(name)
    assert not _truncation_marks(model)
    for f in model["findings"]:
        ids = f.get("session_ids") or []
        assert len(ids) == len(set(ids)) == (f.get("session_count") or 0), (f["rule"], len(ids), f.get("session_count"))
        rows = _detail_rows(f)
        if rows and f.get("scope") == "session":
            assert {r["session_id"] for r in rows} == set(ids), f["rule"]
        ev = f.get("evidence") or {}
        if "requests" in ev:
            cut = ev.get("requests_truncated")
            assert len(ev["requests"]) == len(ids) or (cut and ev.get("requests_total") == len(ids)), f["rule"]
    # the drill-down holds every request of a session, or says how many it has
    counts = {s["session_id"]: s.get("requests") for s in [*model["slowest_sessions"], *model["sessions"]]}
    cut = model.get("session_details_total") or {}
    for sid, rows in (model.get("session_details") or {}).items():
        if sid in counts:
            assert len(rows) == counts[sid] or cut.get(sid) == counts[sid] > len(rows), sid
    sessions, total = model["sessions"], model["sessions_total"]
    assert len(sessions) == total or (model.get("sessions_truncated") and len(sessions) < total)
    assert bool(model.get("sessions_truncated")) == (len(sessions) < total)
    # every flagged session has its row, whatever the cut
    listed = {s["session_id"] for s in sessions}
    assert {sid for f in _session_findings(model) for sid in f["session_ids"]} <= listed
    leak = [f for f in _session_findings(model) if f["rule"] == "memory_leak"]
    band = next((c for c in model["checklist"] if c["id"] == "reserved_band"), None)
    if band is not None and leak:
        assert sorted(band.get("sessions") or []) == sorted(leak[0]["session_ids"])


def test_the_sets_exercise_what_they_are_here_for(reports):
    """The simulated set names more than 200 sessions and lists fewer sessions than it has; the
    recorded Gradio run names exactly its 4 leaking sessions by host RAM."""
    model = reports(SIMULATED)[0]
    (leak,) = [f for f in _session_findings(model) if f["rule"] == "memory_leak"]
    assert leak["session_count"] > 200
    assert model["sessions_truncated"] and model["sessions_total"] > MAX_SESSIONS
    model = reports("gradio_host_leak")[0]
    truth = json.loads((HOST_LEAK / "truth.json").read_text(encoding="utf-8"))
    (rss,) = [f for f in _session_findings(model) if f["rule"] == "rss_growth"]
    assert sorted(rss["session_ids"]) == sorted(truth["host_ram_leak_sessions"])


# -- one number per figure -----------------------------------------------------------------------


@pytest.mark.parametrize("name", SETS)
def test_a_session_figure_is_the_same_in_the_finding_and_the_sessions_table(reports, name):
    model, _html, _md = reports(name)
    by_id = {s["session_id"]: s for s in model["sessions"]}
    for f in _session_findings(model):
        for r in _detail_rows(f):
            s = by_id[r["session_id"]]
            # a column the table shows under the finding's name
            for k, v in r.items():
                if k in s and k != "session_id" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    assert s[k] == v, (f["rule"], r["session_id"], k, v, s[k])
            if f["rule"] in FIGURE:
                judged = (s.get("judged") or {}).get(f["rule"])
                assert judged is not None, (f["rule"], r["session_id"])
                for k, v in judged.items():
                    assert r.get(k) == v, (f["rule"], r["session_id"], k, v, r.get(k))
        if f["rule"] in FIGURE:
            assert f["value"] == max(r[FIGURE[f["rule"]]] for r in _detail_rows(f)), f["rule"]
    # the Python API's sessions are the same rows, the judged figures typed
    from dslogs import Report

    for typed, s in zip(Report(model).sessions, model["sessions"], strict=True):
        assert typed.session_id == s["session_id"] and typed.reserved_rise_mb == s.get("reserved_rise_mb")
        for rule, j in (s.get("judged") or {}).items():
            assert {k: getattr(typed.judged[rule], k) for k in j} == j, (rule, s["session_id"])
    # a session is flagged exactly when the rule's own test passes on what the table shows of it
    th = model["thresholds"]
    for s in model["sessions"]:
        # the rules judged by columns the row shows under their names (gpu_wait_pct_p50...)
        for rule in ("gpu_wait", "cpu_bound", "slow_decode"):
            _table, has, fires = SESSION_SCANS[rule](th)
            cpu = RULE_SPECS[rule].gpu and (s.get("host") or "") in model.get("cpu_hosts", [])
            if has(s) and not cpu:
                assert fires(s) == (rule in (s.get("findings") or [])), (rule, s["session_id"])
        for rule, j in (s.get("judged") or {}).items():
            flagged = rule in (s.get("findings") or [])
            if rule in SESSION_SCANS:
                assert SESSION_SCANS[rule](th)[2]({**s, **j}) == flagged, (rule, s["session_id"], j)
            elif rule == "ghost_memory":
                fires = j["ghost_p50_mb"] > th[rule]["ghost_mb"] and j["ghost_share_p50"] > th[rule]["ghost_share"]
                assert fires == flagged, (rule, s["session_id"], j)
            elif rule == "oom":
                assert (j["ooms"] >= th[rule]["min_events"]) == flagged, (rule, s["session_id"], j)
            if rule == "memory_leak" and j.get("basis") == "request deltas":
                fires = j["leak_per_request_mb"] > th[rule]["leak_per_request_mb"] and j[FIGURE[rule]] > th[rule]["rise_mb"]
            elif rule == "rss_growth":
                fires = j[PER_REQUEST[rule]] > th[rule]["leak_per_request_mb"] and j[FIGURE[rule]] > th[rule]["rise_mb"]
            else:
                continue
            # a flagged session's verdict can be taken over by its process (process_scoped)
            assert fires == flagged or (fires and not flagged and rule == "memory_leak"), (rule, s["session_id"], j)


@pytest.mark.parametrize("name", SETS)
def test_a_process_figure_is_the_same_in_the_finding_and_the_processes_table(reports, name):
    model, _html, _md = reports(name)
    procs = {(p.get("host"), p.get("pid")): p for p in model.get("processes") or []}
    for f in model["findings"]:
        if f["rule"] != "rss_growth" or f["scope"] != "process":
            continue
        d = f["evidence"]["details"]
        p = procs[(f["hosts"][0] if f["hosts"] else None, d["pid"])]
        for k, v in d.items():
            if k in p and isinstance(v, (int, float)):
                assert p[k] == v, (k, v, p[k])
        assert _close(f["value"], p["rss_last_mb"] - p["rss_first_mb"], 0.002)


# -- evidence adds up ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SETS)
def test_memory_evidence_adds_up_to_its_verdict(reports, name):
    model, _html, _md = reports(name)
    details = model.get("session_details") or {}
    for f in _session_findings(model):
        if f["rule"] not in FIGURE:
            continue
        verdicts = {r["session_id"]: r for r in _detail_rows(f)}
        for e in (f.get("evidence") or {}).get("requests") or []:
            v = verdicts[e["session_id"]]
            assert e.get("verdict_mb") == v[FIGURE[f["rule"]]], (f["rule"], e["session_id"])
            listed = e["requests"]
            credited = [r.get("credited_mb") for r in listed if "credited_mb" in r]
            if credited:
                assert len(credited) == len(listed)
                assert _close(e["credited_mb"], sum(c for c in credited if c is not None), 0.001 * (len(listed) + 1))
            left = sum(x["credited_mb"] for x in e.get("left_out") or [])
            n = len(listed) + len(e.get("left_out") or []) + 1
            assert _close(e["credited_mb"] + left, e["verdict_mb"], 0.001 * n + 0.05 * bool(not credited)), (
                f["rule"], e["session_id"], e["credited_mb"], left, e["verdict_mb"])
            # every credited request is listed or left out by name, each once
            if "credited" in v:
                counted = {c["request_id"] for c in v["credited"] if c["credited_mb"] is not None}
                named = {r["request_id"] for r in listed if r.get("credited_mb") is not None}
                named |= {x["request_id"] for x in e.get("left_out") or []}
                assert named == counted, (f["rule"], e["session_id"])
            # the readings are the drill-down's, request by request
            rows = {r["request_id"]: r for r in details.get(e["session_id"]) or []}
            for r in listed:
                d = rows[r["request_id"]]
                for basis in ("allocated", "reserved", "rss"):
                    if f"{basis}_before_mb" in r:
                        assert r[f"{basis}_before_mb"] == d[f"{basis}_mb_before"]
                        assert r[f"{basis}_after_mb"] == d[f"{basis}_mb_after"]
                        assert _close(r["kept_mb"], d[f"{basis}_mb_after"] - d[f"{basis}_mb_before"], 0.051)


# -- HTML and Markdown say the same numbers ------------------------------------------------------


def _row_text(page: str, sid: str) -> str:
    m = re.search(rf'<tr id="row-{re.escape(anchor(sid))}"[^>]*>(.*?)</tr>', page, re.S)
    assert m, sid
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", m.group(1)))


def _judged_text(j: dict, rule: str, num, requests: int) -> str:
    """A judged figure as the sessions tables write it: in all (per request × requests counted,
    then "of" the session's requests when fewer were counted)."""
    if rule == "memory_leak" and j.get("basis") != "request deltas":
        return f"{num(j[FIGURE[rule]])} (reserved over turns)"
    n = j["requests_counted"]
    return f"{num(j[FIGURE[rule]])} ({num(j[PER_REQUEST[rule]])} × {num(n)}" + (")" if n >= requests else f" of {requests}")


@pytest.mark.parametrize("name", SETS)
def test_html_and_markdown_show_the_judged_figures(reports, name):
    from dslogs.analyzer.render.markdown import _num

    model, page, md = reports(name)
    by_id = {s["session_id"]: s for s in model["sessions"]}
    shown = set(list(by_id)[:MAX_SESSION_ROWS])
    flagged_table = md.partition("## Flagged sessions")[2].partition("\n## ")[0]
    md_rows = {line.split(" | ")[0].lstrip("| ").strip(): line
               for line in flagged_table.splitlines() if line.startswith("| ")}
    for f in _session_findings(model):
        if f["rule"] not in FIGURE:
            continue
        # the finding card's value and the Markdown's
        assert f"value <b>{fmt.table(f['value'])} MiB</b>" in page, f["rule"]
        assert f"value {_num(f['value'])} MiB" in md, f["rule"]
        for sid in f["session_ids"]:
            j = by_id[sid]["judged"][f["rule"]]
            if sid in shown and (f["rule"] == "rss_growth" or not model.get("no_gpu")):
                want = _judged_text(j, f["rule"], fmt.table, by_id[sid]["requests"])
                assert want in " ".join(_row_text(page, sid).split()), (f["rule"], sid, want)
            if sid in md_rows:
                assert _judged_text(j, f["rule"], _num, by_id[sid]["requests"]) in md_rows[sid], (f["rule"], sid)
        # the evidence's sums, as the card and the Markdown write them
        for e in (f.get("evidence") or {}).get("requests") or []:
            if e.get("verdict_mb") is not None:
                assert f"the verdict's {_num(e['verdict_mb'])} MiB" in md or e not in f["evidence"]["requests"][:3]


# -- the same numbers from the other commands ------------------------------------------------------
# watch --once, capacity and diff read the logs through the same selection, views, metric queries
# and rules as analyze: what they show of the same logs is analyze's figure, not a second one.

WATCHED = ["oom", "mixed", "concurrent_leak", "vllm", "seed_format"]
CAPACITY = ["concurrency_cliff", "oom_at_concurrency", "capacity_small"]


def _watch_row(out: str, label: str) -> tuple[str, str, str]:
    m = re.search(rf"^{label}\s+(\S+)\s+(\S+)\s+(\d+)", out, re.M)
    assert m, out
    return m.groups()


@pytest.mark.parametrize("name", WATCHED)
def test_watch_once_shows_analyzes_requests_errors_and_latency(reports, name):
    """One frame over a window holding every event: requests, errors (failed requests, one
    definition) and the latency percentiles are the report's."""
    model, _, _ = reports(name)
    res = CliRunner().invoke(app, ["watch", str(ROOT / "sample_logs" / name), "--once", "--window", "3650d"])
    assert res.exit_code == 0, res.output
    req = model["requests"]
    flat = " ".join(res.output.split())
    assert f"since start: {req['count']} requests, {req['errors']} errors," in flat, res.output
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("end-to-end", "e2e_ms")):
        p = req[key]
        assert _watch_row(res.output, label) == (fmt.terminal(p["p50"]), fmt.terminal(p["p95"]), str(p["count"])), (label, p)


@pytest.mark.parametrize("name", CAPACITY)
def test_capacity_shows_the_reports_capacity_section(reports, name, tmp_path):
    """`dslogs capacity` is the report's capacity section: the same curve, knee, limit and
    capacity findings, figure for figure."""
    model, _, _ = reports(name)
    out = tmp_path / "capacity.json"
    res = CliRunner().invoke(app, ["capacity", str(ROOT / "sample_logs" / name), "--format", "json", "--no-cache",
                                   "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    cap = json.loads(out.read_text(encoding="utf-8"))
    assert cap["capacity"] == model["capacity"]
    assert cap["series"]["capacity"] == model["series"]["capacity"]
    rules = {"concurrency_cliff", "oom_at_concurrency"}
    assert sorted(f["rule"] for f in cap["findings"]) == sorted(f["rule"] for f in model["findings"] if f["rule"] in rules)
    for f in cap["findings"]:
        same = next(g for g in model["findings"] if g["rule"] == f["rule"])
        assert (f["value"], f["threshold"], f["message"]) == (same["value"], same["threshold"], same["message"])


def test_diff_of_two_folders_shows_each_sides_report_percentiles(reports, tmp_path):
    """`dslogs diff BEFORE AFTER`: each side's p50/p95/p99 are that folder's report's."""
    out = tmp_path / "diff.json"
    res = CliRunner().invoke(app, ["diff", str(ROOT / "sample_logs" / "healthy"), str(ROOT / "sample_logs" / "slow_prefill"),
                                   "--format", "json", "--no-cache", "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text(encoding="utf-8"))
    sides = {"before": reports("healthy")[0], "after": reports("slow_prefill")[0]}
    checked = 0
    for row in d["stages"]:
        for side, model in sides.items():
            stage = next((s for s in model["stages"] if s["stage"] == row["label"]), None)
            if stage is None:
                continue
            for q in ("p50", "p95", "p99"):
                got = (row.get(q) or {}).get(side)
                if got is not None:
                    assert got == stage[f"{q}_ms"], (row["metric"], side, q)
                    checked += 1
    for row in d["request_metrics"]:
        for side, model in sides.items():
            block = model["requests"].get(row["metric"])
            for q in ("p50", "p95", "p99"):
                got = (row.get(q) or {}).get(side)
                if got is not None and block:
                    assert got == block[q], (row["metric"], side, q)
                    checked += 1
    assert checked >= 24
