"""Collector-health rules: log volume, dropped events, bad lines."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.rules.registry import RuleOutcome, _host_findings, _plural, finding, rule


@rule(
    "log_volume",
    severity="warning",
    source="000 §3.2, §5",
    fix=(
        "The service writes more than 1 MB/s of logs, which eats disk IOPS: disable DEBUG "
        "logging (logging.disable(logging.INFO)) and keep one structured line per stage "
        "(000 §3.2, §5; 003 §2.1)."
    ),
    inputs=("log_volume_peak_minute", "collector_write_rate"),
    needs=(),
    sections=("collector",),
    charts=("log_volume",),
)
def rule_log_volume(m, ingest, t) -> RuleOutcome:
    th = t["log_volume"]["bytes_per_s"]
    # Line sizes from ingest measure every writer; the collector's byte counter is the fallback.
    rows = [{**r, "source": "line_bytes"} for r in m.get("log_volume_peak_minute", []) if r.get("peak_bytes") is not None]
    if not rows:
        rows = [{**r, "source": "collector bytes_written"} for r in m.get("collector_write_rate", [])
                if r.get("peak_bytes_per_s") is not None]
    if not rows:
        return RuleOutcome("log_volume", "no_data", "no line sizes from ingest and no collector byte counters")
    hit = [r for r in rows if r["peak_bytes_per_s"] > th]
    if not hit:
        return RuleOutcome("log_volume", "pass", f"{_plural(len(rows), 'host')} checked ({rows[0]['source']})")

    def when(r):
        return r.get("peak_minute") or r.get("peak_from")

    findings = _host_findings(
        "log_volume", hit, value_key="peak_bytes_per_s", threshold=th, unit="bytes/s",
        message_of=lambda r: (
            f"{r.get('host') or 'the unnamed host'} wrote {fmt.prose(r['peak_bytes_per_s'] / 1e6, 2)} MB/s of logs "
            f"at its peak ({when(r)})"
        ),
        section="collector", chart="log_volume",
        detail_keys=("peak_minute", "peak_from", "peak_bytes", "peak_events", "total_bytes", "source"),
    )
    return RuleOutcome("log_volume", "fired", _plural(len(hit), "host"), findings)


@rule(
    "collector_drops",
    severity="warning",
    source="—",
    fix=(
        "The collector's queue overflowed and events were dropped, so other metrics miss data: "
        "raise the collector's queue size or sample less often."
    ),
    inputs=("collector_health",),
    needs=(),
    sections=("collector",),
)
def rule_collector_drops(m, ingest, t) -> RuleOutcome:
    th = t["collector_drops"]["dropped"]
    rows = m.get("collector_health", [])
    if not rows:
        return RuleOutcome("collector_drops", "no_data", "no collector health events")
    hit = [r for r in rows if (r.get("dropped") or 0) > th]
    if not hit:
        return RuleOutcome("collector_drops", "pass", f"{_plural(len(rows), 'host')} checked")
    findings = _host_findings(
        "collector_drops", hit, value_key="dropped", threshold=th, unit="events",
        message_of=lambda r: f"the collector on {r.get('host') or 'an unnamed host'} dropped {fmt.prose(r['dropped'])} events",
        section="collector", chart=None, detail_keys=("dropped", "written", "queued", "processes"),
    )
    return RuleOutcome("collector_drops", "fired", _plural(len(hit), "host"), findings)


def _samples(samples: list, bad: int, shown: int = 20) -> dict:
    """Some bad lines as samples, saying they are ``shown`` of the ``bad`` lines skipped."""
    out: dict = {"samples": list(samples)[:shown]}
    if len(out["samples"]) < bad:
        out.update(samples_truncated=True, samples_total=bad)
    return out


@rule(
    "bad_lines",
    severity="info",
    source="—",
    fix=(
        "Malformed lines were skipped and counted (samples in the ingest summary): look for a "
        "writer that died mid-line or two writers interleaving; the logs were not modified."
    ),
    inputs=(),
    needs=(),
    sections=("header",),
)
def rule_bad_lines(m, ingest, t) -> RuleOutcome:
    th = t["bad_lines"]["lines"]
    bad = int((ingest or {}).get("bad_lines") or 0)
    skipped = int((ingest or {}).get("skipped_files") or 0)
    if bad <= th:
        return RuleOutcome("bad_lines", "pass", "no malformed lines")
    f = finding(
        "bad_lines", scope="ingest", value=bad, threshold=th, unit="lines",
        message=f"{_plural(bad, 'malformed line')} skipped while reading the logs"
                + (f", and {_plural(skipped, 'file')} not read" if skipped else ""),
        section="header", chart=None,
        details=_samples((ingest or {}).get("bad_line_samples") or [], bad) | {"skipped_files": skipped},
    )
    return RuleOutcome("bad_lines", "fired", _plural(bad, "line"), [f])


