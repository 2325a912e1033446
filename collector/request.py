"""Request spans: one ``request`` event per user turn, with what the turn changed.

``with tracer.request(session_id=..., request_id=...)`` opens a span around a whole handler;
``tracer.tokenize`` / ``generate`` / ``stream_generate`` with the same ``request_id`` report into
it, and the span writes the ``request`` event at its exit. Without one, ``tokenize`` (or else
``generate``) opens an implicit span that ``generate`` closes.

At the span's two edges (and only there: never per token) it reads the process's RSS and
torch's per-process GPU memory (``memory_reserved`` / ``memory_allocated`` of the model's CUDA
device, or the tracer's ``memory_probe``), and at the start the number of requests in flight in
this process. torch reports memory per process, not per session: with
concurrent sessions the analyzer attributes growth through these before/after deltas.

Spans are found by ``request_id`` in a dict on the tracer, not through a context variable:
Gradio runs each step of a generator handler on a worker thread in a fresh copy of the
context, so a context variable set in one step is gone in the next.

Standard library only; torch, psutil and gradio are read from ``sys.modules`` if the app
imported them, never imported here. Nothing here raises into the app.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time

MB = 1024 * 1024
MAX_OPEN = 10_000  # spans opened by tokenize and never closed by a generate are dropped beyond this
# the span a ``with tracer.request(...)`` block has open in this thread / task: a drop-in
# ``log_event`` called inside it without a request id belongs to that request
CURRENT: contextvars.ContextVar = contextvars.ContextVar("dslogs_request_span", default=None)

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    _PAGE = 4096


_statm = [None]  # an fd on /proc/self/statm kept open: pread is ~2 µs, open+read+close ~8 µs


def _statm_reset() -> None:
    _statm[0] = None  # a forked child must read its own /proc/self, not its parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_statm_reset)


def _read_statm() -> bytes:
    fd = _statm[0]
    if fd is not None:
        try:
            return os.pread(fd, 128, 0)
        except OSError:  # closed under us (a daemonising app closes every fd): open it again
            pass
    fd = _statm[0] = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    return os.pread(fd, 128, 0)


def rss_mb() -> float | None:
    """This process's resident set size in MiB: /proc/self/statm, else psutil if the app
    imported it, else None."""
    try:
        return round(int(_read_statm().split()[1]) * _PAGE / MB, 1)
    except Exception:
        pass
    psutil = sys.modules.get("psutil")
    if psutil is not None:
        try:
            return round(psutil.Process().memory_info().rss / MB, 1)
        except Exception:
            return None
    return None


def device_name(device) -> str | None:
    """``torch.device`` (or a string) as the ``device`` field: "cuda:0", "cpu", "mps"."""
    if device is None:
        return None
    try:
        kind = getattr(device, "type", None)
        if kind is None:
            text = str(device)
            kind, _, idx = text.partition(":")
            index = int(idx) if idx else None
        else:
            index = device.index
        if kind == "cuda" and index is None:
            torch = sys.modules.get("torch")
            index = torch.cuda.current_device() if torch is not None and torch.cuda.is_initialized() else 0
        return f"{kind}:{index}" if kind == "cuda" else str(kind)
    except Exception:
        return None


def _cuda_index(device: str | None):
    if device and device.startswith("cuda:"):
        try:
            return int(device[5:])
        except ValueError:
            return None
    return None


_last_device: list = [None]  # the device the last traced generate ran on (a span's "before" is read
# before its generate says where the model is)


def torch_memory(device: str | None) -> dict | None:
    """torch's reserved/allocated MiB for the CUDA device (or, before the span knows it, the
    device the last generate used, else the current one); None when the app has not used CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():  # CPU torch, or CUDA never touched: don't create a context
            return None
        if device is None:
            device = _last_device[0]
        idx = _cuda_index(device)
        if idx is None:
            if device is not None and not device.startswith("cuda"):
                return None
            idx = cuda.current_device()
        return {"reserved_mb": round(cuda.memory_reserved(idx) / MB, 1),
                "allocated_mb": round(cuda.memory_allocated(idx) / MB, 1)}
    except Exception:
        return None


class Inflight:
    """Process-wide count of open requests and of completed ones (a lock held for a few integer
    operations, and around the memory readings at a request's edges).

    ``done`` numbers completions: a request's "after" reading is taken under the lock together
    with its completion index (``done_seq``), and its "before" reading together with the number
    of completions so far (``done_before``). So the order of readings is exact where timestamps
    tie: B's "after" fell between A's two readings exactly when
    ``A.done_before < B.done_seq < A.done_seq`` (the analyzer's request_memory_deltas)."""

    __slots__ = ("_lock", "n", "done")

    def __init__(self):
        self._lock = threading.Lock()
        self.n = 0
        self.done = 0

    def enter(self) -> int:
        with self._lock:
            self.n += 1
            return self.n

    def exit(self) -> None:
        with self._lock:
            if self.n > 0:
                self.n -= 1

    def before(self, read) -> int:
        """Run ``read`` (the "before" memory reading); return the completions that preceded it."""
        with self._lock:
            read()
            return self.done

    def finish(self, read, counted: bool) -> int:
        """Leave the in-flight count (when ``counted``), run ``read`` (the "after" reading) and
        return this request's completion index, 1-based, all in one lock section."""
        with self._lock:
            if counted and self.n > 0:
                self.n -= 1
            read()
            self.done += 1
            return self.done

    def reset(self) -> None:
        # a forked child has its own requests and memory: counts start over, and a lock a parent
        # thread held at fork time would never be released in the child
        self._lock = threading.Lock()
        self.n = 0
        self.done = 0


INFLIGHT = Inflight()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=INFLIGHT.reset)


def _gradio_queue_wait_ms(gradio_request=None) -> float | None:
    """The request's wait in Gradio's queue: with GRADIO_PROFILING=1, what Gradio keeps in a
    context variable its worker threads inherit; otherwise, given the handler's ``gr.Request``,
    from the enqueue time of its event among the queue's active jobs (the newest of its session).
    Only read when the app imported gradio; None when neither is there."""
    if "gradio" not in sys.modules:
        return None
    try:
        profiling = sys.modules.get("gradio.profiling")
        trace = profiling.get_current_trace() if profiling is not None else None
        ms = getattr(trace, "queue_wait_ms", None) if trace is not None else None
        if ms is not None and ms >= 0:
            return float(ms)
    except Exception:
        pass
    if gradio_request is None:
        return None
    try:
        session = getattr(gradio_request, "session_hash", None)
        app = gradio_request.request.app
        queue = app.get_blocks()._queue
        enqueued = [ev.enqueue_time for job in queue.active_jobs if job for ev in job
                    if getattr(ev, "session_hash", None) == session]
        if not enqueued:
            return None
        ms = (time.monotonic() - max(enqueued)) * 1000.0
        return ms if ms >= 0 else None
    except Exception:
        return None


class RequestSpan:
    """One user turn. ``with`` use is the explicit span; the HF helpers drive implicit ones."""

    def __init__(self, tracer, session_id=None, request_id=None, fields=None, implicit=False, gradio_request=None):
        self.tracer = tracer
        self.gradio_request = gradio_request  # the handler's gr.Request: its queue wait is read from it
        self.session_id = session_id
        self.request_id = request_id
        self.fields = dict(fields or {})  # the request event's fields set so far
        self.implicit = implicit
        self.t0 = None  # perf_counter origin of duration_ms / ttft_ms
        self.offset_ms = 0.0  # time before t0 that belongs to the request (queue wait; tokenize)
        self.queue_ms = None
        self._queue_inside = False  # the queue wait lies within the span's own clock (a gate)
        self.first_token = None  # perf_counter of the request's first generated token
        self.device = None
        self.probe_device = None
        self.attempts = 0
        self.before = {}
        self.inflight = None
        self.done_before = None  # completions in this process before the "before" reading
        self.error_recorded = None  # the exception an error event was written for
        self.closed = False
        self._registered = False

    # -- edges ---------------------------------------------------------------------------
    def open(self, *, start_clock: bool = True, read_queue: bool = True, count: bool = True) -> RequestSpan:
        try:
            if count:
                self.count_inflight()
            if start_clock:
                self.t0 = time.perf_counter()
            self.done_before = INFLIGHT.before(lambda: self._snapshot(self.before, "before"))
            if read_queue:
                q = _gradio_queue_wait_ms(self.gradio_request)
                self.gradio_request = None  # not kept past the read
                if q is not None:
                    self.set_queue(q, source="gradio")
            if self.request_id is not None:
                reqs = self.tracer._requests
                if len(reqs) >= MAX_OPEN:
                    _drop_stale(reqs)
                reqs[self.request_id] = self
                self._registered = True
        except Exception:
            pass
        return self

    def count_inflight(self) -> None:
        """Join the process's in-flight count (once). A span that ``tokenize`` opened joins when
        its generate starts: a tokenize with no traced generate after it must not stay counted."""
        if self.inflight is None:
            self.inflight = INFLIGHT.enter()

    def set_queue(self, ms: float, source: str | None = None, write: bool = True, inside: bool = False,
                  **extra) -> None:
        """The time the request waited before its handler ran: a ``queue`` event stamped at the
        enqueue time, counted in this request's duration_ms and ttft_ms. ``inside``: the wait lies
        within the span (a semaphore in the handler), already in its clock: not added again."""
        if self.queue_ms is not None and not self._queue_inside:
            self.offset_ms -= self.queue_ms
        self.queue_ms = ms
        self._queue_inside = inside
        if not inside:
            self.offset_ms += ms
        if write:
            f = dict(extra, session_id=self.session_id, request_id=self.request_id)
            if source is not None:
                f["source"] = source
            t = self.tracer
            t.event_at(t._clock() - ms / 1000.0, "queue", round(ms, 3), **f)

    def _snapshot(self, into: dict, edge: str) -> None:
        probe = self.tracer._memory_probe
        mem = None
        try:
            mem = probe() if probe is not None else torch_memory(self.device)
        except Exception:
            mem = None
        if mem:
            dev = mem.get("device")
            if isinstance(dev, str) and dev:
                self.probe_device = dev  # the probe knows where the memory lives (see Tracer docs)
            for key in ("reserved_mb", "allocated_mb"):
                v = mem.get(key)
                if v is not None:
                    into[f"{key[:-3]}_mb_{edge}"] = round(float(v), 1)
        r = rss_mb()
        if r is not None:
            into[f"rss_mb_{edge}"] = r

    def close(self, exc: BaseException | None = None, end: float | None = None) -> None:
        """Write the ``request`` event (once)."""
        if self.closed:
            return
        self.closed = True
        try:
            if end is None:
                end = time.perf_counter()
            after = {}
            done_seq = INFLIGHT.finish(lambda: self._snapshot(after, "after"), self.inflight is not None)
            if self._registered and self.tracer._requests.get(self.request_id) is self:
                self.tracer._requests.pop(self.request_id, None)
            f = self.fields
            if exc is not None:
                cancelled = isinstance(exc, GeneratorExit)
                if cancelled:
                    f.setdefault("finish_reason", "cancelled")
                    f.setdefault("status", "ok")
                else:
                    f["status"] = "error"
                    f.setdefault("finish_reason", "error")
                    if self.error_recorded is not exc:
                        self.tracer.error(exc, failed_stage="handler",
                                          session_id=self.session_id, request_id=self.request_id,
                                          device=self.device)
            duration = None
            if self.t0 is not None:
                duration = (end - self.t0) * 1000.0 + self.offset_ms
                if self.first_token is not None:
                    f["ttft_ms"] = round((self.first_token - self.t0) * 1000.0 + self.offset_ms, 3)
            f.setdefault("status", "ok")
            if self.device is not None:
                f["device"] = self.device
            f["inflight"] = self.inflight
            if self.done_before is not None:
                f["done_before"] = self.done_before
                f["done_seq"] = done_seq
            if self.attempts:  # 0: no generate ran in this span
                f["attempts"] = self.attempts
            f.update(self.before)
            f.update(after)
            self.tracer.event("request", None if duration is None else round(duration, 3), **f,
                              session_id=self.session_id, request_id=self.request_id)
        except Exception:
            pass

    # -- the explicit span -----------------------------------------------------------------
    def __enter__(self) -> RequestSpan:
        self._token = CURRENT.set(self)
        return self.open()

    def __exit__(self, et, ev, tb) -> bool:
        try:
            CURRENT.reset(self._token)
        except (ValueError, RuntimeError, AttributeError):
            pass  # exited in another context (a generator resumed elsewhere): nothing to restore
        self.close(ev if ev is not None else (et() if et is not None else None))
        return False

    def set(self, **fields) -> RequestSpan:
        """Extra fields for the ``request`` event."""
        self.fields.update(fields)
        return self


def _drop_stale(reqs: dict) -> None:
    # Implicit spans that a tokenize opened and no generate closed: forget the oldest half.
    for rid in list(reqs)[: len(reqs) // 2]:
        span = reqs.pop(rid, None)
        if span is not None and span.implicit and not span.closed:
            span.closed = True
            if span.inflight is not None:
                INFLIGHT.exit()


class Gate:
    """``tracer.gate``: acquire a semaphore, record the wait as the request's queue wait. The
    semaphore is acquired and released whatever the recording does; the recording never raises."""

    def __init__(self, tracer, semaphore, session_id=None, request_id=None):
        self.tracer, self.semaphore = tracer, semaphore
        self.session_id, self.request_id = session_id, request_id

    def __enter__(self):
        t0 = time.perf_counter()
        self.semaphore.acquire()
        try:
            ms = (time.perf_counter() - t0) * 1000.0
            span = self.tracer._requests.get(self.request_id) if self.request_id is not None else None
            if span is not None and not span.closed:
                span.set_queue(ms, source="semaphore", inside=True)
            else:
                self.tracer.queue_wait(ms, session_id=self.session_id, request_id=self.request_id, source="semaphore")
        except Exception:
            pass
        return self

    def __exit__(self, et, ev, tb) -> bool:
        self.semaphore.release()
        return False
