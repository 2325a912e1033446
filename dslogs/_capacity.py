"""``Capacity``: the ``dslogs.capacity/1`` model (``dslogs capacity``) as typed objects, the
model's own declarations (``dslogs.analyzer.model.types``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dslogs._report import Page
from dslogs.analyzer.model.types import (
    Finding,
    Level,
    MaxUsers,
    ProcessCapacity,
    Recommendation,
    WhatIf,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Capacity", "Finding", "Level", "MaxUsers", "ProcessCapacity", "Recommendation", "WhatIf"]


class Capacity(Page):
    """How many requests in flight each process holds, and the setting that keeps it there
    (``logs.capacity()``, as ``dslogs capacity``). ``processes`` are the typed curves,
    ``findings`` the capacity rules' (concurrency_cliff, oom_at_concurrency), ``model`` the
    ``dslogs.capacity/1`` dict. In a notebook it shows inline as the capacity page."""

    _title = "dslogs capacity"

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model
        self.processes = [ProcessCapacity.from_model(c) for c in model.get("capacity") or []]
        self.findings = [Finding.from_model(f) for f in model.get("findings") or []]

    @property
    def window(self) -> dict[str, Any]:
        return dict(self.model.get("window") or {})

    @property
    def recommendations(self) -> dict[str, Recommendation]:
        """Each process with a recommendation ("host/pid") and its setting."""
        return {p.process: p.recommendation for p in self.processes if p.recommendation is not None}

    def what_if(self, limits: list[int] | None = None, users: list[int] | None = None, *,
                max_new_tokens: int | None = None, num_beams: int | None = None) -> list[WhatIf]:
        """Simulated settings of the busiest process (``dslogs capacity --limits --users``). Without
        arguments, the cells the model already holds (the report's); with them, the same fitted
        service model simulated at those limits and users. [] where the logs cannot support a
        prediction (its ``service.needs`` says what traffic would)."""
        if limits is None and users is None and max_new_tokens is None and num_beams is None:
            return [WhatIf.from_model(w) for w in self.model.get("what_if") or []]
        from dslogs.analyzer.model.whatif import what_if

        busiest: dict[str, Any] = max(self.model.get("capacity") or [], key=lambda c: c.get("requests") or 0, default={})
        service = busiest.get("service") or {}
        if not service or service.get("needs"):
            return []
        slo = (self.model.get("thresholds") or {})["slo"]
        cells = busiest.get("what_if") or [{"limit": 1, "users": 1}]
        grid = what_if(service, sorted(set(limits or [w["limit"] for w in cells])),
                       sorted(set(users or [w["users"] for w in cells])), slo,
                       max_new_tokens=max_new_tokens, num_beams=num_beams)
        return [WhatIf.from_model(w) for w in grid["what_if"]]

    @property
    def max_users(self) -> list[MaxUsers]:
        """Per simulated limit, the most users within the SLO (the busiest process's)."""
        return [MaxUsers.from_model(m) for m in self.model.get("max_users") or []]

    def levels(self) -> pd.DataFrame:
        """Every process's levels as one DataFrame (one row per process and level)."""
        from dslogs._extras import need

        pandas = need("pandas", "Capacity.levels")
        rows = [{"host": p.host, "pid": p.pid, **vars(lv)} for p in self.processes for lv in p.levels]
        frame: pd.DataFrame = pandas.DataFrame(rows)
        return frame

    def __repr__(self) -> str:
        recs = ", ".join(f"{name}: limit {r.limit}" for name, r in self.recommendations.items())
        return (f"<dslogs.Capacity {len(self.processes)} process(es), "
                f"{recs or 'no recommendation'}, {len(self.findings)} finding(s)>")

    def render(self, fmt: str = "html") -> str:
        """The capacity view as text: html (the self-contained page), md or json."""
        from dslogs.analyzer.render.report import render_capacity

        return str(render_capacity(self.model, fmt))

    def _specs(self) -> dict[str, dict[str, Any]]:
        # the capacity page draws only the capacity section's charts
        return {k: v for k, v in super()._specs().items() if k.startswith("capacity")}
