"""The self-contained HTML diagnosis report, rendered from the report model only.

One file, no network: Vega, Vega-Lite and vega-embed are inlined once (the bundle vl-convert
builds, shipped or cached per vl-convert version: `vega_bundle`), the chart specs ride along as
one JSON block, and every chart also carries a static SVG drawn from its spec by
dslogs.analyzer.render.charts.svg inside <noscript>, so the page reads where scripts are blocked. Jinja2 autoescaping turns every log-derived string into text; the embedded JSON
has `<`, `>` and `&` escaped as \\u003c… so no string can close the script element; a
Content-Security-Policy with script hashes blocks any script the page did not put there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
from functools import cache, lru_cache
from pathlib import Path

from jinja2 import (
    Environment,
    FileSystemBytecodeCache,
    FileSystemLoader,
    StrictUndefined,
    select_autoescape,
)
from markupsafe import Markup, escape

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core import progress
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.outfile import own_file, own_folder, write_out
from dslogs.analyzer.core.resources import templates_dir
from dslogs.analyzer.core.time import human_duration, span_between
from dslogs.analyzer.model.lead import LEAD_SLO_SHARE, SLOW_SHOWN, severity_counts
from dslogs.analyzer.model.report import MIN_SLOPE_MINUTES
from dslogs.analyzer.model.result_cache import RUN_KEYS
from dslogs.analyzer.render import page_cache
from dslogs.analyzer.render.charts import specs as charts_mod
from dslogs.analyzer.render.charts import svg as svgchart
from dslogs.analyzer.render.deploys import baseline_text
from dslogs.analyzer.render.glossary import below_zero, counted_of, oom_line
from dslogs.analyzer.render.page_cache import CACHED_BUNDLE, bundle_file_name, read_bundle
from dslogs.analyzer.rules.registry import unit_for

MAX_SESSION_ROWS = 300  # sessions table rows; the rest are counted, not listed
MAX_DRILLDOWNS = 60  # sessions with a <details> drill-down
MAX_DETAIL_ROWS = 100  # requests listed per drill-down
MAX_DETAIL_TOTAL = 800  # requests listed over all drill-downs
MAX_FINDING_SESSIONS = 12  # session links per finding card
SVG_BUDGET_BYTES = 800_000  # all no-JS fallback SVGs together

SECTIONS = [
    ("header", "Overview"), ("checklist", "Checklist"), ("findings", "Findings"),
    ("timeline", "Time range"), ("latency", "Latency"), ("slow", "Slow requests"), ("prefill", "Prefill vs decode"),
    ("gpu", "GPU"), ("memory", "Memory"), ("kv", "KV cache"), ("errors", "Errors"),
    ("capacity", "Capacity"),
    ("sessions", "Sessions"), ("server", "Server metrics"), ("collector", "Collector"), ("rules", "Rules"),
    ("glossary", "Glossary"),
]
SECTION_IDS = {s for s, _ in SECTIONS}
DETAIL_COLUMNS = ["request_id", "turn_index", "start_ts", "status", "error_type", "input_len", "output_len",
                  "reasoning_len", "queue_ms", "ttft_ms", "tpot_ms", "prefill_ms", "decode_ms", "e2e_ms", "tokens_per_s",
                  "gpu_wait_pct", "gpu_util_pct", "reserved_mb", "allocated_mb", "kv_seq_len", "kv_cache_size_mb",
                  "num_beams", "max_new_tokens"]
SLOW_COLUMNS = ["e2e_ms", "times_median", "queue_ms", "tokenize_ms", "prefill_ms", "decode_ms", "other_ms", "shared_ms",
                "others_avg"]
LATENCY_LABELS = [("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2e_ms", "end-to-end (ms)"),
                  ("ttfa_ms", "TTFA (ms)"), ("tokens_per_s", "tokens/s")]
TEXT_COLUMNS = ("request_id", "status", "error_type", "finish_reason", "host", "source_format")


# -- formatting filters ---------------------------------------------------------------------


def fmt_ts(value) -> str:
    """ISO timestamp → `YYYY-MM-DD HH:MM:SS` with the offset (UTC spelled out)."""
    if not value:
        return "—"
    text = str(value)
    m = re.match(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$", text)
    if not m:
        return text
    zone = m.group(4) or ""
    if zone in ("Z", "+00:00", "+0000", "-00:00"):
        zone = " UTC"
    elif zone:
        zone = " " + zone
    return f"{m.group(1)} {m.group(2)}{zone}"


def fmt_ts_short(value) -> str:
    """`MM-DD HH:MM:SS` for dense tables (turns seconds apart stay apart); the full stamp goes in a
    title attribute."""
    full = fmt_ts(value)
    m = re.match(r"^\d{4}-(\d\d-\d\d) (\d\d:\d\d:\d\d)", full)
    return f"{m.group(1)} {m.group(2)}" if m else full


def cite(source) -> Markup:
    """A source like "000 §5 table; 003 §4.1, §5.3" with each section it cites linked to the
    report's own list of sources (its one-line meaning as the tooltip; docs/sources.md has the
    long form)."""
    from markupsafe import escape

    from dslogs.analyzer.render.glossary import SOURCES, citations

    text = "" if source is None else str(source)
    out, last = [], 0
    for m, key, anchor in citations(text):
        out.append(str(escape(text[last:m.start()])))
        span = str(escape(m.group(0)))
        out.append(f'<a class="cite" href="#src-{anchor}" title="{escape(SOURCES[key])}">{span}</a>' if key else span)
        last = m.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def defined(text) -> Markup:
    """``text`` escaped, with the first use of each glossary term linked to its entry (its
    meaning as the tooltip): a term is explained where a reader meets it."""
    from dslogs.analyzer.render.glossary import GLOSSARY, TERM_RE, term_anchor

    if text is None:
        return Markup("—")
    seen: set[str] = set()
    out, last = [], 0
    raw = str(text)
    for m in TERM_RE.finditer(raw):
        word = m.group(1)
        if word in seen:
            continue
        seen.add(word)
        out.append(escape(raw[last:m.start()]))
        out.append(Markup('<a class="term" href="#{}" title="{}">{}</a>').format(term_anchor(word), GLOSSARY[word], word))
        last = m.end()
    out.append(escape(raw[last:]))
    return Markup("").join(out)


def anchor(session_id) -> str:
    """A fragment id for a session's drill-down: readable prefix plus a hash (ids are log text)."""
    text = str(session_id)
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", text)[:32].strip("_") or "s"
    return f"session-{slug}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:8]}"


def json_for_script(obj) -> str:
    """JSON safe inside <script>: no `</script`, `<!--` or `&` can survive (Django json_script)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- assets ---------------------------------------------------------------------------------
# The bundle's file name and its reading are dslogs.analyzer.render.page_cache's: a warm run fills the kept
# page with the bundle without importing this module.


def build_vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed as vl-convert builds them (seconds of CPU: done once)."""
    import vl_convert

    bundle = vl_convert.javascript_bundle()
    # `<\/` is `</` inside JS strings, templates and regexes; the bundle holds no other `</script`.
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)


@cache
def vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed, one copy per page, never fetched.

    vl-convert takes seconds to build the bundle, so it is built once per vl-convert version:
    shipped in templates/vendor/ (scripts/vendor_vega.py), else built on first use and kept in
    the user's cache folder; a file that fails to read or looks cut short is rebuilt."""
    from dslogs.analyzer.ingest import cache_home

    name = bundle_file_name()
    text = read_bundle(name)
    if text is not None:
        return text
    bundle = build_vega_bundle()
    target = own_file(cache_home() / name, CACHED_BUNDLE)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_out(target, bundle, CACHED_BUNDLE)  # readers never see half a file
    except (OSError, UsageError):
        pass  # a read-only home: the report still works, the next run builds it again
    return bundle


def page_script() -> str:
    return (templates_dir() / "_report.js").read_text(encoding="utf-8")


def csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


def content_security_policy(scripts: list[str]) -> str:
    # Only the page's own scripts run (hashes); Vega compiles expressions with Function(),
    # hence 'unsafe-eval'; nothing may be fetched from anywhere.
    hashes = " ".join(csp_hash(s) for s in scripts)
    return (f"default-src 'none'; script-src {hashes} 'unsafe-eval'; style-src 'unsafe-inline'; "
            "img-src data:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")


COMPILED_TEMPLATES = "compiled templates"  # how an error names the templates' cache folder and its files


class _OwnBytecodeCache(FileSystemBytecodeCache):
    """Jinja2's file cache whose every file is checked as one of dslogs' own (``own_file``) before
    it is read or replaced: a link, FIFO or device where a compiled template goes is one line
    naming it, never followed (a FIFO would block the read; a link would be read through)."""

    def load_bytecode(self, bucket) -> None:
        own_file(self._get_cache_filename(bucket), COMPILED_TEMPLATES)
        super().load_bytecode(bucket)

    def dump_bytecode(self, bucket) -> None:
        own_file(self._get_cache_filename(bucket), COMPILED_TEMPLATES)
        super().dump_bytecode(bucket)


def _bytecode_cache() -> FileSystemBytecodeCache | None:
    """Compiled templates kept in the user's cache folder: compiling them is a third of a
    report's render time. Jinja2 checks each entry against the template's source checksum."""
    from dslogs.analyzer.ingest import cache_home

    folder = own_folder(cache_home() / "templates", COMPILED_TEMPLATES)
    return _OwnBytecodeCache(str(folder)) if folder is not None and os.access(folder, os.W_OK) else None


def _term_anchor(word: str) -> str:
    from dslogs.analyzer.render.glossary import term_anchor

    return term_anchor(word)


@cache
def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir())),
        bytecode_cache=_bytecode_cache(),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        finalize=lambda v: "—" if v is None else v,  # a missing value (JSON null) prints as a dash
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(numcol=numcol, defined=defined, term_anchor=_term_anchor, cite=cite, shq=lambda v: shlex.quote(str(v)), num=fmt.table, unit_for=unit_for, pct=fmt.share, ts=fmt_ts, ts_short=fmt_ts_short, bytes=fmt.bytes_si, anchor=anchor, label=detail_label, label_title=column_title)
    env.globals.update(severity_colors=charts_mod.SEVERITY_COLORS, counted_of=counted_of, below_zero=below_zero,
                       oom_line=oom_line, baseline_text=baseline_text)
    return env


def render_template(name: str, **context) -> str:
    return _env().get_template(name).render(**context)


# -- the chart fallbacks ---------------------------------------------------------------------


def chart_svg(spec: dict) -> str | None:
    """A chart drawn by vl-convert (the weekly page's dumbbell; the report uses `static_svg`,
    which needs no second chart engine); None if vl-convert cannot draw it."""
    from dslogs.analyzer.core.textsafe import clean_tree

    # A control character anywhere in the spec aborts the process inside vl-convert (a Rust
    # panic, not an exception): the last guard before it (charts clean their data already).
    return _svg_for(json.dumps(clean_tree(spec), sort_keys=True))


@lru_cache(maxsize=64)
def _svg_for(spec_json: str) -> str | None:
    # Cached by spec: rendering the same model twice (render vs analyze, tests) draws once.
    import vl_convert

    try:
        svg = vl_convert.vegalite_to_svg(json.loads(spec_json))
    except Exception:  # a fallback picture must never break the report
        return None
    # vl-convert escapes text; refuse anything that could still leave <noscript>.
    lowered = svg.lower()
    if "<script" in lowered or "</noscript" in lowered or "<foreignobject" in lowered:
        return None
    return svg[svg.find("<svg"):] if "<svg" in svg else None


def static_svg(spec: dict) -> str | None:
    """The no-JavaScript picture of a chart, drawn from its spec by dslogs.analyzer.render.charts.svg (no second
    chart engine: milliseconds, not seconds); None if it cannot be drawn or looks unsafe."""
    svg = svgchart.render_svg(spec)
    if svg is None:
        return None
    lowered = svg.lower()  # text is escaped; refuse anything that could still leave <noscript>
    if "<script" in lowered or "</noscript" in lowered or "<foreignobject" in lowered or "href" in lowered:
        return None
    return svg


def stable_svg_ids(svg: str, prefix: str) -> str:
    """Rename the SVG's element ids (vl-convert numbers clip paths with a process-wide counter)
    to `<prefix>-<n>`: the same model then gives the same bytes, and ids stay unique per page."""
    mapping: dict[str, str] = {}
    for old in re.findall(r'\bid="([^"]+)"', svg):
        mapping.setdefault(old, f"{prefix}-{len(mapping) + 1}")
    if not mapping:
        return svg

    def swap(m: re.Match) -> str:
        return m.group(1) + mapping.get(m.group(2), m.group(2)) + m.group(3)

    svg = re.sub(r'(\bid=")([^"]+)(")', swap, svg)
    return re.sub(r"(url\(#)([^)]+)(\))", swap, svg)


def prepare_charts(model: dict, fallback_svg: bool = True) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Charts grouped by section (for the template) and their specs by id (for the page script)."""
    by_section: dict[str, list[dict]] = {}
    specs: dict[str, dict] = {}
    budget = SVG_BUDGET_BYTES
    charts = charts_mod.build_charts(model)
    progress.counting("rendering", len(charts), "charts")
    for chart in charts:
        svg = static_svg(chart.spec) if fallback_svg else None
        if svg is not None and len(svg) > budget:
            svg = None
        if svg is not None:
            budget -= len(svg)
        specs[chart.id] = chart.spec
        by_section.setdefault(chart.section, []).append(
            {"id": chart.id, "title": chart.title, "timeline": chart.timeline, "notes": chart.notes,
             "svg": Markup(svg) if svg else None}
        )
        progress.advance(1)
    return by_section, specs


# -- the view model -------------------------------------------------------------------------


def _flagged_sessions(model: dict) -> dict[str, int]:
    """session_id → rank of its worst finding (0 critical … 2 info)."""
    worst: dict[str, int] = {}
    for f in model.get("findings") or []:
        rank = charts_mod.severity_rank(f.get("severity"))
        for sid in f.get("session_ids") or []:
            worst[sid] = min(worst.get(sid, 9), rank)
    for s in model.get("sessions") or []:
        if s.get("findings") and s.get("session_id") not in worst:
            worst[s.get("session_id")] = 2
    return worst


# *_mb fields are MiB (torch and NVML bytes / 2**20), hence MiB in every label.
LABEL_SUFFIXES = [("_mb_per_min", " MiB/min"), ("_mb_per_s", " MiB/s"), ("_ts", " time"), ("_per_min", " /min"),
                  ("_mb", " MiB"), ("_ms", " ms"), ("_pct", " %"), ("_s", " s")]


# Keys whose words alone do not say what they are or in which unit (a share, a percentage).
COLUMN_LABELS = {
    "turn_index": "turn", "start_ts": "start", "inflight": "in flight", "gpu_index": "GPU",
    "util_max": "util max %", "util_p50": "util p50 %", "util_avg": "util avg %",
    "mem_used_share_p50": "mem used p50 share", "starved_s": "starved s", "sampled_s": "sampled s",
    "rss_r2": "RSS R²", "reserved_r2": "R²", "power_w_max": "power max W", "temp_c_max": "temp max °C",
    "rss_held_rise_mb": "RSS held rise MiB", "input_len": "input tokens", "output_len": "output tokens",
    "reasoning_len": "reasoning tokens", "kv_seq_len": "KV tokens",
    **{f"{m}_mb_{w}": f"{m} {w} MiB" for m in ("reserved", "allocated") for w in ("before", "after")},
}  # fmt: skip
# Words written as the field names abbreviate them.
_WORDS = {"mb": "MiB", "rss": "RSS", "gpu": "GPU", "kv": "KV", "ttft": "TTFT", "tpot": "TPOT", "ttfa": "TTFA",
          "e2e": "e2e", "pid": "PID", "pct": "%", "r2": "R²", "id": "id", "oom": "OOM", "cpu": "CPU"}  # fmt: skip
# The glossary word a column is an instance of, for its header's tooltip.
_GLOSSED = (("ttft", "TTFT"), ("tpot", "TPOT"), ("ttfa", "TTFA"), ("e2e", "e2e"), ("gpu_wait", "gpu_wait"),
            ("inflight", "in flight"), ("credited", "credited"), ("kept", "kept"), ("slope", "slope"),
            ("rss", "RSS"), ("reasoning", "reasoning share"),
            ("goodput", "goodput"), ("reserved", "reserved / allocated"), ("allocated", "reserved / allocated"))  # fmt: skip
_GLOSSED_KEYS = {"rise_mb": "rise", "reserved_rise_mb": "rise", "rss_held_rise_mb": "held rise"}


def detail_label(key: str) -> str:
    """`rss_slope_mb_per_min` → `RSS slope MiB/min`: the one header for a model key in every
    HTML table, words with the unit last."""
    text = str(key)
    if text in COLUMN_LABELS:
        return COLUMN_LABELS[text]
    for suffix, unit in LABEL_SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            return _words(text[: -len(suffix)]) + unit
    return _words(text)


def column_title(key: str) -> str:
    """The glossary line a column header carries as its tooltip, or ''."""
    from dslogs.analyzer.render.glossary import GLOSSARY

    text = str(key).lower()
    if text in _GLOSSED_KEYS:
        return GLOSSARY[_GLOSSED_KEYS[text]]
    return next((GLOSSARY[word] for part, word in _GLOSSED if part in text), "")


def _words(text: str) -> str:
    # an `mb` inside a key (kv_cache_size_mb_threshold) is a MiB unit too
    return " ".join(_WORDS.get(w, w) for w in text.split("_"))


def column_digits(rows: list[dict], columns: list[str]) -> dict[str, int]:
    """Decimals per numeric column, one for the whole column: none when every value is whole or
    some reach 1,000; two when all are under 10 (ratios, R²); else one."""
    out = {}
    for c in columns:
        vals = [r.get(c) for r in rows]
        nums = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
        if not nums:
            continue
        top = max(abs(v) for v in nums)
        if all(v.is_integer() for v in nums) or top >= 1000:
            out[c] = 0
        else:
            out[c] = 2 if top < 10 else 1
    return out


def numcol(value, digits: int | None) -> str:
    """A cell of a column formatted by ``column_digits``: every value with the same decimals."""
    if digits is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt.table(value)
    return fmt.number(value, digits, whole_from=None)


def _detail_tables(details: dict, links: dict[str, str]) -> list[dict]:
    """Lists of records in a finding's evidence (per-session numbers, bad-line samples) as small
    tables, so a card shows the numbers behind its claim, not only ids."""
    tables = []
    for key, value in details.items():
        if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
            continue
        columns: list[str] = []
        for r in value:
            columns += [c for c in r if c not in columns and not isinstance(r[c], (dict, list))]
        rows = [{c: r.get(c) for c in columns} for r in value[:MAX_FINDING_SESSIONS]]
        # a list the model cut says how long it was (``<key>_total``)
        total = details.get(f"{key}_total") if details.get(f"{key}_truncated") else None
        tables.append({"key": key, "columns": columns, "rows": rows, "digits": column_digits(rows, columns),
                       "more": max(0, (total or len(value)) - len(rows)),
                       "links": {r.get("session_id"): links.get(r.get("session_id")) for r in rows if r.get("session_id")}})
    return tables


MAX_EVIDENCE_SESSIONS = 6  # sessions whose kept-memory requests a finding card shows


def _checklist(rows: list[dict] | None, findings: list[dict]) -> list[dict]:
    """The checklist rows, each rule a FAIL row names with the anchor of that rule's first card
    (cards are ``finding-<n>`` in the order ``findings`` lists them)."""
    first: dict[str, str] = {}
    for i, f in enumerate(findings, start=1):
        first.setdefault(f["rule"], f"finding-{i}")
    return [{**c, "finding_links": [(r, first.get(r)) for r in c.get("findings") or []]} for c in rows or []]


def _findings(model: dict, links: dict[str, str], charts_by_id: dict[str, dict]) -> list[dict]:
    out = []
    for f in sorted(model.get("findings") or [],
                    key=lambda f: (charts_mod.severity_rank(f.get("severity")), str(f.get("rule")))):
        sids = list(f.get("session_ids") or [])
        evidence = f.get("evidence") or {}
        section = evidence.get("section")
        details = evidence.get("details") or {}
        chart = charts_by_id.get(evidence.get("chart"))
        if chart is not None and chart["section"] in SECTION_IDS:
            section = chart["section"]  # the finding is flagged where its evidence is drawn
        out.append({
            "rule": f.get("rule"), "severity": f.get("severity") or "info", "scope": f.get("scope"),
            "message": f.get("message"), "fix": f.get("fix"), "source": f.get("source"),
            "value": f.get("value"), "threshold": f.get("threshold"), "unit": f.get("unit") or "",
            "hosts": f.get("hosts") or [],
            "sessions": [{"id": s, "anchor": links.get(s)} for s in sids[:MAX_FINDING_SESSIONS]],
            "more_sessions": max(0, len(sids) - MAX_FINDING_SESSIONS), "session_count": len(sids),
            "all_ids": sids, "ids_in_model": len(sids) < (f.get("session_count") or len(sids)),
            "section": section if section in SECTION_IDS else None,
            "chart": chart["id"] if chart else None, "chart_title": chart["title"] if chart else None,
            "details": [(detail_label(k), v) for k, v in details.items()
                        if not isinstance(v, (dict, list)) and not k.endswith(("_truncated", "_total"))]
            if isinstance(details, dict) else [],
            "detail_tables": _detail_tables(details, links) if isinstance(details, dict) else [],
            "kept": [dict(e, anchor=links.get(e.get("session_id")),
                          peak=max([abs(r.get("kept_mb") or 0) for r in e.get("requests") or []] + [1]))
                     for e in (evidence.get("requests") or [])[:MAX_EVIDENCE_SESSIONS]],
            "more_kept": max(0, (f.get("session_count") or len(sids))
                             - len((evidence.get("requests") or [])[:MAX_EVIDENCE_SESSIONS])) if evidence.get("requests") else 0,
            "factors": evidence.get("factors") or [],
            "doc": evidence.get("doc"),
        })
    return out


def _detail_columns(rows: list[dict]) -> list[str]:
    """The columns with a value in some row: a field this source never logs is no column. A row's
    time is its request's start: the times its readings were taken (memory_ts, kv_ts) place the
    per-session charts' points and are no column."""
    present = []
    for r in rows:
        for k, v in r.items():
            if k not in present and v is not None and v != "" and (k == "start_ts" or not k.endswith("_ts")):
                present.append(k)
    ordered = [c for c in DETAIL_COLUMNS if c in present]
    return ordered + sorted(c for c in present if c not in ordered and c != "session_id")


def _lead(model: dict, links: dict[str, str]) -> list[dict]:
    """The lead lines with the anchor of their evidence: the finding card (cards are in severity
    order, the model's findings in rule order) or the section."""
    found = model.get("findings") or []
    order = sorted(range(len(found)), key=lambda i: (charts_mod.severity_rank(found[i].get("severity")),
                                                      str(found[i].get("rule"))))
    card = {model_i + 1: view_i + 1 for view_i, model_i in enumerate(order)}
    out = []
    for x in model.get("lead") or []:
        href = (f"#finding-{card[x['finding']]}" if x.get("finding") in card
                else f"#sec-{x.get('section') or 'findings'}")
        out.append(dict(x, href=href, links=[(s, links.get(s)) for s in x.get("session_ids") or []]))
    return out


MEMORY_COLUMNS = ["reserved_slope_mb_per_min", "reserved_r2", "reserved_rise_mb"]


def memory_digits(rows: list[dict]) -> dict[str, int]:
    """One format per column of the per-session memory tables' readings (slopes only where they
    are shown). The judged figures keep the finding cards' format: the same number, the same text."""
    shown = [dict(r, reserved_slope_mb_per_min=r.get("reserved_slope_mb_per_min") if r.get("slope_ok", True) else None)
             for r in rows]
    return column_digits(shown, MEMORY_COLUMNS)


def _sessions(model: dict, flagged: dict[str, int]) -> tuple[list[dict], list[dict], int]:
    sessions = list(model.get("sessions") or [])
    order = sorted(range(len(sessions)), key=lambda i: (flagged.get(sessions[i].get("session_id"), 9), i))
    sessions = [sessions[i] for i in order]
    details = model.get("session_details") or {}
    totals = model.get("session_details_total") or {}
    drill_ids = [s.get("session_id") for s in sessions if s.get("session_id") in flagged]
    drill_ids += [sid for sid in details if sid not in drill_ids]
    drill_ids = drill_ids[:MAX_DRILLDOWNS]
    by_id = {s.get("session_id"): s for s in sessions}
    drill = []
    left = MAX_DETAIL_TOTAL
    for sid in drill_ids:
        rows = list(details.get(sid) or [])
        shown = rows[:max(0, min(MAX_DETAIL_ROWS, left))]
        left -= len(shown)
        columns = _detail_columns(shown)
        drill.append({"id": sid, "anchor": anchor(sid), "session": by_id.get(sid) or {},
                      "columns": columns, "rows": shown, "digits": column_digits(shown, columns), "total_rows": totals.get(sid, len(rows)),
                      "more_rows": totals.get(sid, len(rows)) - len(shown)})
    drill_set = set(drill_ids)
    # A session links to its drill-down, else to its row in the sessions table.
    rows = [dict(s, anchor=anchor(s.get("session_id")) if s.get("session_id") in drill_set
                 else "row-" + anchor(s.get("session_id")),
                 row_id="row-" + anchor(s.get("session_id")),
                 flagged=s.get("session_id") in flagged) for s in sessions[:MAX_SESSION_ROWS]]
    return rows, drill, len(sessions)


GPU_COLUMNS = ["host", "gpu_index", "samples", "util_max", "util_p50", "util_avg", "mem_used_max_mb",
               "mem_used_p50_mb", "mem_total_mb", "mem_used_share_p50", "starved_s", "power_w_max", "temp_c_max"]
PROCESS_COLUMNS = ["host", "pid", "samples", "minutes", "rss_first_mb", "rss_last_mb", "rss_max_mb",
                   "rss_slope_mb_per_min", "rss_r2"]


def _table(rows, preferred: list[str], max_rows: int = 50, max_cols: int = 12) -> dict | None:
    """A generic table of metric rows: preferred columns first, then any others, capped."""
    rows = [r for r in (rows or []) if isinstance(r, dict)]
    if not rows:
        return None
    present: list[str] = []
    for r in rows:
        present += [k for k in r if k not in present]
    columns = [c for c in preferred if c in present] + [c for c in present if c not in preferred]
    columns = [c for c in columns if not c.endswith("_ts") and not isinstance(rows[0].get(c), (dict, list))]
    shown = rows[:max_rows]
    return {"columns": columns[:max_cols], "rows": shown, "more": max(0, len(rows) - max_rows),
            "digits": column_digits(shown, columns[:max_cols])}


def _flat_thresholds(t, prefix: str = "") -> list[tuple[str, object]]:
    if not isinstance(t, dict):
        return []
    out = []
    for k, v in t.items():
        if isinstance(v, dict):
            out += _flat_thresholds(v, f"{prefix}{k}.")
        elif not isinstance(v, list):
            out.append((f"{prefix}{k}", v))
    return out


def _collector_lines(rows: list[dict], events) -> dict | None:
    """The collector's count against the events read: a process's last ``collector`` record counts
    the lines written before it, so each process adds its own record, one line, to its count."""
    if not rows or any(r.get("written") is None for r in rows):
        return None
    written = sum(r["written"] for r in rows)
    processes = sum(r.get("processes") or 1 for r in rows)
    return {"written": written, "processes": processes, "lines": written + processes, "events": events,
            "same": events == written + processes}


STORIES = 4  # processes whose RSS account the Memory section spells out


def _host_rss(model: dict, sessions: list[dict], limit: int = 10) -> dict:
    """Host memory (RSS) as one account: each process's readings (its slope only where they span
    a minute), what the sessions rss_growth names kept of its rise, and what every session's own
    requests kept (the sessions table's judged figures, largest first)."""
    procs = []
    short = 0
    for r in model.get("processes") or []:
        row = {k: v for k, v in r.items() if k not in ("slope_ok", "sessions_kept", "sessions_kept_mb")}
        if not r.get("slope_ok", True):
            # not measured: a number column shows "—" (the section's note says why), not a duration
            row.update(rss_slope_mb_per_min=None, rss_r2=None)
            short += 1
        first, last = r.get("rss_first_mb"), r.get("rss_last_mb")
        rise = last - first if first is not None and last is not None else None
        story = {"host": r.get("host"), "pid": r.get("pid"), "first": first, "last": last, "rise": rise,
                 "span": human_duration(r["minutes"] * 60) if r.get("minutes") is not None else None, "held": r.get("rss_held_rise_mb"), "named": r.get("sessions_kept"),
                 "kept": r.get("sessions_kept_mb")}
        if rise is not None and r.get("sessions_kept"):
            story["rest"] = rise - r["sessions_kept_mb"]
        procs.append((row, story))
    judged = [s for s in sessions if (s.get("judged") or {}).get("rss_growth")]
    judged.sort(key=lambda s: (-("rss_growth" in (s.get("findings") or [])),
                               -(s["judged"]["rss_growth"].get("rss_kept_mb") or 0.0)))
    # a sentence per process for the few that grew most; the table holds them all
    stories = sorted((st for _, st in procs), key=lambda st: -(st["rise"] or 0.0))[:STORIES]
    return {"table": _table([row for row, _ in procs], PROCESS_COLUMNS), "stories": stories,
            "sessions": judged[:limit], "more": max(len(judged) - limit, 0),
            # the sessions past the table's rows, by id, and the most any of them kept
            "more_sessions": judged[limit:],
            "more_max": max((s["judged"]["rss_growth"].get("rss_kept_mb") or 0.0 for s in judged[limit:]), default=None),
            "threshold": (model.get("thresholds") or {}).get("rss_growth") or {}, "short_slopes": short}


def _memory_sessions(rows: list[dict], limit: int = 10) -> list[dict]:
    """Sessions flagged for memory first, then the steepest reserved-memory slopes."""
    memory_rules = {"memory_leak", "ghost_memory", "oom", "rss_growth"}
    flagged = [r for r in rows if memory_rules & set(r.get("findings") or [])]
    rest = sorted((r for r in rows if r not in flagged and r.get("reserved_slope_mb_per_min") is not None),
                  key=lambda r: -r["reserved_slope_mb_per_min"])
    return (flagged + rest)[:max(limit, len(flagged[:limit]))]


def collector_absent(formats: dict | None) -> str:
    """Why the collector section is empty, from the formats the run's events came in: v1 logs
    are the collector's format, so they lack only its health lines; other formats were written
    by something else."""
    read = {name: n for name, n in (formats or {}).items() if n}
    if read.get("v1"):
        return (f"No collector events: the {fmt.prose(read['v1'])} trace schema v1 events hold no collector "
                "health line, which the dslogs collector writes when it starts and every minute (queued, written, "
                "dropped), so its health cannot be shown. Another v1 writer wrote them, or those lines were "
                "left out of the files read.")
    if read.get("legacy") and len(read) == 1:
        return ("No collector events: these logs were written by article 003's logger (legacy format), "
                "not by the dslogs collector, which reports its own health.")
    if read:
        return (f"No collector events: these logs are {', '.join(sorted(read))}, not written by the dslogs "
                "collector, which reports its own health.")
    return "No collector events: no events were read."


def view_model(model: dict, fallback_svg: bool = True) -> dict:
    # The ingest block's run counters (seconds, files read this run...) describe the run, not
    # the logs: the page never shows them, so a page kept for the model's logs (page_cache)
    # holds for every run over them.
    ingest = {k: v for k, v in (model.get("ingest") or {}).items() if k not in RUN_KEYS}
    model = dict(model, ingest=ingest)
    flagged = _flagged_sessions(model)
    sessions, drill, session_total = _sessions(model, flagged)
    links = {r.get("session_id"): r["anchor"] for r in sessions}
    links.update({d["id"]: d["anchor"] for d in drill})
    by_section, specs = prepare_charts(model, fallback_svg=fallback_svg)
    charts_by_id = {c["id"]: dict(c, section=sec) for sec, cs in by_section.items() for c in cs}
    findings = _findings(model, links, charts_by_id)
    rules = model.get("rules") or []
    counts = severity_counts(model)
    series = model.get("series") or {}
    requests = model.get("requests") or {}
    section_findings: dict[str, list[dict]] = {}
    for i, f in enumerate(findings, start=1):
        if f["section"]:
            section_findings.setdefault(f["section"], []).append({"index": i, "rule": f["rule"], "severity": f["severity"]})
    window = model.get("window") or {}
    data_span = span_between(window.get("first_event"), window.get("last_event"))
    from dslogs.analyzer.render.glossary import ARTICLES, GLOSSARY, source_sections

    return {
        "model": model,
        "glossary": GLOSSARY,
        "articles": ARTICLES,
        "source_sections": source_sections(),
        "data_span": data_span,
        "request_span": span_between(window.get("first_request"), window.get("last_request")),
        "section_findings": section_findings,
        "memory_sessions": _memory_sessions(sessions),
        "memory_digits": memory_digits(_memory_sessions(sessions)),
        "session_digits": {**memory_digits(sessions),
                           **column_digits(sessions, ["gpu_wait_pct_p50", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms"])},
        "short_slopes": sum(1 for s in sessions if not s.get("slope_ok", True)),
        "min_slope_minutes": MIN_SLOPE_MINUTES,
        "judged_rss": any((s.get("judged") or {}).get("rss_growth") for s in sessions),
        "generated_at": model.get("generated_at") or "",
        "version": model.get("dslogs_version") or "",
        "window": model.get("window") or {},
        "ingest": model.get("ingest") or {},
        "hosts": model.get("hosts") or [],
        "checklist": _checklist(model.get("checklist"), findings),
        "findings": findings,
        "lead": _lead(model, links),
        "lead_slo_share": LEAD_SLO_SHARE,
        "slow_requests": [dict(r, anchor=links.get(r.get("session_id"))) for r in (model.get("slow_requests") or [])[:SLOW_SHOWN]],
        "slow_digits": column_digits((model.get("slow_requests") or [])[:SLOW_SHOWN], SLOW_COLUMNS),
        "counts": counts,
        # lines of the ranked list that are no rule's finding (the slow line): the badges count them too
        "lead_extra": [x for x in model.get("lead") or [] if x.get("finding") is None],
        "stages": model.get("stages") or [],
        "requests": requests,
        "latency_metrics": [(k, label, requests.get(k)) for k, label in LATENCY_LABELS if isinstance(requests.get(k), dict)],
        "latency_missing": [label for k, label in LATENCY_LABELS
                            if isinstance(requests.get(k), dict) and requests[k].get("p50") is None
                            and requests[k].get("max") is None],
        "section_labels": dict(SECTIONS),
        "sessions": sessions,
        "session_total": max(session_total, int(model.get("sessions_total") or 0)),
        "gpus": _table(model.get("gpus"), GPU_COLUMNS),
        "host_rss": _host_rss(model, sessions),
        "thresholds": _flat_thresholds(model.get("thresholds")),
        "drilldowns": drill,
        "errors": model.get("errors") or [],
        "capacity": model.get("capacity") or [],
        "collector": series.get("collector") or [],
        "collector_lines": _collector_lines(series.get("collector") or [], ingest.get("events")),
        "collector_absent": collector_absent(ingest.get("formats")),
        "server_metrics": model.get("server_metrics") or [],
        "rules_fired": [r for r in rules if r.get("status") == "fired"],
        "rules_pass": [r for r in rules if r.get("status") == "pass"],
        "rules_no_data": [r for r in rules if r.get("status") == "no_data"],
        "charts": by_section,
        "specs": specs,
        "sections": SECTIONS,
        "text_columns": TEXT_COLUMNS,
        "time_zone": charts_mod.time_axis(model).label,
    }


def render_html(model: dict, *, fallback_svg: bool = True, keep: bool = False) -> str:
    """The report page for a `dslogs.report/1` model, as one self-contained HTML string.

    keep: a model the result cache just found or stored gets its page kept beside it
    (dslogs.analyzer.render.page_cache): rendered with slots for generated_at and the bundle, then filled."""
    if not (keep and page_cache.can_keep(model)):
        ctx = view_model(model, fallback_svg=fallback_svg)
        return render_page("report.html", ctx, with_charts=bool(ctx["specs"]))
    tokens = page_cache.new_tokens()
    ctx = view_model(dict(model, generated_at=tokens["generated_at"]), fallback_svg=fallback_svg)
    with_charts = bool(ctx["specs"])
    page = render_page("report.html", ctx, with_charts=with_charts, bundle_slot=tokens["bundle"])
    bundle = vega_bundle() if with_charts else ""
    parts = page_cache.split_page(page, tokens, bundle)
    if parts is None:  # a slot the fill would not reproduce: render the page plainly, keep none
        ctx = view_model(model, fallback_svg=fallback_svg)
        return render_page("report.html", ctx, with_charts=with_charts)
    page_cache.keep(model, parts, bundle)
    return page_cache.fill(parts, model.get("generated_at") or "", bundle)


def render_capacity_html(model: dict, fallback_svg: bool = True) -> str:
    """``dslogs capacity --format html``: the capacity section alone, with its charts."""
    by_section, specs = prepare_charts(model, fallback_svg=fallback_svg)
    specs = {k: v for k, v in specs.items() if k.startswith("capacity")}
    ctx = {"model": model, "generated_at": model.get("generated_at") or "", "version": model.get("dslogs_version") or "",
           "window": model.get("window") or {}, "capacity": model.get("capacity") or [],
           "findings": model.get("findings") or [], "charts": {"capacity": by_section.get("capacity", [])},
           "specs": specs, "time_zone": charts_mod.time_axis(model).label}
    return render_page("capacity.html", ctx, with_charts=bool(specs))


def render_page(template: str, ctx: dict, with_charts: bool, bundle_slot: str | None = None) -> str:
    """Render a page template with the shared assets (bundle, specs, page script, CSP);
    bundle_slot: written where the bundle goes (the CSP still hashes the bundle)."""
    script = page_script()
    bundle = vega_bundle() if with_charts else ""
    ctx = dict(ctx)
    ctx.setdefault("specs", {})
    ctx["vega_bundle"] = Markup(bundle_slot if bundle and bundle_slot else bundle)
    ctx["specs_json"] = Markup(json_for_script(ctx["specs"]))
    ctx["page_script"] = Markup(script)
    ctx["csp"] = content_security_policy([s for s in (bundle, script) if s])
    return render_template(template, **ctx)


def write_html(model: dict, path: Path) -> Path:
    from dslogs.analyzer.core.outfile import write_out

    return write_out(path, render_html(model))
