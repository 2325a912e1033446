"""Change points: the service changes at one moment of a simulated run (an upgrade, a new
parameter, a leak introduced, or only the users' prompts getting longer).

A change edits the planner's drawn requests after the moment (``at``) and moves every later
timestamp of the session by the time it adds, so the events stay in order. ``truth.json``
records the change and what a diff of before against after must find (``expect``):

- ``prefill_slower``: prefill +40 % on every request from ``at`` (a slower kernel after an
  upgrade). A service regression: prefill and TTFT slower for the same prompts.
- ``max_new_tokens``: ``max_new_tokens`` 2048 → 4096 from ``at``; requests that hit the cap now
  run to 4096 tokens. Not a slower service: a parameter change (and ``high_max_tokens``).
- ``leak``: sessions that start after ``at`` keep ~200 MiB of reserved memory per turn
  (a leak introduced by the new version): ``memory_leak`` appears.
- ``prompt_shift``: prompts 2.5× longer from ``at`` (new users, a new feature); the service is
  unchanged, so prefill per token is the same: a mix shift, never a regression.
"""

from __future__ import annotations

from dataclasses import dataclass

from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.simulate.traffic import KV_MB_PER_TOKEN, Req, Session


@dataclass(frozen=True)
class ChangeSpec:
    name: str
    description: str
    expect: dict


CHANGES: dict[str, ChangeSpec] = {
    c.name: c
    for c in (
        ChangeSpec("prefill_slower", "prefill +40 % on every request from the change on (an upgrade)",
                   {"regressions": ["prefill", "TTFT"], "mix_shift": [], "params": [], "new_findings": []}),
        ChangeSpec("max_new_tokens", "max_new_tokens 2048 -> 4096 from the change on",
                   {"regressions": [], "mix_shift": [], "params": ["max_new_tokens"], "new_findings": ["high_max_tokens"]}),
        ChangeSpec("leak", "sessions starting after the change keep ~200 MiB of reserved memory per turn",
                   {"regressions": [], "mix_shift": [], "params": [], "new_findings": ["memory_leak"]}),
        ChangeSpec("prompt_shift", "prompts 2.5x longer from the change on; the service itself is unchanged",
                   {"regressions": [], "mix_shift": ["input_len"], "params": [], "new_findings": []}),
    )
}

PREFILL_FACTOR = 1.4
NEW_MAX_NEW_TOKENS = 4096
LEAK_MB_PER_TURN = 200.0
PROMPT_FACTOR = 2.5
_TIMES = ("t0", "t_tok", "t_gen", "t_first", "t_dec", "t_fmt", "t_mem")


def check(name: str | None) -> str | None:
    if name is not None and name not in CHANGES:
        raise UsageError(f"unknown change {name!r}; valid: {', '.join(CHANGES)}")
    return name


def _prefill_cost(L: float) -> float:
    # traffic.py's prefill model without its noise factor
    return 90 + 0.32 * L + 6e-5 * L * L


def _delay(r: Req, after: str, d: float) -> None:
    """Add ``d`` ms to the stage ending at timestamp ``after`` and move what follows."""
    later = _TIMES[_TIMES.index(after):]
    for t in later:
        setattr(r, t, getattr(r, t) + d)
    if r.t_oom is not None and after in ("t_tok", "t_gen", "t_first"):
        r.t_oom += d
    r.e2e += d
    if after in ("t_tok", "t_gen", "t_first"):
        r.ttft += d
        if r.ttfa is not None:
            r.ttfa += d


def _shift(r: Req, d: float) -> None:
    for t in _TIMES:
        setattr(r, t, getattr(r, t) + d)
    if r.t_oom is not None:
        r.t_oom += d


def apply(session: Session, name: str, at_ms: float) -> Session:
    """Edit one session's requests for change ``name`` at epoch ms ``at_ms`` (in place)."""
    carry = 0.0
    starts_after = session.requests and session.requests[0].t0 >= at_ms
    for r in session.requests:
        if carry:
            _shift(r, carry)
        before_end = r.t_mem
        if r.t0 >= at_ms:
            if name == "prefill_slower":
                d = r.prefill_ms * (PREFILL_FACTOR - 1)
                r.prefill_ms += d
                _delay(r, "t_first", d)
            elif name == "max_new_tokens":
                r.max_new = NEW_MAX_NEW_TOKENS
                if r.finish == "length" and r.error is None and r.output_len:
                    extra = NEW_MAX_NEW_TOKENS - r.output_len
                    d = r.tpot * extra
                    r.output_len += extra
                    r.decode_ms += d
                    _delay(r, "t_dec", d)
            elif name == "prompt_shift":
                _longer_prompt(r)
        if name == "leak" and starts_after:
            r.reserved += LEAK_MB_PER_TURN * (r.turn - 1)
        carry += r.t_mem - before_end
    return session


def _longer_prompt(r: Req) -> None:
    old_prompt = int(r.input_chars * 0.7) + 2
    r.input_chars = int(r.input_chars * PROMPT_FACTOR)
    new_prompt = int(r.input_chars * 0.7) + 2
    L0 = r.input_tokens
    L1 = L0 + new_prompt - old_prompt
    r.input_tokens = r.kv_len = L1
    r.kv_mb = L1 * KV_MB_PER_TOKEN * r.beams
    d_tok = r.tok_ms * ((12 + 0.02 * L1) / (12 + 0.02 * L0) - 1)
    r.tok_ms += d_tok
    _delay(r, "t_tok", d_tok)
    d_pre = r.prefill_ms * (_prefill_cost(L1) / _prefill_cost(L0) - 1)
    r.prefill_ms += d_pre
    _delay(r, "t_first", d_pre)
    if r.error is None and r.output_len:
        d_tpot = 0.004 * (L1 - L0)  # traffic.py: tpot grows 0.004 ms per context token
        d_dec = d_tpot * (r.output_len - 1)
        r.tpot += d_tpot
        r.decode_ms += d_dec
        _delay(r, "t_dec", d_dec)
        if r.ttfa is not None:
            r.ttfa += d_tpot * (r.reasoning_len + 1)


def apply_all(sessions, name: str | None, at_ms: float):
    """The planner's sessions with the change applied (a generator, like ``Planner.sessions``)."""
    for s in sessions:
        yield apply(s, name, at_ms) if name else s


def truth_entry(name: str, at_iso: str, at_offset_ms: int) -> dict:
    spec = CHANGES[name]
    return {"name": name, "at": at_iso, "at_offset_ms": at_offset_ms, "description": spec.description,
            "expect": spec.expect}
