"""The models dslogs writes, each object declared once: the report ``dslogs.report/1``, the diff
``dslogs.diff/1``, the weekly report ``dslogs.weekly/1`` and the capacity model
``dslogs.capacity/1``.

Every object is a frozen dataclass whose fields are the object's JSON keys, one line each, with
the comment on the line as the field's description. Three things read these declarations and
nothing else:

- ``dslogs.analyzer.model.schemas`` turns them into the shipped JSON Schemas (``schemas/*.json``),
  which ``dslogs.analyzer.model.load`` checks every saved model against;
- the Python API (``dslogs``) re-exports them as its typed objects, built from a model dict by
  ``from_model``;
- the tests hold every model built from ``sample_logs/`` to them, key by key.

How a declaration reads as JSON:

- a field without a default is a required key; one with a default may be absent (models saved
  by an older version lack the keys added since);
- ``X | None``: the value may be null; ``list[X]``, ``dict[str, X]`` (an object keyed by name),
  a nested model class, ``Literal[...]`` (one of these values; one value: that constant);
- ``int`` is a JSON integer, ``float`` any number, both bounded to ±2**53 (a renderer formats
  them as floats); ``Count`` is an integer ≥ 0, ``Share`` a number in [0, 1];
- ``EXTRA``: what a key the class does not declare may hold. A table row (``Row``) takes any
  JSON scalar there (a metric's extra column); other objects take anything.

This module needs only the standard library: the API imports it, and mypy checks it with the API.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, Self

from dslogs.analyzer.core.severity import Severity

LIMIT = 2**53


@dataclass(frozen=True)
class Range:
    """The bounds of a number (``Annotated[int, Range(0, LIMIT)]``)."""

    minimum: float
    maximum: float


Count = Annotated[int, Range(0, LIMIT)]
Share = Annotated[float, Range(0, 1)]  # a fraction: rates and shares
Scalar = str | float | bool | None  # any JSON scalar


@dataclass(frozen=True, kw_only=True)
class Model:
    """An object of a model: its fields are its JSON keys."""

    EXTRA: ClassVar[Any] = Any

    @classmethod
    def from_model(cls, d: typing.Mapping[str, Any]) -> Self:
        """The object from its JSON dict (a model as built, or loaded and checked): the declared
        keys, nested objects built too; a key the dict lacks takes the field's default."""
        hints = _hints(cls)
        kwargs = {f.name: _convert(hints[f.name], d[f.name]) for f in dataclasses.fields(cls) if f.name in d}
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in d and _no_default(f)]
        if missing:
            raise ValueError(f"{cls.__name__}: missing field(s) {', '.join(missing)}")
        return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class Row(Model):
    """A row of a table: the named columns typed, any other column a JSON scalar."""

    EXTRA: ClassVar[Any] = Scalar


def _no_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _convert(tp: Any, value: Any) -> Any:
    """``value`` (parsed JSON) as annotation ``tp`` says: model objects built, ints read as floats
    where a float is declared; anything that does not fit is passed as it is."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _convert(typing.get_args(tp)[0], value)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(tp) if a is not type(None)]
        for a in kinds:
            if _fits(a, value):
                return _convert(a, value)
        return value
    if isinstance(tp, type) and issubclass(tp, Model) and isinstance(value, dict):
        return tp.from_model(value)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(tp)
        return [_convert(item, v) for v in value]
    if origin is dict and isinstance(value, dict):
        _, item = typing.get_args(tp)
        return {k: _convert(item, v) for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _fits(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _fits(typing.get_args(tp)[0], value)
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin is list:
        return isinstance(value, list)
    if origin is dict or (isinstance(tp, type) and issubclass(tp, Model)):
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return tp is Any or (isinstance(tp, type) and isinstance(value, tp))


# -- shared ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Window(Model):
    """The window the model covers: as asked (since/until) and as found in the logs."""

    since: str | None = None  # the window's start as asked, ISO 8601
    until: str | None = None  # the window's end as asked, ISO 8601
    first_event: str | None = None  # the first event read
    last_event: str | None = None  # the last event read
    first_request: str | None = None  # the first request's start (its end less its end-to-end time)
    last_request: str | None = None  # the last request's end


@dataclass(frozen=True, kw_only=True)
class Evidence(Model):
    """Where a finding's evidence is shown, and what pinned it."""

    section: str | None = None  # the report section that shows it
    chart: str | None = None  # the chart that shows it
    doc: str | None = None  # the page that explains the rule
    factors: list[dict[str, Any]] | None = None  # the causes looked for in the affected requests
    requests: list[dict[str, Any]] | None = None  # per session, the requests that pinned it
    requests_truncated: bool | None = None  # the drill-down holds fewer sessions than it names
    requests_total: Count | None = None  # the sessions it names
    details: dict[str, Any] | None = None  # the rule's own figures


@dataclass(frozen=True, kw_only=True)
class Finding(Model):
    """One rule that fired: what, how sure (value against threshold), where, and the fix."""

    rule: str
    severity: Severity
    scope: str  # session, host, process or service
    session_ids: list[str]  # every session it names, sorted
    session_count: int | None = None  # how many it names
    hosts: list[str | None] = field(default_factory=list)
    value: float | None = None  # the measured figure the rule judged
    threshold: float | None = None  # what it was judged against
    unit: str | None = None
    message: str
    fix: str | None = None
    source: str | None = None  # the article section the threshold and fix come from
    evidence: Evidence | None = None


@dataclass(frozen=True, kw_only=True)
class RuleStatus(Row):
    """What each rule did with this run: fired, passed, no data (and why)."""

    rule: str | None = None
    status: str | None = None  # fired, ok or no_data
    reason: str | None = None  # why a rule saw no data
    severity: str | None = None
    source: str | None = None
    findings: int | None = None


@dataclass(frozen=True, kw_only=True)
class Note(Model):
    """What a reader must know to trust the numbers (also printed on stderr)."""

    id: str | None = None
    level: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorRow(Row):
    """One error type of the window."""

    error_type: str | None = None
    count: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    sample_msg: str | None = None
    sessions: int | None = None
    failed_stage: str | None = None


@dataclass(frozen=True, kw_only=True)
class SeriesRow(Row):
    """A row of a chart's series: the columns a query declares for it (``-- series key: ...``)
    and the servers' gauges, typed."""

    bucket: str | None = None  # the time bucket (series_bucket wide)
    ts: str | None = None
    host: str | None = None
    pid: int | None = None
    session_id: str | None = None
    request_id: str | None = None  # memory_timeline: the request a reading belongs to (its turn in the chart)
    server: str | None = None
    gauge: str | None = None
    metric: str | None = None
    stage: str | None = None
    error_type: str | None = None
    level: int | None = None  # requests in flight
    gpu_index: int | None = None
    turn_index: int | None = None
    bin_start: float | None = None
    bin_end: float | None = None
    input_len_bin: float | None = None
    count: int | None = None
    events: int | None = None
    bytes: int | None = None
    processes: int | None = None  # collector: writer processes (each adds its last record to its count)
    written: int | None = None
    dropped: int | None = None
    queued: int | None = None
    bytes_written: int | None = None
    requests: int | None = None
    oom_requests: int | None = None
    value: float | None = None
    time_s: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    prefill_p50_ms: float | None = None
    prefill_p95_ms: float | None = None
    prefill_max_ms: float | None = None
    input_len_p50: float | None = None
    ttft_p95_ms: float | None = None
    service_ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    queue_p95_ms: float | None = None
    tokens_per_s: float | None = None
    util_avg: float | None = None
    util_max: float | None = None
    mem_used_mb_max: float | None = None
    gpu_util_pct: float | None = None
    gpu_total_mb: float | None = None
    reserved_mb: float | None = None
    allocated_mb: float | None = None
    reserved_peak_mb: float | None = None
    allocated_peak_mb: float | None = None
    kv_seq_len: int | None = None
    kv_cache_size_mb: float | None = None


@dataclass(frozen=True, kw_only=True)
class RequestRow(Row):
    """One request of a session's drill-down, in turn order."""

    request_id: str | None = None
    turn_index: int | None = None
    start_ts: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    reasoning_len: int | None = None
    tokenize_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    inference_ms: float | None = None
    format_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    gpu_wait_pct: float | None = None
    gpu_util_pct: float | None = None
    kv_seq_len: int | None = None
    num_beams: int | None = None
    max_new_tokens: int | None = None
    reserved_mb: float | None = None  # the request's last reserved reading
    allocated_mb: float | None = None  # the request's last allocated reading
    memory_ts: str | None = None  # when that reading was taken (the snapshot after the request)
    kv_ts: str | None = None  # when the request's last KV reading (kv_seq_len, kv_cache_size_mb) was taken
    kv_cache_size_mb: float | None = None  # the largest of its kv_cache events
    status: str | None = None
    error_type: str | None = None
    inflight: int | None = None  # requests in flight when it started
    allocated_mb_before: float | None = None
    allocated_mb_after: float | None = None
    reserved_mb_before: float | None = None
    reserved_mb_after: float | None = None
    rss_mb_before: float | None = None
    rss_mb_after: float | None = None
    failed_num_beams: int | None = None  # the generation parameters of a request that failed
    failed_max_new_tokens: int | None = None


# -- dslogs.report/1 -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FileProblem(Row):
    """A line or a file ingest could not read, and why."""

    file: str | None = None
    line: int | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Ingest(Model):
    """What was read: files, events, the lines and files that could not be read."""

    files: int
    events: int
    bad_lines: int
    skipped_files: int = 0
    read_files: int | None = None  # files parsed in this run
    cached_files: int | None = None  # files whose rows the cache held
    renamed_files: int | None = None  # cached files found under another name
    duplicate_files: int | None = None  # files with the content of another, read once
    pruned_files: int | None = None  # files outside the window, not opened
    unreadable_files: int | None = None
    bytes: int | None = None
    seconds: float | None = None  # time spent reading
    cache: str | None = None  # the cache file, if any
    bad_line_samples: list[FileProblem] = field(default_factory=list)  # the first few bad lines
    bad_line_samples_truncated: bool | None = None  # fewer samples than bad lines
    bad_line_samples_total: Count | None = None  # the bad lines
    formats: dict[str, int] = field(default_factory=dict)  # events per source format
    skipped: list[FileProblem] = field(default_factory=list)  # files left out, and why
    snapshots: int | None = None  # Prometheus snapshots read beside the events


@dataclass(frozen=True, kw_only=True)
class HostRow(Row):
    """One host of the window."""

    host: str | None = None
    events: int | None = None
    sessions: int | None = None
    requests: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None


@dataclass(frozen=True, kw_only=True)
class ChecklistItem(Model):
    """One line of the article's checklist: PASS, FAIL, NO DATA or N/A, with the measured value."""

    id: str
    label: str
    status: str  # PASS, FAIL, NO DATA, N/A or "not available for this source"
    value: float | None = None
    threshold: float | None = None
    unit: str | None = None
    source: str | None = None  # the article section
    note: str | None = None  # why the row reads as it does
    sessions: list[str] = field(default_factory=list)  # the sessions that fail it
    findings: list[str] = field(default_factory=list)  # a FAIL row: the rules whose findings explain it
    no_finding: str | None = None  # a FAIL row without a finding: why none

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


@dataclass(frozen=True, kw_only=True)
class Stage(Row):
    """Duration percentiles of one pipeline stage (tokenize, prefill, decode, ...), in ms."""

    stage: str | None = None
    count: int | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class LatencyStats(Row):
    """Percentiles of one request metric over the window."""

    count: int | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, kw_only=True)
class Slo(Model):
    """The latency objective goodput is judged against, in ms."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class Requests(Model):
    """The requests of the window: counts, latency percentiles, goodput, prefill/decode split."""

    count: Count | None = None
    ok: Count | None = None
    errors: Count | None = None  # failed requests (status error), not error events
    retried: Count | None = None  # answered after an error: the app caught it and retried
    errors_note: str | None = None  # "4 failed · 4 retried and answered": what the failed count leaves out
    ttft_ms: LatencyStats = field(default_factory=LatencyStats)  # time to first token
    tpot_ms: LatencyStats = field(default_factory=LatencyStats)  # time per output token
    e2e_ms: LatencyStats = field(default_factory=LatencyStats)  # end to end
    tokens_per_s: LatencyStats = field(default_factory=LatencyStats)
    ttfa_ms: LatencyStats = field(default_factory=LatencyStats)  # time to first answer token (after the reasoning)
    tpot_is_upper_bound: bool | None = None  # some TPOTs include the prefill
    goodput: Share | None = None  # share of requests within the SLO
    slo_missed: Count | None = None  # answered requests with a measured TTFT over an SLO
    slo: Slo = field(default_factory=Slo)
    prefill_decode_ratio_p50: float | None = None
    prefill_decode_ratio_p90: float | None = None
    prefill_share_of_compute: Share | None = None
    reasoning_share_p50: Share | None = None
    reasoning_share_p90: Share | None = None
    reasoning_requests: Count | None = None

    @property
    def raw(self) -> dict[str, Any]:
        """The whole block as a dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class Judged(Row):
    """What one per-session rule judged of a session, flagged or not: the figures its verdict
    compares with its thresholds, under the names its finding's details give them."""

    basis: str | None = None  # memory_leak: "request deltas" (credited) or "reserved_mb over turns"
    rise_mb: float | None = None  # memory_leak: MiB credited to its requests in all, or reserved over its turns
    leak_per_request_mb: float | None = None  # memory_leak: MiB credited per request
    rss_kept_mb: float | None = None  # rss_growth: host RAM credited to its requests in all
    rss_kept_per_request_mb: float | None = None  # rss_growth: host RAM credited per request
    requests_counted: int | None = None  # the requests the per-request figure is over (from the first that kept)
    requests_read: int | None = None  # its requests with a reading before and after (counted ones are from the first that kept)
    samples: int | None = None  # memory_leak over turns: its reserved_mb snapshots
    ghost_p50_mb: float | None = None  # ghost_memory
    ghost_share_p50: Share | None = None  # ghost_memory
    ooms: Count | None = None  # oom
    num_beams_max: float | None = None  # beam_search
    max_new_tokens_max: float | None = None  # high_max_tokens
    output_len_max: float | None = None  # long_output


@dataclass(frozen=True, kw_only=True)
class SessionRow(Row):
    """One session of the sessions table: its readings and the rules it fired."""

    session_id: str | None = None
    host: str | None = None
    requests: int | None = None
    errors: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    duration_min: float | None = None
    reserved_slope_mb_per_min: float | None = None
    reserved_r2: float | None = None
    ghost_max_mb: float | None = None
    gpu_wait_pct_p50: float | None = None
    gpu_util_pct_p50: float | None = None
    tpot_p50_ms: float | None = None
    ttft_p50_ms: float | None = None
    e2e_p50_ms: float | None = None
    prefill_p50_ms: float | None = None
    max_kv_seq_len: int | None = None
    max_output_len: int | None = None
    source_format: str | None = None
    reserved_rise_mb: float | None = None  # last − first reserved snapshot
    errors_note: str | None = None  # "0 failed · 6 OOM retried and answered": no error, yet OOMs logged
    slope_ok: bool | None = None  # readings span a minute: the per-minute slope means something
    judged: dict[str, Judged] | None = None  # rule -> what it judged of the session
    findings: list[str] | None = None  # the rules it fired


@dataclass(frozen=True, kw_only=True)
class SlowSession(Row):
    """One of the slowest sessions."""

    session_id: str | None = None
    host: str | None = None
    requests: int | None = None
    e2e_p50_ms: float | None = None
    e2e_max_ms: float | None = None
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class SlowRequest(Row):
    """One of the slowest requests, its time split into parts and why it was slow."""

    request_id: str | None = None
    session_id: str | None = None
    host: str | None = None
    pid: int | None = None
    turn_index: int | None = None
    start_ts: str | None = None  # its first event: the enqueue time when queue wait is logged
    e2e_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    max_new_tokens: int | None = None
    num_beams: int | None = None  # a failed attempt's included
    status: str | None = None
    error_type: str | None = None
    shared_ms: float | None = None  # time with at least one other request of its process in flight
    others_avg: float | None = None  # other requests in flight (queued or running), on average over its time
    queue_ms: float | None = None  # waited before its handler ran
    tokenize_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None  # decode, or one unsplit inference stage
    other_ms: float | None = None  # rest: e2e minus the parts above, handler time outside the measured stages (format included)
    times_median: float | None = None  # e2e over the median request's
    why: list[str] = field(default_factory=list)  # the parts and settings that made it slow


@dataclass(frozen=True, kw_only=True)
class LeadLine(Model):
    """One problem on the report's first screen, ranked by user impact."""

    rank: int
    rule: str  # the finding's rule, or slow_requests
    severity: Severity
    scope: str | None = None
    finding: int | None = None  # 1-based index of the finding holding the evidence
    section: str | None = None  # the section holding it, when no finding does
    problem: str | None = None
    impact: str  # requests and sessions touched, failed or over the SLO, since when
    requests: Count | None = None  # requests touched
    request_share: Share | None = None  # of the window's requests
    failed_requests: Count | None = None
    failed_sessions: Count | None = None  # of its sessions, those with a failed request
    retried_requests: Count | None = None  # answered after a caught error and retry (drill-down)
    same_failures_as: int | None = None  # rank of an earlier line counting the same failed requests
    slo_missed_requests: Count | None = None
    sessions: Count | None = None
    session_share: Share | None = None
    session_ids: list[str] = field(default_factory=list)  # the first few
    more_sessions: Count | None = None
    since: str | None = None
    until: str | None = None
    minutes: float | None = None
    figure: str | None = None  # the one figure that shows it
    change: str | None = None  # what to change


@dataclass(frozen=True, kw_only=True)
class GpuRow(Row):
    """One GPU of a host: utilisation, memory, power and temperature over the window."""

    host: str | None = None
    gpu_index: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    samples: int | None = None
    util_max: float | None = None
    util_p50: float | None = None
    util_avg: float | None = None
    mem_used_max_mb: float | None = None
    mem_used_p50_mb: float | None = None
    mem_total_mb: float | None = None
    mem_used_share_p50: float | None = None
    sampled_s: float | None = None
    starved_s: float | None = None
    starved_samples: int | None = None
    power_max_w: float | None = None
    temp_max_c: float | None = None


@dataclass(frozen=True, kw_only=True)
class ProcessRow(Row):
    """One process's host memory (RSS) over the window."""

    host: str | None = None
    pid: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    samples: int | None = None
    minutes: float | None = None
    rss_first_mb: float | None = None
    rss_last_mb: float | None = None
    rss_min_mb: float | None = None
    rss_max_mb: float | None = None
    rss_slope_mb_per_min: float | None = None
    rss_r2: float | None = None
    rss_held_rise_mb: float | None = None
    slope_ok: bool | None = None  # its samples span a minute: the per-minute slope is worth showing
    sessions_kept: Count | None = None  # sessions rss_growth names in this process
    sessions_kept_mb: float | None = None  # what their own requests kept of its RSS (their credited MiB)


@dataclass(frozen=True, kw_only=True)
class Level(Row):
    """One in-flight level of a process: its requests, latency percentiles (ms), aggregate output
    rate, memory and GPU utilisation while the process ran at that level."""

    host: str | None = None
    pid: int | None = None
    level: int | None = None  # requests in flight
    requests: int | None = None
    requests_with_inflight: int | None = None
    time_s: float | None = None  # time the process spent at this level
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    service_ttft_p95_ms: float | None = None  # TTFT less the queue wait
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    queue_p50_ms: float | None = None
    queue_p95_ms: float | None = None
    tokens_per_s: float | None = None  # aggregate output rate
    reserved_peak_mb: float | None = None
    allocated_peak_mb: float | None = None
    gpu_util_pct: float | None = None
    gpu_total_mb: float | None = None
    error_requests: int | None = None
    oom_requests: int | None = None
    sparse: bool | None = None  # fewer requests than capacity.min_level_requests: left out of the verdicts


@dataclass(frozen=True, kw_only=True)
class Recommendation(Model):
    """The concurrency setting that keeps a process below its knee, SLO and OOM levels, with the
    evidence in words ("set concurrency_limit=N: at N+1 ...")."""

    limit: int
    text: str


@dataclass(frozen=True, kw_only=True)
class WhatIf(Model):
    """One simulated setting: ``users`` closed-loop users in front of a concurrency ``limit``
    (model/whatif.py). Times in ms; ``slo_share``: the requests whose TTFT (queue wait included)
    and TPOT are within the SLO; ``oom_risk``: the share of the time at or past the OOM level
    (None: no memory limit known)."""

    limit: int
    users: int
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    ttft_p95_ms: float | None = None
    queue_p95_ms: float | None = None
    tokens_per_s: float | None = None
    requests_per_s: float | None = None
    slo_share: float | None = None
    oom_risk: float | None = None


@dataclass(frozen=True, kw_only=True)
class MaxUsers(Model):
    """The most closed-loop users a limit serves with ``what_if.slo_share`` of their requests
    within the SLO (0: one user alone misses it; the search's cap: never seen missed)."""

    limit: int
    users: int


@dataclass(frozen=True, kw_only=True)
class ServiceModel(Model):
    """The service model fitted from one process's logs, the simulation's input (model/whatif.py).
    ``needs``: what traffic a prediction would need (then nothing is predicted)."""

    requests: int | None = None
    assumes: str | None = None
    stack: str | None = None  # what served it (gradio, vllm), when the logs say
    gpu: bool | None = None
    needs: str | None = None
    levels_fitted: list[int] = field(default_factory=list)
    levels_seen: int | None = None
    top_level: int | None = None
    sessions: int | None = None
    turns_per_session: float | None = None
    think_p50_ms: float | None = None
    think_p95_ms: float | None = None
    output_p50: float | None = None
    output_p95: float | None = None
    beam_share: float | None = None
    greedy_token_ms: float | None = None  # a greedy output token's work alone, ms
    rate_per_level: dict[str, float] = field(default_factory=dict)  # aggregate tokens/s per level
    handoff_ms: float | None = None  # from a request's end to the start of the one waiting for its slot
    mb_per_request: float | None = None
    oom_level: int | None = None
    # the request mix, each as its work alone: [prefill ms, decode ms, output tokens, beams, max_new_tokens]
    mix: list[list[float | None]] = field(default_factory=list)
    think_ms: list[float] = field(default_factory=list)  # think times spread over the observed ones


@dataclass(frozen=True, kw_only=True)
class ProcessCapacity(Row):
    """One process's capacity curve and its verdicts (levels in requests in flight; memory in MiB).

    ``recommendation`` is None when the logs hold too little traffic or show no limit; ``needs``
    then says what traffic would settle it."""

    host: str | None = None
    pid: int | None = None
    requests: int | None = None
    top_level: int | None = None  # the highest level measured
    knee: int | None = None  # where aggregate throughput stops rising
    slo_level: int | None = None  # the first level whose p95 service TTFT or TPOT is over the SLO
    slo_over: list[str] | None = None  # the metrics over the SLO there
    slo_unmet: bool | None = None  # the SLO is missed already at the lowest measured level
    oom_level: int | None = None  # where the fitted peak reserved memory passes the GPU's share
    mb_per_request: float | None = None  # reserved memory per request in flight (the fit's slope)
    base_mb: float | None = None  # the fit's intercept
    fit_r2: float | None = None
    leak_mb: float | None = None  # MiB memory_leak pins in the process: it confounds the fit with time
    gpu_total_mb: float | None = None
    recommendation: Recommendation | None = None
    needs: str | None = None  # what traffic would settle a missing recommendation
    levels: list[Level] = field(default_factory=list)
    service: ServiceModel | None = None
    what_if: list[WhatIf] = field(default_factory=list)
    max_users: list[MaxUsers] = field(default_factory=list)
    what_if_notes: list[str] = field(default_factory=list)  # cells the logs do not cover, and why
    users_at_slo: int | None = None  # users the recommended limit holds within the SLO
    users_text: str | None = None  # users_at_slo in words: the setting, the SLO, the users' habits
    setting_code: str | None = None  # the recommended limit as code for the stack the logs came from

    @property
    def process(self) -> str:
        """"host/pid", as the capacity page names the process."""
        name = self.host or "unnamed host"
        return f"{name}/{self.pid}" if self.pid is not None else name


@dataclass(frozen=True, kw_only=True)
class ServerMetrics(Model):
    """What a server's Prometheus snapshots held over the window (vLLM, TGI, ...)."""

    server: str | None = None
    first: str | None = None
    last: str | None = None
    snapshots: int | None = None
    restarts: int | None = None
    seconds: float | None = None
    counters: list[dict[str, Any]] | None = None  # increase and rate per counter
    gauges: list[dict[str, Any]] | None = None  # last and max per gauge, with its points
    histograms: list[dict[str, Any]] | None = None  # count, mean and percentiles per histogram
    note: str | None = None  # why its numbers are partial (one snapshot: no window)


@dataclass(frozen=True, kw_only=True)
class DeployBaseline(Model):
    """The deploy a deploy was compared with, and the window of it that was analysed."""

    id: str  # d1, d2, ... as ``dslogs deploys`` lists them
    since: str | None = None  # null: from the first event of the logs
    until: str | None = None
    outside_window: bool = False  # it ran before the asked --since: read from the logs outside the window


@dataclass(frozen=True, kw_only=True)
class DeployMark(Model):
    """A deploy drawn on the report's timelines (the deploys model's row, cut to what the marks show)."""

    id: str  # d1, d2, ... as ``dslogs deploys`` lists them
    label: str | None = None
    first_event: str | None = None  # where the timelines draw its rule
    verdict: Literal["first", "regression", "improvement", "steady", "too few"]
    reasons: list[str] = field(default_factory=list)  # what made the verdict
    baseline: DeployBaseline | None = None  # the deploy it was compared with; null: the first deploy


@dataclass(frozen=True, kw_only=True)
class ReportModel(Model):
    """``dslogs.report/1``: what ``build_report`` returns and ``analyze --format json`` writes."""

    schema: Literal["dslogs.report/1"]
    generated_at: str | None = None
    dslogs_version: str | None = None
    window: Window
    ingest: Ingest
    hosts: list[HostRow] = field(default_factory=list)
    cpu_hosts: list[str] = field(default_factory=list)  # hosts whose requests ran on a CPU device, no GPU seen
    no_gpu: bool = False  # every host is one of cpu_hosts: GPU tables, charts and checks do not apply
    checklist: list[ChecklistItem] = field(default_factory=list)
    stages: list[Stage]
    requests: Requests
    sessions: list[SessionRow]  # every flagged session, then the others up to report.max_sessions
    sessions_total: int | None = None  # every session of the window
    sessions_truncated: bool | None = None  # sessions lists fewer than sessions_total
    findings: list[Finding]
    notes: list[Note | str] = field(default_factory=list)
    rules: list[RuleStatus] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    slowest_sessions: list[SlowSession] = field(default_factory=list)
    slow_requests: list[SlowRequest] = field(default_factory=list)  # the slowest requests, explained
    lead: list[LeadLine] = field(default_factory=list)  # the problems, ranked by user impact
    checked: list[Note] = field(default_factory=list)  # what a reader asks about, found absent or secondary
    gpus: list[GpuRow] = field(default_factory=list)
    processes: list[ProcessRow] = field(default_factory=list)
    capacity: list[ProcessCapacity] = field(default_factory=list)
    series_bucket: str | None = None  # the time bucket of the series (minute, hour, day)
    series: dict[str, list[SeriesRow]] = field(default_factory=dict)  # chart name -> its rows
    session_details: dict[str, list[RequestRow]] = field(default_factory=dict)  # session id -> its requests
    session_details_truncated: bool | None = None  # some session's requests are cut (report.detail_requests)
    session_details_total: dict[str, Count] | None = None  # session id -> its requests, for those cut
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)  # every threshold the rules used
    server_metrics: list[ServerMetrics] | None = None
    deploys: list[DeployMark] = field(default_factory=list)  # a deploy but the first starts in the window (two or more without one), else none


# -- dslogs.capacity/1 -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CapacityModel(Model):
    """``dslogs.capacity/1``: what ``build_capacity`` returns and ``capacity --format json`` writes."""

    schema: Literal["dslogs.capacity/1"]
    generated_at: str | None = None
    dslogs_version: str | None = None
    window: Window | None = None
    capacity: list[ProcessCapacity]
    findings: list[Finding]
    # the busiest process's simulated settings (its capacity entry's, not computed again)
    what_if: list[WhatIf] = field(default_factory=list)
    max_users: list[MaxUsers] = field(default_factory=list)
    rules: list[RuleStatus] = field(default_factory=list)
    series: dict[str, list[SeriesRow]] = field(default_factory=dict)
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[Note | str] = field(default_factory=list)


# -- dslogs.diff/1 ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DiffSide(Model):
    """One side of a diff: where it came from, its window and its size."""

    label: str = ""
    source: str = ""  # logs or report
    paths: list[str] = field(default_factory=list)
    since: str | None = None
    until: str | None = None
    first_event: str | None = None
    last_event: str | None = None
    has_data: bool | None = None
    files: int | None = None
    events: int | None = None
    bad_lines: int | None = None
    requests: int | None = None
    errors: int | None = None
    sessions: int | None = None
    hosts: list[str | None] = field(default_factory=list)
    values_sampled: bool | None = None  # the significance tests read a sample of the values


@dataclass(frozen=True, kw_only=True)
class RankTest(Model):
    """A two-sided Mann-Whitney U test of after against before."""

    p_value: float | None = None
    prob_after_greater: float | None = None
    n_before: int | None = None
    n_after: int | None = None


@dataclass(frozen=True, kw_only=True)
class PercentileChange(Model):
    """One percentile of a metric, before → after, with its confidence interval and verdict."""

    before: float | None = None
    after: float | None = None
    change_pct: float | None = None
    ci_pct: list[float] | None = None  # the change's 95 % interval, %
    significant: bool | None = None
    expected_after: float | None = None  # before re-weighted to after's request mix
    mix_pct: float | None = None  # the part of the change the mix explains, %
    service_pct: float | None = None  # the change the mix does not explain, %
    service_significant: bool | None = None
    verdict: str | None = None  # regression, improvement, steady, mix, too few


PERCENTILES = ("p50", "p95", "p99")


@dataclass(frozen=True, kw_only=True)
class MetricChange(Model):
    """A stage's or a request metric's latency before → after (TTFT, TPOT, prefill, ...)."""

    metric: str  # ttft_ms, prefill_ms, ...
    label: str
    kind: str | None = None  # stage or request
    unit: str | None = None
    rise_is_bad: bool | None = None
    count_before: int | None = None
    count_after: int | None = None
    significance: bool | None = None  # both sides had the values to test
    rank_test: RankTest | None = None
    mix_uncovered_share: float | None = None  # after's requests in no stratum of before
    p50: PercentileChange | None = None
    p95: PercentileChange | None = None
    p99: PercentileChange | None = None
    verdict: str | None = None

    @property
    def percentiles(self) -> dict[str, PercentileChange]:
        """p50, p95 and p99, those the diff has."""
        found = {q: getattr(self, q) for q in PERCENTILES}
        return {q: pc for q, pc in found.items() if pc is not None}


@dataclass(frozen=True, kw_only=True)
class RateChange(Model):
    """A rate before → after (error rate, goodput, ...), in points, with its test."""

    metric: str
    label: str
    before: float | None = None
    after: float | None = None
    change_pts: float | None = None
    count_before: int | None = None
    count_after: int | None = None
    p_value: float | None = None
    significant: bool | None = None
    verdict: str | None = None


@dataclass(frozen=True, kw_only=True)
class Distribution(Model):
    """A request parameter's distribution on one side."""

    count: int | None = None
    p50: float | None = None
    p95: float | None = None
    mean: float | None = None


@dataclass(frozen=True, kw_only=True)
class MixRow(Model):
    """How a request parameter's distribution moved (input length, output length, ...)."""

    metric: str
    label: str
    before: Distribution | None = None
    after: Distribution | None = None
    change_pct: float | None = None
    p95_change_pct: float | None = None
    shifted: bool | None = None
    rank_test: RankTest | None = None


@dataclass(frozen=True, kw_only=True)
class Mix(Model):
    """The request mix of both sides."""

    available: bool = False  # both sides had per-request values
    rows: list[MixRow] = field(default_factory=list)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # each generation parameter's top values per side


@dataclass(frozen=True, kw_only=True)
class MemoryChange(Model):
    """A memory figure before → after."""

    metric: str
    label: str
    unit: str | None = None
    before: float | None = None
    after: float | None = None
    change: float | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorChange(Row):
    """An error type's count before → after."""

    error_type: str | None = None
    before: int | None = None
    after: int | None = None
    sample_msg: str | None = None


@dataclass(frozen=True, kw_only=True)
class CapacitySide(Model):
    """One level of a host's capacity curve on one side."""

    requests: int | None = None
    tokens_per_s: float | None = None
    tpot_p95_ms: float | None = None
    reserved_peak_mb: float | None = None
    sparse: bool | None = None


@dataclass(frozen=True, kw_only=True)
class CapacityLevelChange(Model):
    """One in-flight level, before and after."""

    level: int
    before: CapacitySide | None = None
    after: CapacitySide | None = None


@dataclass(frozen=True, kw_only=True)
class CapacityChange(Model):
    """A host's capacity curve before and after, with each side's knee and recommended limit."""

    host: str | None = None
    levels: list[CapacityLevelChange] = field(default_factory=list)
    before_knee: int | None = None
    before_limit: int | None = None
    before_mb_per_request: float | None = None
    after_knee: int | None = None
    after_limit: int | None = None
    after_mb_per_request: float | None = None


@dataclass(frozen=True, kw_only=True)
class FindingSummary(Model):
    """A finding as the diff and the weekly report compare it."""

    rule: str
    severity: Severity
    scope: str | None = None
    hosts: list[str | None] = field(default_factory=list)
    sessions: int | None = None  # the sessions it names
    value: float | None = None
    threshold: float | None = None
    unit: str | None = None
    message: str | None = None
    fix: str | None = None
    value_prev: float | None = None  # persisting: the value before
    sessions_prev: int | None = None  # persisting: the sessions before
    severity_prev: Severity | None = None  # persisting: the severity before


@dataclass(frozen=True, kw_only=True)
class FindingChanges(Model):
    """Findings new after, resolved since before, and there on both sides."""

    new: list[FindingSummary] = field(default_factory=list)
    resolved: list[FindingSummary] = field(default_factory=list)
    persisting: list[FindingSummary] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class DiffModel(Model):
    """``dslogs.diff/1``: what ``build_diff`` returns and ``diff --format json`` writes."""

    schema: Literal["dslogs.diff/1"]
    generated_at: str | None = None
    dslogs_version: str | None = None
    regression_threshold_pct: float | None = None
    significance: bool = False  # both sides had per-request values to test
    method: dict[str, Scalar] = field(default_factory=dict)  # how each figure was computed, in words
    before: DiffSide
    after: DiffSide
    stages: list[MetricChange]
    request_metrics: list[MetricChange]
    rates: list[RateChange] = field(default_factory=list)
    mix: Mix | None = None
    memory: list[MemoryChange] = field(default_factory=list)
    capacity: list[CapacityChange] = field(default_factory=list)
    errors: list[ErrorChange] = field(default_factory=list)
    findings: FindingChanges
    regressions: list[str] = field(default_factory=list)  # the metrics that regressed
    notes: list[str] = field(default_factory=list)
    series: dict[str, dict[str, list[SeriesRow]]] = field(default_factory=dict)  # side -> chart name -> rows
    summary: list[str] = field(default_factory=list)  # the changes in words


# -- dslogs.weekly/1 -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FindingCounts(Model):
    """Findings per severity."""

    critical: int | None = None
    warning: int | None = None
    info: int | None = None


@dataclass(frozen=True, kw_only=True)
class WeekSummary(Model):
    """One week: its window, traffic and findings."""

    week: str | None = None  # ISO week, 2026-W48
    since: str | None = None
    until: str | None = None
    first_day: str | None = None
    last_day: str | None = None
    first_event: str | None = None
    last_event: str | None = None
    hours: float | None = None  # hours of the week the logs cover
    week_hours: float | None = None
    has_data: bool | None = None
    files: int | None = None
    events: int | None = None
    bad_lines: int | None = None
    hosts: list[str | None] = field(default_factory=list)
    requests: int | None = None
    errors: int | None = None
    error_rate: float | None = None
    goodput: float | None = None
    sessions: int | None = None
    sessions_affected: int | None = None
    sessions_affected_at_least: bool | None = None  # the count stops at the listed sessions
    findings: FindingCounts | None = None
    so_far: str | None = None  # the week is not over


@dataclass(frozen=True, kw_only=True)
class TrafficRow(Row):
    """A traffic figure this week against last."""

    key: str | None = None
    label: str | None = None
    this: float | None = None
    previous: float | None = None
    change_pct: float | None = None
    verdict: str | None = None


@dataclass(frozen=True, kw_only=True)
class WeeklyStage(Row):
    """A stage's p50 and p95 this week against last (``_prev``), in ms."""

    stage: str | None = None
    count: int | None = None
    count_prev: int | None = None
    p50_ms: float | None = None
    p50_ms_prev: float | None = None
    p50_change_pct: float | None = None
    p50_verdict: str | None = None
    p95_ms: float | None = None
    p95_ms_prev: float | None = None
    p95_change_pct: float | None = None
    p95_verdict: str | None = None
    regression: bool | None = None


@dataclass(frozen=True, kw_only=True)
class WeeklyMetric(Row):
    """A request metric's p50 and p95 this week against last (``_prev``)."""

    metric: str | None = None
    label: str | None = None
    unit: str | None = None
    p50: float | None = None
    p50_prev: float | None = None
    p50_change_pct: float | None = None
    p50_verdict: str | None = None
    p95: float | None = None
    p95_prev: float | None = None
    p95_change_pct: float | None = None
    p95_verdict: str | None = None
    regression: bool | None = None


@dataclass(frozen=True, kw_only=True)
class WeeklyErrors(Model):
    """The error types of each week."""

    this: list[ErrorRow] = field(default_factory=list)
    previous: list[ErrorRow] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class WeeklyModel(Model):
    """``dslogs.weekly/1``: what ``build_weekly`` returns and ``report weekly --format json`` writes."""

    schema: Literal["dslogs.weekly/1"]
    generated_at: str | None = None
    dslogs_version: str | None = None
    week: str
    previous_week: str
    tz: str = ""
    regression_threshold_pct: float | None = None
    this: WeekSummary
    previous: WeekSummary
    traffic: list[TrafficRow] = field(default_factory=list)
    stages: list[WeeklyStage] = field(default_factory=list)
    request_metrics: list[WeeklyMetric] = field(default_factory=list)
    regressions: int = 0
    findings: FindingChanges = field(default_factory=FindingChanges)
    summary: list[str] = field(default_factory=list)
    memory: list[MemoryChange] = field(default_factory=list)
    notes: list[Note | str] = field(default_factory=list)
    errors: WeeklyErrors = field(default_factory=WeeklyErrors)
    deploys: list[Deploy] = field(default_factory=list)  # deploys started this week (records only)


# -- dslogs.deploys/1 ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DeployProcess(Model):
    """One start that belongs to a deploy: a tracer, an OTLP service version, or a process."""

    host: str | None = None
    pid: int | None = None
    key: str  # deploy_id of a collector record, host@version (OTLP), or host:pid


@dataclass(frozen=True, kw_only=True)
class ConfigChange(Model):
    """One key of the deploy record that differs from the deploy before."""

    key: str  # e.g. generate.use_cache, pkg.torch, model.config_hash, git.commit
    before: Scalar  # null: the key was not recorded then
    after: Scalar


@dataclass(frozen=True, kw_only=True)
class DeployMetricChange(Model):
    """A percentile or rate of the diff against the deploy before that carries a verdict."""

    metric: str
    label: str
    quantile: str | None = None  # p50, p95, p99; null for a rate
    unit: str | None = None
    before: float | None = None
    after: float | None = None
    change_pct: float | None = None  # percent; points for a rate
    expected_after: float | None = None  # before's service with after's mix
    service_pct: float | None = None  # the change for the same requests
    mix_pct: float | None = None  # the change the mix alone explains
    verdict: Literal["regression", "improved", "mix"]


@dataclass(frozen=True, kw_only=True)
class Deploy(Model):
    """One deploy: its window (from its start to the next deploy's), what changed, its verdict."""

    id: str  # d1, d2, ... in time order
    label: str | None = None  # DSLOGS_DEPLOY or service.version
    start: str  # the first start of the deploy
    first_event: str | None = None
    last_event: str | None = None
    requests: Count
    errors: Count = 0
    processes: list[DeployProcess] = field(default_factory=list)
    config: dict[str, Scalar] = field(default_factory=dict)  # the deploy record, merged over its lines
    changes: list[ConfigChange] = field(default_factory=list)  # against the deploy before
    verdict: Literal["first", "regression", "improvement", "steady", "too few"]
    reasons: list[str] = field(default_factory=list)  # what made the verdict
    baseline: DeployBaseline | None = None  # the deploy it was compared with; null: the first deploy
    metric_changes: list[DeployMetricChange] = field(default_factory=list)
    memory: list[MemoryChange] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)  # the diff's changes in words


@dataclass(frozen=True, kw_only=True)
class ChangePoint(Model):
    """Without deploy records: the minute a regression began, diffed before against after."""

    at: str
    metric: str  # the per-minute median that moved most
    verdict: Literal["regression"]
    reasons: list[str] = field(default_factory=list)
    metric_changes: list[DeployMetricChange] = field(default_factory=list)
    deploy: str | None = None  # the process start near it, if any
    summary: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class DeploysModel(Model):
    """``dslogs.deploys/1``: what ``dslogs deploys --format json`` writes and ``Logs.deploys()`` returns."""

    schema: Literal["dslogs.deploys/1"]
    generated_at: str | None = None
    dslogs_version: str | None = None
    source: Literal["records", "otlp", "processes"]  # where the deploys came from
    regression_threshold_pct: float | None = None
    deploys: list[Deploy] = field(default_factory=list)
    change_point: ChangePoint | None = None
    notes: list[str] = field(default_factory=list)


# the top-level model of each kind dslogs writes and reads back
MODELS: dict[str, type[Model]] = {"report": ReportModel, "diff": DiffModel, "weekly": WeeklyModel,
                                  "capacity": CapacityModel, "deploys": DeploysModel}  # fmt: skip


def schema_id(kind: str) -> str:
    """The model's ``schema`` value (``dslogs.report/1``), read from its declaration."""
    (value,) = typing.get_args(_hints(MODELS[kind])["schema"])
    return str(value)
