"""dslogs command line: thin typer commands, each parses arguments and calls one library function.

Exit codes: 0 ok, 1 findings at --fail-on, 2 usage or input error.
Library modules are imported inside commands so `dslogs --help` stays fast.
"""

# No `from __future__ import annotations` here: typer reads every command's parameters on every
# run, and annotations kept as strings cost it an eval each (~7 ms CPU a run for all commands).
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from dslogs.analyzer.engines.registry import ENGINE_MODULES


def _plain_types() -> None:
    """Help without typer's type tags (``<bool>``, ``<str>``, ``<list[str]>``): a flag shows none,
    a value its kind as click writes it (TEXT, PATH, INTEGER), a choice its choices."""
    import typer.core

    for cls in (typer.core.TyperOption, typer.core.TyperArgument):
        # Typer releases before the type tags have no display_type: their help is plain already.
        tagged = getattr(cls, "display_type", None)
        if tagged is None or getattr(tagged, "_dslogs_plain", False):
            continue

        def display_type(self, ctx, _tagged=tagged):
            label = _tagged(self, ctx)
            label = label[1:-1] if label.startswith("<") and label.endswith(">") else label
            if label.startswith("list[") and label.endswith("]"):
                label = label[5:-1]
            if label == "bool":
                return ""
            return {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "file": "PATH",
                    "directory": "DIR"}.get(label, label)  # fmt: skip

        display_type._dslogs_plain = True
        cls.display_type = display_type


_plain_types()


def _usage_as_written() -> None:
    """Arguments in the usage line as click writes them (``LOGS...``, ``[SQL]``), an argument's own
    metavar as written: typer 0.29 wraps a required one in braces and adds "..." for nargs=-1
    (``{logs}...``, ``{LOGS... SESSION_ID}...``), which reads as a set."""
    import typer.core

    cls = typer.core.TyperArgument
    framed = getattr(cls, "get_usage_pieces", None)
    if framed is None or getattr(framed, "_dslogs_plain", False):
        return

    def get_usage_pieces(self, ctx, _framed=framed):
        if self.metavar:
            return [self.metavar]
        if not self.name:
            return _framed(self, ctx)
        name = self.name.upper() + ("..." if self.nargs != 1 else "")
        return [name if self.required else f"[{name}]"]

    get_usage_pieces._dslogs_plain = True
    cls.get_usage_pieces = get_usage_pieces


_usage_as_written()


def _plain_coercion() -> None:
    """Values typer 0.29+ would pass through a pydantic TypeAdapter, coerced the way its adapters
    do it without pydantic (importing it and building the adapters costs ~0.05-0.07 s a run,
    more than an hourly `analyze --since 1d` can spare): a str or a list of str as given, an
    enum or literal through typer's own choice matching, a path through typer's own path checks,
    a number or bool already of its type as it is. Anything else, and every value these refuse,
    goes to typer's adapter, so its conversions and its error messages stay its own."""
    import typer.core

    cls = getattr(typer.core, "_TyperParameter", None)
    built = getattr(cls, "get_runtime_param", None)
    if built is None or getattr(built, "_dslogs_plain", False):
        return
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import choice_coercion_annotation, coerce_cli_path, routes_to_path
    except ImportError:  # a typer whose coercion is laid out otherwise keeps its own
        return
    from dataclasses import dataclass
    from typing import get_args, get_origin

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        def _coerce_value(self, value, param, ctx):
            annotation, info = self.annotation, self.parameter_info
            kind = type(value)
            if annotation is str and kind is str:
                return value
            if get_origin(annotation) is list and get_args(annotation) == (str,) and kind in (list, tuple) \
                    and all(type(v) is str for v in value):  # fmt: skip
                return list(value)
            if annotation in (int, float, bool) and kind is annotation:
                return value
            choices = choice_coercion_annotation(annotation, info)
            if choices is not None:
                from typer._param_types import coerce_cli_choice

                try:
                    return coerce_cli_choice(value, choices=choices[0], case_sensitive=choices[1], ctx=ctx)
                except ValueError:
                    pass
            elif isinstance(annotation, type) and issubclass(annotation, Path) and info.path_type is None \
                    and kind is str and value:  # fmt: skip
                return coerce_cli_path(annotation(value), info, path_type=annotation, param=param, ctx=ctx)
            full = param.__dict__.get("_dslogs_full")
            if full is None:
                full = param.__dict__["_dslogs_full"] = build_runtime_param(param.type_descriptor)
            return full._coerce_value(value, param=param, ctx=ctx)

    def plain_for(descriptor):
        annotation, info = descriptor.annotation, descriptor.parameter_info
        if descriptor.file_annotation is not None or info.parser is not None:
            return None
        if annotation in (str, int, float, bool) or annotation == list[str]:
            if annotation in (int, float) and (info.min is not None or info.max is not None or info.clamp):
                return None
            return _Plain(parameter_info=info, annotation=annotation)
        if choice_coercion_annotation(annotation, info) is not None or routes_to_path(annotation, info):
            return _Plain(parameter_info=info, annotation=annotation)
        return None

    def get_runtime_param(self, _built=built):
        if self._runtime_param is None:
            self._runtime_param = plain_for(self.type_descriptor)
        return self._runtime_param if self._runtime_param is not None else _built(self)

    get_runtime_param._dslogs_plain = True
    cls.get_runtime_param = get_runtime_param


_plain_coercion()

app = typer.Typer(
    name="dslogs",
    help="Offline log analytics and diagnosis for small self-hosted LLM services.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
report_app = typer.Typer(help="Periodic reports.", no_args_is_help=True)
app.add_typer(report_app, name="report")


def _print_version(value: bool) -> None:
    if value:
        from dslogs.analyzer import __version__

        typer.echo(f"dslogs {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    # no docstring: the app's help stays the one Typer(help=...) gives
    pass


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


# --engine's choices: the engines the registry names (their modules load only when picked)
Engine = StrEnum("Engine", {name: name for name in ENGINE_MODULES})


class TraceFormat(StrEnum):
    v1 = "v1"
    legacy = "legacy"


def number(help: str, option: str, integer: bool = False, minimum: float | None = None,
           maximum: float | None = None):
    """A typer option whose value goes through the one numeric parser
    (``dslogs.analyzer.core.numbers.parse_number``): a bad value is one line naming the option and
    exit 2, like every other input error, not click's boxed usage text."""

    def parse(value):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value  # a default
        from dslogs.analyzer.core.errors import UsageError
        from dslogs.analyzer.core.numbers import parse_number

        try:
            return parse_number(value, option, integer, minimum, maximum)
        except UsageError as exc:
            _fail(str(exc))

    return typer.Option(option, help=help, parser=parse, metavar="INTEGER" if integer else "NUMBER")


def _print_notes(model: dict) -> None:
    """A model's notes (an empty window, ids missing, estimates) on stderr, one line each."""
    from dslogs.analyzer.core.format import note_message
    from dslogs.analyzer.core.textsafe import visible

    for note in model.get("notes") or []:
        level = (note.get("level") if isinstance(note, dict) else None) or "warning"
        typer.echo(f"dslogs: {visible(str(level))}: {visible(note_message(note))}", err=True)


def _warn_if_window_empty(selection, ingest_block: dict) -> None:
    """A window that holds no events while the files hold some says so, as analyze's note does,
    so that `--since 1d` over older logs is not a silent empty answer. Call it once the run's
    logs are closed: the note opens them again, and one connection of a process attaches the
    cache at a time."""
    from dslogs.analyzer.usecases.window import note_if_empty

    if note := note_if_empty(selection, ingest_block):
        _print_notes({"notes": [note]})


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
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on the terminal (it is drawn on stderr, only when stderr is a terminal).")]
SessionAttrOpt = Annotated[
    str | None,
    typer.Option("--session-attr", help="OTLP traces: the span attribute that names the session (default: gen_ai.conversation.id)."),
]

PromServersOpt = Annotated[
    str,
    typer.Option("--prom-servers", help="Prometheus snapshots: how they are told apart into servers: auto (host in the "
                 "file name and the instance, job, model_name, engine labels), file (the file name alone, labels "
                 "summed), labels (the labels alone), one (every snapshot one server)."),
]  # fmt: skip


def _fail(message: str) -> None:
    # every error line may quote a path, a value or a log's text: shown, never obeyed
    from dslogs.analyzer.core.textsafe import visible

    typer.echo(f"dslogs: error: {visible(str(message))}", err=True)
    raise typer.Exit(2)


def _run(fn, *args, **kwargs):
    """Call a library function; input errors become exit 2 with their one-line reason."""
    from dslogs.analyzer.core.errors import DslogsError, Interrupted

    try:
        return fn(*args, **kwargs)
    except DslogsError as exc:
        _fail(str(exc))
    except Interrupted as exc:
        from dslogs.analyzer.core.textsafe import visible

        typer.echo(f"dslogs: {visible(str(exc))}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _counts(option: str, text: str | None) -> list[int] | None:
    """A comma-separated list of positive integers (--limits 1,2,4), or exit 2 naming the option."""
    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"{option} {text!r}: expected positive integers separated by commas, e.g. 1,2,4")
    if not values or any(v < 1 or v > 4096 for v in values):
        _fail(f"{option} {text!r}: each value must be between 1 and 4096")
    return sorted(set(values))


def _positive(option: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        _fail(f"{option} {value}: must be 1 or more")
    return value


def _select(logs, since=None, until=None, tz=None, thresholds=None, cache=None, no_cache=False, engine=None,
            master="local[*]", session_attr=None, prom_servers="auto"):
    """The run's ``Selection``, built once from the options (a bad --since, --tz or thresholds
    file is exit 2 here, before any log is read)."""
    from dslogs.analyzer.core.selection import Selection

    return _run(Selection.build, logs, since=since, until=until, tz=tz, session_attr=session_attr,
                thresholds_file=thresholds, cache=cache, use_cache=not no_cache,
                engine=engine.value if engine is not None else "duckdb", master=master,
                prom_servers=prom_servers)  # fmt: skip


def _open(selection, materialize=True):
    from dslogs.analyzer import ingest

    return _run(ingest.open, selection, materialize)


def _check_out(out: Path | None, logs=(), *files) -> None:
    """An --out that cannot be written fails before the logs are read, not after; so does one
    that is a file the run reads (one of ``logs``, or ``files``: thresholds, saved reports)."""
    if out is None:
        return
    from dslogs.analyzer.core.outfile import check_not_input, check_out

    _run(check_out, out)
    if os.path.exists(out):
        _run(check_not_input, out, _input_files(logs, files))


def _input_files(logs, files) -> list:
    """The files a run names or would discover under ``logs``, plus ``files``."""
    from dslogs.analyzer import ingest
    from dslogs.analyzer.core.errors import DslogsError

    found = [f for f in (*files, *logs) if f is not None and os.path.isfile(f)]
    try:
        discovered = ingest.discover([str(p) for p in logs]) if logs else None
    except (DslogsError, OSError):
        discovered = None  # the run itself says what is wrong with its logs
    if discovered is not None:
        found += [f.path for f in (*discovered.files, *discovered.pruned)]
    return found


def _write_or_print(text: str, out: Path | None) -> None:
    """stdout, or the one output writer (atomic; an unwritable path is exit 2 naming it)."""
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        from dslogs.analyzer.core.outfile import write_out

        _run(write_out, out, text)
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
    quiet: QuietOpt = False,
    session_attr: SessionAttrOpt = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """Diagnose the logs and write a report (html, json or md)."""
    _check_out(out if out is not None or format is not ReportFormat.html else Path("dslogs-report.html"), logs,
               thresholds, cache)
    from dslogs.analyzer.core import progress

    selection = _select(logs, since, until, tz, thresholds, cache, no_cache, engine, master, session_attr,
                        prom_servers)  # fmt: skip
    with progress.run("analyze", quiet):
        _analyze(selection, format, out, fail_on)


def _analyze(selection, format, out, fail_on) -> None:
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.model.report import has_findings_at
    from dslogs.analyzer.usecases.analyze import analyze
    from dslogs.analyzer.usecases.deploys import report_deploys

    model = _run(analyze, selection, report_deploys)
    progress.phase("rendering")
    _print_notes(model)
    from dslogs.analyzer.render.report import render_report

    text = _run(render_report, model, format.value)
    if format is ReportFormat.md and out is None and sys.stdout.isatty():
        # read on a terminal, not rendered: `<` rather than `&lt;` (log text stays made safe:
        # control characters were replaced when the model was rendered)
        import html

        text = html.unescape(text)
    if format is ReportFormat.html:
        _write_or_print(text, out or Path("dslogs-report.html"))
    else:
        _write_or_print(text, out)
    if fail_on is not None and has_findings_at(model, fail_on.value):
        raise typer.Exit(1)


@app.command()
def capacity(
    logs: LogsArg,
    since: SinceOpt = None,
    until: UntilOpt = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")] = ReportFormat.md,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-capacity.html).")] = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    quiet: QuietOpt = False,
    session_attr: SessionAttrOpt = None,
    limits: Annotated[str | None, typer.Option("--limits", help="What if: concurrency limits to simulate, e.g. 1,2,4.")] = None,
    users: Annotated[str | None, typer.Option("--users", help="What if: closed-loop users to simulate, e.g. 6,12.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="What if: output capped at N tokens.")] = None,
    num_beams: Annotated[int | None, typer.Option("--num-beams", help="What if: 1 runs beam requests greedy.")] = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """How many requests in flight the service holds, the concurrency limit that keeps it there,
    and what other limits and user counts would do (simulated from the logs)."""
    _check_out(out if out is not None or format is not ReportFormat.html else Path("dslogs-capacity.html"), logs,
               thresholds, cache)
    grid = {"limits": _counts("--limits", limits), "users": _counts("--users", users),
            "max_new_tokens": _positive("--max-new-tokens", max_new_tokens)}
    if num_beams is not None and num_beams != 1:
        _fail(f"--num-beams {num_beams}: only 1 is simulated (beam requests run greedy)")
    grid["num_beams"] = num_beams
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.render.report import render_capacity
    from dslogs.analyzer.usecases.analyze import capacity as run_capacity

    selection = _select(logs, since, until, tz, thresholds, cache, no_cache, engine, master, session_attr,
                        prom_servers)  # fmt: skip
    with progress.run("capacity", quiet):
        model = _run(run_capacity, selection, grid)
        progress.phase("rendering")
        _print_notes(model)
        text = _run(render_capacity, model, format.value)
    _write_or_print(text, out or (Path("dslogs-capacity.html") if format is ReportFormat.html else None))


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
    quiet: QuietOpt = False,
    session_attr: SessionAttrOpt = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """This week against the previous one: regressions, new and resolved findings. `--week ""`
    lists the weeks that hold events."""
    _check_out(out, logs, thresholds, cache, previous)
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.render.weekly import render_weekly
    from dslogs.analyzer.usecases.deploys import week_deploys
    from dslogs.analyzer.usecases.weekly import weekly, weeks_with_data

    selection = _select(logs, None, None, tz, thresholds, cache, no_cache, engine, master, session_attr,
                        prom_servers)  # fmt: skip
    if week is not None and not week.strip():
        weeks = _run(weeks_with_data, selection)
        typer.echo("\n".join(weeks) if weeks else "no week holds events")
        return
    with progress.run("report weekly", quiet):
        model = _run(weekly, selection, week=week, previous=previous)
        model["deploys"] = _run(week_deploys, selection, model)
    from dslogs.analyzer.core.textsafe import visible

    for note in model.get("notes") or []:
        typer.echo(f"dslogs: note: {visible(str(note))}", err=True)
    text = _run(render_weekly, model, format.value)
    if format is ReportFormat.html:
        _write_or_print(text, out or Path(f"dslogs-weekly-{model['week']}.html"))
    else:
        _write_or_print(text, out)


@app.command()
def diff(
    logs: Annotated[list[str], typer.Argument(help="BEFORE AFTER (log sets or saved report JSON), or LOGS with --before/--after.")],
    before: Annotated[str | None, typer.Option("--before", help="Split LOGS by time: the before window START..END.")] = None,
    after: Annotated[str | None, typer.Option("--after", help="The after window START..END (END may be empty).")] = None,
    deploy: Annotated[list[str] | None, typer.Option("--deploy", help="Compare two deploys of LOGS: --deploy A --deploy B (ids or labels from `dslogs deploys`).")] = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")] = ReportFormat.md,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-diff.html).")] = None,
    fail_on_regression: Annotated[float | None, number("Exit 1 on a significant regression above PCT %.", "--fail-on-regression", minimum=0, maximum=1e6)] = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    quiet: QuietOpt = False,
    session_attr: SessionAttrOpt = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """Before against after: latency changes with significance, the mix, findings, memory, errors."""
    _check_out(out if out is not None or format is not ReportFormat.html else Path("dslogs-diff.html"), logs,
               thresholds, cache)
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.model.diff import REGRESSION_PCT, has_regression
    from dslogs.analyzer.render.diff_html import render_diff
    from dslogs.analyzer.usecases.diff import diff as run_diff
    from dslogs.analyzer.usecases.diff import sides

    selection = _select(logs, None, None, tz, thresholds, cache, no_cache, engine, master, session_attr,
                        prom_servers)  # fmt: skip
    if deploy:
        from dslogs.analyzer.usecases.deploys import deploy_sides

        before_side, after_side = _run(deploy_sides, selection, deploy)
    else:
        before_side, after_side = _run(sides, selection, before, after)
    limit = REGRESSION_PCT if fail_on_regression is None else fail_on_regression
    with progress.run("diff", quiet):
        model = _run(run_diff, before_side, after_side, limit)
        progress.phase("rendering")
        text = _run(render_diff, model, format.value)
    if format is ReportFormat.html:
        _write_or_print(text, out or Path("dslogs-diff.html"))
    else:
        _write_or_print(text, out)
    if fail_on_regression is not None and has_regression(model):
        raise typer.Exit(1)


@app.command()
def deploys(
    logs: LogsArg,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")] = ReportFormat.md,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (html default: dslogs-deploys.html).")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tz: TzOpt = None,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="TOML file overriding rule thresholds.")] = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = Engine.duckdb,
    master: MasterOpt = "local[*]",
    quiet: QuietOpt = False,
    session_attr: SessionAttrOpt = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """The deploys in the logs, what changed at each, and whether it made the service slower."""
    _check_out(out if out is not None or format is not ReportFormat.html else Path("dslogs-deploys.html"))
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.render.deploys import render_deploys
    from dslogs.analyzer.usecases.deploys import deploys as run_deploys

    selection = _select(logs, since, until, tz, thresholds, cache, no_cache, engine, master, session_attr,
                        prom_servers)  # fmt: skip
    with progress.run("deploys", quiet):
        model = _run(run_deploys, selection)
        text = _run(render_deploys, model, format.value)
    if format is ReportFormat.html:
        _write_or_print(text, out or Path("dslogs-deploys.html"))
    else:
        _write_or_print(text, out)


@app.command()
def watch(
    logs: LogsArg,
    interval: Annotated[str, typer.Option("--interval", help="Refresh every (2s, 500ms, 1m).")] = "2s",
    window: Annotated[str, typer.Option("--window", help="Statistics over the last (15m, 1h).")] = "15m",
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    tz: TzOpt = None,
) -> None:
    """A live terminal view of the logs being written (reads only appended bytes)."""
    from dslogs.analyzer.live.watch import watch as run_watch

    selection = _select(logs, tz=tz)
    raise typer.Exit(_run(run_watch, selection, interval=interval, window=window, once=once))


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
    allow_files: Annotated[bool, typer.Option("--allow-files", help="Let the SQL read files (read_json, read_csv, read_parquet); off: the views alone. SQL never writes: use --out.")] = False,
    raw_csv: Annotated[bool, typer.Option("--raw-csv", help="CSV cells verbatim: no ' before cells starting with = + - @ tab CR (spreadsheet formulas).")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the result to this file instead of stdout.")] = None,
    session_attr: SessionAttrOpt = None,
    prom_servers: PromServersOpt = "auto",
) -> None:
    """Run SQL over the logs (views: events, requests, sessions); read-only unless --allow-files."""
    _check_out(out, logs, cache)
    selection = _select(logs, since, until, tz, None, cache, no_cache, engine, master, session_attr, prom_servers)
    if engine is Engine.spark:
        from dslogs.analyzer.engines.spark.driver import spark_query

        result = _run(spark_query, selection, sql)
    else:
        # Refused before the logs are read; then one query in the sandbox (dslogs.analyzer.ingest.sandbox):
        # views, computed only as far as the query needs them.
        # Ctrl-C or SIGTERM: one line, exit 130 / 143 (the cache is only read)
        import duckdb

        from dslogs.analyzer.ingest import check_statement, run_user_query, stop_on_signals

        _run(check_statement, duckdb.connect(), sql, allow_files)
        with stop_on_signals() as stop:
            db = _open(selection, materialize=False)
            try:
                result = _run(run_user_query, db, sql, allow_files, stop)
            finally:
                db.close()
            _run(_warn_if_window_empty, selection, db.ingest)
    if out is not None:
        from dslogs.analyzer.core.outfile import open_out
        from dslogs.analyzer.core.results import write_result

        def _write() -> None:
            with open_out(out) as fh:
                write_result(result, format.value, fh, csv_guard=not raw_csv)

        _run(_write)
        typer.echo(str(out))
        return
    _print_result(result, format.value, csv_guard=not raw_csv)


@app.command()
def session(
    logs: Annotated[list[str], typer.Argument(metavar="LOGS... SESSION_ID", help="Log directories, files or globs, then the SESSION_ID or a unique prefix of it, e.g. 653f6e4a (put -- before an id that starts with -).")],
    format: Annotated[SessionFormat, typer.Option("--format", help="table: timeline; jsonl: events for jq.")] = SessionFormat.table,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tz: TzOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    session_attr: SessionAttrOpt = None,
) -> None:
    """Show one session (its id or a unique prefix): its timeline, or its events as JSONL."""
    from dslogs.analyzer.ingest import resolve_session, session_events

    if len(logs) < 2:
        _fail("usage: dslogs session LOGS... SESSION_ID")
    *paths, session_id = logs
    selection = _select(paths, since, until, tz, None, cache, no_cache, None, "local[*]", session_attr)
    db = _open(selection, materialize=False)
    try:
        session_id = _run(resolve_session, db, session_id)
        result = _run(session_events, db, session_id, timeline=format is SessionFormat.table)
    finally:
        db.close()
    _run(_warn_if_window_empty, selection, db.ingest)
    if not result.rows:
        from dslogs.analyzer.core.textsafe import visible

        _fail(f"no events for session {visible(repr(session_id))} in {visible(', '.join(paths))}")
    _print_result(result, format.value)


def _print_result(result, fmt: str, csv_guard: bool = True) -> None:
    """Print a query result; a closed pipe (`| head`) ends the command quietly."""
    import os

    from dslogs.analyzer.core.results import write_result

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
    from dslogs.analyzer.model.report import load_report_json
    from dslogs.analyzer.render.html import render_html

    if not str(report_json).strip() or report_json.is_dir() or not report_json.name:
        _fail(f"REPORT_JSON {str(report_json)!r}: not a file; give a report saved with `analyze --format json`")
    target = out or report_json.with_suffix(".html")
    _check_out(target)
    if target.exists() and target.resolve() == report_json.resolve():
        _fail(f"--out {target}: is the report being read; give another file")
    model = _run(load_report_json, report_json)
    _write_or_print(_run(render_html, model), target)


@app.command()
def simulate(
    outdir: Annotated[Path | None, typer.Argument(help="Folder to write simulated logs and truth.json into.")] = None,
    scenario: Annotated[list[str] | None, typer.Option("--scenario", help="Fault scenario (repeatable); default: healthy.")] = None,
    days: Annotated[int, number("Days of traffic.", "--days", integer=True, minimum=1, maximum=3660)] = 1,
    seed: Annotated[int, number("Random seed (same arguments give the same bytes).", "--seed", integer=True, minimum=0, maximum=2**63 - 1)] = 0,
    format: Annotated[TraceFormat, typer.Option("--format", help="v1 (dslogs collector) or legacy (article 003 logger).")] = TraceFormat.v1,
    events: Annotated[int | None, number("Target number of events (scales traffic).", "--events", integer=True, minimum=1, maximum=10**10)] = None,
    hosts: Annotated[int, number("Number of GPU hosts.", "--hosts", integer=True, minimum=1, maximum=1000)] = 1,
    start: Annotated[str | None, typer.Option("--start", help="First simulated day (ISO date); default 2026-11-23.")] = None,
    list_scenarios: Annotated[bool, typer.Option("--list", help="List scenarios and exit.")] = False,
    change: Annotated[str | None, typer.Option("--change", help="A change at one moment: prefill_slower, max_new_tokens, leak, prompt_shift.")] = None,
    change_at: Annotated[str | None, typer.Option("--change-at", help="When the change happens (local ISO time; default mid-run).")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Write realistic simulated logs with injected faults, and truth.json."""
    from dslogs.analyzer.simulate import SCENARIOS
    from dslogs.analyzer.simulate import simulate as run_simulation

    if list_scenarios:
        for name, spec in SCENARIOS.items():
            typer.echo(f"{name:18} {spec.description}")
        from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS

        for name, cspec in CONCURRENT_SCENARIOS.items():
            typer.echo(f"{name:18} {cspec.description} ({cspec.fmt}; runs alone)")
        return
    if outdir is None:
        _fail("usage: dslogs simulate OUTDIR [--scenario NAME]... (or --list)")
    from dslogs.analyzer.simulate.concurrent import CONCURRENT_SCENARIOS, simulate_concurrent

    if any(name in CONCURRENT_SCENARIOS for name in scenario or []):
        # one process serving overlapping sessions; a run of its own (40 min, one host)
        if len(scenario) != 1:
            _fail(f"--scenario {', '.join(scenario)}: a concurrent scenario ({', '.join(CONCURRENT_SCENARIOS)}) runs alone")
        summary = _run(simulate_concurrent, outdir, scenario[0], seed=seed)
        typer.echo(f"wrote {summary['events']} events in {summary['files']} files to {outdir} "
                   f"(truth: {outdir / 'truth.json'})")
        return
    from dslogs.analyzer.core import progress

    with progress.run("simulate", quiet):
        progress.phase("writing logs")
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
    quiet: QuietOpt = False,
) -> None:
    """Write normalised events as hive-partitioned Parquet (idempotent)."""
    from dslogs.analyzer.core import progress
    from dslogs.analyzer.ingest import compact_logs

    with progress.run("compact", quiet):
        progress.phase("compacting")
        summary = _run(compact_logs, logs, out, tz=tz)
    typer.echo(f"{summary['new_files']} new files, {summary['events']} events -> {out}")


@app.command()
def schema(
    format: Annotated[SchemaFormat, typer.Option("--format", help="json: the trace schema; md: the events view's columns (docs/sql.md).")] = SchemaFormat.json,
) -> None:
    """Print the trace schema v1 (JSON Schema, draft 2020-12), or the events table (--format md)."""
    if format == SchemaFormat.md:
        from dslogs.analyzer.ingest import events_table_md

        sys.stdout.write(events_table_md())
        return
    from dslogs_collector.schema import schema_text

    sys.stdout.write(schema_text())


@app.command("cache")
def cache_cmd(
    clear: Annotated[bool, typer.Option("--clear", help="Delete every cache in the cache folder.")] = False,
    prune: Annotated[bool, typer.Option("--prune", help="Delete the caches whose log folder no longer exists (and, with --unused-days, those not used for N days).")] = False,
    unused_days: Annotated[float | None, number("With --prune: also delete caches no run has used for this many days.", "--unused-days", minimum=0, maximum=36600)] = None,
) -> None:
    """List the caches (one per log folder, in $XDG_CACHE_HOME/dslogs or ~/.cache/dslogs) with their sizes and log folders; --clear or --prune them."""
    import time

    from dslogs.analyzer.core.textsafe import visible
    from dslogs.analyzer.ingest import cache_home, clear_caches, list_caches, prune_caches

    if unused_days is not None and not prune:
        _fail("--unused-days goes with --prune")
    home = cache_home()
    shown = visible(str(home))  # $XDG_CACHE_HOME is the environment's text, not ours
    if clear:
        caches, busy = _run(clear_caches, home)
        freed = sum(c["freed"] for c in caches)
        for c in busy:
            typer.echo(f"kept {visible(c['path'])}: in use by a running dslogs")
        typer.echo(f"removed {len(caches)} cache(s) from {shown}, {freed / 1e6:,.1f} MB freed")
        return
    if prune:
        removed = _run(prune_caches, unused_days, time.time(), home)
        for c in removed:
            typer.echo(f"removed {visible(c['path'])} ({c['freed'] / 1e6:,.1f} MB): {c['why']}")
        typer.echo(f"pruned {len(removed)} cache(s), {sum(c['freed'] for c in removed) / 1e6:,.1f} MB freed")
        return
    caches = _run(list_caches, home)
    if not caches:
        typer.echo(f"no caches in {shown}")
        return
    now = time.time()
    typer.echo(f"{len(caches)} cache(s) in {shown}, {sum(c['bytes'] for c in caches) / 1e6:,.1f} MB:")
    for c in caches:
        age = (now - c["last_used"]) / 86400
        folder = visible(c["folder"]) if c["folder"] else "—"
        if c["folder"] and not c["folder_exists"]:
            folder += " (gone)"
        state = "" if c["state"] == "ok" else f"  [{c['state']}]"
        typer.echo(f"  {c['bytes'] / 1e6:8,.1f} MB  used {age:5.1f} d ago  {c['files'] or 0:5} files  {folder}  "
                   f"{visible(Path(c['path']).name)}{state}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
