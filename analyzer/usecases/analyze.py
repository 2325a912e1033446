"""``dslogs analyze`` and ``dslogs capacity``: the logs a selection names, opened once on its
engine, into the report model (or the capacity model); ``load_side``: the same for one side of
``dslogs diff`` or one deploy of ``dslogs deploys``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dslogs.analyzer import ingest
from dslogs.analyzer.core import progress
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.selection import Selection
from dslogs.analyzer.core.thresholds import defaults
from dslogs.analyzer.engines.compute import compute_metrics, session_requests
from dslogs.analyzer.engines.duckdb import as_source
from dslogs.analyzer.engines.registry import open_engine
from dslogs.analyzer.metrics.registry import bucket_for_span, parameters
from dslogs.analyzer.metrics.results import release_tables
from dslogs.analyzer.model import deploys as deploys_model
from dslogs.analyzer.model import report as report_model
from dslogs.analyzer.model import result_cache
from dslogs.analyzer.model.diff import Side, read_values
from dslogs.analyzer.model.load import saved_report
from dslogs.analyzer.usecases.window import note_if_empty


def build_report(source, thresholds: dict | None = None) -> dict:
    """The report model of logs opened on any engine (a MetricSource, or an open LogSet): the
    metric tables, the model built from them, then the drill-down rows of the sessions the model
    shows and the findings' evidence."""
    thresholds = thresholds or defaults()
    source = as_source(source)
    progress.phase("computing")
    metrics = compute_metrics(source, thresholds)
    model = report_model.build_report_from_metrics(metrics, source.ingest, source.window, thresholds)
    # the per-session tables (400 k+ rows at 20 M events) are not needed for the drill-down:
    # those kept in DuckDB are dropped there too
    release_tables(metrics)
    del metrics
    ids = report_model.detail_session_ids(model, thresholds)
    return report_model.with_details(model, session_requests(source, ids, thresholds), thresholds)


def build_capacity(source, thresholds: dict | None = None, grid: dict | None = None) -> dict:
    """The capacity model of logs opened on any engine: the capacity curve, the request sample
    its service model is fitted from, the capacity rules and the simulated settings (``grid``:
    limits, users, max_new_tokens, num_beams)."""
    thresholds = thresholds or defaults()
    source = as_source(source)
    progress.phase("computing")
    params = parameters(thresholds, bucket_for_span(*source.time_bounds()))
    metrics = source.run(["capacity_per_level", "service_requests", "time_span"], params)
    return report_model.capacity_model(metrics, source.ingest, source.window, thresholds, grid)


def load_side(selection: Selection, label: str) -> Side:
    """A saved report model (one .json path), or logs opened on the selection's engine: the
    report model and the values behind its percentiles, from the one opened side. An engine
    without DuckDB's connection (Spark) builds the model; the values are then read with DuckDB
    over the same selection (the engine contract carries metric tables, not per-request rows)."""
    paths = list(selection.paths)
    saved = saved_report(paths[0]) if len(paths) == 1 else None
    if saved is not None:
        if selection.windowed:
            raise UsageError(f"{paths[0]}: a saved report cannot be split by time; give logs for --before/--after")
        return Side(label, saved, "report", paths=paths)
    source = open_engine(selection)
    try:
        model = build_report(source, selection.threshold_tables())
        db = getattr(source, "db", None)
        read = read_values(db.con) if db is not None else None
    finally:
        source.close()
    values_engine = selection.engine
    if read is None:
        values_engine = "duckdb"
        with ingest.open(replace(selection, engine=values_engine)) as db:
            read = read_values(db.con)
    values, sampled = read
    return Side(label, model, "logs", values, sampled, paths, engine=selection.engine, values_engine=values_engine)


def analyze(selection: Selection, deploys: Callable[..., list[dict]] | None = None) -> dict:
    """Read the logs once and return the report model ``dslogs.report/1``. ``deploys``
    (``usecases.deploys.report_deploys``, passed in by the caller: that module builds on this
    one; called with the selection and the whole log set's starts where the open logs hold them,
    else None): where a deploy other than the log set's first starts in the window (without one:
    where the logs hold two deploys or more), the report's ``deploys`` are what it returns, kept
    with the model in the result cache; one deploy (one process start), or a window that no deploy
    starts in, costs a query on the open logs and nothing more."""
    thresholds = selection.threshold_tables()
    # With a window, requests/sessions are not built before the cache has been asked for this
    # run's model (analyzer/model/result_cache.py): a warm run that finds it never needs them.
    lazy = selection.engine == "duckdb" and selection.use_cache and selection.windowed
    source = open_engine(selection, materialize=not lazy)
    try:
        db = getattr(source, "db", None)
        empty = selection.windowed and not (source.ingest or {}).get("events")
        if db is None or empty:
            # an empty window is not kept in the result cache: its note reads the files outside it
            model = build_report(source, thresholds)
            # the note opens the logs again: DuckDB lets one connection of a process attach the
            # cache file at a time, so this run's lets go of it first
            source.close()
            if empty and (note := note_if_empty(selection, source.ingest)):
                model["notes"].insert(0, note)
            elif deploys is not None:
                # an engine without DuckDB's connection (Spark): the deploy records are read with
                # DuckDB over the same logs, each deploy's window analysed on the engine
                with ingest.open(replace(selection, engine="duckdb"), materialize=False) as duck:
                    judge, read = _deploys_to_judge(duck, selection)
                if judge and (rows := deploys(selection, read)):
                    model["deploys"] = rows
            return model
        key = result_cache.result_key(db, thresholds)
        model = result_cache.lookup(db, key, report_model.clean(report_model.ingest_block(db.ingest)))
        if model is None:
            result_cache.materialize_derived(db.con)
            model = build_report(source, thresholds)
            result_cache.store(db, key, model, report_model.report_to_json)
        if deploys is None and "deploys" in model:
            # kept by a run that asked for them: a caller that did not gets the model it builds cold
            del model["deploys"]
            result_cache.differs(model)
        judge, read = _deploys_to_judge(db, selection) if deploys is not None and "deploys" not in model else (False, None)
    finally:
        source.close()
    # after close: each deploy's window opens the logs (and the cache file) again; set on the
    # model itself, which the result cache knows by identity and keeps again with them
    if judge and (rows := deploys(selection, read)):
        model["deploys"] = rows
        # without a window the key covers every file the deploys are numbered over
        result_cache.added_to(model, report_model.report_to_json if not selection.windowed else None)
    return model


def _deploys_to_judge(db, selection: Selection) -> tuple[bool, tuple[str, list[deploys_model.Instance]] | None]:
    """Whether the report may mark deploys (a deploy other than the log set's first starts in its
    window), and the whole log set's starts that number them where the open logs ``db`` hold them
    (no window, or a cache holding the files outside it): then the answer is sure. A window whose
    own logs hold no deploy record (nor OTLP version) has no deploy start: one query on it. Else,
    without the whole log set open, ``deploys`` reads it (an open of it without a cache) to tell,
    and returns no rows when none starts there."""
    if selection.windowed and not deploys_model.may_start_within(db.con):
        return False, None
    if db.whole_events:
        read = deploys_model.read_instances(db.con, db.whole_events)
        groups = deploys_model.group_deploys(read[1])
        return deploys_model.starts_within(groups, selection.since, selection.until), read
    return True, None


def capacity(selection: Selection, grid: dict | None = None) -> dict:
    """``dslogs capacity``: the capacity model alone (its metric queries and the capacity rules),
    with the settings ``grid`` names simulated."""
    source = open_engine(selection)
    try:
        model = build_capacity(source, selection.threshold_tables(), grid)
        source.close()  # before the note opens the logs again (see analyze)
        if note := note_if_empty(selection, source.ingest):
            model["notes"] = [note]
        return model
    finally:
        source.close()


def analyze_logs(paths, **options) -> dict:
    """``analyze`` with the selection's options as keywords (``Selection.build``'s), for scripts
    and tests: ``analyze_logs(["./logs"], since="1d", use_cache=False)``."""
    return analyze(Selection.build(paths, **options))


def capacity_logs(paths, **options) -> dict:
    """``capacity`` with the selection's options as keywords (see ``analyze_logs``)."""
    return capacity(Selection.build(paths, **options))
