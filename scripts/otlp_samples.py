"""sample_logs/openinference/ and sample_logs/genai_agents/: LLM apps traced by today's conventions.

- ``openinference/``: a documentation assistant whose agent plans each answer with one call and
  streams the answer with a second, traced by OpenInference (Arize Phoenix's convention): the
  real ``openinference-instrumentation-openai`` around the real ``openai`` client, talking to an
  OpenAI-compatible server on 127.0.0.1 (tests/openinference_helpers.py), the turn's AGENT and
  CHAIN spans from the library's ``OITracer``. The server waits on a simulated clock, which is
  also the SDK's, so the folder is the same on every run. Two calls get an HTTP 500.
- ``genai_agents/``: a support agent traced with the OpenTelemetry GenAI conventions
  (opentelemetry-semantic-conventions' gen_ai names): ``invoke_agent`` spans holding
  ``create_agent``, ``chat`` and ``execute_tool`` spans, the agent span carrying its calls' token
  totals; half the chats use the deprecated token names and ``gen_ai.server.time_to_first_token``,
  the others the current ones and ``gen_ai.response.time_to_first_chunk``; one chat ends with
  finish reason ``error``.

Both are written as an OTel Collector ``file`` exporter writes (tests/otlp_helpers.py). Their
truth.json holds what was put in: requests, errors, sessions, token totals and the TTFT and
end-to-end percentiles of the request spans.
"""

from __future__ import annotations

import random
import re
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # otlp_helpers, openinference_helpers
NEEDS = ("opentelemetry-sdk, opentelemetry-exporter-otlp-proto-common, openai and "
         "openinference-instrumentation-openai (pip install -e '.[test]')")  # fmt: skip

START = datetime(2026, 11, 24, 10, 0, tzinfo=UTC).timestamp()
NS = 1_000_000_000


def available() -> bool:
    try:
        import openai  # noqa: F401
        import openinference.instrumentation.openai  # noqa: F401
        import otlp_helpers  # noqa: F401
    except ImportError:
        return False
    return True


def _pct(values: list[float], q: int) -> float:
    """DuckDB's quantile_cont (linear between closest ranks), rounded as the report rounds."""
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


def _truth(seed: int, generator_part: str, spans: list[tuple[float, float | None, int, int, bool, str]],
           files: list[str], host: str, pid: int, fmt: str) -> dict:  # fmt: skip
    """spans: (e2e ms, ttft ms or None, input tokens, output tokens, failed, session) per request."""
    ok = [s for s in spans if not s[4]]
    e2e = [s[0] for s in spans]
    ttft = [s[1] for s in spans if s[1] is not None]
    sessions = sorted({s[5] for s in spans})
    return {
        "generator": f"scripts/otlp_samples.py {generator_part}",
        "seed": seed,
        "format": fmt,
        "files": files,
        "events": len(spans),
        "requests": len(spans),
        "errors": len(spans) - len(ok),
        "input_tokens": sum(s[2] for s in ok),
        "output_tokens": sum(s[3] for s in ok),
        "sessions": len(sessions),
        "session_requests": {s: sum(1 for x in spans if x[5] == s) for s in sessions},
        "healthy_sessions": sessions,
        "hosts": [{"host": host, "pid": pid, "faults": []}],
        "e2e_ms": {"p50": _pct(e2e, 50), "p90": _pct(e2e, 90)},
        "ttft_ms": {"count": len(ttft), "p50": _pct(ttft, 50), "p90": _pct(ttft, 90)},
        "scenarios": {},
    }


def _site_relative(path: Path) -> None:
    """The failed calls' stack traces name library files by where they are installed; the sample
    names them from site-packages on, so it is the same from any venv."""
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(r'[^"\\\s]*/site-packages/', "site-packages/", text), encoding="utf-8")


def generate_openinference(target: Path, seed: int) -> dict:
    from openinference_helpers import Call, Clock, run_calls
    from otlp_helpers import Recorder

    rng = random.Random(seed)
    host, pid = "docs-assistant-01", 2211
    calls = []
    for turn in range(40):
        session = f"sess-{seed:04d}-{turn % 9:02d}"
        user = f"user-{turn % 5}"
        gap = rng.uniform(10, 60)
        prompt = rng.randint(300, 1800)
        calls.append(Call(prompt_tokens=prompt, completion_tokens=rng.randint(20, 60), seconds=rng.uniform(0.3, 0.9),
                          session=session, user=user, max_tokens=128, temperature=0.0, gap=gap))  # fmt: skip
        answer = rng.randint(80, 600)
        calls.append(Call(prompt_tokens=prompt + 200, completion_tokens=answer, stream=True,
                          first_token=rng.uniform(0.15, 0.6), seconds=0.6 + answer * rng.uniform(0.012, 0.018),
                          session=session, user=user, max_tokens=1024, temperature=0.7))  # fmt: skip
    for i in (23, 58):  # the server fails two answers
        calls[i].fail = True
        calls[i].stream = False
    rec = Recorder({"service.name": "docs-assistant", "host.name": host, "process.pid": pid,
                    "telemetry.sdk.version": "1.45.1", "service.instance.id": "docs-assistant-01"}, seed=seed)  # fmt: skip
    run_calls(rec.provider, calls, agent_every=2, clock=Clock(START))
    target.mkdir(parents=True)
    name = "traces.json"
    rec.write(target / name, per_line=64)
    _site_relative(target / name)
    spans = []
    for s in sorted(rec.exporter.get_finished_spans(), key=lambda s: s.start_time):
        if s.attributes.get("openinference.span.kind") != "LLM":
            continue
        first = next((e.timestamp for e in s.events if e.name == "First Token Stream Event"), None)
        failed = s.status.status_code.name == "ERROR"
        spans.append(((s.end_time - s.start_time) / 1e6, (first - s.start_time) / 1e6 if first else None,
                      s.attributes.get("llm.token_count.prompt", 0), s.attributes.get("llm.token_count.completion", 0),
                      failed, s.attributes["session.id"]))  # fmt: skip
    return _truth(seed, "openinference", spans, [name], host, pid, "otlp:openinference")


def generate_genai_agents(target: Path, seed: int) -> dict:
    from opentelemetry import trace
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
    from otlp_helpers import Recorder

    rng = random.Random(seed)
    host, pid = "support-agent-01", 4100
    rec = Recorder({"service.name": "support-agent", "host.name": host, "process.pid": pid,
                    "telemetry.sdk.version": "1.45.1", "service.instance.id": "support-agent-01"}, seed=seed)  # fmt: skip
    t = START
    spans = []
    k = 0
    for turn in range(30):
        conv = f"conv-{seed:04d}-{turn % 7:02d}"
        t += rng.uniform(15, 90)
        agent = rec.tracer.start_span("invoke_agent support", start_time=int(t * NS), attributes={
            ga.GEN_AI_OPERATION_NAME: "invoke_agent", ga.GEN_AI_CONVERSATION_ID: conv,
            "gen_ai.agent.name": "support"})  # fmt: skip
        ctx = trace.set_span_in_context(agent)
        made = rec.tracer.start_span("create_agent support", context=ctx, start_time=int(t * NS),
                                     attributes={ga.GEN_AI_OPERATION_NAME: "create_agent"})  # fmt: skip
        t += 0.005
        made.end(end_time=int(t * NS))
        total_in = total_out = 0
        for _ in range(rng.randint(2, 4)):
            prompt, out = rng.randint(400, 2500), rng.randint(30, 400)
            ttft = rng.uniform(0.1, 0.5)
            secs = ttft + out * rng.uniform(0.01, 0.02)
            failed = k == 41
            current = k % 2 == 0  # half the spans in the current names, half in the deprecated ones
            attrs = {ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_CONVERSATION_ID: conv,
                     "gen_ai.request.model": "qwen2.5-7b-instruct", ga.GEN_AI_REQUEST_MAX_TOKENS: 1024,
                     ga.GEN_AI_RESPONSE_FINISH_REASONS: ("error",) if failed else ("stop",)}  # fmt: skip
            if current:
                attrs |= {ga.GEN_AI_USAGE_INPUT_TOKENS: prompt, ga.GEN_AI_USAGE_OUTPUT_TOKENS: out,
                          ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: ttft}  # fmt: skip
            else:
                attrs |= {ga.GEN_AI_USAGE_PROMPT_TOKENS: prompt, ga.GEN_AI_USAGE_COMPLETION_TOKENS: out,
                          "gen_ai.server.time_to_first_token": ttft}  # fmt: skip
            chat = rec.tracer.start_span("chat qwen2.5-7b-instruct", context=ctx, start_time=int(t * NS), attributes=attrs)
            end = int(t * NS) + int(secs * NS)
            chat.end(end_time=end)
            spans.append(((end - int(t * NS)) / 1e6, ttft * 1000, prompt, out, failed, conv))
            total_in += prompt
            total_out += out
            t += secs
            tool = rec.tracer.start_span("execute_tool search_tickets", context=ctx, start_time=int(t * NS),
                                         attributes={ga.GEN_AI_OPERATION_NAME: "execute_tool",
                                                     "gen_ai.tool.name": "search_tickets"})  # fmt: skip
            t += rng.uniform(0.05, 0.4)
            tool.end(end_time=int(t * NS))
            k += 1
        agent.set_attribute(ga.GEN_AI_USAGE_INPUT_TOKENS, total_in)
        agent.set_attribute(ga.GEN_AI_USAGE_OUTPUT_TOKENS, total_out)
        agent.end(end_time=int(t * NS))
    target.mkdir(parents=True)
    name = "traces.json"
    rec.write(target / name, per_line=50)
    return _truth(seed, "genai_agents", spans, [name], host, pid, "otlp:genai")


GENERATORS = {"openinference": generate_openinference, "genai_agents": generate_genai_agents}
