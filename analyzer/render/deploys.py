"""A ``dslogs.deploys/1`` model as Markdown, JSON or a small self-contained HTML page."""

from __future__ import annotations

import html
import json

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.render.diff_md import md_text

VERDICT_MD = {"regression": "**▲ regression**", "improvement": "▼ improvement", "steady": "steady",
              "too few": "too few", "first": "—"}


def _value(v) -> str:
    return "—" if v is None else str(v)


def _changes_text(changes: list[dict], limit: int = 6) -> str:
    parts = [f"{c['key']} {_value(c['before'])} → {_value(c['after'])}" for c in changes[:limit]]
    if len(changes) > limit:
        parts.append(f"+{len(changes) - limit} more")
    return "; ".join(parts) or "nothing recorded changed"


def _metric_text(m: dict) -> str:
    q = f" {m['quantile']}" if m.get("quantile") else ""
    service = f", same requests {fmt.signed_pct(m['service_pct'])}" if m.get("service_pct") is not None else ""
    if m.get("quantile") is None:  # a rate: shares, its change in points
        change = "—" if m.get("change_pct") is None else f"{m['change_pct']:+.2f} pts"
        return f"{m['label']} {fmt.compact(m.get('before'))} → {fmt.compact(m.get('after'))} ({change}) {m['verdict']}"
    return (f"{m['label']}{q} {fmt.compact(m.get('before'))} → {fmt.compact(m.get('after'))} {m.get('unit') or ''} "
            f"({fmt.signed_pct(m.get('change_pct'))}{service}) {m['verdict']}")


def baseline_text(d: dict) -> str:
    """Where a deploy's baseline came from when it is not in the asked window; else empty."""
    b = d.get("baseline") or {}
    if not b.get("outside_window"):
        return ""
    return f"against {b['id']} ({b.get('since') or 'the first event'} to {b.get('until') or 'the last'}), read from before the window"


def deploys_table_md(rows: list[dict]) -> list[str]:
    """One row per deploy: when, how many requests, what changed, the verdict."""
    out = ["| deploy | label | first event | last event | requests | changed | verdict |", "|---|---|---|---|---:|---|---|"]
    for d in rows:
        changed = "first deploy" if d["verdict"] == "first" else _changes_text(d.get("changes") or [])
        if baseline := baseline_text(d):
            changed += f"; {baseline}"
        out.append(f"| {d['id']} | {md_text(d.get('label') or '')} | {d.get('first_event') or '—'} | {d.get('last_event') or '—'} | "
                   f"{d.get('requests', 0)} | {md_text(changed)} | {VERDICT_MD.get(d['verdict'], d['verdict'])} |")
    return out


def deploys_md(model: dict) -> str:
    out = ["# Deploys", ""]
    rows = model.get("deploys") or []
    out += deploys_table_md(rows)
    for d in rows:
        if d.get("metric_changes") and d["verdict"] in ("regression", "improvement"):
            out += ["", f"## {d['id']}: {d['verdict']}", ""]
            out += [f"- {md_text(_metric_text(m))}" for m in d["metric_changes"][:12]]
            out += [f"- {md_text(r)}" for r in d.get("reasons") or [] if r.startswith("new ")]
    cp = model.get("change_point")
    if cp:
        out += ["", "## Change point", ""] + [f"- {md_text(s)}" for s in cp.get("summary") or []]
    for note in model.get("notes") or []:
        out += ["", f"> {md_text(note)}"]
    return "\n".join(out) + "\n"


def deploys_html(model: dict) -> str:
    e = html.escape
    body = ["<h1>Deploys</h1>", "<table><tr><th>deploy</th><th>label</th><th>first event</th><th>last event</th>"
            "<th>requests</th><th>changed</th><th>verdict</th><th>behind it</th></tr>"]
    for d in model.get("deploys") or []:
        changed = "first deploy" if d["verdict"] == "first" else _changes_text(d.get("changes") or [], 12)
        if baseline := baseline_text(d):
            changed += f"; {baseline}"
        behind = "<br>".join(e(_metric_text(m)) for m in (d.get("metric_changes") or [])[:8])
        body.append(f"<tr class=\"{e(d['verdict'].replace(' ', '-'))}\"><td>{e(d['id'])}</td><td>{e(d.get('label') or '')}</td>"
                    f"<td>{e(d.get('first_event') or '—')}</td><td>{e(d.get('last_event') or '—')}</td>"
                    f"<td>{d.get('requests', 0)}</td><td>{e(changed)}</td><td>{e(d['verdict'])}</td><td>{behind}</td></tr>")
    body.append("</table>")
    cp = model.get("change_point")
    if cp:
        body += ["<h2>Change point</h2>"] + [f"<p>{e(s)}</p>" for s in cp.get("summary") or []]
    body += [f"<p class=\"note\">{e(n)}</p>" for n in model.get("notes") or []]
    style = ("body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}.regression td{background:#fde2e2}"
             ".improvement td{background:#e2f5e2}.note{color:#555}")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>dslogs deploys</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def deploys_json(model: dict) -> str:
    return json.dumps(model, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_deploys(model: dict, format: str) -> str:  # noqa: A002 - the CLI's option name
    return {"md": deploys_md, "json": deploys_json, "html": deploys_html}[format](model)
