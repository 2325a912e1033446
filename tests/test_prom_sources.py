"""Prometheus text as TGI, llama.cpp, vLLM and SGLang write it, read by each family's ``# TYPE``
line: TGI (text-generation-inference 3.3.6-dev0, router/src/server.rs; the Rust
metrics-exporter-prometheus 0.15 renders it) and llama.cpp (examples/server/server.cpp at
03d4bccb685f1fff604c56abe4cddf0348c26417, ``handle_metrics``) rebuilt from their source in
tests/prom_helpers.py, vLLM and SGLang through the real prometheus_client. Requests, tokens and
rates equal what was put in; servers are told apart by host in the file name and by their labels;
numbers and files as hostile as the exposition format allows cost that value or that file."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("prometheus_client")

from prom_helpers import LlamaCppServer, SglangServer, TgiServer, VllmServer  # noqa: E402

from dslogs.analyzer.ingest import formats, prometheus  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_796_000_000


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dslogs", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120, **kw)  # fmt: skip


def _read(folder: Path, group: str = "auto"):
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    kw = {"group": group} if group != "auto" else {}
    return prometheus.read_servers([(f, str(f.relative_to(folder))) for f in files], **kw)


def _by(rows: list[dict], key: str = "metric") -> dict:
    return {r[key]: r for r in rows}


def test_tgi_counters_ending_in_count_summaries_and_token_histograms(tmp_path):
    """TGI's ``tgi_request_count`` is a counter (its TYPE says so), not a histogram's count;
    ``tgi_request_skipped_tokens`` (a histogram without buckets) is a summary; prompt and
    generated tokens are the windowed sums of their histograms."""
    rng = random.Random(11)
    tgi = TgiServer()
    for _ in range(15):  # before the window
        tgi.finish(rng.uniform(0.5, 3), 0.01, rng.randint(10, 400), rng.randint(1, 300))
    tgi.scrape(tmp_path, f"tgi-{T0}.prom")
    window = [(rng.uniform(0.5, 6), rng.uniform(0, 0.4), rng.randint(10, 4000), rng.randint(1, 900)) for _ in range(70)]
    for d, q, p, g in window:
        tgi.finish(d, q, p, g)
    for _ in range(4):
        tgi.fail("validation")
    tgi.queue_size, tgi.batch_size = 5, 3
    tgi.scrape(tmp_path, f"tgi-{T0 + 60}.prom")
    assert formats.sniff_file(tmp_path / f"tgi-{T0}.prom").name == "prometheus"
    servers, bad = _read(tmp_path)
    assert bad == [] and len(servers) == 1
    sv = servers[0]
    assert sv["restarts"] == 0
    rates = {(c["metric"], c["labels"]): c for c in sv["counters"]}
    assert rates[("tgi_request_count", "")]["increase"] == 74
    assert rates[("tgi_request_count", "")]["per_s"] == pytest.approx(74 / 60)
    assert rates[("tgi_request_success", "")]["increase"] == 70
    assert rates[("tgi_request_failure", "err=validation")]["increase"] == 4
    hist = _by(sv["histograms"])
    assert hist["tgi_request_input_length"]["count"] == 70
    assert hist["tgi_request_input_length"]["sum"] == sum(p for _, _, p, _ in window)
    assert hist["tgi_request_generated_tokens"]["sum"] == sum(g for _, _, _, g in window)
    dur = hist["tgi_request_duration"]
    lo, hi = dur["p50_bucket"]
    true = sorted(d for d, _, _, _ in window)[34]
    assert lo <= true <= hi and lo <= dur["p50"] <= hi
    skipped = hist["tgi_request_skipped_tokens"]
    assert skipped["count"] == 70 and skipped["sum"] == 0 and skipped["p50_bucket"] is None
    assert "since it started" in skipped["quantiles"]
    gauges = _by(sv["gauges"])
    assert gauges["tgi_queue_size"]["last"] == 5 and gauges["tgi_batch_current_size"]["max"] == 3


def test_llamacpp_average_typed_counter_that_falls_is_no_restart(tmp_path):
    """llama.cpp's ``n_busy_slots_per_decode`` (TYPE counter, an average) falls when load drops
    while every real counter rises: no restart, it is read as a gauge, and the token counters'
    increases are what was served (read as restarts, prompt tokens were 2.5x too many)."""
    rng = random.Random(7)
    srv = LlamaCppServer()
    served = []
    loads = [4, 4, 1, 4, 1, 1]  # slots busy at once: the average falls twice
    for i, slots in enumerate(loads):
        batch = [(rng.randint(50, 900), rng.randint(20, 200)) for _ in range(8)]
        if i:
            served += batch
        srv.serve(batch, slots)
        srv.processing, srv.deferred = slots, 8 - slots
        srv.scrape(tmp_path, f"llamacpp-{T0 + 60 * i}.prom")
    servers, bad = _read(tmp_path)
    assert bad == [] and len(servers) == 1
    sv = servers[0]
    assert sv["restarts"] == 0
    rates = _by(sv["counters"])
    assert rates["llamacpp:prompt_tokens"]["increase"] == pytest.approx(sum(p for p, _ in served), rel=1e-5)
    assert rates["llamacpp:tokens_predicted"]["increase"] == pytest.approx(sum(n for _, n in served), rel=1e-5)
    assert rates["llamacpp:tokens_predicted"]["per_s"] == pytest.approx(sum(n for _, n in served) / 300, rel=1e-5)
    assert "llamacpp:n_busy_slots_per_decode" not in rates
    busy = _by(sv["gauges"])["llamacpp:n_busy_slots_per_decode"]
    assert "falls" in busy["note"] and len(busy["points"]) == 6
    assert all(c["increase"] >= 0 for c in sv["counters"])


def test_a_real_restart_still_counts_from_zero(tmp_path):
    """Every cumulative value falls (a new process): one restart, counted from zero."""
    srv = LlamaCppServer()
    srv.serve([(100, 10)] * 4, 2)
    srv.scrape(tmp_path, f"llamacpp-{T0}.prom")
    srv.serve([(100, 10)] * 4, 2)
    srv.scrape(tmp_path, f"llamacpp-{T0 + 60}.prom")
    srv = LlamaCppServer()
    srv.serve([(100, 10)] * 2, 2)
    srv.scrape(tmp_path, f"llamacpp-{T0 + 120}.prom")
    (sv,), _ = _read(tmp_path)
    assert sv["restarts"] == 1
    assert _by(sv["counters"])["llamacpp:prompt_tokens"]["increase"] == 400 + 200


def test_process_start_time_decides_restarts(tmp_path):
    """prometheus_client's ``process_start_time_seconds``: where it is exposed it alone says
    whether the process restarted, whatever the counters do (here the new process passes the old
    one's totals, and no ``_created`` stamp tells)."""
    import prometheus_client
    from prometheus_client import Gauge

    prometheus_client.disable_created_metrics()
    try:
        _start_time_scrapes(tmp_path, Gauge)
    finally:
        prometheus_client.enable_created_metrics()
    (sv,), _ = _read(tmp_path)
    assert sv["restarts"] == 1
    assert _by(sv["counters"])["vllm:prompt_tokens"]["increase"] == (10 + 50) * 100


def _start_time_scrapes(tmp_path, Gauge):
    servers = []
    for t, start in ((T0, 1000.0), (T0 + 60, 1000.0), (T0 + 120, 2000.0)):
        if not servers or start != servers[-1][1]:
            servers.append((VllmServer(), start))
            Gauge("process_start_time_seconds", "Start time of the process", registry=servers[-1][0].registry).set(start)
        srv = servers[-1][0]
        for _ in range(10 if t < T0 + 120 else 50):  # the new process passes the old one's totals
            srv.finish(0.1, 1.0, 0.01, 100, 10)
        srv.scrape(tmp_path, t)


def test_replicas_told_apart_by_host_in_the_name_and_by_labels(tmp_path):
    """``vllm-node01-<t>.prom`` and ``vllm-node02-<t>.prom`` are two servers (they merged into
    one with false restarts); one file holding two instances is two servers; ``group`` groups
    them otherwise."""
    nodes = {"node01": VllmServer(), "node02": VllmServer()}
    load = {"node01": 30, "node02": 5}
    for i in range(4):
        for node, srv in nodes.items():
            for _ in range(load[node]):
                srv.finish(0.2, 2.0, 0.01, 100, 20)
            srv.scrape(tmp_path, T0 + 60 * i).rename(tmp_path / f"vllm-{node}-{T0 + 60 * i}.prom")
    servers, bad = _read(tmp_path)
    assert bad == [] and [s["server"].split()[0] for s in servers] == ["vllm-node01", "vllm-node02"]
    for sv, node in zip(servers, ("node01", "node02"), strict=True):
        assert sv["restarts"] == 0 and sv["snapshots"] == 4
        assert _by(sv["counters"])["vllm:prompt_tokens"]["increase"] == 3 * load[node] * 100
    (one,), _ = _read(tmp_path, group="one")
    assert _by(one["counters"])["vllm:prompt_tokens"]["increase"] > 0 and one["snapshots"] == 8

    # one file per scrape holding two servers, told apart by ``instance`` (a federated scrape)
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    fed = tmp_path / "fed"
    fed.mkdir()
    reg = CollectorRegistry()
    tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ["instance", "model_name"],
                     registry=reg)  # fmt: skip
    for i in range(3):
        tokens.labels("a:8000", "m").inc(100)
        tokens.labels("b:8000", "m").inc(7)
        (fed / f"federate-{T0 + 60 * i}.prom").write_bytes(generate_latest(reg))
    servers, _ = _read(fed)
    assert {s["server"]: _by(s["counters"])["vllm:prompt_tokens"]["increase"] for s in servers} == {
        "federate instance=a:8000 model_name=m": 200, "federate instance=b:8000 model_name=m": 14}
    (summed,), _ = _read(fed, group="file")
    assert _by(summed["counters"])["vllm:prompt_tokens"]["increase"] == 214


def test_sglang_through_prometheus_client(tmp_path):
    sg = SglangServer()
    sg.scrape(tmp_path, T0)
    for _ in range(40):
        sg.finish(0.3, 120, 300)
    sg.scrape(tmp_path, T0 + 60)
    (sv,), bad = _read(tmp_path)
    rates = _by(sv["counters"])
    assert bad == [] and sv["restarts"] == 0
    assert rates["sglang:prompt_tokens"]["increase"] == 40 * 120
    assert rates["sglang:generation_tokens"]["per_s"] == pytest.approx(40 * 300 / 60)
    # prometheus_client writes each _created stamp under a TYPE gauge line of its own: a stamp
    assert sorted(g["metric"] for g in sv["gauges"]) == ["sglang:num_queue_reqs", "sglang:num_running_reqs",
                                                         "sglang:token_usage"]  # fmt: skip


# -- numbers and files as hostile as the exposition format allows ---------------------------------


def _vllm_pair(folder: Path) -> list[Path]:
    srv = VllmServer()
    for _ in range(10):
        srv.finish(0.2, 2.0, 0.01, 100, 20)
    a = srv.scrape(folder, T0)
    for _ in range(10):
        srv.finish(0.2, 2.0, 0.01, 100, 20)
    return [a, srv.scrape(folder, T0 + 60)]


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e400", "-5"])
def test_nan_infinities_and_negatives_in_a_later_snapshot(tmp_path, value):
    """``_count NaN``, ``+Inf``, ``1e400`` or a negative value in the second snapshot: that value
    is a bad line (was a traceback); the other series keep their figures; no rate is negative."""
    _, second = _vllm_pair(tmp_path)
    text = second.read_text().splitlines()
    i = next(i for i, line in enumerate(text) if line.startswith("vllm:e2e_request_latency_seconds_count"))
    text[i] = text[i].rsplit(" ", 1)[0] + " " + value
    j = next(i for i, line in enumerate(text) if line.startswith("vllm:kv_cache_usage_perc"))
    text[j] = text[j].rsplit(" ", 1)[0] + " " + value  # a gauge: "no value", not a bad line
    second.write_text("\n".join(text) + "\n")
    (sv,), bad = _read(tmp_path)
    assert [(no, "vllm:e2e_request_latency_seconds_count" in why) for _, no, why in bad] == [(i + 1, True)]
    assert _by(sv["counters"])["vllm:prompt_tokens"]["increase"] == 1000
    assert _by(sv["histograms"])["vllm:time_to_first_token_seconds"]["count"] == 10
    assert all(c["increase"] >= 0 for c in sv["counters"])
    json.dumps(sv, allow_nan=False)
    res = _cli("analyze", tmp_path, "--format", "json", "--no-cache")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert json.loads(res.stdout)["ingest"]["bad_lines"] == 1


@pytest.mark.parametrize("stamp", ["1" * 20, "9" * 400, "-" + "9" * 30, "1.5e12"])
def test_odd_sample_timestamps_are_bad_lines(tmp_path, stamp):
    """Sample timestamps of 20 or 400 digits, hugely negative or not an integer: a bad line each,
    the sample kept, the snapshot's time from its name."""
    body = "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total {v} {ts}\n"
    (tmp_path / "metrics.prom").write_text(body.format(v=10, ts=stamp))
    (tmp_path / "metrics.prom.gz").write_bytes(gzip.compress(body.format(v=30, ts=1_796_000_060_000).encode()))
    os.utime(tmp_path / "metrics.prom", (T0, T0))
    servers, bad = _read(tmp_path)
    assert [(f, no) for f, no, _ in bad] == [("metrics.prom", 2)]
    (sv,) = servers
    assert sv["snapshots"] == 2 and _by(sv["counters"])["vllm:prompt_tokens"]["increase"] == 20
    res = _cli("analyze", tmp_path, "--format", "json", "--no-cache")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


def _damaged(folder: Path, how: str) -> Path:
    good = _vllm_pair(folder)[0]
    raw = bytearray(gzip.compress(good.read_bytes()))
    if how == "truncated":
        raw = raw[: len(raw) // 2]
    else:
        raw[len(raw) // 2] ^= 0x40
    bad = folder / f"metrics-{T0 + 120}.prom.gz"
    bad.write_bytes(bytes(raw))
    return bad


@pytest.mark.parametrize("how", ["truncated", "bitflip"])
def test_damaged_prom_gz_is_one_line_naming_it(tmp_path, how):
    """A truncated or bit-flipped .prom.gz (a traceback, or "Aborted." and exit 1): beside good
    snapshots it is left out and named; alone it is one line and exit 2."""
    bad = _damaged(tmp_path, how)
    servers, errors = _read(tmp_path)
    assert [(f, no) for f, no, _ in errors] == [(bad.name, 0)] and "gzip" in errors[0][2]
    assert servers[0]["snapshots"] == 2
    res = _cli("analyze", tmp_path, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ingest"]["bad_line_samples"][0]["file"].endswith(bad.name)
    alone = _cli("analyze", bad, "--format", "json", "--no-cache")
    assert alone.returncode == 2 and "Traceback" not in alone.stderr
    lines = alone.stderr.strip().splitlines()
    assert len(lines) == 1 and bad.name in lines[0] and "gzip" in lines[0], alone.stderr


def test_prom_gz_inflation_is_bounded(tmp_path):
    """A small .prom.gz of blank lines that inflates past MAX_TEXT (80 MiB from ~80 KB; the
    1.4 GB RSS case) is read as a stream and stops at the bound: the process stays small."""
    path = tmp_path / f"metrics-{T0}.prom.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        block = b"\n" * (1 << 20)
        for _ in range(80):
            f.write(block)
    assert path.stat().st_size < 200_000
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so it would count the pytest process that forked
    code = ("import sys; from pathlib import Path; from dslogs.analyzer.ingest import prometheus as p; "
            f"s, b = p.read_servers([(Path({str(path)!r}), 'm.prom.gz')]); "
            "print(len(s), b[0][2], next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')))")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert res.returncode == 0, res.stderr
    n, *why, rss_kb = res.stdout.split()
    assert n == "0" and "64 MiB" in " ".join(why)
    assert int(rss_kb) < 250_000, rss_kb


def test_prom_servers_option(tmp_path):
    """``dslogs analyze --prom-servers``: two replicas are two servers by default, one server
    with ``one``; a value not offered is one line and exit 2."""
    for node in ("node01", "node02"):
        srv = VllmServer()
        for i in range(2):
            srv.finish(0.2, 2.0, 0.01, 100, 20)
            srv.scrape(tmp_path, T0 + 60 * i).rename(tmp_path / f"vllm-{node}-{T0 + 60 * i}.prom")
    res = _cli("analyze", tmp_path, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["server_metrics"]) == 2
    res = _cli("analyze", tmp_path, "--format", "json", "--no-cache", "--prom-servers", "one")
    (one,) = json.loads(res.stdout)["server_metrics"]
    assert one["server"] == "all snapshots" and one["snapshots"] == 4
    bad = _cli("analyze", tmp_path, "--format", "json", "--no-cache", "--prom-servers", "nodes")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--prom-servers" in bad.stderr


@pytest.mark.parametrize("folder", ["tgi", "llamacpp"])
def test_sample_folders_give_what_was_put_in(folder):
    """sample_logs/tgi (two replicas) and sample_logs/llamacpp (an average TYPEd counter that
    falls): one server per replica, no restart, requests and tokens as truth.json says."""
    path = ROOT / "sample_logs" / folder
    truth = json.loads((path / "truth.json").read_text())
    res = _cli("analyze", path, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    model = json.loads(res.stdout)
    assert model["ingest"]["snapshots"] == truth["snapshots"] and not model["ingest"].get("bad_lines")
    servers = {s["server"].rsplit("/", 1)[-1]: s for s in model["server_metrics"]}
    assert sorted(servers) == sorted(truth["servers"])
    for name, want in truth["servers"].items():
        sv = servers[name]
        assert sv["restarts"] == 0
        counters, hist = _by(sv["counters"]), _by(sv["histograms"])
        if folder == "tgi":
            assert counters["tgi_request_count"]["increase"] == want["requests"]
            assert counters["tgi_request_success"]["increase"] == want["success"]
            assert hist["tgi_request_input_length"]["sum"] == want["prompt_tokens"]
            assert hist["tgi_request_generated_tokens"]["sum"] == want["generated_tokens"]
        else:
            assert counters["llamacpp:prompt_tokens"]["increase"] == pytest.approx(want["prompt_tokens"], rel=1e-5)
            assert counters["llamacpp:tokens_predicted"]["increase"] == pytest.approx(want["generated_tokens"],
                                                                                      rel=1e-5)  # fmt: skip


def test_python_api_groups_servers_too(tmp_path):
    import dslogs
    from dslogs.analyzer.core.errors import UsageError

    for node in ("node01", "node02"):
        srv = VllmServer()
        for i in range(2):
            srv.finish(0.2, 2.0, 0.01, 100, 20)
            srv.scrape(tmp_path, T0 + 60 * i).rename(tmp_path / f"vllm-{node}-{T0 + 60 * i}.prom")
    with dslogs.open(tmp_path, use_cache=False, prom_servers="file") as logs:
        assert len(logs.report().model["server_metrics"]) == 2
    with dslogs.open(tmp_path, use_cache=False, prom_servers="one") as logs:
        assert len(logs.report().model["server_metrics"]) == 1
    with pytest.raises(UsageError, match="prom-servers"):
        dslogs.open(tmp_path, prom_servers="hosts")


def test_a_family_with_fewer_server_labels_joins_its_server(tmp_path):
    """vLLM's ``cache_config_info`` carries ``engine`` but not ``model_name``: it belongs to the
    server whose labels include it, not to a server of its own."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    reg = CollectorRegistry()
    tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                     registry=reg).labels("m", "0")  # fmt: skip
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", ["block_size", "engine"],
          registry=reg).labels("16", "0").set(1)  # fmt: skip
    for i in range(2):
        tokens.inc(50)
        (tmp_path / f"metrics-{T0 + 60 * i}.prom").write_bytes(generate_latest(reg))
    (sv,), _ = _read(tmp_path)
    assert sv["server"] == "metrics" and _by(sv["counters"])["vllm:prompt_tokens"]["increase"] == 50
    assert "vllm:cache_config_info" in _by(sv["gauges"])


COMMANDS = [["capacity", "LOGS"], ["report", "weekly", "LOGS"], ["query", "LOGS", "SELECT 1"],
            ["diff", "LOGS", "--before", "2026-11-23..2026-11-24", "--after", "2026-11-24.."], ["analyze", "LOGS"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_prom_servers_is_an_option_of_every_command_that_reads_logs(command, monkeypatch):
    """``--prom-servers`` is part of the selection: each command that reads logs takes it into the
    ``Selection`` it builds (the run stops there), and a value not offered is the selection's one line."""
    from typer.testing import CliRunner

    from dslogs.analyzer.cli import app
    from dslogs.analyzer.core.errors import UsageError
    from dslogs.analyzer.core.selection import Selection

    args = [str(ROOT / "sample_logs" / "tgi") if a == "LOGS" else a for a in command]
    seen = []
    build = Selection.build.__func__

    def recorded(cls, *a, **kw):
        selection = build(cls, *a, **kw)
        seen.append(selection.prom_servers)
        raise UsageError("stop here")

    monkeypatch.setattr(Selection, "build", classmethod(recorded))
    res = CliRunner().invoke(app, [*args, "--prom-servers", "one", "--no-cache"])
    assert res.exit_code == 2 and "stop here" in res.output and seen == ["one"], res.output
    monkeypatch.undo()
    res = CliRunner().invoke(app, [*args, "--prom-servers", "nodes"])
    assert res.exit_code == 2 and res.output.strip().splitlines() == [
        "dslogs: error: --prom-servers: 'nodes' is not one of auto, file, labels, one"], res.output
