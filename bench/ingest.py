"""Ingest benchmark: dslogs against a bare DuckDB scan and jq on the same files,
the HTML report against the JSON run, many short sessions, and a size series for time and memory.

    .venv/bin/python bench/ingest.py [--events 1500000] [--days 7] [--repeat 3]
        [--sizes 0.5M[,5M,20M]] [--short-events 3000000] [--sections main,render,short,sizes]

Simulator data (bench/data/, git-ignored; made once): --days daily files, the closed days
gzipped as our collector leaves them. Everything runs as a child process (what a user types),
timed by wall clock and by CPU (user + sys of the child): on a shared machine CPU time is the
steadier figure. Each figure is the best of --repeat runs (peak RSS: the largest). Sections:

main (bench/data/ingest-<events>/, --events events):
- bare: one DuckDB read_json scan computing stage percentiles of the same files (explicit
  columns, the fastest way to ask DuckDB that question);
- cold query: `dslogs query` on requests with an empty cache (reads every file, builds the
  cache); --no-cache too;
- cold analyze: `dslogs analyze --format json` with an empty cache ('n/a' if it fails);
  target <= 2.0x bare;
- warm: the same query and analyze once the cache holds the files; target <= 0.5x bare;
- append: one more day's file added to a warm cache: the extra time against the cold read's,
  and the new file's share of the bytes;
- session: `dslogs session ID --format jsonl` (warm and --no-cache) against
  `zcat -f FILES | jq -c 'select(.session_id == ID)'`; target >= 10x.
render: `analyze --out r.html` against `--format json`, cold and warm, on sample_logs/ and on the
  main data set (bench/render.py's measurement); target HTML <= 1.3x JSON.
short (bench/data/short-<events>/, --short-events events): healthy sessions of 1 to 3 requests
  (simulate's max_turns), 100 k+ sessions: bare, cold and warm analyze; warm target <= 0.5x bare
  with 50 k+ sessions.
sizes (bench/data/ingest-<n>/ for each of --sizes, same recipe as main): bare, cold and warm
  analyze once each (--size-repeat): time and peak RSS per size and per million events, so growth
  shows; peak RSS target <= 1.5 GB at 5 M and 20 M events. The default runs
  0.5M only (a few minutes in all); --sizes 0.5M,5M,20M is the full series (20 M events: ~1 GB of
  data made once, minutes per run).
The summary at the end prints every ratio above with its target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# `python -m analyzer` runs the command line of any tree, older ones (before `python -m dslogs`) too
DSLOGS = [PY, "-m", "analyzer"]
BARE = """
import sys, duckdb
files = sys.argv[1:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
rows = con.execute(
    "SELECT stage, count(*), quantile_cont(duration_ms, [0.5, 0.9, 0.95, 0.99]), max(duration_ms) "
    "FROM read_json($f, columns={stage: 'VARCHAR', duration_ms: 'DOUBLE'}, format='newline_delimited') "
    "GROUP BY stage", {"f": files}).fetchall()
print(len(rows))
"""
# Runs one command and reports its own child's wall, CPU and peak RSS (so figures never mix).
PROBE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[2:], shell=sys.argv[1] == "sh", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
                  "rss_mb": ru.ru_maxrss / 1024, "err": p.stderr.decode(errors="replace")[-400:]}))
"""


def probe(cmd: list[str] | str, env: dict | None = None) -> dict:
    shell = isinstance(cmd, str)
    args = [PY, "-c", PROBE, "sh" if shell else "exec", *([cmd] if shell else cmd)]
    # cwd and PYTHONPATH = this tree: `python -m dslogs` runs the code under test
    env = {**(env or os.environ), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"rc": runs[-1]["rc"], "wall": float("nan"), "cpu": float("nan"), "rss_mb": float("nan"),
                "err": runs[-1]["err"]}  # fmt: skip
    return {"rc": 0, "wall": min(r["wall"] for r in ok), "cpu": min(r["cpu"] for r in ok),
            "rss_mb": max(r["rss_mb"] for r in ok)}  # fmt: skip


SCENARIOS = ["memory_leak", "gpu_wait", "kv_cache_bloat"]
SHORT_TURNS = 3  # the short-sessions data set: healthy sessions of 1 to 3 requests


def make_data(
    folder: Path, events: int, days: int, scenarios=SCENARIOS, max_turns: int | None = None
) -> list[Path]:
    from dslogs.analyzer.simulate import simulate

    done = folder / "truth.json"
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        # One file per day (no size rotation): the daily files the collector writes by default.
        simulate(folder, list(scenarios), days=days, seed=7, events=events, max_bytes=1 << 40,
                 max_turns=max_turns)  # fmt: skip
        print(
            f"simulated {events} events over {days} days in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
    return sorted(p for p in folder.rglob("*.jsonl*"))


def extra_day(folder: Path, events: int, days: int, into: Path) -> Path:
    """One more day of traffic (a new file for the append test), made once."""
    from dslogs.analyzer.simulate import simulate

    src = folder.parent / (folder.name + "-extra")
    if not (src / "truth.json").is_file():
        shutil.rmtree(src, ignore_errors=True)
        first = date(2026, 11, 23) + timedelta(
            days=days
        )  # the day after the data set (simulate's start)
        simulate(src, ["healthy"], days=1, seed=8, events=max(1, events // days), max_bytes=1 << 40,
                 start=first.isoformat())  # fmt: skip
    (new,) = sorted(src.rglob("*.jsonl*"))
    target = into / new.name
    shutil.copyfile(new, target)
    return target


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and a == a and b == b else "n/a"


def env_with(cache_home: Path) -> dict:
    return {**os.environ, "XDG_CACHE_HOME": str(cache_home)}


def cold(cmd: list[str], work: Path, n: int) -> dict:
    """Best of n runs, each with an empty cache folder."""
    runs = []
    for i in range(n):
        home = work / f"cold-{time.monotonic_ns()}-{i}"
        runs.append(probe(cmd, env_with(home)))
        shutil.rmtree(home, ignore_errors=True)
    return best(runs)


def warm(cmd: list[str], work: Path, n: int) -> dict:
    """Best of n runs on a cache that one earlier run of the same command filled (a user re-running)."""
    home = work / f"warm-{time.monotonic_ns()}"
    probe(cmd, env_with(home))
    out = best([probe(cmd, env_with(home)) for _ in range(n)])
    shutil.rmtree(home, ignore_errors=True)
    return out


def analyze_json(logdir: Path) -> list[str]:
    return [*DSLOGS, "analyze", str(logdir), "--format", "json"]


def data_set(folder: Path, events: int, days: int, **kw) -> tuple[Path, list[Path], dict]:
    files = make_data(folder, events, days, **kw)
    truth = json.loads((folder / "truth.json").read_text())
    logdir = folder / files[0].relative_to(folder).parts[0]
    total = sum(p.stat().st_size for p in files)
    print(f"{folder.name}: {len(files)} files, {total / 2**20:.0f} MiB on disk, {truth['events']} events, "
          f"{truth['sessions']} sessions, {truth['requests']} requests", flush=True)  # fmt: skip
    return logdir, files, truth


def bare_scan(files: list[Path], n: int) -> dict:
    return best([probe([PY, "-c", BARE, *map(str, files)]) for _ in range(n)])


def print_table(res: dict[str, dict], bare: dict) -> None:
    print(
        f"{'run':22} {'wall s':>8} {'cpu s':>8} {'peak RSS':>9} {'wall/bare':>10} {'cpu/bare':>9}"
    )
    for name, r in res.items():
        if r.get("rc") != 0:
            print(
                f"{name:22} {'n/a':>8}   ({(r.get('err') or '').strip().splitlines()[-1:] or ''})"
            )
            continue
        print(f"{name:22} {r['wall']:8.2f} {r['cpu']:8.2f} {r['rss_mb']:7.0f} MB {ratio(r['wall'], bare['wall']):>10} "
              f"{ratio(r['cpu'], bare['cpu']):>9}")  # fmt: skip


def section_main(args, work: Path) -> dict:
    data = ROOT / "bench" / "data" / f"ingest-{args.events}"
    logdir, files, truth = data_set(data, args.events, args.days)
    total_bytes = sum(p.stat().st_size for p in files)
    events = truth["events"]
    n = args.repeat
    query = [
        *DSLOGS,
        "query",
        str(logdir),
        "SELECT count(*), avg(ttft_ms), quantile_cont(e2e_ms, 0.95) FROM requests",
    ]
    res: dict[str, dict] = {}
    res["bare"] = bare_scan(files, n)
    res["cold_query"] = cold(query, work, n)
    res["cold_query_no_cache"] = best([probe([*query, "--no-cache"]) for _ in range(n)])
    res["cold_analyze"] = cold(analyze_json(logdir), work, n)

    # Warm: a cache that has seen the files (and a second run that stored requests/sessions).
    # The append test works on a copy of the folder, so the data set stays as simulated.
    warm_logs = work / "logs"
    shutil.copytree(logdir, warm_logs)
    home = work / "warm"
    warm_query = [*DSLOGS, "query", str(warm_logs), query[-1]]
    probe(warm_query, env_with(home))
    probe(warm_query, env_with(home))
    res["warm_query"] = best([probe(warm_query, env_with(home)) for _ in range(n)])
    res["warm_analyze"] = best([probe(analyze_json(warm_logs), env_with(home)) for _ in range(n)])

    # Session drill-down against jq over the same files.
    import duckdb

    sid = duckdb.sql(
        "SELECT session_id FROM read_json($f, columns={session_id: 'VARCHAR', stage: 'VARCHAR'}, "
        "format='newline_delimited') WHERE stage = 'input' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
        params={"f": [str(p) for p in files]},
    ).fetchall()[0][0]  # fmt: skip
    session = [*DSLOGS, "session", str(warm_logs), sid, "--format", "jsonl"]
    res["session_warm"] = best([probe(session, env_with(home)) for _ in range(n)])
    res["session_no_cache"] = best([probe([*session, "--no-cache"]) for _ in range(n)])
    jq = f"zcat -f {' '.join(str(p) for p in files)} | jq -c 'select(.session_id == \"{sid}\")'"
    res["jq"] = (
        best([probe(jq) for _ in range(max(1, n - 1))])
        if shutil.which("jq")
        else best([{"rc": 1, "err": "no jq"}])
    )

    # One new day appended to the warm cache: only that file is read.
    new = extra_day(data, args.events, args.days, warm_logs)
    res["append"] = probe(warm_query, env_with(home))
    new_share = new.stat().st_size / (total_bytes + new.stat().st_size)
    with open(new, "rb") as fh:
        new_events = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    event_share = new_events / (events + new_events)
    shutil.rmtree(warm_logs, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)

    bare = res["bare"]
    print(f"\n== main: {events} events, {truth['sessions']} sessions ==")
    print_table(res, bare)
    cold_q, warm_q, app = res["cold_query"], res["warm_query"], res["append"]
    extra = (app["wall"] - warm_q["wall"]) / max(cold_q["wall"] - warm_q["wall"], 1e-9)
    print(
        f"cold query / bare:      {ratio(cold_q['wall'], bare['wall'])} wall, {ratio(cold_q['cpu'], bare['cpu'])} cpu   (target <= 2.0x)"
    )
    print(f"append: extra time {extra:.2f} of a cold read, for a file holding {event_share:.2f} of the events "
          f"({new_share:.2f} of the bytes on disk: it is not gzipped)")  # fmt: skip
    print(
        f"jq / session (warm):    {ratio(res['jq']['wall'], res['session_warm']['wall'])}   (target >= 10x)"
    )
    print(
        f"jq / session (no cache): {ratio(res['jq']['wall'], res['session_no_cache']['wall'])}",
        flush=True,
    )
    out = data / "results.json"
    out.write_text(json.dumps({"files": len(files), "bytes": total_bytes, "events": events, "runs": res,
                               "append_extra_share": extra, "append_bytes_share": new_share,
                               "append_events_share": event_share}, indent=1))  # fmt: skip
    return {"events": events, "sessions": truth["sessions"], "runs": res, "logdir": str(logdir)}


def section_render(args, work: Path) -> dict:
    """bench/render.py's json/html × cold/warm measurement, on sample_logs/ and the main data set."""
    spec = importlib.util.spec_from_file_location("bench_render", ROOT / "bench" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    sets = {"sample_logs": ROOT / "sample_logs"}
    if args.events:
        data = ROOT / "bench" / "data" / f"ingest-{args.events}"
        sets[f"{args.events / 1e6:g} M events"] = data_set(data, args.events, args.days)[0]
    out = {}
    print("\n== render: analyze --out r.html against --format json ==")
    print(f"{'data set':16} {'cache':5} {'json s':>7} {'html s':>7} {'html/json':>9} {'json cpu':>8} {'html cpu':>8} "
          f"{'cpu ratio':>9} {'html RSS':>9}")  # fmt: skip
    for label, logs in sets.items():
        run_dir = work / f"render-{len(out)}"
        run_dir.mkdir()
        r = render.measure(ROOT, logs, run_dir, args.repeat)
        shutil.rmtree(run_dir, ignore_errors=True)
        out[label] = r
        for state in ("cold", "warm"):
            j, h = r[f"json_{state}"], r[f"html_{state}"]
            if j["rc"] or h["rc"]:
                print(
                    f"{label:16} {state:5} failed: {(j.get('err') or h.get('err') or '').strip().splitlines()[-1:]}"
                )
                continue
            print(f"{label:16} {state:5} {j['wall']:7.2f} {h['wall']:7.2f} {ratio(h['wall'], j['wall']):>9} "
                  f"{j['cpu']:8.2f} {h['cpu']:8.2f} {ratio(h['cpu'], j['cpu']):>9} {h['rss_mb']:6.0f} MB", flush=True)  # fmt: skip
    return out


def section_short(args, work: Path) -> dict:
    data = ROOT / "bench" / "data" / f"short-{args.short_events}"
    logdir, files, truth = data_set(
        data, args.short_events, args.days, scenarios=["healthy"], max_turns=SHORT_TURNS
    )
    n = args.repeat
    res = {"bare": bare_scan(files, n), "cold_analyze": cold(analyze_json(logdir), work, n),
           "warm_analyze": warm(analyze_json(logdir), work, n)}  # fmt: skip
    print(f"\n== short sessions: {truth['events']} events, {truth['sessions']} sessions of 1 to {SHORT_TURNS} "
          f"requests ({truth['requests']} requests) ==")  # fmt: skip
    print_table(res, res["bare"])
    return {"events": truth["events"], "sessions": truth["sessions"], "runs": res}


def parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * mult)


def section_sizes(args, work: Path) -> dict:
    sizes = [parse_size(x) for x in args.sizes.split(",") if x.strip()]
    out: dict[int, dict] = {}
    for events in sizes:
        data = ROOT / "bench" / "data" / f"ingest-{events}"
        logdir, files, truth = data_set(data, events, args.days)
        n = args.size_repeat
        print(f"measuring {events / 1e6:g} M events …", flush=True)
        out[events] = {"events": truth["events"], "sessions": truth["sessions"],
                       "bytes": sum(p.stat().st_size for p in files),
                       "runs": {"bare": bare_scan(files, n), "cold_analyze": cold(analyze_json(logdir), work, n),
                                "warm_analyze": warm(analyze_json(logdir), work, n)}}  # fmt: skip
    print(
        "\n== sizes: time and peak RSS as the logs grow (cold = empty cache, warm = cache filled) =="
    )
    print(f"{'events':>10} {'sessions':>9} {'run':13} {'wall s':>8} {'cpu s':>8} {'peak RSS':>9} {'wall/bare':>10} "
          f"{'cpu/bare':>9} {'cpu s/M ev':>11} {'RSS growth':>11}")  # fmt: skip
    first = out[sizes[0]] if sizes else None
    for r in out.values():
        bare = r["runs"]["bare"]
        for name, x in r["runs"].items():
            if x.get("rc") != 0:
                print(
                    f"{r['events']:>10} {r['sessions']:>9} {name:13} failed: {(x.get('err') or '').strip().splitlines()[-1:]}"
                )
                continue
            base = first["runs"][name]["rss_mb"]
            print(f"{r['events']:>10} {r['sessions']:>9} {name:13} {x['wall']:8.2f} {x['cpu']:8.2f} {x['rss_mb']:6.0f} MB "
                  f"{ratio(x['wall'], bare['wall']):>10} {ratio(x['cpu'], bare['cpu']):>9} "
                  f"{x['cpu'] / (r['events'] / 1e6):11.2f} {ratio(x['rss_mb'], base):>11}")  # fmt: skip
    print(
        "(RSS growth: against the smallest size; cpu s/M ev: CPU seconds per million events)",
        flush=True,
    )
    return out


def verdict(value: float, target: float, above: bool = False) -> str:
    if value != value:
        return "n/a"
    return "ok" if (value >= target if above else value <= target) else "MISSED"


def summary(results: dict) -> None:
    load = os.getloadavg()[0]
    print(
        f"\n== every ratio of this run (load average {load:.1f} on {os.cpu_count()} cpus) =="
    )

    def line(label: str, a: dict, b: dict, target: float) -> None:
        if a.get("rc") != 0 or b.get("rc") != 0:
            print(f"{label:48} n/a")
            return
        w, c = a["wall"] / b["wall"], a["cpu"] / b["cpu"]
        ok_wall, ok_cpu = verdict(w, target) == "ok", verdict(c, target) == "ok"
        # wall clock on a shared box measures the neighbours too: CPU time says which it is
        judged = "ok" if ok_wall and ok_cpu else "MISSED" if not (ok_wall or ok_cpu) else (
            "ok on cpu, not on wall" if ok_cpu else "ok on wall, not on cpu")  # fmt: skip
        print(f"{label:48} {w:6.2f}x wall {c:6.2f}x cpu   target <= {target}x: {judged}")

    for label, r in results.get("render", {}).items():
        for state in ("cold", "warm"):
            line(f"1. HTML / JSON, {label}, {state}", r[f"html_{state}"], r[f"json_{state}"], 1.3)
    sets = []
    if "main" in results:
        sets.append((f"{results['main']['events'] / 1e6:.2g} M events", results["main"]))
    if "short" in results:
        sets.append(
            (f"short sessions, {results['short']['events'] / 1e6:.2g} M events", results["short"])
        )
    for events, r in results.get("sizes", {}).items():
        sets.append((f"{events / 1e6:g} M events (sizes)", r))
    for label, r in sets:
        line(
            f"2. cold analyze json / bare, {label}",
            r["runs"]["cold_analyze"],
            r["runs"]["bare"],
            2.0,
        )
    for label, r in sets:
        line(f"3. warm analyze / bare, {label} ({r['sessions'] / 1e3:.0f} k sessions)", r["runs"]["warm_analyze"],
             r["runs"]["bare"], 0.5)  # fmt: skip
    for label, r in sets:
        peak = max((x["rss_mb"] for k, x in r["runs"].items() if k not in ("jq", "bare") and x.get("rc") == 0),
                   default=float("nan"))  # fmt: skip
        print(f"{'4. peak RSS of dslogs, ' + label:48} {peak:6.0f} MB   target <= {RSS_TARGET_MB} MB: "
              f"{verdict(peak, RSS_TARGET_MB)}")  # fmt: skip
    if "main" in results:
        m = results["main"]["runs"]
        print(f"{'   jq / session (warm), main':48} {ratio(m['jq']['wall'], m['session_warm']['wall']):>7} wall   "
              f"target >= 10x: {verdict(m['jq']['wall'] / m['session_warm']['wall'], 10, above=True)}")  # fmt: skip


RSS_TARGET_MB = 1536
SECTIONS = ("main", "render", "short", "sizes")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--events", type=int, default=1_500_000, help="main data set (and render's large one)"
    )
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--sizes", default="0.5M", help="size series, e.g. 0.5M,5M,20M (the full series)"
    )
    ap.add_argument("--size-repeat", type=int, default=1, help="runs per size (each cold and warm)")
    ap.add_argument(
        "--short-events", type=int, default=3_000_000, help="many-short-sessions data set"
    )
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"any of {', '.join(SECTIONS)}")
    args = ap.parse_args()
    wanted = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s) {', '.join(sorted(unknown))}; valid: {', '.join(SECTIONS)}")
    work = Path(tempfile.mkdtemp(prefix="dslogs-bench-"))
    results: dict = {}
    started = time.perf_counter()
    try:
        for name in SECTIONS:
            if name in wanted:
                results[name] = globals()[f"section_{name}"](args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(results)
    tag = "-".join(wanted) + ("-" + args.sizes.replace(",", "-") if "sizes" in wanted else "")
    out = ROOT / "bench" / "data" / f"ingest-results-{tag}.json"  # one file per kind of run
    out.write_text(json.dumps(results, indent=1, default=str))
    print(
        f"(results in {out.relative_to(ROOT)}; the bench took {time.perf_counter() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
