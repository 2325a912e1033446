"""The fault simulator: determinism, files (rotation, gzip, local days), truth.json against the
files, each scenario showing exactly its fault under an independent reading of the rules' thresholds
(docs/rules.md), the legacy writer matching article 003 §2.2, the CLI contract, and sample_logs/
being what scripts/make_sample_logs.py produces."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.simulate import SCENARIOS, simulate
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS
from dslogs.analyzer.simulate.traffic import LOAD_MAX, load_curve
from tests.sim_cases import LEGACY_SCENARIOS, V1_SCENARIOS, evaluate, events, lines, run

REPO = Path(__file__).resolve().parents[1]
FILE_NAME = re.compile(r"^ds15b_(\d{8})(?:\.(\d+))?\.jsonl(\.gz)?$")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


MULTI = dict(
    scenarios=["memory_leak", "oom", "collector_drops", "rss_growth", "bad_lines"],
    days=2,
    hosts=2,
    events=30_000,
    max_bytes=256 << 10,
)


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("multi")
    simulate(out, seed=5, **MULTI)
    return out, json.loads((out / "truth.json").read_text(encoding="utf-8"))


# -- determinism -------------------------------------------------------------------------------


def test_same_arguments_give_the_same_bytes(multi, tmp_path):
    first, _ = multi
    simulate(tmp_path / "again", seed=5, **MULTI)
    assert _tree(first) == _tree(tmp_path / "again")


def test_another_seed_gives_other_data(multi, tmp_path):
    first, truth = multi
    simulate(tmp_path / "other", seed=6, **MULTI)
    other = json.loads((tmp_path / "other" / "truth.json").read_text())
    assert set(other["healthy_sessions"]).isdisjoint(truth["healthy_sessions"])
    assert _tree(first) != _tree(tmp_path / "other")


def test_legacy_is_deterministic_too(tmp_path):
    kw = dict(scenarios=["memory_leak", "oom"], fmt="legacy", seed=3, events=2000, start="2026-11-23T09:00", hours=6)
    simulate(tmp_path / "a", **kw)
    simulate(tmp_path / "b", **kw)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_scenario_order_does_not_matter(tmp_path):
    kw = dict(seed=1, events=3000, start="2026-11-23T09:00", hours=3)
    simulate(tmp_path / "a", ["oom", "memory_leak"], **kw)
    simulate(tmp_path / "b", ["memory_leak", "oom"], **kw)
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    a.pop("truth.json"), b.pop("truth.json")  # args record the order given
    assert a == b


# -- files -------------------------------------------------------------------------------------


def test_rotation_gzip_and_local_days(multi):
    root, truth = multi
    by_host: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    for rel in truth["files"]:
        host, name = rel.split("/")
        m = FILE_NAME.match(name)
        assert m, rel
        by_host[host].append((m.group(1), int(m.group(2) or 0), rel))
        data = (root / rel).read_bytes()
        if rel.endswith(".gz"):
            assert data[4:8] == b"\0\0\0\0", "gzip header mtime must be 0 (deterministic bytes)"
            data = gzip.decompress(data)
        assert len(data) <= MULTI["max_bytes"], rel
    assert sorted(by_host) == ["gpu-01", "gpu-02"]
    empty = {b["file"] for b in truth["bad_lines"] if b["kind"] == "empty_file"}
    for host, files in by_host.items():
        files = [f for f in files if f[2] not in empty]
        days = sorted({d for d, _, _ in files})
        assert len(days) == MULTI["days"], (host, days)
        for day in days:
            indexes = sorted(i for d, i, _ in files if d == day)
            assert indexes == list(range(len(indexes))), (host, day, indexes)
            assert len(indexes) > 1, "max_bytes=256 KiB must rotate every day"
        last = max(files)
        plain = [rel for _, _, rel in files if not rel.endswith(".gz")]
        assert plain == [last[2]], "only the current (last) file stays plain"
    # gpu-02 writes +08:00: its file dates are its local days, and every line's ts agrees.
    for e in events(root, truth):
        if e["host"] == "gpu-02":
            assert e["ts"].endswith("+08:00")
        day = FILE_NAME.match(e["_file"].split("/")[1]).group(1)
        assert e["ts"][:10].replace("-", "") == day, e["_file"]


def test_lines_are_whole_and_time_ordered(multi):
    root, truth = multi
    bad = {(b["file"], b["line"]) for b in truth["bad_lines"]}
    for rel in truth["files"]:
        data = (root / rel).read_bytes()
        data = gzip.decompress(data) if rel.endswith(".gz") else data
        eof_cut = any(b["file"] == rel and b["kind"] == "truncated_eof" for b in truth["bad_lines"])
        assert data == b"" or data.endswith(b"\n") or eof_cut, rel
    last: dict[str, str] = {}
    for rel, i, raw in lines(root, truth):
        if (rel, i) in bad:
            continue
        e = json.loads(raw)
        assert e["ts"] >= last.get(rel, ""), (rel, i)  # same offset per file: text order is time order
        last[rel] = e["ts"]


def test_events_target_is_met_within_ten_percent(tmp_path):
    for n in (20_000, 120_000):
        summary = simulate(tmp_path / str(n), ["healthy"], events=n)
        assert abs(summary["events"] / n - 1) <= 0.10, summary
        truth = json.loads((tmp_path / str(n) / "truth.json").read_text())
        assert truth["events"] == summary["events"]


def test_rerun_replaces_previous_output_and_refuses_foreign_folders(tmp_path):
    out = tmp_path / "sim"
    simulate(out, ["healthy"], days=2, events=12_000)
    simulate(out, ["healthy"], events=5_000)
    truth = json.loads((out / "truth.json").read_text())
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        [*truth["files"], "truth.json"]
    )
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not empty"):
        simulate(foreign, ["healthy"])
    assert (foreign / "notes.txt").read_text() == "keep me"


# -- truth.json --------------------------------------------------------------------------------


def test_truth_matches_the_files(multi):
    root, truth = multi
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "truth.json")
    assert truth["files"] == sorted(on_disk)
    sessions: dict[str, set[str]] = defaultdict(set)
    n = 0
    for e in events(root, truth):
        n += 1
        if e["session_id"]:
            sessions[e["session_id"]].add(e["host"])
    assert n == truth["events"]
    healthy = set(truth["healthy_sessions"])
    faulty = set()
    for name, entry in truth["scenarios"].items():
        assert entry["rule"] == name and entry["scope"] == SCENARIOS[name].scope
        for sid in entry["sessions"]:
            assert sid in sessions, (name, sid)
            assert sessions[sid] == {entry["details"]["sessions"][sid]["host"]}
            faulty.add(sid)
        if entry["scope"] == "session":
            assert entry["sessions"], name
            assert set(entry["hosts"]) == {h for s in entry["sessions"] for h in sessions[s]}
        else:
            assert entry["hosts"], name
    assert healthy.isdisjoint(faulty)
    assert healthy | faulty == set(sessions)
    assert json.dumps(truth, sort_keys=True, indent=1) + "\n" == (root / "truth.json").read_text()
    rss = truth["scenarios"]["rss_growth"]
    assert rss["hosts"] == ["gpu-02"] and rss["details"]["rss_rise_mb"] > 100
    assert truth["scenarios"]["bad_lines"]["hosts"] == ["gpu-01"]


def test_leak_evidence_in_truth_is_what_the_logs_show(multi):
    root, truth = multi
    mem = defaultdict(list)
    for e in events(root, truth):
        if e["stage"] == "gpu_memory":
            mem[e["session_id"]].append(e["reserved_mb"])
    for sid, detail in truth["scenarios"]["memory_leak"]["details"]["sessions"].items():
        rise = max(mem[sid]) - min(mem[sid])
        assert abs(rise - detail["reserved_rise_mb"]) < 0.2, sid
        assert detail["reserved_slope_mb_per_min"] > 80


# -- every scenario shows exactly its fault -----------------------------------------------------


def _check_fires_exactly(scenario: str, fmt: str) -> None:
    root, truth = run(scenario, fmt)
    fired, p50 = evaluate(root, truth)
    entry = truth["scenarios"][scenario]
    allowed = {scenario, *entry["also_fires"]} - {"healthy"}
    unexpected = {rule: sorted(who)[:3] for rule, who in fired.items() if rule not in allowed}
    assert not unexpected, (scenario, fmt, unexpected, p50)
    if scenario in ("healthy", "bad_lines"):
        return
    who = fired.get(scenario, set())
    if entry["scope"] == "session":
        assert len(entry["sessions"]) >= (1 if SCENARIOS[scenario].sparse else 2), scenario
        assert len(truth["healthy_sessions"]) >= 3
        assert who == set(entry["sessions"]), (scenario, fmt)
    elif entry["scope"] in ("host", "process"):
        assert who == set(entry["hosts"]) and len(truth["hosts"]) == 2, (scenario, who)
    else:
        assert who == {"*"}, (scenario, p50)
    for also in entry["also_fires"]:
        assert fired.get(also), (scenario, also)


@pytest.mark.parametrize("scenario", V1_SCENARIOS)
def test_v1_scenario_shows_exactly_its_fault(scenario):
    _check_fires_exactly(scenario, "v1")


@pytest.mark.parametrize("scenario", LEGACY_SCENARIOS)
def test_legacy_scenario_shows_exactly_its_fault(scenario):
    _check_fires_exactly(scenario, "legacy")


def test_healthy_traffic_is_far_inside_the_health_checklist():
    """Article 003 §5.2-5.3 on the healthy run, with margin."""
    root, truth = run("healthy")
    _, p50 = evaluate(root, truth)
    assert p50["tokenize"] < 50 and p50["prefill_short"] < 450 and p50["ttft"] < 500
    by = defaultdict(lambda: defaultdict(list))
    gpu_util_serving = []
    for e in events(root, truth):
        d = by[e["session_id"]]
        if e["stage"] == "gpu_memory":
            d["reserved"].append(e["reserved_mb"])
            assert e["reserved_mb"] - e["allocated_mb"] < 900 and e["num_ooms"] == 0
        elif e["stage"] == "decode":
            d["tpot"].append(e["duration_ms"] / (e["output_len"] - 1))
            d["gw"].append(e["gpu_wait_pct"])
            assert e["output_len"] < 3000 and e["params"]["num_beams"] == 1
            assert e["params"]["max_new_tokens"] < 4096 and e["reasoning_len"] < e["output_len"]
        elif e["stage"] == "kv_cache":
            assert e["kv_seq_len"] < 2048
        elif e["stage"] == "gpu_sample":
            gpu_util_serving.append(e["gpu_util_pct"])
        elif e["stage"] == "collector":
            assert e["dropped"] == 0
    for sid, d in by.items():
        if sid is None:
            continue
        assert max(d["reserved"]) - min(d["reserved"]) <= 200, sid
        if d["tpot"]:
            assert 30 <= statistics.median(d["tpot"]) <= 70 and statistics.median(d["gw"]) < 45
    assert max(gpu_util_serving) > 80


def test_load_curve_has_quiet_nights_and_a_true_bound():
    values = [load_curve(h / 10) for h in range(240)]
    assert max(values) <= LOAD_MAX
    assert load_curve(3.5) < 0.1 * max(values)


# -- legacy writer: article 003 §2.2 ------------------------------------------------------------

LEGACY_STAGES = {"input", "tokenize", "kv_cache", "inference", "format", "gpu_memory", "error"}
NAIVE_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}$")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_legacy_lines_are_what_the_article_logger_writes(tmp_path):
    out = tmp_path / "legacy"
    simulate(out, ["memory_leak", "oom", "kv_cache_bloat"], fmt="legacy", seed=2, events=3000,
             start="2026-11-23T08:00", hours=10, max_bytes=8192)  # fmt: skip
    truth = json.loads((out / "truth.json").read_text())
    assert truth["files"] == ["ds15b_20261123.jsonl"], "flat ./logs, one file per day, no size rotation"
    stages = defaultdict(int)
    prev = None
    swapped = 0
    for raw in (out / "ds15b_20261123.jsonl").read_bytes().decode("utf-8").splitlines():
        entry = json.loads(raw)
        # log_event(): {"session_id", "timestamp", "stage", "duration_ms", **kwargs} -> json.dumps
        assert list(entry)[:4] == ["session_id", "timestamp", "stage", "duration_ms"]
        assert json.dumps(entry, ensure_ascii=False) == raw
        assert not {"v", "ts", "request_id", "host", "pid"} & set(entry)
        assert NAIVE_MS.match(entry["timestamp"]) and UUID4.match(entry["session_id"])
        stage = entry["stage"]
        stages[stage] += 1
        assert stage in LEGACY_STAGES
        if stage in ("input", "format", "gpu_memory", "kv_cache", "error"):
            assert entry["duration_ms"] == -1 and isinstance(entry["duration_ms"], int)
        else:
            assert entry["duration_ms"] == round(entry["duration_ms"], 2) > 0
        if stage == "gpu_memory":
            # allocated memory sits in kv_cache_size_mb, as memory_allocated() / 1024**2
            assert set(entry) == {"session_id", "timestamp", "stage", "duration_ms", "kv_cache_size_mb", "reserved_mb"}
            assert (entry["kv_cache_size_mb"] * 2**20) % 512 == 0
        if stage == "inference":
            assert {"output_len", "cpu_time_ms", "gpu_wait_pct", "gpu_util_pct"} <= set(entry)
        if stage == "error":
            assert entry["error_type"] == "OOMError"
        if prev is not None and entry["timestamp"] < prev:
            swapped += 1
        prev = entry["timestamp"]
    assert set(stages) == LEGACY_STAGES
    assert swapped > 0 and truth["hosts"][0]["stats"]["out_of_order_pairs"] >= swapped


def test_legacy_refuses_what_the_format_cannot_carry(tmp_path):
    for name in ("beam_search", "slow_prefill", "low_gpu_util", "log_volume"):
        with pytest.raises(UsageError, match=name):
            simulate(tmp_path / name, [name], fmt="legacy")


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_unknown_scenario_is_a_one_line_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["simulate", str(tmp_path / "x"), "--scenario", "nope"])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and "'nope'" in message and "memory_leak" in message
    assert not (tmp_path / "x").exists()


def test_cli_simulate_writes_and_lists(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(app, ["simulate", str(tmp_path), "--list"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [*SCENARIOS, *CONCURRENT_SCENARIOS]
    result = runner.invoke(app, ["simulate", str(tmp_path / "o"), "--scenario", "oom", "--seed", "4", "--hosts", "2", "--events", "6000"])  # fmt: skip
    assert result.exit_code == 0, result.output
    truth = json.loads((tmp_path / "o" / "truth.json").read_text())
    assert f"wrote {truth['events']} events in {len(truth['files'])} files" in result.stdout
    assert truth["args"]["hosts"] == 2 and truth["seed"] == 4


def test_conflicting_host_faults_need_two_hosts(tmp_path):
    with pytest.raises(UsageError, match="--hosts 2"):
        simulate(tmp_path / "a", ["low_gpu_util", "memory_thrash"], hosts=1)
    simulate(tmp_path / "b", ["low_gpu_util", "memory_thrash"], hosts=3, events=8000)
    truth = json.loads((tmp_path / "b" / "truth.json").read_text())
    placed = {n: e["hosts"] for n, e in truth["scenarios"].items()}
    assert placed["low_gpu_util"] != placed["memory_thrash"] and "gpu-01" not in placed["low_gpu_util"]


# -- sample_logs/ ------------------------------------------------------------------------------


def _content(root: Path) -> dict[str, bytes]:
    """Files with .gz compared by content: zlib builds may differ in compressed bytes."""
    out = {}
    for rel, data in _tree(root).items():
        out[rel] = gzip.decompress(data) if rel.endswith(".gz") else data
    return out


def test_sample_logs_are_what_the_script_generates(tmp_path):
    spec = importlib.util.spec_from_file_location("make_sample_logs", REPO / "scripts" / "make_sample_logs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.vllm_sample.available():
        pytest.skip(f"sample_logs/vllm needs {module.vllm_sample.NEEDS}")
    if not module.otlp_samples.available():
        pytest.skip(f"sample_logs/openinference and genai_agents need {module.otlp_samples.NEEDS}")
    module.generate(tmp_path)
    checked_in = _content(REPO / "sample_logs")
    assert sorted(checked_in) == sorted(_content(tmp_path)), "run scripts/make_sample_logs.py and commit"
    assert checked_in == _content(tmp_path), "run scripts/make_sample_logs.py and commit"
    folders = {p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir()}
    assert folders == (set(SCENARIOS) | {"seed_format", "mixed", "vllm"} | set(CONCURRENT_SCENARIOS)
                       | set(module.prom_samples.FOLDERS) | set(module.otlp_samples.GENERATORS))  # fmt: skip
    total = sum(len(b) for b in _tree(REPO / "sample_logs").values())
    assert total < 6 << 20, f"sample_logs/ is {total} bytes; keep it small"
    sessions = set()
    for folder in folders:
        truth = json.loads((REPO / "sample_logs" / folder / "truth.json").read_text())
        ids = set(truth["healthy_sessions"]) | {s for e in truth["scenarios"].values() for s in e["sessions"]}
        assert sessions.isdisjoint(ids), f"{folder}: session ids must be unique across folders"
        sessions |= ids


def test_max_turns_caps_healthy_sessions_only(tmp_path):
    # bench/ingest.py's many-short-sessions data set; a faulty session keeps the turns its fault needs
    simulate(tmp_path / "s", ["healthy", "memory_leak"], days=1, seed=3, events=40_000, max_turns=2)
    truth = json.loads((tmp_path / "s" / "truth.json").read_text())
    per_session: dict[str, int] = defaultdict(int)
    for e in events(tmp_path / "s", truth):
        if e.get("stage") == "input":
            per_session[e["session_id"]] += 1
    leaky = set(truth["scenarios"]["memory_leak"]["sessions"])
    assert leaky and all(per_session[s] >= 7 for s in leaky)
    healthy = [n for s, n in per_session.items() if s not in leaky]
    assert max(healthy) == 2 and min(healthy) == 1
    assert truth["args"]["max_turns"] == 2
    with pytest.raises(UsageError):
        simulate(tmp_path / "t", ["healthy"], events=1000, max_turns=0)
