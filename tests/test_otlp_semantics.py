"""What the spans of today's instrumentations mean: OpenInference LLM spans (written by the real
openinference-instrumentation-openai against a local OpenAI-compatible server,
tests/openinference_helpers.py), the OpenTelemetry GenAI conventions' agent traces (names from
opentelemetry-semantic-conventions' gen_ai attributes), vLLM's current finish reasons, and spans
the statement cannot take as they are. Requests, errors, sessions, tokens and TTFT/e2e
percentiles must equal what was put in."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")

from otlp_helpers import NS, Recorder, vllm_workload, write_vllm  # noqa: E402

from dslogs.analyzer.core.thresholds import defaults  # noqa: E402
from dslogs.analyzer.ingest.logs import open_logs  # noqa: E402
from dslogs.analyzer.usecases.analyze import build_report  # noqa: E402


def _pct(values, q):
    """DuckDB's quantile_cont (linear between closest ranks)."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if q != 50 else statistics.median(values)


def _report(path):
    with open_logs([str(path)], use_cache=False) as db:
        model = build_report(db, defaults())
        rows = db.con.execute(
            "SELECT request_id, session_id, status, error_type, input_len, output_len, reasoning_len, ttft_ms, e2e_ms, "
            "max_new_tokens, temperature, num_beams, finish_reason FROM requests ORDER BY start_ts"
        ).fetchall()
    return model, rows


# -- OpenInference -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openinference(tmp_path_factory):
    pytest.importorskip("openai")
    pytest.importorskip("openinference.instrumentation.openai")
    from openinference_helpers import Call, run_calls

    calls = []
    for i in range(12):
        calls.append(Call(prompt_tokens=20 + 7 * i, completion_tokens=30 + 11 * i, seconds=0.02 + 0.005 * (i % 5),
                          first_token=0.01 + 0.002 * i if i % 2 else 0.0, stream=bool(i % 2),
                          session=f"s{i % 3}", user="u1", max_tokens=64 + i, temperature=0.5 if i % 4 else 0.0))  # fmt: skip
    calls[5].fail = True
    calls[5].stream = False
    rec = Recorder({"service.name": "rag-app", "host.name": "app-1", "process.pid": 11})
    # three agent turns of four calls each: AGENT > CHAIN > LLM, the agent span holding the totals
    run_calls(rec.provider, calls, agent_every=4)
    path = rec.write(tmp_path_factory.mktemp("oi") / "traces.json")
    spans = list(rec.exporter.get_finished_spans())
    return calls, spans, path


def test_openinference_llm_spans_are_the_requests(openinference):
    calls, spans, path = openinference
    llm = [s for s in spans if s.attributes.get("openinference.span.kind") == "LLM"]
    assert len(llm) == 12 and len(spans) == 12 + 3 + 3  # the instrumentation wrote agent and chain spans too
    model, rows = _report(path)
    assert model["ingest"]["bad_lines"] == 0
    assert model["ingest"]["formats"].keys() == {"otlp:openinference"}
    assert model["requests"]["count"] == 12
    assert model["requests"]["errors"] == 1
    failed = [r for r in rows if r[2] == "error"]
    assert len(failed) == 1 and failed[0][3] == "InternalServerError"
    ok = [c for c in calls if not c.fail]
    # tokens as the server's usage said (never the agent's totals added again)
    assert sum(r[4] or 0 for r in rows) == sum(c.prompt_tokens for c in ok)
    assert sum(r[5] or 0 for r in rows) == sum(c.completion_tokens for c in ok)
    assert sorted({r[1] for r in rows}) == ["s0", "s1", "s2"]
    assert {s["session_id"]: s["requests"] for s in model["sessions"]} == {"s0": 4, "s1": 4, "s2": 4}
    # invocation parameters: max_tokens and temperature of each call
    by_tokens = {c.max_tokens: c for c in calls}
    assert all(r[9] in by_tokens and r[10] == pytest.approx(by_tokens[r[9]].temperature) for r in rows)


def test_openinference_e2e_and_ttft_percentiles_are_the_spans(openinference):
    calls, spans, path = openinference
    llm = [s for s in spans if s.attributes.get("openinference.span.kind") == "LLM"]
    e2e = [(s.end_time - s.start_time) / 1e6 for s in llm]
    first = [next((e.timestamp for e in s.events if e.name == "First Token Stream Event"), None) for s in llm]
    ttft = [(t - s.start_time) / 1e6 for s, t in zip(llm, first, strict=True) if t is not None]
    assert len(ttft) == sum(c.stream for c in calls)
    model, _rows = _report(path)
    for q in (50, 90):
        assert model["requests"]["e2e_ms"][f"p{q}"] == pytest.approx(_pct(e2e, q), abs=0.01)
        assert model["requests"]["ttft_ms"][f"p{q}"] == pytest.approx(_pct(ttft, q), abs=0.01)
    assert model["requests"]["ttft_ms"]["count"] == len(ttft)


# -- OpenTelemetry GenAI conventions: agent traces -----------------------------------------------


def _agent_trace(rec: Recorder, t0: float, agents: int = 2, chats: int = 5):
    """invoke_agent > (chat, execute_tool)*: the GenAI agent-span conventions, the agent span
    carrying the sum of its chats' usage as agent instrumentations report it. Returns the chats."""
    from opentelemetry import trace
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

    made = []
    t = t0
    for a in range(agents):
        agent = rec.tracer.start_span("invoke_agent planner", start_time=int(t * NS), attributes={
            ga.GEN_AI_OPERATION_NAME: ga.GenAiOperationNameValues.INVOKE_AGENT.value,
            ga.GEN_AI_CONVERSATION_ID: f"conv-{a}"})  # fmt: skip
        ctx = trace.set_span_in_context(agent)
        created = rec.tracer.start_span("create_agent planner", context=ctx, start_time=int(t * NS), attributes={
            ga.GEN_AI_OPERATION_NAME: ga.GenAiOperationNameValues.CREATE_AGENT.value})  # fmt: skip
        created.end(end_time=int((t + 0.01) * NS))
        inp = out = 0
        for c in range(chats):
            i = a * chats + c
            secs = 0.4 + 0.13 * ((i * 7) % 10)
            attrs = {ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_USAGE_INPUT_TOKENS: 100 + i,
                     ga.GEN_AI_USAGE_OUTPUT_TOKENS: 40 + 3 * i, ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 0.05 + 0.01 * i,
                     ga.GEN_AI_RESPONSE_FINISH_REASONS: ("error",) if i == 7 else ("stop",),
                     ga.GEN_AI_CONVERSATION_ID: f"conv-{a}", ga.GEN_AI_REQUEST_MAX_TOKENS: 512}  # fmt: skip
            span = rec.tracer.start_span("chat qwen", context=ctx, start_time=int(t * NS), attributes=attrs)
            span.end(end_time=int((t + secs) * NS))
            made.append((secs, attrs))
            inp += 100 + i
            out += 40 + 3 * i
            tool = rec.tracer.start_span("execute_tool search", context=ctx, start_time=int((t + secs) * NS),
                                         attributes={ga.GEN_AI_OPERATION_NAME: "execute_tool"})  # fmt: skip
            tool.end(end_time=int((t + secs + 0.2) * NS))
            t += secs + 0.2
        agent.set_attribute(ga.GEN_AI_USAGE_INPUT_TOKENS, inp)
        agent.set_attribute(ga.GEN_AI_USAGE_OUTPUT_TOKENS, out)
        agent.end(end_time=int(t * NS))
        t += 1
    return made


def test_genai_agent_trace_counts_each_chat_once(tmp_path):
    rec = Recorder({"service.name": "agent-app", "host.name": "a-1", "process.pid": 5}, seed=3)
    chats = _agent_trace(rec, 1_796_000_000.0)
    path = rec.write(tmp_path / "traces.json")
    model, rows = _report(path)
    assert model["requests"]["count"] == len(chats) == 10
    assert sum(r[4] for r in rows) == sum(a["gen_ai.usage.input_tokens"] for _, a in chats)
    assert sum(r[5] for r in rows) == sum(a["gen_ai.usage.output_tokens"] for _, a in chats)
    e2e = [s * 1000 for s, _ in chats]
    ttft = [a["gen_ai.response.time_to_first_chunk"] * 1000 for _, a in chats]
    for q in (50, 90):
        assert model["requests"]["e2e_ms"][f"p{q}"] == pytest.approx(_pct(e2e, q), abs=0.01)
        assert model["requests"]["ttft_ms"][f"p{q}"] == pytest.approx(_pct(ttft, q), abs=0.01)
    # finish reason "error" is a failed request (the conventions' and vLLM's)
    assert model["requests"]["errors"] == 1 and [r[12] for r in rows if r[2] == "error"] == ["error"]
    assert {s["session_id"]: s["requests"] for s in model["sessions"]} == {"conv-0": 5, "conv-1": 5}


def test_a_span_around_a_request_is_not_one(tmp_path):
    """A wrapper that names no operation (a framework's workflow span, a client span around
    vLLM's own) repeating its child's totals counts once: the innermost request."""
    from opentelemetry import trace

    rec = Recorder({"service.name": "x", "host.name": "h"}, seed=4)
    t = 1_796_000_000.0
    outer = rec.tracer.start_span("workflow", start_time=int(t * NS),
                                  attributes={"gen_ai.system": "openai", "gen_ai.usage.input_tokens": 10})  # fmt: skip
    inner = rec.tracer.start_span("chat m", context=trace.set_span_in_context(outer), start_time=int(t * NS),
                                  attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10})  # fmt: skip
    inner.end(end_time=int((t + 1) * NS))
    outer.end(end_time=int((t + 2) * NS))
    model, rows = _report(rec.write(tmp_path / "t.json"))
    assert len(rows) == 1 and rows[0][4] == 10 and rows[0][8] == pytest.approx(1000)


# -- vLLM's finish reasons -----------------------------------------------------------------------


def test_vllm_error_finish_reason_is_an_error(tmp_path):
    """vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: stop, length, abort, error, repetition;
    error is a request-level internal error (HTTP 500), abort an aborted request."""
    reqs = vllm_workload(20)
    for i, reason in ((2, "error"), (5, "error"), (9, "abort"), (11, "repetition")):
        reqs[i].finish_reason = reason
    write_vllm(tmp_path / "t.json", reqs)
    model, rows = _report(tmp_path / "t.json")
    assert model["requests"]["count"] == 20 and model["requests"]["errors"] == 3
    assert sorted(r[3] for r in rows if r[2] == "error") == ["abort", "error", "error"]


# -- spans the statement cannot take as they are -------------------------------------------------


def test_span_ending_before_its_start_is_counted_not_read(tmp_path):
    rec = Recorder({"service.name": "x", "host.name": "h"}, seed=5)
    t = 1_796_000_000.0
    for i, secs in enumerate((1.0, 2.0, -1.0)):
        span = rec.tracer.start_span("chat m", start_time=int((t + 10 * i) * NS), attributes={"gen_ai.operation.name": "chat"})
        span.end(end_time=int((t + 10 * i + secs) * NS))
    model, rows = _report(rec.write(tmp_path / "t.json", per_line=2))  # the reversed span on line 2
    assert model["requests"]["count"] == 2 and min(r[8] for r in rows) == pytest.approx(1000)
    assert model["ingest"]["bad_lines"] == 1
    sample = model["ingest"]["bad_line_samples"][0]
    assert sample["line"] == 2 and "1000.0 ms before it starts" in sample["reason"]


def test_span_ids_shared_across_traces_stay_apart(tmp_path):
    from otlp_helpers import SeededIds

    class SameSpanId(SeededIds):  # four traces, one span id (a broken or hostile id generator)
        def generate_span_id(self):
            return 0xABCDEF

    rec = Recorder({"service.name": "x", "host.name": "h"})
    rec.provider.id_generator = SameSpanId(6)
    rec.tracer = rec.provider.get_tracer("app")
    t = 1_796_000_000.0
    for i in range(4):
        span = rec.tracer.start_span("chat m", start_time=int((t + i) * NS),
                                     attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": 10 + i})  # fmt: skip
        span.end(end_time=int((t + i + 0.5) * NS))
    model, rows = _report(rec.write(tmp_path / "t.json"))
    assert model["requests"]["count"] == 4 and sorted(r[5] for r in rows) == [10, 11, 12, 13]
    assert len({r[0] for r in rows}) == 4
    assert model["ingest"]["bad_lines"] == 1
    assert "shared by 4 spans of several traces" in model["ingest"]["bad_line_samples"][0]["reason"]


# -- the sample folders: what was put in is what the report says --------------------------------

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


@pytest.mark.parametrize("folder", ["openinference", "genai_agents"])
def test_sample_folder_reads_as_put_in(folder):
    truth = json.loads((SAMPLES / folder / "truth.json").read_text(encoding="utf-8"))
    with open_logs([str(SAMPLES / folder)], use_cache=False) as db:
        model = build_report(db, defaults())
        tokens = db.con.execute("SELECT sum(input_len), sum(output_len) FROM requests WHERE status = 'ok'").fetchone()
    assert model["ingest"]["formats"].keys() == {truth["format"]} and model["ingest"]["bad_lines"] == 0
    assert (model["requests"]["count"], model["requests"]["errors"]) == (truth["requests"], truth["errors"])
    assert {s["session_id"]: s["requests"] for s in model["sessions"]} == truth["session_requests"]
    assert tokens == (truth["input_tokens"], truth["output_tokens"])
    for key in ("e2e_ms", "ttft_ms"):
        for q in ("p50", "p90"):
            assert model["requests"][key][q] == pytest.approx(truth[key][q], abs=0.01)
    assert model["requests"]["ttft_ms"]["count"] == truth["ttft_ms"]["count"]
    assert not model["findings"]
