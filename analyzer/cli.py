"""dslogs command line: thin typer commands, each parses arguments and calls one library function.

Exit codes (DESIGN.md §7): 0 ok, 1 findings at --fail-on, 2 usage or input error.
Library modules are imported inside commands so `dslogs --help` stays fast.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="dslogs",
    help="Offline log analytics and diagnosis for small self-hosted LLM services.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
report_app = typer.Typer(help="Periodic reports.", no_args_is_help=True)
app.add_typer(report_app, name="report")


class ReportFormat(StrEnum):
    html = "html"
    json = "json"
    md = "md"


class QueryFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


class SessionFormat(StrEnum):
    table = "table"
    jsonl = "jsonl"


class SchemaFormat(StrEnum):
    json = "json"
    md = "md"


class FailOn(StrEnum):
    warning = "warning"
    critical = "critical"


class Engine(StrEnum):
    duckdb = "duckdb"
    spark = "spark"


class TraceFormat(StrEnum):
    v1 = "v1"
    legacy = "legacy"


LogsArg = Annotated[list[str], typer.Argument(help="Log directories (recursive), files or globs.")]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Window start: 30m, 12h, 1d, 7d, 2w or an ISO date.")
]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Window end (same forms as --since).")]
TzOpt = Annotated[
    str | None, typer.Option("--tz", help="Time zone for naive (legacy) timestamps, e.g. Asia/Shanghai.")
]
CacheOpt = Annotated[
    Path | None, typer.Option("--cache", help="DuckDB cache file (default: one per log folder under ~/.cache/dslogs).")
]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Read the logs without a cache file.")]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="Query engine.")]
MasterOpt = Annotated[str, typer.Option("--master", help="Spark master URL (with --engine spark).")]
SessionAttrOpt = Annotated[
    str | None,
    typer.Option("--session-attr", help="OTLP traces: the span attribute that names the session (default: gen_ai.conversation.id)."),
]


def _fail(message: str) -> None:
    typer.echo(f"dslogs: error: {message}", err=True)
    raise typer.Exit(2)


def _run(fn, *args, **kwargs):
    """Call a library function; input errors become exit 2 with their one-line reason."""
    from analyzer.core.errors import DslogsError, Interrupted

    try:
        return fn(*args, **kwargs)
    except DslogsError as exc:
        _fail(str(exc))
    except Interrupted as exc:
        typer.echo(f"dslogs: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _open(logs, since, until, tz, cache, no_cache, materialize=True, session_attr=None):
    from analyzer.ingest.logs import open_logs

    return _run(open_logs, logs, since=since, until=until, tz=tz, cache=cache, use_cache=not no_cache,
                materialize=materialize, session_attr=session_attr)


def _write_or_print(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(str(out))


@app.command()
def analyze(
    logs: LogsArg,
    since: SinceOpt = None,
    until: UntilOpt = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Report format.")] = ReportFormat.html,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-report.html).")] = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    fail_on: Annotated[FailOn | None, typer.Option("--fail-on", help="Exit 1 when a finding at this level or above exists.")] = None,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    session_attr: SessionAttrOpt = None,
) -> None:
    """Diagnose the logs and write a report (html, json or md)."""
    from analyzer.model.report import analyze_logs, has_findings_at, report_to_json

    model = _run(
        analyze_logs,
        logs,
        since=since,
        until=until,
        tz=tz,
        thresholds_file=thresholds,
        cache=cache,
        use_cache=not no_cache,
        engine=engine.value,
        master=master,
        session_attr=session_attr,
    )
    for note in model.get("notes") or []:
        typer.echo(f"dslogs: warning: {note['message']}", err=True)
    if format is ReportFormat.json:
        from analyzer.model.result_cache import json_text

        _write_or_print(json_text(model) or report_to_json(model), out)
    elif format is ReportFormat.md:
        from analyzer.render.markdown import render_markdown

        _write_or_print(render_markdown(model), out)
    else:
        # A warm run writes the page kept with the model (no jinja2 or chart code imported);
        # else the page is rendered, and kept with the model when it came from the cache.
        from analyzer.render.page_cache import cached_html

        page = cached_html(model)
        if page is None:
            from analyzer.render.html import render_html

            page = render_html(model, keep=True)
        target = out or Path("dslogs-report.html")
        target.write_text(page, encoding="utf-8")
        typer.echo(str(target))
    if fail_on is not None and has_findings_at(model, fail_on.value):
        raise typer.Exit(1)


@report_app.command("weekly")
def report_weekly(
    logs: LogsArg,
    week: Annotated[str | None, typer.Option("--week", help="ISO week, e.g. 2026-W48 (default: the last full week in the logs).")] = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Report format.")] = ReportFormat.html,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-weekly-YYYY-Www.html).")] = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    previous: Annotated[Path | None, typer.Option("--previous", help="Last week's report model (analyze --format json) instead of analysing that week again.")] = None,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    session_attr: SessionAttrOpt = None,
) -> None:
    """This week against the previous one: regressions, new and resolved findings. `--week ""`
    lists the weeks that hold events."""
    from analyzer.render.weekly import build_weekly, render_weekly, weeks_with_data

    if week is not None and not week.strip():
        weeks = _run(weeks_with_data, logs, tz, engine.value, master, cache, not no_cache)
        typer.echo("\n".join(weeks) if weeks else "no week holds events")
        return
    model = _run(build_weekly, logs, week=week, tz=tz, thresholds_file=thresholds, cache=cache, use_cache=not no_cache,
                 engine=engine.value, master=master, previous=previous, session_attr=session_attr)  # fmt: skip
    for note in model.get("notes") or []:
        typer.echo(f"dslogs: note: {note}", err=True)
    text = render_weekly(model, format.value)
    if format is ReportFormat.html:
        target = out or Path(f"dslogs-weekly-{model['week']}.html")
        target.write_text(text, encoding="utf-8")
        typer.echo(str(target))
    else:
        _write_or_print(text, out)


@app.command()
def diff(
    logs: Annotated[list[str], typer.Argument(help="BEFORE AFTER (log sets or saved report JSON), or LOGS with --before/--after.")],
    before: Annotated[str | None, typer.Option("--before", help="Split LOGS by time: the before window START..END.")] = None,
    after: Annotated[str | None, typer.Option("--after", help="The after window START..END (END may be empty).")] = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")] = ReportFormat.md,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-diff.html).")] = None,
    fail_on_regression: Annotated[float | None, typer.Option("--fail-on-regression", help="Exit 1 on a significant regression above PCT %.")] = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    session_attr: SessionAttrOpt = None,
) -> None:
    """Before against after: latency changes with significance, the mix, findings, memory, errors."""
    from analyzer.model.diff import REGRESSION_PCT, build_diff, has_regression
    from analyzer.render.diff_md import render_diff

    if before is not None or after is not None:
        kwargs = {"logs": logs, "before_range": before, "after_range": after}
    elif len(logs) == 2:
        kwargs = {"before": [logs[0]], "after": [logs[1]]}
    else:
        _fail("usage: dslogs diff BEFORE AFTER, or dslogs diff LOGS... --before START..END --after START..END")
    limit = REGRESSION_PCT if fail_on_regression is None else fail_on_regression
    model = _run(build_diff, **kwargs, tz=tz, thresholds_file=thresholds, cache=cache, use_cache=not no_cache, limit=limit,
                 session_attr=session_attr)  # fmt: skip
    text = _run(render_diff, model, format.value)
    if format is ReportFormat.html:
        target = out or Path("dslogs-diff.html")
        target.write_text(text, encoding="utf-8")
        typer.echo(str(target))
    else:
        _write_or_print(text, out)
    if fail_on_regression is not None and has_regression(model):
        raise typer.Exit(1)


@app.command()
def watch(
    logs: LogsArg,
    interval: Annotated[str, typer.Option("--interval", help="Refresh every (2s, 500ms, 1m).")] = "2s",
    window: Annotated[str, typer.Option("--window", help="Statistics over the last (15m, 1h).")] = "15m",
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    tz: TzOpt = None,
) -> None:
    """A live terminal view of the logs being written (reads only appended bytes)."""
    from analyzer.live.watch import watch as run_watch

    raise typer.Exit(_run(run_watch, logs, interval=interval, window=window, once=once, tz=tz))


@app.command()
def query(
    logs: LogsArg,
    sql: Annotated[str, typer.Argument(help="SQL over the views events, requests, sessions.")],
    format: Annotated[QueryFormat, typer.Option("--format", help="Output format.")] = QueryFormat.table,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tz: TzOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    allow_files: Annotated[bool, typer.Option("--allow-files", help="Let the SQL read and write files (read_json, COPY ... TO); off: read-only over the views.")] = False,
    raw_csv: Annotated[bool, typer.Option("--raw-csv", help="CSV cells verbatim: no ' before cells starting with = + - @ tab CR (spreadsheet formulas).")] = False,
    session_attr: SessionAttrOpt = None,
) -> None:
    """Run SQL over the logs (views: events, requests, sessions); read-only unless --allow-files."""
    if engine is Engine.spark:
        from analyzer.engines.spark.driver import spark_query

        result = _run(spark_query, logs, sql, since=since, until=until, tz=tz, master=master,
                      session_attr=session_attr)  # fmt: skip
    else:
        # Refused before the logs are read; then one query in the sandbox (analyzer.ingest.sandbox):
        # views, computed only as far as the query needs them.
        # Ctrl-C or SIGTERM: one line, exit 130 / 143 (the cache is only read)
        import duckdb

        from analyzer.ingest.sandbox import check_statement, run_user_query, stop_on_signals

        _run(check_statement, duckdb.connect(), sql, allow_files)
        with stop_on_signals() as stop:
            db = _run(_open, logs, since, until, tz, cache, no_cache, materialize=False, session_attr=session_attr)
            result = _run(run_user_query, db, sql, allow_files, stop)
    _print_result(result, format.value, csv_guard=not raw_csv)


@app.command()
def session(
    logs: Annotated[list[str], typer.Argument(help="Log directories, files or globs, then the SESSION_ID (put -- before an id that starts with -).")],
    format: Annotated[SessionFormat, typer.Option("--format", help="table: timeline; jsonl: events for jq.")] = SessionFormat.table,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tz: TzOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    session_attr: SessionAttrOpt = None,
) -> None:
    """Show one session: its timeline, or its events as JSONL."""
    from analyzer.ingest.logs import session_events

    if len(logs) < 2:
        _fail("usage: dslogs session LOGS... SESSION_ID")
    *paths, session_id = logs
    db = _open(paths, since, until, tz, cache, no_cache, materialize=False, session_attr=session_attr)
    result = _run(session_events, db, session_id, timeline=format is SessionFormat.table)
    if not result.rows:
        from analyzer.core.textsafe import visible

        _fail(f"no events for session {visible(repr(session_id))} in {visible(', '.join(paths))}")
    _print_result(result, format.value)


def _print_result(result, fmt: str, csv_guard: bool = True) -> None:
    """Print a query result; a closed pipe (`| head`) ends the command quietly."""
    import os

    from analyzer.core.results import write_result

    try:
        write_result(result, fmt, sys.stdout, csv_guard=csv_guard)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would complain again at exit when flushing stdout: point it at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@app.command()
def render(
    report_json: Annotated[Path, typer.Argument(help="A report saved with `analyze --format json`.")],
    out: Annotated[Path | None, typer.Option("--out", help="Output HTML file (default: REPORT.html).")] = None,
) -> None:
    """Rebuild the HTML report from a saved JSON report model."""
    from analyzer.model.report import load_report_json
    from analyzer.render.html import render_html

    model = _run(load_report_json, report_json)
    target = out or report_json.with_suffix(".html")
    target.write_text(render_html(model), encoding="utf-8")
    typer.echo(str(target))


@app.command()
def simulate(
    outdir: Annotated[Path | None, typer.Argument(help="Folder to write simulated logs and truth.json into.")] = None,
    scenario: Annotated[list[str] | None, typer.Option("--scenario", help="Fault scenario (repeatable); default: healthy.")] = None,
    days: Annotated[int, typer.Option("--days", min=1, help="Days of traffic.")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same arguments give the same bytes).")] = 0,
    format: Annotated[TraceFormat, typer.Option("--format", help="v1 (dslogs collector) or legacy (article 003 logger).")] = TraceFormat.v1,
    events: Annotated[int | None, typer.Option("--events", min=1, help="Target number of events (scales traffic).")] = None,
    hosts: Annotated[int, typer.Option("--hosts", min=1, help="Number of GPU hosts.")] = 1,
    start: Annotated[str | None, typer.Option("--start", help="First simulated day (ISO date); default 2026-11-23.")] = None,
    list_scenarios: Annotated[bool, typer.Option("--list", help="List scenarios and exit.")] = False,
    change: Annotated[str | None, typer.Option("--change", help="A change at one moment: prefill_slower, max_new_tokens, leak, prompt_shift.")] = None,
    change_at: Annotated[str | None, typer.Option("--change-at", help="When the change happens (local ISO time; default mid-run).")] = None,
) -> None:
    """Write realistic simulated logs with injected faults, and truth.json."""
    from analyzer.simulate import SCENARIOS
    from analyzer.simulate import simulate as run_simulation

    if list_scenarios:
        for name, spec in SCENARIOS.items():
            typer.echo(f"{name:18} {spec.description}")
        from analyzer.simulate.concurrent import CONCURRENT_SCENARIOS

        for name, cspec in CONCURRENT_SCENARIOS.items():
            typer.echo(f"{name:18} {cspec.description} ({cspec.fmt}; runs alone)")
        return
    if outdir is None:
        _fail("usage: dslogs simulate OUTDIR [--scenario NAME]... (or --list)")
    from analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent

    if any(name in CONCURRENT_SCENARIOS for name in scenario or []):
        # issue 12: one process serving overlapping sessions; a run of its own (40 min, one host)
        if len(scenario) != 1:
            _fail(f"--scenario {', '.join(scenario)}: a concurrent scenario ({', '.join(CONCURRENT_SCENARIOS)}) runs alone")
        summary = _run(simulate_concurrent, outdir, scenario[0], seed=seed)
        typer.echo(f"wrote {summary['events']} events in {summary['files']} files to {outdir} "
                   f"(truth: {outdir / 'truth.json'})")
        return
    summary = _run(
        run_simulation,
        outdir,
        scenarios=scenario or ["healthy"],
        days=days,
        seed=seed,
        fmt=format.value,
        events=events,
        hosts=hosts,
        start=start,
        change=change,
        change_at=change_at,
    )
    typer.echo(
        f"wrote {summary['events']} events in {summary['files']} files to {outdir} "
        f"(truth: {outdir / 'truth.json'})"
    )


@app.command()
def compact(
    logs: LogsArg,
    out: Annotated[Path, typer.Option("--out", help="Parquet dataset folder (date=YYYY-MM-DD/host=H/).")],
    tz: TzOpt = None,
) -> None:
    """Write normalised events as hive-partitioned Parquet (idempotent)."""
    from analyzer.ingest.compact import compact_logs

    summary = _run(compact_logs, logs, out, tz=tz)
    typer.echo(f"{summary['new_files']} new files, {summary['events']} events -> {out}")


@app.command()
def schema(
    format: Annotated[SchemaFormat, typer.Option("--format", help="json: the trace schema; md: the events view's columns (docs/sql.md).")] = SchemaFormat.json,
) -> None:
    """Print the trace schema v1 (JSON Schema, draft 2020-12), or the events table (--format md)."""
    if format == SchemaFormat.md:
        from analyzer.ingest.columns import events_table_md

        sys.stdout.write(events_table_md())
        return
    from collector.schema import schema_text

    sys.stdout.write(schema_text())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
