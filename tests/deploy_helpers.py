"""Simulated logs with deploy records: the simulator's run (analyzer/simulate) and the
collector's ``deploy`` lines at chosen hours, as a service restarted then would write them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

START = "2026-11-23T00:00"


def deploy_line(at: datetime, deploy_id: str, config: dict, label: str | None = None, host: str = "gpu-01",
                pid: int = 4242) -> str:
    return json.dumps({"v": 1, "ts": at.isoformat(timespec="milliseconds"), "stage": "deploy", "host": host,
                       "pid": pid, "deploy_id": deploy_id, "label": label,
                       "config": json.dumps(dict(config, trigger="start"), sort_keys=True)})


def simulated(folder: Path, seed: int, change: str | None, deploys: list[tuple[float, dict]] | None,
              hours: float = 3.0, change_hour: float = 2.0, events: int = 30_000, start: str = START) -> dict:
    """Simulate ``hours`` from ``start`` (UTC) with ``change`` at ``change_hour``, and write one
    deploy record per (hour, config) of ``deploys`` (none: logs without records)."""
    from dslogs.analyzer.simulate import simulate

    t0 = datetime.fromisoformat(start + "+00:00")
    at = (t0 + timedelta(hours=change_hour)).strftime("%Y-%m-%dT%H:%M")
    simulate(folder, hours=hours, seed=seed, start=start, change=change, change_at=at if change else None,
             events=events)
    if deploys:
        lines = [deploy_line(t0 + timedelta(hours=h), f"sim-{seed}-{n}", cfg) for n, (h, cfg) in enumerate(deploys)]
        (folder / "deploys.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return json.loads((folder / "truth.json").read_text(encoding="utf-8"))
