"""Prometheus text snapshots of a vLLM server, written by the real prometheus_client with vLLM's
names and buckets (tests/prom_helpers.py): windowed histogram percentiles with their bucket,
counter rates across a restart, gauges as a series, a report from snapshots alone."""

from __future__ import annotations

import bisect
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("prometheus_client")

from prom_helpers import TTFT_BUCKETS, VllmServer  # noqa: E402

from dslogs.analyzer.ingest import formats, prometheus  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_796_000_000


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dslogs", *args], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory):
    """Three scrapes a minute apart; the server restarts between the second and the third."""
    folder = tmp_path_factory.mktemp("prom")
    rng = random.Random(3)
    window_ttft = []
    server = VllmServer()
    for _ in range(50):  # before the window: in the first scrape's totals only
        server.finish(rng.uniform(0.02, 0.09), rng.uniform(1, 3), 0.01, 200, 300)
    server.scrape(folder, T0)
    for _ in range(100):
        ttft = rng.uniform(0.2, 1.4)
        window_ttft.append(ttft)
        server.finish(ttft, rng.uniform(2, 9), rng.uniform(0.1, 0.5), 200, 400, rng.choice(["stop", "length"]))
    server.running.set(6)
    server.waiting.set(11)
    server.kv.set(0.83)
    server.scrape(folder, T0 + 60)
    server = VllmServer()  # restarted: every counter from zero
    for _ in range(30):
        ttft = rng.uniform(0.2, 1.4)
        window_ttft.append(ttft)
        server.finish(ttft, rng.uniform(2, 9), 0.2, 200, 400)
    server.running.set(2)
    server.scrape(folder, T0 + 120)
    (folder / "notes.txt").write_text("not a snapshot")
    return folder, window_ttft


def test_windowed_deltas_percentiles_rates_and_restart(scrapes):
    folder, window_ttft = scrapes
    files = sorted(folder.glob("*.prom"))
    assert formats.sniff_file(files[0]).name == "prometheus"
    servers, bad = prometheus.read_servers([(f, f.name) for f in files])
    assert bad == [] and len(servers) == 1
    sv = servers[0]
    assert sv["snapshots"] == 3 and sv["seconds"] == 120 and sv["restarts"] == 1
    hist = {h["metric"]: h for h in sv["histograms"]}
    ttft = hist["vllm:time_to_first_token_seconds"]
    assert ttft["count"] == len(window_ttft) == 130  # the 50 before the window are not in it
    assert ttft["mean"] == pytest.approx(statistics.fmean(window_ttft))
    ordered = sorted(window_ttft)
    for q in (50, 90, 99):
        lo, hi = ttft[f"p{q}_bucket"]
        assert hi in TTFT_BUCKETS and (lo == 0 or lo in TTFT_BUCKETS)
        assert lo <= ttft[f"p{q}"] <= hi
        # the spans' own percentile lies in the same bucket: the stated resolution holds
        true = ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
        assert lo <= true <= hi, (q, true, lo, hi)
        i = bisect.bisect_left(TTFT_BUCKETS, true)
        assert hi == TTFT_BUCKETS[i]
    rates = {(c["metric"], c["labels"]): c for c in sv["counters"]}
    assert rates[("vllm:prompt_tokens", "")]["increase"] == 130 * 200
    assert rates[("vllm:generation_tokens", "")]["per_s"] == pytest.approx(130 * 400 / 120)
    done = sum(c["increase"] for (m, _), c in rates.items() if m == "vllm:request_success")
    assert done == 130
    gauges = {g["metric"]: g for g in sv["gauges"]}
    assert [p[1] for p in gauges["vllm:num_requests_waiting"]["points"]] == [0, 11, 0]
    assert gauges["vllm:kv_cache_usage_perc"]["max"] == pytest.approx(0.83)


def test_report_from_snapshots_alone_in_every_format(scrapes, tmp_path):
    folder, _ = scrapes
    res = _cli("analyze", str(folder), "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    model = json.loads(res.stdout)
    assert model["ingest"]["snapshots"] == 3 and model["ingest"]["events"] == 0
    assert model["server_metrics"][0]["histograms"]
    assert {r["gauge"] for r in model["series"]["server_gauges"]} == {"waiting", "running", "kv_cache_usage"}
    saved = tmp_path / "report.json"
    saved.write_text(res.stdout)
    from dslogs.analyzer.model.report import load_report_json

    assert load_report_json(saved)["server_metrics"] == model["server_metrics"]
    md = _cli("analyze", str(folder), "--format", "md", "--no-cache")
    assert md.returncode == 0 and "## Server metrics" in md.stdout
    assert "| vllm:time_to_first_token_seconds | 130 |" in md.stdout
    out = tmp_path / "r.html"
    page = _cli("analyze", str(folder), "--no-cache", "--out", str(out))
    assert page.returncode == 0, page.stderr
    html = out.read_text()
    assert 'id="sec-server"' in html and "chart-server_gauges" in html and "vllm:request_success" in html


def test_server_gauges_chart_is_a_plain_vega_lite_dict(scrapes):
    from dslogs.analyzer.render.charts.specs import CHARTS, build_charts

    folder, _ = scrapes
    servers, _ = prometheus.read_servers([(f, f.name) for f in sorted(folder.glob("*.prom"))])
    model = {"series": {"server_gauges": prometheus.gauge_rows(servers)}, "window": {}}
    chart = next(c for c in build_charts(model) if c.id == "server_gauges")
    assert CHARTS["server_gauges"].section == "server"
    json.dumps(chart.spec)  # plain JSON: no altair objects
    assert chart.spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


def test_sglang_tgi_and_llamacpp_names_give_the_same_figures(tmp_path):
    """The other servers' /metrics, each two scrapes a minute apart: percentiles from SGLang's
    and TGI's histograms with their bucket, llama.cpp's counters as rates, and every server's
    queue and batch gauges in the charted series."""
    from prom_helpers import SglangServer, llamacpp_text, tgi_text

    rng = random.Random(5)
    sg = SglangServer()
    (tmp_path / "sglang").mkdir()
    sg.scrape(tmp_path / "sglang", T0)
    window = [rng.uniform(0.05, 0.6) for _ in range(80)]
    for ttft in window:
        sg.finish(ttft, 120, 300)
    sg.queued.set(7)
    sg.running.set(3)
    sg.scrape(tmp_path / "sglang", T0 + 60)
    (tmp_path / "llamacpp").mkdir()
    (tmp_path / "llamacpp" / f"llamacpp-{T0}.prom").write_text(llamacpp_text(1000, 4000, 0, 0))
    (tmp_path / "llamacpp" / f"llamacpp-{T0 + 60}.prom").write_text(llamacpp_text(7000, 16000, 4, 9))
    (tmp_path / "tgi").mkdir()
    buckets = [0.5, 1.0, 2.0, 5.0, 10.0, 30.0]
    first = [rng.uniform(0.3, 4) for _ in range(20)]
    later = [rng.uniform(0.3, 4) for _ in range(60)]
    (tmp_path / "tgi" / f"tgi-{T0}.prom").write_text(tgi_text(first, 0, 1, buckets))
    (tmp_path / "tgi" / f"tgi-{T0 + 60}.prom").write_text(tgi_text(first + later, 12, 4, buckets))
    files = sorted(tmp_path.rglob("*.prom"))
    assert all(formats.sniff_file(f).name == "prometheus" for f in files)
    servers, bad = prometheus.read_servers([(f, str(f.relative_to(tmp_path))) for f in files])
    assert bad == [] and len(servers) == 3
    by = {s["server"].split("/")[0]: s for s in servers}

    ttft = {h["metric"]: h for h in by["sglang"]["histograms"]}["sglang:time_to_first_token_seconds"]
    assert ttft["count"] == 80 and ttft["mean"] == pytest.approx(statistics.fmean(window))
    true = sorted(window)[39]
    lo, hi = ttft["p50_bucket"]
    assert lo <= ttft["p50"] <= hi and lo <= true <= hi
    rates = {c["metric"]: c for c in by["sglang"]["counters"]}
    assert rates["sglang:generation_tokens"]["increase"] == 80 * 300

    dur = {h["metric"]: h for h in by["tgi"]["histograms"]}["tgi_request_duration"]
    assert dur["count"] == 60 and dur["mean"] == pytest.approx(statistics.fmean(later))
    lo, hi = dur["p50_bucket"]
    assert lo <= sorted(later)[29] <= hi and hi in buckets

    rates = {c["metric"]: c for c in by["llamacpp"]["counters"]}
    assert rates["llamacpp:tokens_predicted"]["per_s"] == pytest.approx(12000 / 60)

    series = prometheus.gauge_rows(servers)
    last = {(r["server"].split("/")[0], r["gauge"]): r["value"] for r in sorted(series, key=lambda r: r["ts"])}
    assert last[("sglang", "waiting")] == 7 and last[("sglang", "running")] == 3
    assert last[("tgi", "waiting")] == 12 and last[("tgi", "running")] == 4
    assert last[("llamacpp", "waiting")] == 9 and last[("llamacpp", "running")] == 4
