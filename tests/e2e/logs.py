"""The raw lines an app wrote (schema v1 or article 003's seed format), for the assertions
that compare the logs with what the test saw from outside."""

from __future__ import annotations

import json
from pathlib import Path


def read_events(log_dir: Path) -> list[dict]:
    out = []
    for p in sorted(Path(log_dir).glob("*.jsonl")):
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise AssertionError(f"{p.name}:{n}: not JSON ({e})") from None
    return out


def by_request(events: list[dict]) -> dict[str, dict[str, dict]]:
    """request_id -> stage -> the request's last event of that stage."""
    out: dict[str, dict[str, dict]] = {}
    for e in events:
        rid = e.get("request_id")
        if rid:
            out.setdefault(rid, {})[e["stage"]] = e
    return out
