"""`dslogs watch`: a live terminal view over log files being written (docs/watch.md).

The logs are followed by ingest (``dslogs.analyzer.ingest``'s ``LogTail`` reads appended bytes, its
``LogStream`` holds the window's events as a log set); ``Window`` computes each frame with
analyze's own definitions: the events/requests/sessions views, the metric queries and the rules
(``build_report_from_metrics`` over the window). What only a live view shows (in flight, the
latest GPU sample and memory per process) is SQL over the same events view.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from datetime import datetime

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import parse_duration
from dslogs.analyzer.ingest import LogStream, LogTail, printable

RULES_EVERY_S = 10.0  # the rules need every metric table: a frame of them costs several latency frames
INFLIGHT_STALE_S = 600.0  # a request started this long ago without an end is abandoned
START_STAGES = ("input", "tokenize", "queue", "prefill", "decode", "inference")


# -- the window ---------------------------------------------------------------------------------


class Window(LogStream):
    """The window's events (``ingest``'s ``LogStream``); ``frame(now)`` summarises them with
    analyze's own views, metric queries and rules."""

    def __init__(self, seconds: float, tz: str | None = None, thresholds: dict | None = None):
        from dslogs.analyzer.core.thresholds import defaults

        super().__init__(seconds, tz)
        self.thresholds = thresholds or defaults()
        self.last_cost_s = 0.0
        self.findings: list[dict] | None = None  # the rules firing at the last evaluation
        self.rules_cost_s = 0.0

    # The metric tables of the report's requests block (model.report._requests_block): cheap
    # enough for every frame; the rules need every table and run every RULES_EVERY_S.
    LATENCY_TABLES = ("goodput", "request_latency_percentiles", "prefill_decode_ratio", "reasoning_share")

    def frame(self, now: float, rules: bool = True) -> dict:
        """The window at ``now``; with ``rules`` the findings are evaluated again (else the last
        ones are shown: None until the first evaluation)."""
        from dslogs.analyzer.engines.compute import compute_metrics
        from dslogs.analyzer.engines.duckdb import DuckDBSource
        from dslogs.analyzer.metrics.registry import bucket_for_span, parameters
        from dslogs.analyzer.metrics.results import release_tables
        from dslogs.analyzer.model.report import _requests_block, build_report_from_metrics

        started = time.perf_counter()
        # materialised when every metric reads them (the rules); else only requests
        ingest, window = self.open_views(now, materialize=rules)
        source = DuckDBSource(self.con, ingest, window)
        if rules:
            metrics = compute_metrics(source, self.thresholds)
            model = build_report_from_metrics(metrics, ingest, window, self.thresholds)
            release_tables(metrics)
            self.rules_cost_s = time.perf_counter() - started
            req = model["requests"]
            self.findings = [{"rule": f.get("rule"), "severity": f.get("severity"), "message": f.get("message"),
                              "sessions": f.get("session_count") or len(f.get("session_ids") or [])}
                             for f in model.get("findings") or [] if f.get("rule") != "bad_lines"]  # fmt: skip
        else:
            params = parameters(self.thresholds, bucket_for_span(*source.time_bounds()))
            req = _requests_block(source.run(self.LATENCY_TABLES, params), self.thresholds)
        live = self._live(now)
        count, errors = int(req.get("count") or 0), int(req.get("errors") or 0)
        # The rate over the time the window covers: all of it once the window is full of what
        # the files hold, else from the first moment it holds every event of.
        covered_from = max(now - self.seconds, self.complete_from or 0.0)
        covered = max(1.0, now - covered_from)
        self.last_cost_s = time.perf_counter() - started
        return {
            "now": now,
            "window_s": self.seconds,
            "covered_s": round(covered, 1),
            "events": int(ingest["events"]),
            "hosts": live["hosts"],
            "requests": count,
            "requests_per_s": round(count / covered, 3),
            "requests_per_s_1m": round(live["last_minute"] / min(60.0, covered), 3),
            "inflight": live["inflight"],
            "errors": errors,
            "error_rate": round(errors / count, 4) if count else None,
            "ttft_ms": _lat(req.get("ttft_ms")),
            "tpot_ms": _lat(req.get("tpot_ms")),
            "e2e_ms": _lat(req.get("e2e_ms")),
            "gpus": live["gpus"],
            "processes": live["processes"],
            "findings": self.findings,
            "newest_event_age_s": round(now - self.newest, 1) if self.newest is not None else None,
            "total_requests": self.total_requests,
            "total_errors": self.total_errors,
            "total_error_events": self.total_error_events,
            "bad_lines": self.bad_lines,
            "cost_s": round(self.last_cost_s, 3),
        }

    def _live(self, now: float) -> dict:
        """What only a live view shows, over the same events view: requests ended in the last
        minute, requests in flight, the latest GPU sample per GPU and memory per process."""
        con = self.con
        hosts = [r[0] for r in con.execute("SELECT DISTINCT host FROM events WHERE host IS NOT NULL ORDER BY 1").fetchall()]
        last_minute = con.execute("SELECT count(*) FROM requests WHERE end_ts >= to_timestamp(?)",
                                  [now - 60]).fetchone()[0]  # fmt: skip
        starts = ", ".join(f"'{s}'" for s in START_STAGES)
        inflight = con.execute(
            f"""SELECT count(*) FROM (
                    SELECT 1 FROM events WHERE request_id IS NOT NULL GROUP BY host, pid, session_id, request_id
                    HAVING bool_or(stage IN ({starts})) AND NOT bool_or(stage = 'request')
                       AND max(ts) >= to_timestamp(?))""", [now - INFLIGHT_STALE_S]).fetchone()[0]  # fmt: skip
        gpus = [{"host": h, "gpu_index": i, "age_s": round(now - t, 1), "util_pct": u, "mem_used_mb": used,
                 "mem_total_mb": total}
                for h, i, t, u, used, total in con.execute(
                    """SELECT host, gpu_index, epoch(max(ts)), arg_max(gpu_util_pct, ts), arg_max(gpu_mem_used_mb, ts),
                              arg_max(gpu_mem_total_mb, ts)
                       FROM events WHERE stage = 'gpu_sample' GROUP BY ALL ORDER BY host, gpu_index""").fetchall()]  # fmt: skip
        processes = [{"host": h, "pid": p, "age_s": round(now - t, 1), "reserved_mb": r, "allocated_mb": a}
                     for h, p, t, r, a in con.execute(
                         """SELECT host, pid, epoch(max(ts)),
                                   arg_max(CASE WHEN stage = 'request' THEN reserved_mb_after ELSE reserved_mb END, ts),
                                   arg_max(CASE WHEN stage = 'request' THEN allocated_mb_after ELSE allocated_mb END, ts)
                            FROM events
                            WHERE (stage = 'request' AND reserved_mb_after IS NOT NULL)
                               OR (stage = 'gpu_memory' AND reserved_mb IS NOT NULL)
                            GROUP BY ALL ORDER BY host, pid""").fetchall()]  # fmt: skip
        return {"hosts": hosts, "last_minute": last_minute, "inflight": inflight, "gpus": gpus,
                "processes": processes}  # fmt: skip


def _lat(row: dict | None) -> dict:
    row = row or {}
    return {"p50": row.get("p50"), "p95": row.get("p95"), "count": row.get("count") or 0}


# -- rendering ----------------------------------------------------------------------------------


def render_frame(frame: dict, paths: list[str]):
    """A rich renderable of one frame (log strings shown as plain text, never markup)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from dslogs.analyzer.core.textsafe import visible

    stamp = datetime.fromtimestamp(frame["now"]).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    from dslogs.analyzer.core.time import human_duration

    head = Text.assemble(("dslogs watch ", "bold"), (visible(", ".join(paths)), ""),
                         f"  ·  {stamp}  ·  window {human_duration(frame['window_s'])}")
    age = frame["newest_event_age_s"]
    head.append(f"  ·  newest event {fmt.duration(age)} ago" if age is not None else "  ·  no events yet")
    if frame["covered_s"] < frame["window_s"]:
        head.append(f"  ·  the window holds the last {fmt.duration(frame['covered_s'])} (a partial start)")

    top = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("req/s (1 min)", "req/s (window)", "requests", "in flight", "errors", "error rate", "hosts"):
        top.add_column(col, justify="right")
    rate = fmt.share(frame["error_rate"])
    top.add_row(f"{frame['requests_per_s_1m']:.2f}", f"{frame['requests_per_s']:.2f}", str(frame["requests"]),
                str(frame["inflight"]), str(frame["errors"]), rate, Text(visible(", ".join(map(str, frame["hosts"]))) or "—"))  # fmt: skip

    lat = Table(title="latency over the window (ms)", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("", "p50", "p95", "n"):
        lat.add_column(col, justify="right" if col else "left")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end")):
        p = frame[key]
        lat.add_row(label, fmt.terminal(p["p50"]), fmt.terminal(p["p95"]), str(p["count"]))

    gpu = Table(title="GPU (latest sample)", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("host", "gpu", "util %", "memory used", "age"):
        gpu.add_column(col, justify="left" if col == "host" else "right")
    for g in frame["gpus"]:
        mem = "—" if g["mem_used_mb"] is None else f"{g['mem_used_mb']:,.0f} / {g['mem_total_mb'] or 0:,.0f} MiB"
        gpu.add_row(Text(visible(str(g["host"]))), str(g["gpu_index"]), fmt.terminal(g["util_pct"]), mem, fmt.duration(g["age_s"]))
    if not frame["gpus"]:
        gpu.add_row("no gpu_sample events in the window", "", "", "", "")

    proc = Table(title="reserved GPU memory per process", title_justify="left", box=None,
                 header_style="bold", pad_edge=False)  # fmt: skip
    for col in ("host", "pid", "reserved MiB", "allocated MiB", "age"):
        proc.add_column(col, justify="left" if col == "host" else "right")
    for p in frame["processes"]:
        proc.add_row(Text(visible(str(p["host"]))), str(p["pid"]), fmt.terminal(p["reserved_mb"]), fmt.terminal(p["allocated_mb"]),
                     fmt.duration(p["age_s"]))  # fmt: skip
    if not frame["processes"]:
        proc.add_row("no memory readings in the window", "", "", "", "")

    rule_table = Table(title="rules firing now", title_justify="left", box=None,
                       header_style="bold", pad_edge=False)  # fmt: skip
    for col in ("severity", "rule", "sessions", "message"):
        rule_table.add_column(col, justify="right" if col == "sessions" else "left", overflow="fold")
    rules = frame["findings"]
    if rules is None:
        rule_table.add_row("", "(evaluating…)", "", "")
    elif not rules:
        rule_table.add_row("", "none", "", "")
    for r in rules or []:
        style = {"critical": "bold red", "warning": "yellow"}.get(r["severity"], "")
        rule_table.add_row(Text(visible(str(r["severity"])), style=style), Text(visible(str(r["rule"]))),
                           str(r["sessions"] or ""), Text(visible(" ".join(str(r["message"] or "").split())[:160])))  # fmt: skip
    foot = Text(f"since start: {frame['total_requests']} requests, {frame['total_errors']} errors, "
                f"{frame.get('total_error_events', 0)} error events (OOMs and other exceptions, retried ones too), "
                f"{frame['bad_lines']} unreadable lines · Ctrl-C quits", style="dim")  # fmt: skip
    return Group(head, Text(""), top, Text(""), lat, Text(""), gpu, Text(""), proc, Text(""), rule_table, Text(""), foot)


# -- the command --------------------------------------------------------------------------------


def watch(selection, interval: str = "2s", window: str = "15m", once: bool = False, console=None,
          max_frames: int | None = None) -> int:
    """Run the live view of the logs ``selection`` (a ``core.selection.Selection``) names, over
    the last ``window`` (or print one frame with ``once``). Returns the exit code."""
    from rich.console import Console
    from rich.live import Live

    from dslogs.analyzer.core.time import zone_name

    interval_s = parse_duration(interval, "--interval")
    window_s = parse_duration(window, "--window")
    paths, tz = list(selection.paths), selection.tz
    zone_name(tz)  # an unknown --tz is a usage error before anything is read
    for raw in paths:
        if not os.path.lexists(os.path.expanduser(raw)) and not glob_matches(raw):
            raise UsageError(f"{printable(raw)}: no such file or directory")
    console = console or Console()
    tail = LogTail(list(paths))
    win = Window(window_s, tz=tz)
    # Ctrl-C may land inside a DuckDB statement, which then fails as a RuntimeError rather than
    # a KeyboardInterrupt: the handler marks the stop and interrupts the statement, and the loop
    # ends cleanly (exit 0) whatever it was doing.
    stopping = threading.Event()

    def stop(signum, frame) -> None:
        stopping.set()
        with contextlib.suppress(Exception):
            win.con.interrupt()

    previous = signal.signal(signal.SIGINT, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        try:
            now = time.time()
            win.add(tail.start(now - window_s))
            if tail.partial_backfill:
                win.complete_from = now
            win.bad_lines += tail.bad_lines
            if once:
                console.print(render_frame(win.frame(time.time()), paths))
                return 0
            frames = 0
            last_rules = time.time()
            with Live(render_frame(win.frame(last_rules), paths), console=console,
                      refresh_per_second=4, screen=False, transient=False) as live:  # fmt: skip
                while not stopping.is_set() and (max_frames is None or frames < max_frames):
                    before = tail.bad_lines
                    win.add(tail.poll())
                    win.bad_lines += tail.bad_lines - before
                    now = time.time()
                    # rules at most a quarter of the time: a large window's rules frame takes seconds
                    rules = now - last_rules >= max(RULES_EVERY_S, interval_s, 4 * win.rules_cost_s)
                    live.update(render_frame(win.frame(now, rules=rules), paths))
                    last_rules = now if rules else last_rules
                    frames += 1
                    # a frame that costs more than the interval paces the loop (stays responsive)
                    stopping.wait(max(interval_s - win.last_cost_s, 0.05))
        except Exception:
            if not stopping.is_set():
                raise  # a real error, not the statement a Ctrl-C interrupted
        except KeyboardInterrupt:
            stopping.set()
        if stopping.is_set():
            console.print("dslogs watch: stopped")
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        win.close()


def glob_matches(raw: str) -> bool:
    import glob

    return bool(glob.glob(os.path.expanduser(raw), recursive=True))
