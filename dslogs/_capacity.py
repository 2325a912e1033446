"""``Capacity``: the ``dslogs.capacity/1`` model (``dslogs capacity``) as typed objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dslogs._report import Finding, Page, _float, _int, _str

if TYPE_CHECKING:
    import pandas as pd


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Level:
    """One in-flight level of a process: its requests, latency percentiles (ms), aggregate
    output rate, memory and GPU utilisation while the process ran at that level."""

    level: int
    requests: int
    time_s: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    service_ttft_p95_ms: float | None  # TTFT less the queue wait
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    queue_p50_ms: float | None
    queue_p95_ms: float | None
    tokens_per_s: float | None
    reserved_peak_mb: float | None
    allocated_peak_mb: float | None
    gpu_util_pct: float | None
    error_requests: int
    oom_requests: int
    sparse: bool  # fewer requests than capacity.min_level_requests: left out of the verdicts

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> Level:
        f = {k: _float(d.get(k)) for k in (
            "time_s", "ttft_p50_ms", "ttft_p95_ms", "service_ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms",
            "e2e_p50_ms", "e2e_p95_ms", "queue_p50_ms", "queue_p95_ms", "tokens_per_s",
            "reserved_peak_mb", "allocated_peak_mb", "gpu_util_pct")}
        return cls(level=_int(d.get("level")), requests=_int(d.get("requests")),
                   error_requests=_int(d.get("error_requests")), oom_requests=_int(d.get("oom_requests")),
                   sparse=bool(d.get("sparse")), **f)


@dataclass(frozen=True)
class Recommendation:
    """The concurrency setting that keeps a process below its knee, SLO and OOM levels, with the
    evidence in words ("set concurrency_limit=N: at N+1 ...")."""

    limit: int
    text: str


@dataclass(frozen=True)
class ProcessCapacity:
    """One process's capacity curve and its verdicts (levels in requests in flight; memory in MiB).

    ``recommendation`` is None when the logs hold too little traffic or show no limit; ``needs``
    then says what traffic would settle it."""

    host: str | None
    pid: int | None
    requests: int
    top_level: int
    knee: int | None  # where aggregate throughput stops rising
    slo_level: int | None  # the first level whose p95 service TTFT or TPOT is over the SLO
    slo_over: list[str]
    slo_unmet: bool  # the SLO is missed already at the lowest measured level
    oom_level: int | None  # where the fitted peak reserved memory passes the GPU's share
    mb_per_request: float | None
    base_mb: float | None
    fit_r2: float | None
    gpu_total_mb: float | None
    recommendation: Recommendation | None
    needs: str | None
    levels: list[Level] = field(default_factory=list)

    @property
    def process(self) -> str:
        name = self.host or "unnamed host"
        return f"{name}/{self.pid}" if self.pid is not None else name

    @classmethod
    def from_model(cls, d: dict[str, Any]) -> ProcessCapacity:
        rec = d.get("recommendation")
        host, needs = d.get("host"), d.get("needs")
        return cls(host=None if host is None else str(host), pid=_opt_int(d.get("pid")),
                   requests=_int(d.get("requests")), top_level=_int(d.get("top_level")),
                   knee=_opt_int(d.get("knee")), slo_level=_opt_int(d.get("slo_level")),
                   slo_over=[str(x) for x in d.get("slo_over") or []], slo_unmet=bool(d.get("slo_unmet")),
                   oom_level=_opt_int(d.get("oom_level")), mb_per_request=_float(d.get("mb_per_request")),
                   base_mb=_float(d.get("base_mb")), fit_r2=_float(d.get("fit_r2")),
                   gpu_total_mb=_float(d.get("gpu_total_mb")),
                   recommendation=Recommendation(limit=_int(rec.get("limit")), text=_str(rec.get("text")))
                   if isinstance(rec, dict) else None,
                   needs=None if needs is None else str(needs),
                   levels=[Level.from_model(lv) for lv in d.get("levels") or []])


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
        from analyzer.render.report import render_capacity

        return str(render_capacity(self.model, fmt))

    def _specs(self) -> dict[str, dict[str, Any]]:
        # the capacity page draws only the capacity section's charts
        return {k: v for k, v in super()._specs().items() if k.startswith("capacity")}
