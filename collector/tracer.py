"""``Tracer``: the collector's front door. Cheap on the caller's thread, never raises.

``tracer.event()`` costs one ``time.time()``, one tuple and one ``deque.append``; timestamps are
formatted and JSON is encoded by the writer thread (collector/writer.py). ``log_event`` is a
drop-in for article 003 §2.2's ``utils/logger.log_event`` on a default tracer.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from collections import deque

from dslogs_collector.files import remove_tmp_in_progress
from dslogs_collector.schema import DEFAULT_MAX_BYTES, DEFAULT_PREFIX
from dslogs_collector.values import LOG_EVENT_DEFAULT
from dslogs_collector.writer import MAX_ERROR_MSG, Flush, Writer

DEFAULT_QUEUE_SIZE = 100_000  # ~30 MB of queued tuples at worst; 10 s at 10 k events/s
ENV_LOG_DIR = "DSLOGS_LOG_DIR"


class Span:
    """``with tracer.stage(...) as span``: wall and CPU time of the block, extra fields via
    ``span.set()``. An exception in the block adds an ``error`` event and propagates unchanged."""

    __slots__ = ("_tracer", "stage", "fields", "t0", "c0", "duration_ms", "cpu_time_ms")

    def __init__(self, tracer: Tracer, stage: str, fields: dict):
        self._tracer = tracer
        self.stage = stage
        self.fields = fields
        self.duration_ms = None
        self.cpu_time_ms = None

    def set(self, **fields) -> Span:
        self.fields.update(fields)
        return self

    def __enter__(self) -> Span:
        self.c0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, et, ev, tb) -> bool:
        try:
            wall = (time.perf_counter() - self.t0) * 1000.0
            cpu = (time.process_time() - self.c0) * 1000.0
            self.duration_ms = wall
            self.cpu_time_ms = cpu
            f = self.fields
            f.setdefault("cpu_time_ms", round(cpu, 3))
            if et is not None:
                f["status"] = "error"
                self._tracer.error(ev if ev is not None else et(), failed_stage=self.stage,
                                   session_id=f.get("session_id"), request_id=f.get("request_id"))
            self._tracer.event(self.stage, wall, **f)
        except Exception:
            pass
        return False


class Tracer:
    """Writes trace schema v1 lines (trace_schema_v1.json) to ``<log_dir>/<prefix>_YYYYMMDD[.N].jsonl``.

    Several processes may share ``log_dir``. ``samplers`` turns on background samplers:
    ``True`` for all, or any of ``"gpu"`` (NVML ``gpu_sample``), ``"torch"`` (``gpu_memory``),
    ``"process"`` (``process_sample``), every ``sample_interval_s`` seconds. ``deploy_record``
    writes a ``deploy`` line at start and at the first generate call with each model: what the
    service runs with (collector/deploy.py), off the caller's thread.
    """

    def __init__(self, log_dir: str | os.PathLike | None = "./logs", prefix: str = DEFAULT_PREFIX,
                 max_bytes: int = DEFAULT_MAX_BYTES, *, gzip: bool = False,
                 queue_size: int = DEFAULT_QUEUE_SIZE, flush_interval_s: float = 0.1,
                 health_interval_s: float = 60.0, host: str | None = None, clock=None,
                 samplers=None, sample_interval_s: float = 5.0, handle_signals: bool = True,
                 memory_probe=None, deploy_record: bool = True, _write=os.write, _stderr=None):
        if log_dir is None:
            log_dir = os.environ.get(ENV_LOG_DIR) or "./logs"
        self.log_dir = os.path.abspath(os.fspath(log_dir))  # an app's later chdir must not move logs
        self.prefix = prefix
        self.max_bytes = max_bytes
        self._clock = clock or time.time
        self._queue: deque = deque()
        self._max_queue = max(1, int(queue_size))
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._closed = False
        self._said_closed = False
        self._samplers = None
        self._sampler_args = None
        self._requests: dict = {}  # request_id -> open RequestSpan (collector/request.py)
        self._memory_probe = memory_probe  # () -> {"reserved_mb", "allocated_mb"} | None
        self._writer = Writer(self._queue, log_dir=self.log_dir, prefix=prefix, max_bytes=max_bytes,
                              gzip_closed=gzip, clock=self._clock, host=host, poll_s=flush_interval_s,
                              health_interval_s=health_interval_s, write=_write, stderr=_stderr)
        self._writer.dropped_queue = lambda: self._dropped
        self.host = self._writer.host
        ref = weakref.ref(self)
        atexit.register(_close_at_exit, ref)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: _after_fork(ref))
        if handle_signals:
            _install_signal_handlers(self)
        self._deploy = None
        if deploy_record:
            try:
                from dslogs_collector.deploy import Deploy

                self._deploy = Deploy(self)
                self._deploy.start()
            except Exception:
                self._deploy = None
        if samplers:
            self.start_samplers(samplers, interval_s=sample_interval_s)

    # -- the hot path ----------------------------------------------------------------------
    def event(self, stage: str, duration_ms: float | None = None, /, *more, **fields) -> None:
        """Queue one event. ``duration_ms`` None leaves it out (-1 is article 003's "not
        measured"); ``duration_ms=`` as a keyword works too. Any field name is accepted (the
        writer's own, like ``stage`` or ``ts``, are kept as ``stage_``, ``ts_``); values are
        made JSON-safe by the writer thread (collector/values.py)."""
        q = self._queue
        if more:  # extra positional arguments: kept, never a TypeError
            fields["args_"] = more
        if len(q) < self._max_queue:
            q.append((self._clock(), stage, duration_ms, fields))
        else:
            self._overflow()

    def event_at(self, ts: float, stage: str, duration_ms: float | None = None, /, *more,
                 **fields) -> None:
        """``event`` with its own timestamp (seconds since the epoch, as ``time.time()``)."""
        q = self._queue
        if more:
            fields["args_"] = more
        if len(q) < self._max_queue:
            q.append((ts, stage, duration_ms, fields))
        else:
            self._overflow()

    def _overflow(self) -> None:
        with self._drop_lock:
            self._dropped += 1
        if self._closed and not self._said_closed:
            self._said_closed = True
            self._writer._report("event after close() dropped (and counted)", once=False)

    def stage(self, stage: str, **fields) -> Span:
        """Time a block: ``with tracer.stage("prefill", session_id=s) as span: ...``."""
        return Span(self, stage, fields)

    def error(self, exc: BaseException, /, failed_stage: str | None = None, **fields) -> None:
        """An ``error`` event for ``exc`` (type name, first 300 characters of its message)."""
        try:
            try:
                msg = str(exc)
            except Exception:
                msg = f"<{type(exc).__name__}>"
            if len(msg) > MAX_ERROR_MSG:
                msg = msg[:MAX_ERROR_MSG] + "…"
            fields.update(error_type=type(exc).__name__, error_msg=msg, failed_stage=failed_stage)
            self.event("error", **fields)
        except Exception:
            pass

    # -- control ---------------------------------------------------------------------------
    def flush(self, timeout: float = 5.0) -> bool:
        """Block until every event queued before this call is written (or ``timeout``)."""
        if self._closed or not self._writer.thread.is_alive():
            return False
        marker = Flush()
        self._queue.append(marker)
        self._writer.wake()
        return marker.done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop samplers, write what is queued, a last ``collector`` event, close files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop_samplers()
        except Exception:
            pass
        self._max_queue = 0  # from now on events are counted as dropped (the last heartbeat has them)
        if not self._writer.stop(timeout):
            # The writer could not finish in time (a hung disk): what is still queued is lost.
            # Taken off the queue here, each item either by the writer or by us: never both.
            left = 0
            q = self._queue
            while True:
                try:
                    item = q.popleft()
                except IndexError:
                    break
                if item.__class__ is tuple:
                    left += 1
                else:  # a flush() waiting: nothing more will be written
                    item.done.set()
            if left:
                # not `with`: a signal handler may run close() while this thread holds the lock
                locked = self._drop_lock.acquire(timeout=0.5)
                self._dropped += left
                if locked:
                    self._drop_lock.release()
                self._writer._report(f"{left} queued events not written: the writer did not "
                                     f"finish within {timeout} s (counted as dropped)", once=False)

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> dict:
        """The counters the ``collector`` events carry, now. ``accepted`` = lines this tracer
        took on (your events, including those dropped at a full queue, and its own
        ``heartbeats``); once the queue is empty, ``written + dropped == accepted``, and
        ``written`` is the number of lines it put on disk."""
        w = self._writer
        queued = len(self._queue)
        dropped_queue, dropped_write, written = self._dropped, w.dropped_write, w.written
        return {"queued": queued, "written": written,
                "dropped": dropped_queue + dropped_write, "bytes_written": w.bytes_written,
                "dropped_queue": dropped_queue, "dropped_write": dropped_write,
                "accepted": w.received + w.heartbeats + dropped_queue + queued,
                "heartbeats": w.heartbeats}

    def current_file(self) -> str | None:
        return self._writer.files.current_path()

    # -- samplers --------------------------------------------------------------------------
    def start_samplers(self, which=True, interval_s: float = 5.0) -> dict:
        """Start background samplers (see the class doc); returns {name: "on" | reason off}."""
        from dslogs_collector.samplers import SamplerThread

        self.stop_samplers()
        self._sampler_args = (which, interval_s)
        self._samplers = SamplerThread(self, which, interval_s)
        return self._samplers.status

    def stop_samplers(self) -> None:
        s, self._samplers = self._samplers, None
        if s is not None:
            s.stop()

    @property
    def sampler_status(self) -> dict:
        return dict(self._samplers.status) if self._samplers else {}

    def gpu_memory(self, **fields) -> None:
        """A ``gpu_memory`` event now (article 003 §4.1's log_gpu_memory), if CUDA is in use."""
        from dslogs_collector.samplers import torch_memory_rows

        try:
            for row in torch_memory_rows(only_device=fields.pop("gpu_index", None)):
                self.event("gpu_memory", **row, **fields)
        except Exception:
            pass

    # -- HF transformers -------------------------------------------------------------------
    def generate(self, model, inputs=None, *, session_id=None, request_id=None, tokenizer=None,
                 think_end_token_id=None, oom_fallback: bool = False, log_text: bool = False,
                 **generate_kwargs):
        """``model.generate(inputs, **generate_kwargs)``, traced: prefill, decode, request,
        kv_cache, gpu_memory and (on failure) error events. Returns what generate returned;
        generate's own exceptions propagate unchanged. See collector/hf.py."""
        from dslogs_collector.hf import traced_generate

        return traced_generate(self, model, inputs, session_id=session_id, request_id=request_id,
                               tokenizer=tokenizer, think_end_token_id=think_end_token_id,
                               oom_fallback=oom_fallback, log_text=log_text, **generate_kwargs)

    def tokenize(self, tokenizer, text, *, session_id=None, request_id=None, device=None,
                 log_text: bool = False, **tokenizer_kwargs):
        """``tokenizer(text, return_tensors="pt", **kw)`` (moved to ``device``), traced as an
        ``input`` event (characters) and a ``tokenize`` event (tokens, ms)."""
        from dslogs_collector.hf import traced_tokenize

        return traced_tokenize(self, tokenizer, text, session_id=session_id, request_id=request_id,
                               device=device, log_text=log_text, **tokenizer_kwargs)

    def stream_generate(self, model, inputs=None, *, session_id=None, request_id=None, tokenizer=None,
                        think_end_token_id=None, oom_fallback: bool = False, log_text: bool = False,
                        timeout_s: float | None = None, **generate_kwargs):
        """Streaming ``generate``: yields decoded text pieces as they are generated (generate runs
        on its own thread, feeding a TextIteratorStreamer); the same events as ``generate``.
        When generate raises, the stream ends and the exception is re-raised here after its
        ``error`` event; closing the generator early stops generation. Beam search raises
        ValueError at once. See collector/hf.py."""
        from dslogs_collector.hf import stream_generate

        return stream_generate(self, model, inputs, session_id=session_id, request_id=request_id,
                               tokenizer=tokenizer, think_end_token_id=think_end_token_id,
                               oom_fallback=oom_fallback, log_text=log_text, timeout_s=timeout_s,
                               **generate_kwargs)

    # -- request spans (collector/request.py) -----------------------------------------------
    def request(self, *, session_id=None, request_id=None, gradio_request=None, **fields):
        """``with tracer.request(session_id=s, request_id=r):`` around a whole handler: one
        ``request`` event at its exit, with duration_ms, ttft_ms, device, inflight, attempts and
        memory/RSS before and after; tokenize/generate/stream_generate with the same request_id
        report into it. Reads Gradio's queue wait itself: with GRADIO_PROFILING=1, or from the
        handler's ``gr.Request`` passed as ``gradio_request`` (its session_hash is then the
        session id unless one is given)."""
        from dslogs_collector.request import RequestSpan

        if session_id is None and gradio_request is not None:
            session_id = getattr(gradio_request, "session_hash", None)
        return RequestSpan(self, session_id, request_id, fields, gradio_request=gradio_request)

    def gate(self, semaphore, *, session_id=None, request_id=None):
        """``with tracer.gate(sem, request_id=r):`` acquires ``sem`` (a threading.Semaphore or
        Lock the handler uses to bound concurrent generates) and records how long the request
        waited for it as its queue wait (``source`` semaphore), inside its open request span."""
        from dslogs_collector.request import Gate

        return Gate(self, semaphore, session_id, request_id)

    def queue_wait(self, ms: float, *, session_id=None, request_id=None, source: str | None = None,
                   **fields) -> None:
        """A ``queue`` event: the request waited ``ms`` before its handler ran. Counted in the
        open request span's duration_ms and ttft_ms (if one is open for ``request_id``)."""
        try:
            span = self._requests.get(request_id) if request_id is not None else None
            if span is not None and not span.closed:
                span.set_queue(float(ms), source=source, **fields)
                return
            f = dict(fields, session_id=session_id, request_id=request_id)
            if source is not None:
                f["source"] = source
            self.event_at(self._clock() - float(ms) / 1000.0, "queue", float(ms), **f)
        except Exception:
            pass

    # -- process lifecycle -----------------------------------------------------------------
    def _after_fork_in_child(self) -> None:
        # The parent writes what it had queued; the child must not write it again.
        self._queue.clear()
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._samplers = None
        if self._closed:
            return
        self._writer.after_fork()
        if self._deploy is not None:
            self._deploy.after_fork()
        if self._sampler_args:
            which, interval = self._sampler_args
            try:
                self.start_samplers(which, interval)
            except Exception:
                pass


def _close_at_exit(ref) -> None:
    t = ref()
    if t is not None:
        try:
            t.close()
        except Exception:
            pass


def _after_fork(ref) -> None:
    t = ref()
    if t is not None:
        try:
            t._after_fork_in_child()
        except Exception:
            pass


# -- article 003's log_event, on a default tracer --------------------------------------------
_default: Tracer | None = None
_default_lock = threading.Lock()


def default_tracer() -> Tracer:
    """The tracer ``log_event`` writes to: log dir ``$DSLOGS_LOG_DIR`` or ``./logs``."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Tracer(log_dir=None)
    return _default


def set_default_tracer(tracer: Tracer | None) -> None:
    """Make ``log_event`` write to ``tracer`` (e.g. one with samplers or another log dir)."""
    global _default
    _default = tracer


def log_event(stage: str, duration_ms=LOG_EVENT_DEFAULT, /, *more, **fields) -> None:
    """Drop-in for article 003 §2.2's ``utils/logger.log_event``: same arguments, same stages;
    lines are schema v1 (``v``, ``ts`` with offset, host, pid). ``duration_ms`` not given
    (neither way) is -1, the article's "not measured". Without ``session_id=`` it is
    ``st.session_state["session_id"]`` when called from a Streamlit script (as the article's),
    else ``"unknown"`` (as the article's)."""
    t = _default or default_tracer()
    if "session_id" not in fields:
        fields["session_id"] = _session_id_from_streamlit() if "streamlit" in sys.modules else "unknown"
    if "request_id" not in fields:
        rid = _open_request_id(fields["session_id"])
        if rid is not None and fields["session_id"] == "unknown":
            fields["session_id"] = _open_session_id()
        if rid is None:
            rid = _drop_in_request_id(fields["session_id"], stage)
        if rid is not None:
            fields["request_id"] = rid
    if more:
        fields["args_"] = more
    q = t._queue
    if len(q) < t._max_queue:
        q.append((t._clock(), stage, duration_ms, fields))
    else:
        t._overflow()


# The article's logger writes no request id; dslogs groups a drop-in's lines into requests here:
# a request starts at "input", or at "tokenize" once the session's current request is past it
# (article 003 §3.2's traces start at tokenize, with no input line). session -> [id, past start]
_drop_in_turns: dict = {}
_drop_in_lock = threading.Lock()
_REQUEST_START = ("input", "tokenize")


def _open_request_id(session_id) -> str | None:
    """The request id of the ``tracer.request`` span open around this call, when it is the same
    session's: a line logged inside a request is that request's, not one of its own."""
    try:
        from dslogs_collector.request import CURRENT

        span = CURRENT.get()
        if span is None or span.closed or span.request_id is None:
            return None
        if span.session_id is not None and session_id not in ("unknown", span.session_id):
            return None
        return span.request_id
    except Exception:
        return None


def _open_session_id():
    try:
        from dslogs_collector.request import CURRENT

        return CURRENT.get().session_id or "unknown"
    except Exception:
        return "unknown"


def _drop_in_request_id(session_id, stage) -> str | None:
    if not isinstance(stage, str) or not isinstance(session_id, (str, int)):
        return None  # any value may come in: only plain ones are grouped, nothing raises
    with _drop_in_lock:
        turn = _drop_in_turns.get(session_id)
        if turn is None or stage == "input" or (stage == "tokenize" and turn[1]):
            if turn is None and len(_drop_in_turns) > 10_000:
                _drop_in_turns.clear()  # bounded: a long-running app's old sessions are forgotten
            turn = _drop_in_turns[session_id] = [f"{os.getpid():x}-{time.time_ns():x}-{len(_drop_in_turns):x}", False]
        elif stage not in _REQUEST_START:
            turn[1] = True
        return turn[0]


_script_run_ctx = None


def _session_id_from_streamlit():
    """``st.session_state.get("session_id", "unknown")`` when the calling thread runs a
    Streamlit script; ``"unknown"`` otherwise. Streamlit is only looked at once the app has
    imported it: the collector never imports it itself."""
    global _script_run_ctx
    try:
        if _script_run_ctx is None:
            from streamlit.runtime.scriptrunner import get_script_run_ctx

            _script_run_ctx = get_script_run_ctx
        if _script_run_ctx(suppress_warning=True) is None:
            return "unknown"
        return sys.modules["streamlit"].session_state.get("session_id", "unknown")
    except Exception:
        return "unknown"


# -- SIGTERM / SIGINT: write what is queued, then do what the signal did before --------------
_signal_tracers: weakref.WeakSet = weakref.WeakSet()
_previous_handlers: dict = {}
_in_signal = False
SIGNAL_FLUSH_TIMEOUT_S = 5.0


def _install_signal_handlers(tracer: Tracer) -> None:
    """From the main thread only (Python's rule): once per process and signal, chaining to the
    handler that was there. A signal ignored (SIG_IGN) or handled outside Python is left alone."""
    try:
        import signal

        if threading.current_thread() is not threading.main_thread():
            return
        _signal_tracers.add(tracer)
        for name in ("SIGTERM", "SIGINT"):
            signum = getattr(signal, name, None)
            if signum is None or signum in _previous_handlers:
                continue
            prev = signal.getsignal(signum)
            if prev is None or prev == signal.SIG_IGN:
                continue
            signal.signal(signum, _on_signal)
            _previous_handlers[signum] = prev
    except Exception:
        pass


def _on_signal(signum, frame):
    import signal

    global _in_signal
    prev = _previous_handlers.get(signum, signal.SIG_DFL)
    dies = not callable(prev) and prev != signal.SIG_IGN  # SIG_DFL of SIGTERM/SIGINT: terminate
    if not _in_signal:
        _in_signal = True
        try:
            for t in list(_signal_tracers):
                try:
                    # The process ends now: close (queue, last heartbeat, files). Otherwise the
                    # previous handler decides (KeyboardInterrupt may be caught): flush only.
                    if dies:
                        t.close(SIGNAL_FLUSH_TIMEOUT_S)
                    else:
                        t.flush(SIGNAL_FLUSH_TIMEOUT_S)
                except Exception:
                    pass
        finally:
            _in_signal = False
    if callable(prev):
        return prev(signum, frame)
    if dies:
        # A gzip still under way dies with the process: its .tmp goes first.
        try:
            remove_tmp_in_progress()
        except Exception:
            pass
        # The default action, so the exit status still says "killed by SIGTERM".
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return None


def _warn(msg: str) -> None:
    try:
        sys.stderr.write(f"dslogs collector: {msg}\n")
    except Exception:
        pass
