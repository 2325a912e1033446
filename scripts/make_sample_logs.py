#!/usr/bin/env python3
"""Regenerate sample_logs/: one small folder per scenario, seed_format/, mixed/, README.md.

    .venv/bin/python scripts/make_sample_logs.py [OUTDIR]     # default: sample_logs/

Deterministic (fixed seeds, no clock): tests/test_simulate.py regenerates into a temporary
folder and compares with the checked-in copy, so run this after changing the simulator and
commit the result.

Sizes: each v1 folder covers 22:00-00:03 local time, so the first local day's file is closed
and gzipped and only three minutes stay plain. Each folder names its hosts after itself
(``memory-leak-gpu-01``), and session ids derive from the seed and the scenario names, so
``dslogs analyze sample_logs/`` can read every folder at once without mixing hosts or sessions.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dslogs.analyzer.simulate import SCENARIOS, simulate  # noqa: E402
from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent  # noqa: E402
from dslogs.analyzer.simulate.scenarios import HOST, PROCESS  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import otlp_samples  # noqa: E402
import prom_samples  # noqa: E402
import vllm_sample  # noqa: E402

SEED = 2026
V1_WINDOW = {"start": "2026-11-23T22:00", "hours": 2.05}
V1_EVENTS = 5000


def folders() -> list[dict]:
    """Every sample folder and the simulate() arguments that make it."""
    out = []
    for name, spec in SCENARIOS.items():
        hosts = 2 if spec.scope in (HOST, PROCESS) else 1
        out.append(
            {
                "folder": name,
                "scenarios": [name],
                "fmt": "v1",
                "hosts": hosts,
                "events": V1_EVENTS * hosts,
                **V1_WINDOW,
            }
        )
    out.append(
        {
            "folder": "seed_format",
            "scenarios": ["memory_leak", "oom"],
            "fmt": "legacy",
            "hosts": 1,
            "events": 1500,
            "start": "2026-11-23T09:00",
            "hours": 8.0,
        }
    )
    out.append(
        {
            "folder": "mixed",
            "scenarios": [
                "memory_leak", "oom", "kv_cache_bloat", "gpu_wait", "slow_decode",
                "low_gpu_util", "rss_growth", "collector_drops", "bad_lines",
            ],
            "fmt": "v1",
            "hosts": 3,
            "events": 15000,
            **V1_WINDOW,
        }
    )  # fmt: skip
    # Concurrent scenarios: one process serving overlapping sessions, CPU-only hosts, OOM
    # fallbacks, the seed format's turn spacing (analyzer/simulate/concurrent.py).
    for name, spec in CONCURRENT_SCENARIOS.items():
        out.append({"folder": name, "concurrent": True, "fmt": spec.fmt, "hosts": 1})
    return out


def generate(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    made = []
    for f in folders():
        target = root / f["folder"]
        if target.exists():
            shutil.rmtree(target)
        if f.get("concurrent"):
            simulate_concurrent(target, f["folder"], seed=SEED, host_prefix=f["folder"].replace("_", "-") + "-gpu")
            made.append((f, json.loads((target / "truth.json").read_text(encoding="utf-8"))))
            continue
        simulate(
            target,
            f["scenarios"],
            seed=SEED,
            fmt=f["fmt"],
            events=f["events"],
            hosts=f["hosts"],
            start=f["start"],
            hours=f["hours"],
            host_prefix=f["folder"].replace("_", "-") + "-gpu",
        )
        made.append((f, json.loads((target / "truth.json").read_text(encoding="utf-8"))))
    target = root / "vllm"
    if vllm_sample.available():
        if target.exists():
            shutil.rmtree(target)
        truth = vllm_sample.generate(target, SEED)
        (target / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    else:
        print(f"{target}: not regenerated, it needs {vllm_sample.NEEDS}", file=sys.stderr)
    if (target / "truth.json").is_file():
        made.append(({"folder": "vllm", "fmt": "OTLP + Prometheus", "hosts": 1},
                     json.loads((target / "truth.json").read_text(encoding="utf-8"))))
    for name, truth in prom_samples.generate(root, SEED).items():
        (root / name / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        made.append(({"folder": name, "fmt": "Prometheus", "hosts": len(truth["servers"])}, truth))
    for name, make in otlp_samples.GENERATORS.items():
        target = root / name
        if otlp_samples.available():
            if target.exists():
                shutil.rmtree(target)
            truth = make(target, SEED)
            (target / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        else:
            print(f"{target}: not regenerated, it needs {otlp_samples.NEEDS}", file=sys.stderr)
        if (target / "truth.json").is_file():
            made.append(({"folder": name, "fmt": "OTLP", "hosts": 1},
                         json.loads((target / "truth.json").read_text(encoding="utf-8"))))  # fmt: skip
    (root / "README.md").write_text(readme(made), encoding="utf-8")


def _expect(truth: dict) -> str:
    parts = []
    for name, entry in sorted(truth["scenarios"].items()):
        if entry["rule"] is None:
            continue
        scope = entry["scope"]
        if scope == "session":
            n = len(entry["sessions"])
            who = f"{n} session{'s' if n != 1 else ''} (e.g. `{entry['sessions'][0][:8]}…`)" if n else "no session"
        elif scope == "ingest":
            who = f"{len(truth['bad_lines'])} bad lines/files"
        elif scope == "global":
            who = "all traffic"
        else:
            who = ", ".join(f"`{h}`" for h in entry["hosts"])
            if scope == "process":
                who += f" pid {entry['details']['pid']}"
        also = f"; also {', '.join(f'`{a}`' for a in entry['also_fires'])}" if entry["also_fires"] else ""
        label = entry["rule"] if truth.get("generator") == "dslogs.analyzer.simulate.concurrent" else name
        parts.append(f"`{label}`: {who}{also}")
    if truth.get("generator") == "dslogs.analyzer.simulate.concurrent":
        name = truth["args"]["scenario"]
        extra = {
            "concurrent_leak": "no other session flagged although reserved_mb (per process) rises under all of them",
            "process_leak": "a process-scoped finding: no session stands out",
            "rss_staircase": "the leaking sessions, not the process",
            "cpu_only": "no finding; GPU rules report no data (device cpu)",
            "oom_fallback": "`beam_search` too: \"OOM with num_beams=5, then greedy fallback\"",
            "seed_turns": "turns 0.25 s and 10 min apart alike; the reserved_band checklist row agrees",
            "concurrency_cliff": "the capacity section's knee, OOM level and concurrency_limit as in truth.json "
                                 "(details.capacity); no `memory_leak`: reserved follows the requests in flight",
            "oom_at_concurrency": "OOMs only at the top in-flight level; the limit stays at the knee",
            "capacity_small": "no finding; the capacity section has too little traffic for a recommendation",
        }[name]
        parts.append(extra)
    if truth.get("generator") == "scripts/prom_samples.py":
        parts.append(prom_samples.expect(truth))
    if truth.get("generator") == "scripts/vllm_sample.py":
        waiting = truth["scenarios"]["queue_wait"]["details"]["max_waiting"]
        parts.append(f"{truth['events']} `llm_request` spans and {truth['snapshots']} snapshots; the server "
                     f"metrics section charts `vllm:num_requests_waiting` rising to {waiting}; 2 aborts as errors")
    if str(truth.get("generator", "")).startswith("scripts/otlp_samples.py"):
        parts.append(f"nothing; {truth['requests']} requests ({truth['errors']} errors) of {truth['format']} "
                     f"spans, {truth['input_tokens']:,}/{truth['output_tokens']:,} tokens in/out, e2e p50 "
                     f"{truth['e2e_ms']['p50']:,.0f} ms, TTFT p50 {truth['ttft_ms']['p50']:,.0f} ms")
    return "<br>".join(parts) or "nothing: every rule passes"


def readme(made: list[tuple[dict, dict]]) -> str:
    rows = []
    for f, truth in made:
        n_healthy = len(truth["healthy_sessions"])
        rows.append(
            f"| `{f['folder']}/` | {f['fmt']} | {f['hosts']} | {truth['events']} | "
            f"{truth['sessions']} ({n_healthy}) | {_expect(truth)} |"
        )
    table = "\n".join(rows)
    return f"""# sample_logs

Simulated logs with known faults, made by `scripts/make_sample_logs.py` (seed {SEED}; do not
edit by hand: regenerate and commit). Each folder holds the logs of one `dslogs simulate` run and
its `truth.json`: which sessions and hosts carry which fault, per-session evidence values, the
deliberately bad lines (file and line), the files and the event count.

```bash
dslogs analyze sample_logs/memory_leak --format md     # one folder: exactly the table's findings
dslogs analyze sample_logs/                             # all folders at once
```

Read one folder to get exactly what the table says. All folders at once also works (hosts and
session ids are unique per folder), but the global rules (`slow_tokenize`, `slow_prefill`,
`slow_ttft`, `slow_format`: p50 over all requests) then see the slow folder's traffic diluted by
the others and stay quiet.

- v1 folders cover 22:00–00:03 local time on 2026-11-23/24: the first day's file is closed and
  gzipped (`ds15b_20261123.jsonl.gz`), the second stays plain. Host `…-02` writes `+08:00`
  timestamps, the others `+00:00`.
- `seed_format/` is article 003 §2.2's logger output as-is: no `v`, naive Asia/Shanghai
  `timestamp`, `duration_ms: -1` for unmeasured stages, one `inference` stage, allocated memory in
  `kv_cache_size_mb`, neighbouring lines sometimes swapped (two writer threads). Read it with
  `--tz Asia/Shanghai` for true UTC times.
- Samplers: `gpu_sample` + `process_sample` at 1 Hz while a request is in flight and for 10 s
  after, once a minute while the host is idle; a `collector` heartbeat every minute (its
  `bytes_written` counts the writer's bytes, `dropped` the events it lost).
- `concurrent_leak/`, `process_leak/`, `rss_staircase/`, `cpu_only/`, `oom_fallback/` (v1, 40 min)
  come from `analyzer/simulate/concurrent.py`: one process serves overlapping sessions through 4
  handlers (a Gradio concurrency limit), GPU memory and RSS are the process's, and request
  events carry the collector contract's `device`, `inflight`, `attempts`,
  `reserved/allocated/rss_mb_before/after` and the completion sequence `done_before`/`done_seq`; queue waits are `queue` stages. `seed_turns/` is article
  003's format with leaks whose turns are 0.25 s or 10 min apart.
- `vllm/` is not simulated by dslogs but written by the third-party libraries themselves
  (`scripts/vllm_sample.py`, with the `test` extra installed): vLLM `llm_request` spans as an OTel
  Collector `file` exporter writes them (OTLP/JSON from the OpenTelemetry SDK's encoder) and a
  `curl host:8000/metrics` every minute (prometheus_client with vLLM's names and buckets). One
  engine with a small KV cache is overloaded for five minutes (09:08–09:13 UTC): requests wait for
  KV blocks, so `queue_wait` fires and the server's waiting-requests gauge rises. The events
  column counts spans; the spans carry no session id, so it has no sessions.
- `tgi/` and `llamacpp/` are `/metrics` scrapes every minute, rebuilt from each project's source
  (`scripts/prom_samples.py`, tests/prom_helpers.py): two TGI replicas (`tgi-node01-…`,
  `tgi-node02-…`, two servers) and one llama.cpp server whose `n_busy_slots_per_decode` (TYPE
  counter, an average) falls as load drops, which is no restart. `truth.json` holds the requests
  and tokens put in over the window; the hosts column counts servers.
- `openinference/` and `genai_agents/` are LLM apps traced by today's conventions
  (`scripts/otlp_samples.py`, with the `test` extra installed): a documentation assistant traced
  by OpenInference (the real `openinference-instrumentation-openai` around the `openai` client,
  each turn an AGENT span holding a CHAIN span and two LLM calls, the answer streamed; two HTTP
  500s), and a support agent traced with the OpenTelemetry GenAI conventions (`invoke_agent`
  spans holding `create_agent`, `chat` and `execute_tool` spans, half the chats in the deprecated
  token names; one finish reason `error`). Only the LLM and chat spans are requests; the events
  column counts them; their truth.json holds the requests, errors, sessions, token totals and
  TTFT/e2e percentiles put in.
- "healthy" sessions stay clearly inside every threshold of docs/rules.md; a fault is injected into
  some sessions (session rules), one host (host rules) or all traffic (global rules).

| folder | format | hosts | events | sessions (without a session fault) | dslogs should report |
|---|---|---|---|---|---|
{table}
"""


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "sample_logs")
