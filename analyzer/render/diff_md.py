"""A ``dslogs.diff/1`` model as Markdown (chat, issue, CI log), and the Markdown helpers the weekly
report shares; the HTML page is ``dslogs.analyzer.render.diff_html``."""

from __future__ import annotations

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.model.diff import QUANTILES

VERDICT_MARK = {"regression": " **▲ regression**", "mix": " (mix)", "improved": " ▼ improved", "too few": " (too few)"}


def _ci(c: dict) -> str:
    ci = c.get("ci_pct")
    if not ci or ci[0] is None:
        return ""
    return f" [{ci[0]:+.0f}, {ci[1]:+.0f}]"


def md_text(text) -> str:
    # Log-derived text in Markdown: one line, no table breaks, inert if the Markdown becomes HTML.
    from dslogs.analyzer.core.textsafe import visible

    s = visible(" ".join(str(text or "").split()))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|").replace("`", "'")


def _latency_table(rows: list[dict], significance: bool) -> list[str]:
    head = "| | n before → after | " + " | ".join(f"{q} before → after (change{' [95 % CI]' if significance else ''})" for q, _ in QUANTILES)
    out = [head + " | same mix |", "|---|---:|" + "---:|" * len(QUANTILES) + "---:|"]
    for r in rows:
        cells = []
        for q, _ in QUANTILES:
            c = r.get(q) or {}
            cells.append(f"{fmt.with_unit(c.get('before'))} → {fmt.with_unit(c.get('after'))} ({fmt.signed_pct(c.get('change_pct'))}{_ci(c)})"
                         f"{VERDICT_MARK.get(c.get('verdict'), '')}")
        p95 = r.get("p95") or {}
        same_mix = (f"p95 mix {fmt.signed_pct(p95.get('mix_pct'))}, service {fmt.signed_pct(p95.get('service_pct'))}"
                    if p95.get("service_pct") is not None else "—")
        label = f"**{r['label']}**" if r.get("verdict") == "regression" else r["label"]
        out.append(f"| {label} ({r['unit']}) | {fmt.with_unit(r.get('count_before'))} → {fmt.with_unit(r.get('count_after'))} | "
                   + " | ".join(cells) + f" | {same_mix} |")
    return out


def render_markdown_diff(d: dict) -> str:
    b, a = d["before"], d["after"]
    lim = d["regression_threshold_pct"]
    out = ["# dslogs diff", "",
           f"**before**: {md_text(b['label'])} — {md_text(', '.join(b['paths']))} ({b['source']}; "
           f"{fmt.with_unit(b['requests'])} requests, {md_text(b['first_event'])} – {md_text(b['last_event'])})  ",
           f"**after**: {md_text(a['label'])} — {md_text(', '.join(a['paths']))} ({a['source']}; "
           f"{fmt.with_unit(a['requests'])} requests, {md_text(a['first_event'])} – {md_text(a['last_event'])})", "",
           f"A regression is a significant change worse than {lim:g} % that the request mix does not explain. "
           f"Regressions: **{len(d['regressions'])}**" + (f" ({md_text(', '.join(d['regressions']))})" if d["regressions"] else "") + "."]
    for note in d.get("notes") or []:
        out += ["", f"> {md_text(fmt.note_message(note))}"]
    if d.get("summary"):
        out += ["", "## What changed", ""] + [f"- {md_text(s)}" for s in d["summary"]]
    out += ["", "## Requests", ""] + _latency_table(d["request_metrics"], d["significance"])
    out += ["", "| | before | after | change | p | verdict |", "|---|---:|---:|---:|---:|---|"]
    for r in d["rates"]:
        def share(v):
            return "—" if v is None else f"{v * 100:.2f} %"
        p = "—" if r.get("p_value") is None else f"{r['p_value']:.3g}"
        pts = "—" if r.get("change_pts") is None else f"{r['change_pts']:+.2f} pts"
        out.append(f"| {r['label']} | {share(r['before'])} | {share(r['after'])} | {pts} | {p} | {r['verdict']} |")
    out += ["", "## Stages", ""] + (_latency_table(d["stages"], d["significance"]) if d["stages"] else ["no stage timings"])
    mix = d["mix"]
    out += ["", "## Mix (what the requests asked for)", ""]
    if not mix["available"]:
        out.append("Not available from a saved report (request-level values are needed).")
    else:
        out += ["| | p50 before → after | p95 before → after | rank test p | shifted |", "|---|---:|---:|---:|---|"]
        for r in mix["rows"]:
            p = (r.get("rank_test") or {}).get("p_value")
            out.append(f"| {r['label']} | {fmt.with_unit(r['before']['p50'])} → {fmt.with_unit(r['after']['p50'])} ({fmt.signed_pct(r['change_pct'])}) | "
                       f"{fmt.with_unit(r['before']['p95'])} → {fmt.with_unit(r['after']['p95'])} ({fmt.signed_pct(r.get('p95_change_pct'))}) | "
                       f"{'—' if p is None else f'{p:.3g}'} | {'yes' if r['shifted'] else 'no'} |")
        for name, v in mix["params"].items():
            def shares(rows):
                return ", ".join(f"{fmt.with_unit(x['value'])}: {x['share'] * 100:.1f} %" for x in rows) or "—"
            out.append(f"\n{name}: before {shares(v['before'])}; after {shares(v['after'])}{' — **changed**' if v['changed'] else ''}")
    out += ["", "## Memory", "", "| | before | after | change |", "|---|---:|---:|---:|"]
    for r in d["memory"]:
        out.append(f"| {r['label']} | {fmt.with_unit(r['before'], r['unit'])} | {fmt.with_unit(r['after'], r['unit'])} | {fmt.with_unit(r['change'])} |")
    for c in d.get("capacity") or []:
        out += ["", f"## Capacity: {md_text(c['host'] or 'unnamed host')}", "",
                f"knee {fmt.with_unit(c.get('before_knee'))} → {fmt.with_unit(c.get('after_knee'))}; recommended limit "
                f"{fmt.with_unit(c.get('before_limit'))} → {fmt.with_unit(c.get('after_limit'))}; MiB per request in flight "
                f"{fmt.with_unit(c.get('before_mb_per_request'))} → {fmt.with_unit(c.get('after_mb_per_request'))}", "",
                "| in flight | requests | tokens/s | TPOT p95 (ms) | peak reserved (MiB) |", "|---:|---:|---:|---:|---:|"]
        for r in c["levels"]:
            b, a = r["before"], r["after"]
            out.append(f"| {r['level']} | {fmt.with_unit(b['requests'])} → {fmt.with_unit(a['requests'])} | "
                       f"{fmt.with_unit(b['tokens_per_s'])} → {fmt.with_unit(a['tokens_per_s'])} | "
                       f"{fmt.with_unit(b['tpot_p95_ms'])} → {fmt.with_unit(a['tpot_p95_ms'])} | "
                       f"{fmt.with_unit(b['reserved_peak_mb'])} → {fmt.with_unit(a['reserved_peak_mb'])} |")
    if d["errors"]:
        out += ["", "## Errors", "", "| error type | before | after | sample message |", "|---|---:|---:|---|"]
        for e in d["errors"][:12]:
            out.append(f"| {md_text(e['error_type'])} | {e['before']} | {e['after']} | {md_text(e['sample_msg'])[:160]} |")
    out += md_finding_changes(d["findings"])
    return "\n".join(out) + "\n"


def md_finding_changes(findings: dict, with_fix: bool = False) -> list[str]:
    """Markdown of findings new / resolved / still open between two models (diff and weekly)."""
    out: list[str] = []
    for kind, title in (("new", "New findings"), ("resolved", "Resolved findings"), ("persisting", "Still open")):
        rows = findings[kind]
        out += ["", f"## {title} ({len(rows)})", ""]
        if not rows:
            out.append("none")
        for f in rows:
            n = f.get("sessions") or 0
            where = f" — {n} session{'s' if n != 1 else ''}" if n else ""
            hosts = f" on {md_text(', '.join(f['hosts']))}" if f.get("hosts") else ""
            out.append(f"- **{md_text(f['severity'])}** `{md_text(f['rule'])}`{hosts}{where}: {md_text(f.get('message'))}")
            if with_fix and kind != "resolved" and f.get("fix"):
                out.append(f"  - fix: {md_text(f['fix'])}")
    return out
