"""A real Gradio server (tests/e2e/apps/gradio_chat.py) on 127.0.0.1, driven by gradio_client
from one thread per session, with faults injected in known sessions; then ``dslogs analyze`` on
what it logged must name each fault's sessions and nothing else.

16 sessions x 4 turns (a host-leaking session keeps 160 MiB: the rule wants > 100 in all). /chat (tracer.generate) and /chat_stream (tracer.stream_generate) each
run at most 4 requests at once; 10 sessions use /chat, so its queue is where waits appear.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dslogs_collector import Tracer
from tests.e2e.apps.fake_gpu import FakeCuda
from tests.e2e.apps.faults import HOST_LEAK_MB, Plan
from tests.e2e.apps.serving import free_port, patient_client
from tests.e2e.compat import HAS_DIAGNOSIS
from tests.e2e.findings import (
    CPU_TIMING_RULES,
    Expectation,
    analyze,
    fault_table,
    record_table,
    sessions_named,
)
from tests.e2e.logs import by_request, read_events

gradio = pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

SESSIONS, TURNS, CONCURRENCY = 16, 4, 4
CALL_TIMEOUT_S = 60
PLAN = {"s00": "beam", "s01": "beam", "s02": "max_tokens", "s03": "max_tokens", "s04": "oom",
        "s05": "oom_fallback", "s06": "host_leak", "s07": "host_leak", "s08": "gpu_leak", "s09": "gpu_leak"}
KEYS = [f"s{i:02d}" for i in range(SESSIONS)]
# after the concurrent traffic, one plain and one streaming session alone on the server
CALM, CALM_TURNS = ["s16", "s17"], 3
HEALTHY = set(KEYS + CALM) - set(PLAN)
# beam search cannot stream (transformers refuses a streamer with beams): those use /chat
STREAMING = {"s03", "s07", "s09", "s11", "s13", "s15", "s17"}
# Seen, reported, not yet fixed: the rule names healthy sessions in some runs (rule -> why).
# memory_leak was here until request spans carried the completion sequence (done_before /
# done_seq): ends within one millisecond were ordered by their timestamps, and a request's delta
# could hold a leaking neighbour's 512 MiB that the analyzer did not subtract.
KNOWN_EXTRA: dict[str, str] = {}
NEEDS_DIAGNOSIS = "diagnosis (rules on per-request deltas, failed attempts' params)"


def keys(plan_names):
    return {k for k, f in PLAN.items() if f in plan_names}


EXPECTED = [
    Expectation("beam search (num_beams=2)", "beam_search", keys({"beam"})),
    Expectation("num_beams=5 that OOMed (the OOM's cause)", "beam_search", keys({"oom", "oom_fallback"}),
                needs=NEEDS_DIAGNOSIS),
    Expectation("max_new_tokens=4096", "high_max_tokens", keys({"max_tokens"})),
    Expectation("OOM in generate, no fallback", "oom", keys({"oom"})),
    Expectation("OOM in generate, oom_fallback=True", "oom", keys({"oom_fallback"})),
    Expectation(f"host leak {HOST_LEAK_MB} MiB/request", "rss_growth", keys({"host_leak"}),
                needs="stream (rss_mb_before/after) + " + NEEDS_DIAGNOSIS),
    Expectation("reserved GPU leak (per-process probe)", "memory_leak", keys({"gpu_leak"}),
                needs="stream (memory_probe, reserved_mb_before/after) + " + NEEDS_DIAGNOSIS),
]


@pytest.fixture(scope="module")
def served(log_root, model, tokenizer):
    """Serve, drive, close; returns what the test needs to judge the logs."""
    import gradio.profiling
    import gradio.queueing

    from tests.e2e.apps.gradio_chat import ChatApp, build_demo

    log_dir = log_root / "gradio" / "logs"
    # GRADIO_PROFILING is read when gradio is imported: if another test imported it first,
    # switch the queue's profiling on here (it is what keeps each request's queue wait)
    mp = pytest.MonkeyPatch()
    mp.setattr(gradio.queueing, "PROFILING_ENABLED", True)
    mp.setattr(gradio.profiling, "PROFILING_ENABLED", True)
    gpu = FakeCuda()
    tracer = Tracer(log_dir, memory_probe=gpu.probe)
    app = ChatApp(tracer, model, tokenizer, gpu, Plan(PLAN))
    demo = build_demo(app, concurrency_limit=CONCURRENCY)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    clients = {}
    calls: dict[str, list[dict]] = {k: [] for k in KEYS + CALM}
    start = threading.Barrier(SESSIONS, timeout=60)
    t0 = time.perf_counter()
    try:
        for k in KEYS + CALM:
            clients[k] = patient_client(url, CALL_TIMEOUT_S)

        def user(k: str, turns: int = TURNS, together: bool = True) -> None:
            api = "/chat_stream" if k in STREAMING else "/chat"
            if together:
                start.wait()  # every session's first message at once: /chat gets 10 for 4 slots
            for turn in range(turns):
                c0 = time.perf_counter()
                job = clients[k].submit(f"[{k}] w{turn} w{turn + 7} question {turn}", api_name=api)
                try:
                    answer, error = job.result(timeout=CALL_TIMEOUT_S), None
                except Exception as e:  # noqa: BLE001 - the OOM sessions' error comes back here
                    answer, error = None, e
                calls[k].append({"answer": answer, "error": error, "client_ms": (time.perf_counter() - c0) * 1000})

        with ThreadPoolExecutor(SESSIONS) as pool:
            for f in [pool.submit(user, k) for k in KEYS]:
                f.result(timeout=CALL_TIMEOUT_S * TURNS)
        for k in CALM:
            user(k, CALM_TURNS, together=False)
    finally:
        drive_s = time.perf_counter() - t0
        for c in clients.values():
            c.close()
        demo.close()
        tracer.close()
        mp.undo()
    sid_of = {k: c.session_hash for k, c in clients.items()}
    return {"log_dir": log_dir, "app": app, "calls": calls, "sid_of": sid_of,
            "key_of": {v: k for k, v in sid_of.items()}, "drive_s": drive_s}


@pytest.fixture(scope="module")
def events(served):
    return read_events(served["log_dir"])


@pytest.fixture(scope="module")
def report(served):
    return analyze(served["log_dir"])


def test_every_call_answered_the_r1_way(served, events):
    """The server really served: healthy answers are R1-shaped; only the no-fallback OOM
    session got errors; the model's output lengths are what tiny_r1 forces."""
    from tests.e2e.apps.tiny_r1 import OUTPUT_TOKENS, REASONING_LEN

    for k, calls in served["calls"].items():
        assert len(calls) == (CALM_TURNS if k in CALM else TURNS), k
        for c in calls:
            if PLAN.get(k) == "oom":
                assert c["error"] is not None and c["answer"] is None, k
            else:
                assert c["error"] is None, (k, c["error"])
                assert c["answer"].startswith("> w") and "</think>" not in c["answer"], (k, c["answer"])
    ok = [e for e in events if e["stage"] == "request" and e.get("status") == "ok"]
    assert len(ok) == (SESSIONS - 1) * TURNS + len(CALM) * CALM_TURNS
    assert {e["output_len"] for e in ok} == {OUTPUT_TOKENS}
    assert {e["reasoning_len"] for e in ok} == {REASONING_LEN}
    assert {e["session_id"] for e in events if e.get("session_id")} == set(served["sid_of"].values())
    print(f"drove {SESSIONS} sessions x {TURNS} turns + calm phase in {served['drive_s']:.1f} s")


def generate_gaps(served, events, keys: set[str]) -> dict[str, list[tuple[float, float]]]:
    """(app's generate ms - (prefill + decode), app's ms) per successful single-attempt request
    of the sessions ``keys``, split plain / stream."""
    reqs = by_request(events)
    gaps: dict[str, list] = {"plain": [], "stream": []}
    for rid, (sid, app_ms) in served["app"].generate_ms.items():
        key = served["key_of"][sid]
        ev = reqs.get(rid, {})
        if key not in keys or "prefill" not in ev or "decode" not in ev or any(e.get("fallback") for e in ev.values()):
            continue
        spans = ev["prefill"]["duration_ms"] + ev["decode"]["duration_ms"]
        gaps["stream" if key in STREAMING else "plain"].append((app_ms - spans, app_ms))
    return gaps


def test_prefill_plus_decode_is_the_apps_generate_time(served, events):
    """prefill + decode sits inside the app's own perf_counter around tracer.generate (or the
    stream loop) and, for the answer-at-once handler, within a few ms of it."""
    busy = generate_gaps(served, events, set(KEYS))
    calm = generate_gaps(served, events, set(CALM))
    assert len(busy["plain"]) >= 20 and len(busy["stream"]) >= 15, {k: len(v) for k, v in busy.items()}
    assert len(calm["plain"]) == len(calm["stream"]) == CALM_TURNS
    for kind, rows in list(busy.items()) + list(calm.items()):
        for gap, app_ms in rows:
            assert gap >= -0.5, (kind, gap, app_ms)  # never longer than the call around them
    # Alone on the server: within 3 ms (the median call: this box is shared, a stall can hit one)
    assert statistics.median(g for g, _ in calm["plain"]) <= 3.0, calm["plain"]
    # 8 generating threads on 2 cores: GIL switches (5 ms each) land outside the spans too, but
    # the median call stays within two of them (a span that missed prefill would be ~8 ms off
    # even alone, a missed decode ~70 ms).
    busy_plain = sorted(g for g, _ in busy["plain"])
    assert statistics.median(busy_plain) <= 10.0, busy_plain
    # A stream's loop ends when the handler has handed Gradio its last piece: it holds Gradio's
    # per-piece work as well, so the spans are only bounded by it (checked above).


@pytest.mark.parametrize("exp", EXPECTED, ids=[f"{e.rule}:{e.fault}" for e in EXPECTED])
def test_fault_found_in_its_sessions(served, report, exp, request):
    if "diagnosis" in exp.needs and not HAS_DIAGNOSIS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"needs branch diagnosis: {exp.needs}"))
    row = next(r for r in fault_table(report, served["key_of"], EXPECTED, HEALTHY) if r["fault"] == exp.fault)
    assert row["found"] == exp.keys, row


@pytest.mark.parametrize("rule", sorted({e.rule for e in EXPECTED}))
def test_fault_rule_names_no_other_session(served, report, rule, request):
    if rule in KNOWN_EXTRA:
        request.applymarker(pytest.mark.xfail(strict=False, reason=KNOWN_EXTRA[rule]))
    rows = [r for r in fault_table(report, served["key_of"], EXPECTED, HEALTHY) if r["rule"] == rule]
    assert all(r["extra"] == set() for r in rows), rows


def test_no_finding_names_a_healthy_session(served, report):
    rows = fault_table(report, served["key_of"], EXPECTED, HEALTHY, ignore=CPU_TIMING_RULES)
    record_table("Gradio ChatInterface: /chat (tracer.generate) + /chat_stream (tracer.stream_generate)", rows)
    named = sessions_named(report)
    healthy_ids = {served["sid_of"][k] for k in HEALTHY}
    wrongly = {rule: sorted(served["key_of"][s] for s in ids & healthy_ids) for rule, ids in named.items()
               if ids & healthy_ids and rule not in CPU_TIMING_RULES and rule not in KNOWN_EXTRA}
    assert not wrongly, wrongly
    # and a faulty session is named only by its own faults' rules
    for key, fault in PLAN.items():
        rules = {rule for rule, ids in named.items() if served["sid_of"][key] in ids}
        expected = {e.rule for e in EXPECTED if key in e.keys}
        assert rules - CPU_TIMING_RULES - set(KNOWN_EXTRA) <= expected, (key, fault, rules - expected)


def client_vs_logs(served, reqs) -> list[tuple[str, dict, dict]]:
    """(session key, the client's call, that call's events) in order, per session: a user's
    turns are sequential, so the k-th request event of a session is its k-th call."""
    out = []
    for key, calls in served["calls"].items():
        sid = served["sid_of"][key]
        mine = sorted((ev for ev in reqs.values() if "request" in ev and ev["request"]["session_id"] == sid),
                      key=lambda ev: ev["request"]["ts"])
        assert len(mine) == len(calls), (key, len(mine), len(calls))
        out += [(key, call, ev) for call, ev in zip(calls, mine, strict=True)]
    return out


def test_queue_wait_is_recorded_when_concurrency_is_exceeded(served, events):
    """10 sessions send to /chat at once for 4 slots: 6 wait. The wait is a `queue` stage
    (source gradio) and is part of the request's ttft and end-to-end time."""
    reqs = by_request(events)
    rows = client_vs_logs(served, reqs)
    assert all("queue" in ev for _, _, ev in rows), [k for k, _, ev in rows if "queue" not in ev]
    for key, call, ev in rows:
        q, r = ev["queue"], ev["request"]
        assert q["source"] == "gradio" and q["duration_ms"] >= 0, q
        assert r["duration_ms"] >= q["duration_ms"], (key, r, q)
        if "ttft_ms" in r:
            assert r["ttft_ms"] >= q["duration_ms"], (key, r, q)
        # dslogs never reports more than the client waited, queue included
        assert r["duration_ms"] <= call["client_ms"] + 1.0, (key, r["duration_ms"], call["client_ms"])
    first_chat = [ev["queue"]["duration_ms"] for key, _, ev in rows
                  if key in KEYS and key not in STREAMING and ev is min(
                      (e for k, _, e in rows if k == key), key=lambda e: e["request"]["ts"])]
    assert len(first_chat) == SESSIONS - len(STREAMING & set(KEYS))
    # 4 slots for 10 first messages: the last 6 wait for one to finish (the fastest takes ~100 ms)
    waited = sorted(first_chat)[CONCURRENCY:]
    assert min(waited) >= 30.0, sorted(first_chat)
    # Alone on the server, nothing waits
    calm = [ev["queue"]["duration_ms"] for key, _, ev in rows if key in CALM]
    assert statistics.median(calm) < 30.0, calm
    busy = [(call["client_ms"], ev["request"]["duration_ms"], ev["queue"]["duration_ms"])
            for key, call, ev in rows if key in KEYS]
    p50 = [statistics.median(x[i] for x in busy) for i in range(3)]
    print(f"busy: client p50 {p50[0]:.0f} ms, dslogs e2e p50 {p50[1]:.0f} ms (queue p50 {p50[2]:.0f} ms)")


def test_drive_time_is_bounded(served):
    assert served["drive_s"] < 120, served["drive_s"]


def test_leaking_sessions_are_the_worst_by_their_own_requests(served, report):
    """Under 8 concurrent requests the attribution still puts the two leaking sessions on top,
    each near the 512 MiB its requests really keep."""
    from tests.e2e.apps.faults import GPU_LEAK_MB

    (finding,) = [f for f in report["findings"] if f["rule"] == "memory_leak" and f["scope"] == "session"]
    rows = sorted(finding["evidence"]["details"]["sessions"], key=lambda r: -r["leak_per_request_mb"])
    leaky = {served["sid_of"][k] for k in PLAN if PLAN[k] == "gpu_leak"}
    assert {r["session_id"] for r in rows[:2]} == leaky, rows
    for r in rows[:2]:
        assert 0.7 * GPU_LEAK_MB <= r["leak_per_request_mb"] <= 1.3 * GPU_LEAK_MB, r
