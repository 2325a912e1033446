"""sample_logs/tgi/ and sample_logs/llamacpp/: /metrics scrapes of two servers dslogs does not
simulate, rebuilt from each project's source by tests/prom_helpers.py (no third-party library:
TGI's text is written by Rust's metrics-exporter-prometheus, llama.cpp's by the server itself).

- ``tgi/``: two TGI replicas behind one balancer (``tgi-node01-<unix>.prom``,
  ``tgi-node02-<unix>.prom``), scraped every minute for ten minutes; node02 takes a third of the
  traffic and rejects a few requests at validation. Two servers, no restart.
- ``llamacpp/``: one ``llama-server --metrics -np 4``, scraped every minute; load comes and goes,
  so ``n_busy_slots_per_decode`` (an average exposed with TYPE counter) falls twice while the
  token counters rise. One server, no restart.

``truth.json`` holds what was put in over the window (the first scrape is its start): requests,
prompt and generated tokens per server.
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # prom_helpers

START = int(datetime(2026, 11, 24, 10, 0, tzinfo=UTC).timestamp())
SCRAPES = 11
FOLDERS = ("tgi", "llamacpp")


def _base(files: list[str], snapshots: int, servers: dict) -> dict:
    return {"generator": "scripts/prom_samples.py", "events": 0, "sessions": 0, "healthy_sessions": [],
            "scenarios": {}, "bad_lines": [], "files": sorted(files), "snapshots": snapshots, "servers": servers}  # fmt: skip


def tgi(target: Path, seed: int) -> dict:
    from prom_helpers import TgiServer

    rng = random.Random(f"{seed}-tgi")
    target.mkdir(parents=True, exist_ok=True)
    nodes = {"node01": TgiServer(), "node02": TgiServer()}
    truth = {f"tgi-{n}": {"requests": 0, "success": 0, "prompt_tokens": 0, "generated_tokens": 0} for n in nodes}
    files = []
    for i in range(SCRAPES):
        for node, srv in nodes.items():
            if i:
                share = 20 if node == "node01" else 10
                sums = truth[f"tgi-{node}"]
                for _ in range(rng.randint(share - 5, share + 5)):
                    prompt, generated = rng.randint(20, 3000), rng.randint(5, 800)
                    queued = rng.uniform(0.001, 0.3)
                    srv.finish(queued + 0.05 + generated * rng.uniform(0.018, 0.03), queued, prompt, generated)
                    sums["requests"] += 1
                    sums["success"] += 1
                    sums["prompt_tokens"] += prompt
                    sums["generated_tokens"] += generated
                if node == "node02" and i % 3 == 0:
                    srv.fail("validation")
                    sums["requests"] += 1
            srv.queue_size, srv.batch_size = rng.randint(0, 4), rng.randint(1, 8)
            name = f"tgi-{node}-{START + 60 * i}.prom"
            srv.scrape(target, name)
            files.append(name)
    return _base(files, len(files), truth)


def llamacpp(target: Path, seed: int) -> dict:
    from prom_helpers import LlamaCppServer

    rng = random.Random(f"{seed}-llamacpp")
    target.mkdir(parents=True, exist_ok=True)
    srv = LlamaCppServer()
    sums = {"prompt_tokens": 0, "generated_tokens": 0}
    files = []
    loads = [4, 4, 4, 1, 1, 4, 4, 2, 1, 4, 4]  # slots busy at once, minute by minute
    for i, slots in enumerate(loads):
        batch = [(rng.randint(40, 1500), rng.randint(16, 400)) for _ in range(2 * slots)]
        srv.serve(batch, slots)
        if i:
            sums["prompt_tokens"] += sum(p for p, _ in batch)
            sums["generated_tokens"] += sum(n for _, n in batch)
        srv.processing, srv.deferred = slots, rng.randint(0, 3) if slots == 4 else 0
        srv.kv_tokens = slots * 900
        name = f"llamacpp-{START + 60 * i}.prom"
        srv.scrape(target, name)
        files.append(name)
    return _base(files, len(files), {"llamacpp": sums})


def generate(root: Path, seed: int) -> dict[str, dict]:
    """Each folder under ``root``, and its truth."""
    import shutil

    out = {}
    for name, make in (("tgi", tgi), ("llamacpp", llamacpp)):
        if (root / name).exists():
            shutil.rmtree(root / name)
        out[name] = make(root / name, seed)
    return out


def expect(truth: dict) -> str:
    """The sample_logs README's "dslogs should report" cell."""
    parts = []
    for server, s in sorted(truth["servers"].items()):
        what = [f"{s['requests']} requests"] if "requests" in s else []
        what += [f"{s['prompt_tokens']:,} prompt and {s['generated_tokens']:,} generated tokens"]
        parts.append(f"`{server}`: {', '.join(what)}, no restart")
    return "<br>".join(parts)
