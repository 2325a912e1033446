"""Draft the Spark twin of a DuckDB query: ``python -m analyzer.spark_sql.twin NAME [NAME...]``.

NAME is a metric (``queries/NAME.sql``) or a view (``views/NAME``: ``analyzer/views/NAME.sql``).
The draft goes to ``analyzer/spark_sql/[views/]NAME.sql`` with a ``mirrors sha256:`` line that
tests/test_spark.py checks against the DuckDB file, so a change there cannot go unnoticed. The
rewrites below are the dialect differences met so far; review every draft (and run
``pytest -m spark``): a construct without a rule (ASOF JOIN, say) needs a hand translation.

- ``quantile_cont(x, p)`` -> ``percentile(x, p)`` (both exact, linear interpolation; never
  ``percentile_approx``);
- ``epoch(ts)`` -> ``(unix_micros(ts) / 1e6)`` (sqlglot maps epoch the wrong way, DESIGN.md §9);
- ``$name`` -> ``:name`` (Spark's named parameters);
- ``VARCHAR`` -> ``STRING``; a decimal literal divisor ``/ 60.0`` -> ``/ 60.0D`` (Spark divides
  decimals as decimals, to 6 places; DuckDB's ``/`` gives a double);
- every ascending ``ORDER BY`` key gets ``NULLS LAST`` (DuckDB's default; Spark puts NULLs first);
- ``arg_min``/``arg_max``/``min_by``/``max_by`` -> Spark ``min_by``/``max_by`` with
  ``FILTER (WHERE arg IS NOT NULL)`` (DuckDB skips NULL arguments, Spark returns them);
- ``regr_slope(y, x)`` without a FILTER -> NaN where DuckDB gives NaN (x constant), NULL
  where it gives NULL (no rows): NaN sorts first in a DESC ORDER BY in both engines;
- ``list_contains`` -> ``array_contains``; ``unnest(generate_series(a, b, step))`` ->
  ``explode(sequence(a, b, step))``; ``'NaN'::DOUBLE`` -> ``CAST('NaN' AS DOUBLE)``;
- ``epoch_ms(ts)`` -> ``unix_millis(ts)``; ``HUGEINT`` -> ``DECIMAL(38, 0)`` (exact integers
  either way; Spark's decimal sums stay exact up to 38 digits);
- the sessions view's two ``ASOF JOIN``s on ``rss_cum`` -> one window that carries the last
  running sums forward to each session bound (Spark SQL has no ASOF JOIN; see ``_ASOF_RSS``).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def source_path(name: str) -> Path:
    if name.startswith("views/"):
        return ROOT / "analyzer" / "views" / f"{name[len('views/'):]}.sql"
    return ROOT / "queries" / f"{name}.sql"


def twin_path(name: str) -> Path:
    return HERE / f"{name}.sql"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _calls(sql: str, fname: str):
    """(start, end, inner) of each call ``fname(...)``, outermost first, left to right."""
    pat = re.compile(rf"\b{fname}\(", re.IGNORECASE)
    i = 0
    while m := pat.search(sql, i):
        depth, j = 1, m.end()
        while depth:
            depth += (sql[j] == "(") - (sql[j] == ")")
            j += 1
        yield m.start(), j, sql[m.end() : j - 1]
        i = j


def _replace_calls(sql: str, fname: str, build) -> str:
    """``build(inner, rest)`` gives the replacement text, or (text, characters of rest consumed)."""
    out, last = [], 0
    for start, end, inner in _calls(sql, fname):
        if start < last:
            continue
        out.append(sql[last:start])
        built = build(inner, sql[end:])
        text, used = built if isinstance(built, tuple) else (built, 0)
        out.append(text)
        last = end + used
    out.append(sql[last:])
    return "".join(out)


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _nulls_last(sql: str) -> str:
    out = []
    for line in sql.split("\n"):
        m = re.search(r"ORDER BY (.+)$", line)
        if m and not line.lstrip().startswith("--"):
            body, depth = m.group(1), 0
            frame = re.search(r"\s+(ROWS|RANGE|LIMIT)\b", body)
            end = frame.start() if frame else len(body)
            for i, ch in enumerate(body[:end]):
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    if depth == 0:
                        end = i
                        break
                    depth -= 1
            items = []
            for item in _split_top(body[:end]):
                s = item.rstrip()
                if s.strip() and not re.search(r"\b(DESC|NULLS (FIRST|LAST))\s*$", s, re.IGNORECASE):
                    item = s + " NULLS LAST" + item[len(s) :]
                items.append(item)
            line = line[: m.start(1)] + ",".join(items) + body[end:]
        out.append(line)
    return "\n".join(out)


def translate(src: str) -> str:
    """The Spark text of a DuckDB query (comments kept as they are)."""
    comments: list[str] = []

    def keep(m):
        comments.append(m.group(0))
        return f"\x00{len(comments) - 1}\x00"

    sql = _translate_code(re.sub(r"--[^\n]*", keep, src))
    return re.sub(r"\x00(\d+)\x00", lambda m: comments[int(m.group(1))], sql)


# sessions.sql: "ASOF JOIN rss_cum AS hi ... hi.ts <= s.last_ts" and "ASOF LEFT JOIN rss_cum AS lo
# ... lo.ts < s.first_ts", as a carried-forward window over the bounds and the running sums.
_ASOF_RSS = """), rss_marks AS (
    -- DuckDB's two ASOF joins in Spark SQL: each session's first_ts and last_ts interleaved with
    -- its process's running sums, each bound carrying the last sums before it. Ties: kind -1
    -- (first_ts) sorts before a sample at the same instant (lo.ts < first_ts), kind 1 (last_ts)
    -- after it (hi.ts <= last_ts).
    SELECT host, pid, ts, 0 AS kind, CAST(NULL AS STRING) AS session_id,
           named_struct('n', n, 'sx', sx, 'sy', sy, 'sxx', sxx, 'sxy', sxy) AS sums
    FROM rss_cum
    UNION ALL
    SELECT host, pid, first_ts, -1, session_id, NULL
    FROM ev WHERE host IS NOT NULL AND pid IS NOT NULL AND first_ts IS NOT NULL
    UNION ALL
    SELECT host, pid, last_ts, 1, session_id, NULL
    FROM ev WHERE host IS NOT NULL AND pid IS NOT NULL AND last_ts IS NOT NULL
), rss_carried AS (
    SELECT session_id, kind,
           last(sums, true) OVER (PARTITION BY host, pid ORDER BY ts, kind
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sums
    FROM rss_marks
), rss_bounds AS (
    SELECT session_id,
           first(CASE WHEN kind = 1 THEN sums END, true) AS hi,
           first(CASE WHEN kind = -1 THEN sums END, true) AS lo
    FROM rss_carried
    WHERE kind <> 0
    GROUP BY session_id
), rss AS (
    SELECT
        session_id,
        hi.n - coalesce(lo.n, 0) AS n,
        hi.sx - coalesce(lo.sx, 0) AS sx,
        hi.sy - coalesce(lo.sy, 0) AS sy,
        hi.sxx - coalesce(lo.sxx, 0) AS sxx,
        hi.sxy - coalesce(lo.sxy, 0) AS sxy
    FROM rss_bounds
    WHERE hi IS NOT NULL
"""


def _asof(sql: str) -> str:
    if "ASOF" not in sql:
        return sql
    m = re.search(r"\), rss AS \(.*?ASOF JOIN rss_cum AS hi.*?ASOF LEFT JOIN rss_cum AS lo[^\n]*\n", sql, re.DOTALL)
    if not m:
        raise ValueError("ASOF JOIN without a rule: translate it by hand")
    return sql[: m.start()] + _ASOF_RSS + sql[m.end() :]


def _translate_code(src: str) -> str:
    sql = _asof(src)
    sql = re.sub(r"\bquantile_cont\(", "percentile(", sql)
    sql = _replace_calls(sql, "epoch_ms", lambda inner, _rest: f"unix_millis({inner})")
    sql = re.sub(r"\bHUGEINT\b", "DECIMAL(38, 0)", sql)
    sql = _replace_calls(sql, "epoch", lambda inner, _rest: f"(unix_micros({inner}) / 1e6)")
    sql = re.sub(r"\$([A-Za-z_]\w*)", r":\1", sql)
    sql = re.sub(r"\bVARCHAR\b", "STRING", sql)
    sql = re.sub(r"/ (\d+\.\d+)\b(?!D)", r"/ \1D", sql)
    sql = sql.replace("'NaN'::DOUBLE", "CAST('NaN' AS DOUBLE)")
    sql = re.sub(r"\blist_contains\(", "array_contains(", sql)
    sql = _replace_calls(
        sql, "unnest", lambda inner, _rest: "explode(" + re.sub(r"^generate_series\(", "sequence(", inner) + ")"
    )
    for duck, spark in (("arg_min", "min_by"), ("arg_max", "max_by"), ("min_by", "min_by"), ("max_by", "max_by")):

        def by(inner, rest, spark=spark):
            arg = _split_top(inner)[0].strip()
            call = f"{spark}({inner})"
            if f"{arg} IS NOT NULL" in rest[:200]:
                return call
            m = re.match(r"\s*FILTER\s*\(\s*WHERE\s+", rest, re.IGNORECASE)
            if m:
                return f"{call} FILTER (WHERE {arg} IS NOT NULL AND ", m.end()
            return f"{call} FILTER (WHERE {arg} IS NOT NULL)"

        sql = _replace_calls(sql, duck, by)

    def slope(inner, rest):
        if re.match(r"\s*FILTER", rest):
            return f"regr_slope({inner})"
        return f"coalesce(regr_slope({inner}), CASE WHEN regr_count({inner}) > 0 THEN CAST('NaN' AS DOUBLE) END)"

    sql = _replace_calls(sql, "regr_slope", slope)
    return _nulls_last(sql)


def draft(name: str) -> Path:
    src_path = source_path(name)
    rel = src_path.relative_to(ROOT).as_posix()
    head = f"-- Spark SQL twin of {rel} (mirrors sha256:{digest(src_path)}); rewrites: analyzer/spark_sql/twin.py.\n"
    out = twin_path(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + translate(src_path.read_text(encoding="utf-8")), encoding="utf-8")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(draft(arg))
