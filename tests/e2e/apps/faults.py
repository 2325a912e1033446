"""Which session misbehaves, and how: the test puts a session key in every message ("[s07] ...")
and the app looks the key up here. Each fault is a mistake article 003 or 000 describes, made
by the app for that session only; every other session is served the healthy way.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

HOST_LEAK_MB = 40  # kept per request by host-leaking sessions
GPU_LEAK_MB = 512  # reserved left behind per request by GPU-leaking sessions
HOST_TRANSIENT_MB = 200  # host memory a transient-heavy request holds while it generates, then frees (2 GiB-class on a GPU box)
ACTIVATION_MB = 32  # what any request holds on the (fake) GPU while it runs: a 1.5B model's KV cache and logits for a short chat

# fault name -> the rule dslogs should answer it with
RULE_OF = {
    "beam": "beam_search",
    "max_tokens": "high_max_tokens",
    "oom": "oom",
    "oom_fallback": "oom",
    "host_leak": "rss_growth",
    "host_leak_late": "rss_growth",
    "gpu_leak": "memory_leak",
}


@dataclass(frozen=True)
class Fault:
    name: str = "healthy"
    num_beams: int = 1
    max_new_tokens: int = 256
    oom_fallback: bool = False  # article 003 §3.2's remedy: retry greedy after an OOM
    host_leak_mb: int = 0
    leak_from_turn: int = 1  # the session's turn (1-based) from which host_leak_mb is kept
    host_transient_mb: int = 0  # held from after tokenizing to the end of generate, then freed
    gpu_leak_mb: int = 0


HEALTHY = Fault()
FAULTS = {
    "beam": Fault("beam", num_beams=2),  # 003 §3.2: num_beams left > 1
    "max_tokens": Fault("max_tokens", max_new_tokens=4096),  # 000 §2.2
    # num_beams=5 does not fit the (simulated) GPU: tiny_r1.TinyR1.oom_at_batch
    "oom": Fault("oom", num_beams=5),
    "oom_fallback": Fault("oom_fallback", num_beams=5, oom_fallback=True),
    "host_leak": Fault("host_leak", host_leak_mb=HOST_LEAK_MB),  # 000 §3.3
    # the same cache, filled only once a conversation has some history
    "host_leak_late": Fault("host_leak_late", host_leak_mb=HOST_LEAK_MB, leak_from_turn=3),
    # large working memory under concurrency, all of it released: not a leak
    "host_transient": Fault("host_transient", host_transient_mb=HOST_TRANSIENT_MB),
    "gpu_leak": Fault("gpu_leak", gpu_leak_mb=GPU_LEAK_MB),  # 003 §4.1
}
KEY_RE = re.compile(r"^\[(s\d+)\]")
PLAN_ENV = "DSLOGS_E2E_PLAN"  # how a test hands a Streamlit script its plan: {"s00": "beam", ...}


class Plan:
    """session key -> Fault; keys not listed are healthy."""

    def __init__(self, faults_by_key: dict[str, str]):
        self.by_key = {k: FAULTS[name] for k, name in faults_by_key.items()}

    @classmethod
    def from_env(cls) -> Plan:
        return cls(json.loads(os.environ.get(PLAN_ENV) or "{}"))

    def for_message(self, message: str) -> Fault:
        m = KEY_RE.match(message or "")
        return self.by_key.get(m.group(1), HEALTHY) if m else HEALTHY

    def keys_with(self, name: str) -> set[str]:
        return {k for k, f in self.by_key.items() if f.name == name}
