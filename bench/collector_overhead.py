"""Collector overhead: our Tracer against article 003 §2.2's logger, side by side in one run.

Measures, for each logger:
  * caller-side cost of one event (median, p99 in µs): each call timed alone with
    perf_counter_ns, the timer's own cost (median of empty pairs) subtracted; once back-to-back
    (a burst: the writer threads compete for the GIL) and once paced at 10 k events/s;
  * sustained events/s to disk: N events as fast as the caller can, until every line is on disk;
  * a paced 10 k events/s run with the default settings: lines written, events dropped.

The article's logger is reproduced as printed: ThreadPoolExecutor(max_workers=2).submit per
event, the file opened per write, json.dumps(ensure_ascii=False), datetime.now().isoformat.

    .venv/bin/python bench/collector_overhead.py [--events 200000] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dslogs_collector import Tracer, log_event, set_default_tracer  # noqa: E402

PACED_RATE = 10_000
FIELDS = {"session_id": "a1b2c3d4-5678-90ab-cdef-1234567890ab", "input_len": 42}


class ArticleLogger:
    """utils/logger.py of article 003 §2.2, verbatim but for LOG_DIR and st.session_state."""

    def __init__(self, log_dir: Path):
        self.LOG_DIR = Path(log_dir)
        self.LOG_DIR.mkdir(exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=2)
        self.session_state = {"session_id": FIELDS["session_id"]}  # st.session_state stand-in

    def _write_log_entry(self, entry: dict):
        date_str = datetime.now().strftime("%Y%m%d")
        log_file = self.LOG_DIR / f"ds15b_{date_str}.jsonl"
        try:
            with open(log_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        except Exception as e:
            print(f"[LOG FALLBACK] {e}")

    def log_event(self, stage: str, duration_ms: float = -1, **kwargs):
        entry = {
            "session_id": self.session_state.get("session_id", "unknown"),
            "timestamp": datetime.now().isoformat(timespec="milliseconds"),
            "stage": stage,
            "duration_ms": round(duration_ms, 2),
            **kwargs,
        }
        self._executor.submit(self._write_log_entry, entry)

    def close(self):
        self._executor.shutdown(wait=True)


def timer_overhead_ns(n=200_000) -> float:
    pc = time.perf_counter_ns
    d = []
    for _ in range(n):
        t0 = pc()
        t1 = pc()
        d.append(t1 - t0)
    return statistics.median(d)


def pct(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def time_calls(call, n, overhead, paced_rate=None, session=True) -> dict:
    """Time each call alone; with ``paced_rate``, spread the calls at that rate. ``session``
    False: called as article 003's app calls log_event, the logger finds the session itself."""
    pc = time.perf_counter_ns
    d = [0] * n
    sid = {"session_id": FIELDS["session_id"]} if session else {}
    gc.collect()
    if paced_rate is None:
        for i in range(n):
            t0 = pc()
            call("tokenize", 12.3, input_len=i, **sid)
            d[i] = pc() - t0
    else:
        gap = 1e9 / paced_rate
        start = pc()
        for i in range(n):
            due = start + i * gap
            while pc() < due:
                pass
            t0 = pc()
            call("tokenize", 12.3, input_len=i, **sid)
            d[i] = pc() - t0
    us = [max(0.0, (x - overhead) / 1000.0) for x in d]
    return {"median_us": statistics.median(us), "p99_us": pct(us, 0.99), "max_us": max(us), "n": n}


def count_lines(folder: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in folder.glob("*.jsonl"))


def data_lines(folder: Path) -> int:
    n = 0
    for p in folder.glob("*.jsonl"):
        # the collector's own lines: heartbeats and the deploy record
        n += sum(1 for line in p.read_bytes().splitlines()
                 if b'"stage":"collector"' not in line and b'"stage":"deploy"' not in line)
    return n


def queue_micro(n=1_000_000) -> dict:
    """Bulk cost of the enqueue alone: deque.append vs queue.SimpleQueue.put (ns/op)."""
    item = (1.0, "tokenize", 12.3, FIELDS)
    out = {}
    for name in ("deque.append", "SimpleQueue.put", "empty loop"):
        d, q = deque(), queue.SimpleQueue()
        op = d.append if name == "deque.append" else q.put if name == "SimpleQueue.put" else None
        gc.collect()
        t0 = time.perf_counter_ns()
        if op is None:
            for _ in range(n):
                pass
        else:
            for _ in range(n):
                op(item)
        out[name] = (time.perf_counter_ns() - t0) / n
    base = out.pop("empty loop")
    return {k: round(v - base, 1) for k, v in out.items()}


def sustained(make, n, folder: Path) -> dict:
    """N events back-to-back, then wait until all are on disk."""
    logger, call, close = make(folder)
    gc.collect()
    t0 = time.perf_counter()
    for i in range(n):
        call("tokenize", 12.3, session_id=FIELDS["session_id"], input_len=i)
    t_enq = time.perf_counter() - t0
    close()
    t_all = time.perf_counter() - t0
    on_disk = data_lines(folder)
    return {"events": n, "enqueue_s": t_enq, "total_s": t_all, "events_per_s": n / t_all, "lines_on_disk": on_disk}


def writer_capacity(n, folder: Path, fields=None) -> dict:
    """The writer alone: format, encode and append ``n`` queued events on this thread (its own
    thread stopped), no producer sharing the GIL. The ceiling of the end-to-end rate."""
    from dslogs_collector.writer import Writer

    q: deque = deque()
    w = Writer(q, log_dir=str(folder), prefix="ds15b", max_bytes=10 * 2**20, gzip_closed=False,
               clock=time.time, poll_s=1.0, health_interval_s=1e9)
    w.stop(5)
    now = time.time()
    extra = fields or {}
    q.extend((now + i * 1e-6, "tokenize", 12.3, {"session_id": FIELDS["session_id"], "input_len": i, **extra})
             for i in range(n))
    gc.collect()
    t0 = time.perf_counter()
    w._drain()
    dt = time.perf_counter() - t0
    w.files.close()
    return {"events": n, "seconds": dt, "events_per_s": n / dt, "lines_on_disk": data_lines(folder)}


def make_ours(**kw):
    def make(folder):
        t = Tracer(folder, **kw)
        return t, t.event, t.close
    return make


def make_article(folder):
    a = ArticleLogger(folder)

    def call(stage, duration_ms=-1, **kwargs):
        kwargs.pop("session_id", None)  # the article reads it from st.session_state
        a.log_event(stage, duration_ms, **kwargs)

    return a, a.log_event, a.close


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000, help="events per caller-cost run")
    ap.add_argument("--sustained", type=int, default=500_000, help="events in our sustained run")
    ap.add_argument("--article-events", type=int, default=100_000, help="events for the article's logger")
    ap.add_argument("--paced-seconds", type=float, default=5.0)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dslogs-bench-"))
    res: dict = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    try:
        overhead = timer_overhead_ns()
        res["timer_overhead_ns"] = overhead
        res["queue_ns_per_op"] = queue_micro()

        # caller-side cost, burst
        t = Tracer(root / "ours_burst", queue_size=args.events + 10)
        res["ours_burst"] = time_calls(t.event, args.events, overhead)
        t.close()
        a = ArticleLogger(root / "article_burst")
        res["article_burst"] = time_calls(a.log_event, args.article_events, overhead, session=False)
        a.close()
        # our drop-in log_event called as the article's app calls it (no session_id: looked up)
        t = Tracer(root / "ours_log_event", queue_size=args.events + 10)
        set_default_tracer(t)
        res["ours_log_event_burst"] = time_calls(log_event, args.events, overhead, session=False)
        set_default_tracer(None)
        t.close()

        # caller-side cost, paced at 10 k/s (the realistic case: writers mostly idle)
        n_paced = int(PACED_RATE * min(args.paced_seconds, 2.0))
        t = Tracer(root / "ours_paced")
        res["ours_paced"] = time_calls(t.event, n_paced, overhead, PACED_RATE)
        t.close()
        a = ArticleLogger(root / "article_paced")
        res["article_paced"] = time_calls(a.log_event, n_paced, overhead, PACED_RATE, session=False)
        a.close()

        # sustained to disk
        res["ours_sustained"] = sustained(make_ours(queue_size=args.sustained + 10), args.sustained,
                                          root / "ours_sus")
        res["article_sustained"] = sustained(make_article, args.article_events, root / "article_sus")
        res["ours_writer_capacity"] = writer_capacity(args.sustained, root / "ours_cap")
        # events with a generate-params dict and a tensor-like field: the writer's value rules
        res["ours_writer_capacity_values"] = writer_capacity(
            args.sustained // 5, root / "ours_cap_values",
            {"params": {"num_beams": 1, "max_new_tokens": 256, "temperature": 0.6, "top_p": 0.95,
                        "do_sample": True}, "ratio": float("nan")})

        # 10 k events/s for a while with default settings: drops?
        folder = root / "ours_10k"
        t = Tracer(folder)
        n = int(PACED_RATE * args.paced_seconds)
        time_calls(t.event, n, overhead, PACED_RATE)
        t.close()
        st = t.stats()
        res["ours_10k"] = {"events": n, "seconds": args.paced_seconds, "lines_on_disk": data_lines(folder),
                           "dropped": st["dropped"]}
    finally:
        shutil.rmtree(root, ignore_errors=True)

    ob, ab = res["ours_burst"], res["article_burst"]
    op, ap_ = res["ours_paced"], res["article_paced"]
    os_, as_ = res["ours_sustained"], res["article_sustained"]
    res["ratios"] = {
        "burst_median": ab["median_us"] / max(ob["median_us"], 1e-3),
        "burst_p99": ab["p99_us"] / max(ob["p99_us"], 1e-3),
        "paced_median": ap_["median_us"] / max(op["median_us"], 1e-3),
        "paced_p99": ap_["p99_us"] / max(op["p99_us"], 1e-3),
        "sustained": os_["events_per_s"] / as_["events_per_s"],
        "log_event_burst_median": ab["median_us"] / max(res["ours_log_event_burst"]["median_us"], 1e-3),
    }
    r = res["ratios"]
    print(f"python {res['python']}, {res['cpus']} CPUs; timer overhead {overhead:.0f} ns (subtracted)")
    print(f"enqueue alone: deque.append {res['queue_ns_per_op']['deque.append']} ns, "
          f"SimpleQueue.put {res['queue_ns_per_op']['SimpleQueue.put']} ns")
    print(f"{'caller cost per event (µs)':34} {'ours':>16} {'article 003':>16} {'ratio':>8}")
    for label, o, a_, kr in (("burst, median", ob["median_us"], ab["median_us"], "burst_median"),
                             ("burst, p99", ob["p99_us"], ab["p99_us"], "burst_p99"),
                             ("paced 10k/s, median", op["median_us"], ap_["median_us"], "paced_median"),
                             ("paced 10k/s, p99", op["p99_us"], ap_["p99_us"], "paced_p99")):
        print(f"{label:34} {o:16.2f} {a_:16.2f} {r[kr]:7.1f}x")
    le = res["ours_log_event_burst"]
    print(f"{'log_event drop-in, burst, median':34} {le['median_us']:16.2f} {ab['median_us']:16.2f} "
          f"{r['log_event_burst_median']:7.1f}x")
    print(f"{'sustained events/s to disk':34} {os_['events_per_s']:16,.0f} {as_['events_per_s']:16,.0f} "
          f"{r['sustained']:7.1f}x")
    print(f"  ours: {os_['events']:,} events, {os_['lines_on_disk']:,} lines on disk; "
          f"article: {as_['events']:,} events, {as_['lines_on_disk']:,} lines on disk")
    cap = res["ours_writer_capacity"]
    print(f"  our writer alone (no producer on the GIL): {cap['events_per_s']:,.0f} events/s "
          f"({cap['lines_on_disk']:,} lines)")
    capv = res["ours_writer_capacity_values"]
    print(f"  our writer alone, events with a params dict and a NaN (value rules): "
          f"{capv['events_per_s']:,.0f} events/s ({capv['lines_on_disk']:,} lines)")
    try:
        res["load_avg_1m"] = os.getloadavg()[0]
        print(f"  load average during the run: {res['load_avg_1m']:.1f} on {res['cpus']} CPUs "
              "(a shared machine: quote ratios)")
    except OSError:
        pass
    k = res["ours_10k"]
    print(f"paced {PACED_RATE:,}/s for {k['seconds']:.0f} s, default settings: {k['lines_on_disk']:,} of "
          f"{k['events']:,} lines on disk, {k['dropped']} dropped")
    targets = {
        "median >= 10x cheaper than article": r["burst_median"] >= 10 and r["paced_median"] >= 10
        and r["log_event_burst_median"] >= 10,
        "sustained >= 200k events/s": os_["events_per_s"] >= 200_000,
        "no drops at 10k/s": k["dropped"] == 0 and k["lines_on_disk"] == k["events"],
    }
    res["targets"] = targets
    for name, ok in targets.items():
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
