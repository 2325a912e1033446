"""HF transformers integration: ``Tracer.generate`` and ``Tracer.tokenize``.

First-token time comes from forward hooks on the model, registered for the one call and
filtered to the calling thread (so concurrent requests on a shared model don't see each
other). HF ``generate`` runs the prompt through the model first (input length L > 1, or several
chunks with ``prefill_chunk_size``) and then one forward per step with L = 1, for greedy,
sampling and beam search alike; a streamer can't tell the first token under beam search (its
first ``put`` is the prompt, and beams refuse streamers). On CUDA the prefill forward's
end is synchronised once, so the time is when the first token's logits exist, not when the
kernels were queued; the end of generate is synchronised as well.

If the hooks saw no forward (the model passed wraps another that does the work), one
``inference`` event (article 003's combined stage) is written instead of prefill + decode.

Each call reports into a request span (collector/request.py): the caller's
``tracer.request()`` for the same request_id, or an implicit one from ``tokenize`` (or this
call) to the end of generate. With ``oom_fallback`` the retry reports into the same span, so
the turn has one ``request`` line with ``attempts`` 2 and the failed attempt's time in it.

``stream_generate`` runs ``traced_generate`` on its own thread with a TextIteratorStreamer;
whatever happens there, the producer ends the stream, and generate's exception is handed to
the consuming thread and raised there (a streamer nobody ends hangs the handler).

Nothing here may raise into the host app: instrumentation sits in ``try`` blocks and the
exceptions of ``generate`` itself propagate unchanged.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping

THINK_END = "</think>"
PARAM_DEFAULTS = {"num_beams": 1, "max_new_tokens": None, "temperature": 1.0, "top_p": 1.0, "do_sample": False}
MB = 1024 * 1024
# generate() arguments that greedy search rejects or ignores
BEAM_ONLY = ("num_return_sequences", "num_beam_groups", "diversity_penalty", "length_penalty", "early_stopping")


def _torch():
    return sys.modules.get("torch")


def is_oom(exc: BaseException) -> bool:
    torch = _torch()
    oom_cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    if oom_cls is not None and isinstance(exc, oom_cls):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _seq_len(x):
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) < 1:
        return None
    return int(shape[-1]) if len(shape) <= 2 else int(shape[1])


def _prompt_len(inputs, kwargs) -> tuple[int | None, bool]:
    """(prompt tokens, whether the prompt came as inputs_embeds only: then decoder-only
    models return the new tokens alone)."""
    if inputs is not None and not isinstance(inputs, Mapping):
        return _seq_len(inputs), False
    for src in (inputs, kwargs):
        if isinstance(src, Mapping):
            if src.get("input_ids") is not None:
                return _seq_len(src["input_ids"]), False
            if src.get("inputs_embeds") is not None:
                return _seq_len(src["inputs_embeds"]), True
    return None, False


def _params(model, kwargs, prompt_len) -> dict:
    gc = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    out = {}
    for key, default in PARAM_DEFAULTS.items():
        v = kwargs[key] if key in kwargs else getattr(gc, key, None)
        out[key] = default if v is None else v
    if out["max_new_tokens"] is None and prompt_len is not None:
        max_length = kwargs.get("max_length") or getattr(gc, "max_length", None)
        if max_length:
            out["max_new_tokens"] = max(0, int(max_length) - prompt_len)
    for key in ("num_beams", "max_new_tokens"):
        if out[key] is not None:
            out[key] = int(out[key])
    for key in ("temperature", "top_p"):
        if out[key] is not None:
            out[key] = float(out[key])
    out["do_sample"] = bool(out["do_sample"])
    return out


def _eos_ids(model, kwargs, tokenizer) -> set:
    ids = set()
    gc = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    for v in (kwargs.get("eos_token_id"), getattr(gc, "eos_token_id", None),
              getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None):
        if v is None:
            continue
        if isinstance(v, (list, tuple, set)):
            ids.update(int(x) for x in v)
        else:
            try:
                ids.add(int(v))
            except (TypeError, ValueError):
                pass
    return ids


def think_end_id(tokenizer) -> int | None:
    """The ``</think>`` token id if the tokenizer has it as one token, else None."""
    if tokenizer is None:
        return None
    try:
        tid = tokenizer.convert_tokens_to_ids(THINK_END)
    except Exception:
        return None
    if tid is None or isinstance(tid, list) or tid == getattr(tokenizer, "unk_token_id", None):
        return None
    return int(tid)


def _cache_len(cache) -> int | None:
    if cache is None:
        return None
    try:
        if hasattr(cache, "get_seq_length"):
            return int(cache.get_seq_length())
        return int(cache[0][0].shape[-2])  # legacy tuple of (key, value) per layer
    except Exception:
        return None


def _cache_mb(cache) -> float | None:
    """Bytes held by the KV cache's key/value tensors, in MiB."""
    if cache is None:
        return None
    try:
        tensors = []
        layers = getattr(cache, "layers", None)
        if layers is not None:  # transformers >= 4.54
            for layer in layers:
                tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
        elif hasattr(cache, "key_cache"):
            tensors = list(cache.key_cache) + list(cache.value_cache)
        else:
            for kv in cache:
                tensors += list(kv[:2])
        total = sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel"))
        return round(total / MB, 3)
    except Exception:
        return None


class _Probe:
    """Forward hooks for one generate call on one thread."""

    def __init__(self, prompt_len: int | None):
        self.tid = threading.get_ident()
        self.prompt_len = prompt_len
        self.calls = 0
        self.fed = 0  # prompt tokens consumed by prefill forwards so far
        self.prefill_done = False
        self.started = False
        self.first_end = None  # perf_counter when the first token's logits were ready
        self.prefill_kv = None
        self.step_ends: list[float] = []  # end of decode forward k produces generated token k
        self.cache = None
        self._cur_len = None
        self.handles = []
        self._compiling = None
        torch = _torch()
        try:
            self._compiling = torch.compiler.is_compiling
        except Exception:
            self._compiling = None

    def attach(self, model) -> None:
        self.handles = [
            model.register_forward_pre_hook(self._pre, with_kwargs=True),
            model.register_forward_hook(self._post, with_kwargs=True),
        ]

    def detach(self) -> None:
        for h in self.handles:
            try:
                h.remove()
            except Exception:
                pass
        self.handles = []

    def _skip(self) -> bool:
        # Other threads' requests, and decode steps under torch.compile (dynamo must not trace us).
        return threading.get_ident() != self.tid or (self._compiling is not None and self._compiling())

    # Both hooks take kwargs as optional: torch decides per call whether a hook registered
    # with_kwargs gets them, by looking its id up in a dict that another thread's detach may be
    # changing at that moment, so a hook can be called without them (a TypeError in the app).
    def _pre(self, module, args, kwargs=None):
        kwargs = kwargs or {}
        try:
            if self._skip():
                return None
            self.started = True
            x = kwargs.get("input_ids")
            if x is None:
                x = args[0] if args else kwargs.get("inputs_embeds")
            self._cur_len = _seq_len(x)
            # A one-token step after a prefill forward: the prompt was shorter than input_ids
            # (a reused cache held the rest), so the prefill ended with the previous forward.
            if not self.prefill_done and self.calls > 0 and self._cur_len == 1:
                self.prefill_done = True
        except Exception:
            pass
        return None

    def _post(self, module, args, *rest):
        out = rest[-1] if rest else None
        try:
            if self._skip():
                return None
            cache = getattr(out, "cache", None)
            if cache is None:
                cache = getattr(out, "past_key_values", None)
            self.cache = cache
            if not self.prefill_done:
                logits = getattr(out, "logits", None)
                if logits is not None and getattr(logits.device, "type", "") == "cuda":
                    _torch().cuda.synchronize(logits.device)
                self.first_end = time.perf_counter()
                self.prefill_kv = _cache_len(cache)
                self.fed += self._cur_len or 0
                if self.prompt_len is None or self.fed >= self.prompt_len or self._cur_len is None:
                    self.prefill_done = True
            else:
                self.step_ends.append(time.perf_counter())
            self.calls += 1
        except Exception:
            pass
        return None


def _model_device(model):
    try:
        return next(model.parameters()).device
    except Exception:
        return getattr(model, "device", None)


def _sync(device) -> None:
    try:
        if device is not None and device.type == "cuda":
            _torch().cuda.synchronize(device)
    except Exception:
        pass


def _call(model, inputs, kwargs):
    if inputs is None:
        return model.generate(**kwargs)
    if isinstance(inputs, Mapping):
        return model.generate(**inputs, **kwargs)
    return model.generate(inputs, **kwargs)


def _sequences(out):
    if hasattr(out, "shape"):
        return out
    seq = getattr(out, "sequences", None)
    if seq is None and isinstance(out, Mapping):
        seq = out.get("sequences")
    return seq


def _r(x, nd=3):
    return None if x is None else round(x, nd)


def _span_for(tracer, session_id, request_id):
    """(span, owned): the explicit ``tracer.request()`` span for ``request_id`` (the caller's to
    close), else the implicit one ``tokenize`` opened, else a new implicit one (ours to close)."""
    from dslogs_collector.request import RequestSpan

    span = tracer._requests.get(request_id) if request_id is not None else None
    if span is not None and not span.closed:
        if not span.implicit:
            return span, False
        tracer._requests.pop(request_id, None)
        span.count_inflight()
        return span, True
    span = RequestSpan(tracer, session_id, request_id, implicit=True)
    span.open(start_clock=False)
    tracer._requests.pop(request_id, None)  # generate holds it now; a later tokenize opens a new one
    return span, True


def new_request_id() -> str:
    """A request id for a call that names none: the process, then a clock that never repeats."""
    return f"{os.getpid():x}-{time.time_ns():x}-{next(_request_counter):x}"


_request_counter = itertools.count(1)


def traced_generate(tracer, model, inputs=None, *, session_id=None, request_id=None, tokenizer=None,
                    think_end_token_id=None, oom_fallback=False, log_text=False, _fallback=None,
                    _span=None, **kwargs):
    if request_id is None:
        request_id = new_request_id()  # its events must group into one request
    ids = {"session_id": session_id, "request_id": request_id}
    extra = {"fallback": _fallback} if _fallback else {}
    probe = None
    prompt_len = params = device = None
    embeds_only = False
    span = owned = None
    try:
        span, owned = _span if _span is not None else _span_for(tracer, session_id, request_id)
    except Exception:
        span = None
    try:
        prompt_len, embeds_only = _prompt_len(inputs, kwargs)
        params = _params(model, kwargs, prompt_len)
        deploy = tracer._deploy
        if deploy is not None and id(model) not in deploy.seen:
            deploy.saw_model(model, kwargs)
        device = _model_device(model)
        if span is not None:
            from dslogs_collector.request import _last_device, device_name

            span.device = span.probe_device or device_name(device)
            _last_device[0] = span.device
            span.attempts += 1
        probe = _Probe(prompt_len)
        probe.attach(model)
    except Exception:
        if probe is not None:
            probe.detach()
        probe = None

    failed = False
    c0 = time.process_time()
    t0 = time.perf_counter()
    if span is not None and span.t0 is None:
        span.t0 = t0  # an implicit span: duration = tokenize + generate, as before spans existed
    streamer = kwargs.get("streamer")
    try:
        out = _call(model, inputs, kwargs)
    except BaseException as e:
        t_end = time.perf_counter()
        c_end = time.process_time()
        if probe is not None:
            probe.detach()
            probe.cache = None  # the failed run's KV cache must not outlive it (the retry needs the memory)
        oom = False
        will_fallback = False
        try:
            oom = is_oom(e)
            # a stream that already showed text can't take a second answer after it
            will_fallback = (oom and oom_fallback and isinstance(e, Exception)
                             and not getattr(streamer, "_dslogs_emitted", False))
            _record_failure(tracer, e, oom, probe, ids, extra, t_end, prompt_len, params, device,
                            will_fallback, span, owned)
        except Exception:
            pass
        if not will_fallback:
            raise
        failed = True  # leave the except block first: its traceback pins the failed tensors
    if failed:
        try:
            torch = _torch()
            if torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass
        try:
            if streamer is not None and hasattr(streamer, "_dslogs_reset"):
                streamer._dslogs_reset()
        except Exception:
            pass
        greedy = {k: v for k, v in kwargs.items() if k not in BEAM_ONLY}
        greedy.update(num_beams=1, do_sample=False)
        # article 003 §3.2: fall back to greedy search after a beam-search OOM
        return traced_generate(tracer, model, inputs, session_id=session_id, request_id=request_id,
                               tokenizer=tokenizer, think_end_token_id=think_end_token_id,
                               oom_fallback=False, log_text=log_text, _fallback="greedy",
                               _span=None if span is None else (span, owned), **greedy)

    _sync(device)
    t_end = time.perf_counter()
    c_end = time.process_time()
    try:
        if probe is not None:
            probe.detach()
        _record_success(tracer, model, out, probe, ids, extra, t0, t_end, c0, c_end, prompt_len,
                        params, device, kwargs, tokenizer, think_end_token_id, log_text, embeds_only,
                        span, owned)
    except Exception:
        pass
    finally:
        if probe is not None:
            probe.cache = None
        if owned and span is not None and not span.closed:
            span.close(end=t_end)  # only if recording failed: the request line is still written
    return out


def _gpu_index(device):
    if device is not None and getattr(device, "type", None) == "cuda":
        return device.index if device.index is not None else _torch().cuda.current_device()
    return None


def _gpu_memory(tracer, device, ids, extra):
    idx = _gpu_index(device)
    probe = tracer._memory_probe
    if probe is not None:  # the app's own reading of this process's GPU memory
        try:
            mem = probe()
        except Exception:
            mem = None
        if mem:
            row = {k: v for k, v in mem.items() if k != "device"}
            dev = mem.get("device")
            if idx is None and isinstance(dev, str) and dev.startswith("cuda:") and dev[5:].isdigit():
                idx = int(dev[5:])
            if idx is not None:
                row.setdefault("gpu_index", idx)
            tracer.event("gpu_memory", **row, **ids, **extra)
        return
    if idx is not None:
        tracer.gpu_memory(gpu_index=idx, **ids, **extra)


def _record_failure(tracer, e, oom, probe, ids, extra, t_end, prompt_len, params, device,
                    will_fallback, span, owned):
    if probe is None or not probe.started:
        stage = "generate"
    elif probe.first_end is None:
        stage = "prefill"
    else:
        stage = "decode"
    fields = dict(ids, **extra)
    if will_fallback:
        fields["fallback"] = "greedy"
    msg = str(e)
    if len(msg) > 300:
        msg = msg[:300] + "…"
    dev = span.device if span is not None else None
    tracer.event("error", error_type="OutOfMemoryError" if oom else type(e).__name__, error_msg=msg,
                 failed_stage=stage, params=params, device=dev, **fields)
    _gpu_memory(tracer, device, ids, extra)
    if span is None:
        return
    if will_fallback:
        span.first_token = None  # the user sees the retry's first token, not this attempt's
        return
    span.error_recorded = e
    span.fields.update(input_len=prompt_len, status="error", finish_reason="error", **extra)
    if probe is not None and probe.first_end is not None and span.first_token is None:
        span.first_token = probe.first_end
    if owned:
        span.close(end=t_end)


def _record_success(tracer, model, out, probe, ids, extra, t0, t_end, c0, c_end, prompt_len, params,
                    device, kwargs, tokenizer, think_id, log_text, embeds_only, span, owned):
    wall = (t_end - t0) * 1000.0
    cpu = (c_end - c0) * 1000.0
    # article 003 §4.2: the share of generate's wall time the CPU spent waiting on the GPU. On a
    # CPU device it has no meaning (torch's threads make CPU time exceed wall time): not logged.
    gpu_wait = (wall - cpu) / wall * 100.0 if wall > 0 and getattr(device, "type", None) != "cpu" else None
    seq = _sequences(out)
    output_len = reasoning_len = None
    finish = None
    gen_row = None
    if seq is not None and prompt_len is not None:
        if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
            start = 1  # the decoder start token
        else:
            start = 0 if embeds_only else prompt_len
        output_len = max(0, int(seq.shape[-1]) - start)
        gen_row = seq[0, start:].tolist() if seq.dim() == 2 else None
    if think_id is None:
        think_id = think_end_id(tokenizer)
    if gen_row is not None:
        if think_id is not None:
            try:
                reasoning_len = gen_row.index(think_id) + 1
            except ValueError:
                reasoning_len = 0
        eos = _eos_ids(model, kwargs, tokenizer)
        if gen_row and gen_row[-1] in eos:
            finish = "stop"
        elif params and params.get("max_new_tokens") is not None and output_len >= params["max_new_tokens"]:
            finish = "length"
        else:
            finish = "stop"
    streamer = kwargs.get("streamer")
    if getattr(streamer, "_dslogs_cancelled", False):
        finish = "cancelled"
    cache = probe.cache if probe is not None else None
    kv_len = _cache_len(cache)
    decode = {
        "output_len": output_len, "reasoning_len": reasoning_len, "cpu_time_ms": _r(cpu),
        "gpu_wait_pct": round(gpu_wait, 1) if gpu_wait is not None else None, "params": params, "input_len": prompt_len,
        "kv_seq_len": kv_len,
    }
    sampler = tracer._samplers
    idx = _gpu_index(device)
    if sampler is not None and idx is not None:
        util = sampler.gpu_util(idx)
        if util is not None:
            decode["gpu_util_pct"] = util
    split = probe is not None and probe.first_end is not None
    first = getattr(streamer, "_dslogs_first_token", None)  # stream_generate: the first streamed token
    if first is None and split:
        first = probe.first_end
    answer_start = None
    if split:
        prefill_ms = (probe.first_end - t0) * 1000.0
        # the prefill line carries the first token's time, so a timeline reads in order
        first_ts = tracer._clock() - (time.perf_counter() - probe.first_end)
        tracer.event_at(first_ts, "prefill", prefill_ms, input_len=prompt_len,
                     kv_seq_len=probe.prefill_kv if probe.prefill_kv is not None else prompt_len, **ids, **extra)
        tracer.event("decode", (t_end - probe.first_end) * 1000.0, **decode, **ids, **extra)
        if reasoning_len and output_len and reasoning_len < output_len:
            k = reasoning_len  # index of the first answer token among the generated ones
            if k <= len(probe.step_ends):
                answer_start = probe.step_ends[k - 1]
    else:
        tracer.event("inference", wall, **decode, **ids, **extra)
    req = {"input_len": prompt_len, "output_len": output_len, "reasoning_len": reasoning_len,
           "status": "ok", "finish_reason": finish, **extra}
    if log_text and tokenizer is not None:
        try:
            first_row = seq[0]
            cut = seq.shape[-1] - output_len
            req["prompt_text"] = tokenizer.decode(first_row[:cut], skip_special_tokens=True)
            req["response_text"] = tokenizer.decode(first_row[cut:], skip_special_tokens=True)
        except Exception:
            pass
    if span is not None:
        if span.first_token is None:
            span.first_token = first
        if answer_start is not None and span.t0 is not None and "ttfa_ms" not in span.fields:
            req["ttfa_ms"] = _r((answer_start - span.t0) * 1000.0 + span.offset_ms)
        span.fields.update(req)
        if owned:
            span.close(end=t_end)
    if kv_len is not None:
        tracer.event("kv_cache", kv_seq_len=kv_len, kv_cache_size_mb=_cache_mb(cache), **ids, **extra)
    _gpu_memory(tracer, device, ids, extra)


def traced_tokenize(tracer, tokenizer, text, *, session_id=None, request_id=None, device=None,
                    log_text=False, **kwargs):
    ids = {"session_id": session_id, "request_id": request_id}
    span = None
    try:
        chars = len(text) if isinstance(text, str) else sum(len(t) for t in text)
        fields = {"input_len": chars}
        if log_text:
            fields["prompt_text"] = text
        tracer.event("input", **fields, **ids)
        if request_id is not None:
            open_span = tracer._requests.get(request_id)
            if open_span is None or open_span.closed:
                # no tracer.request() around this turn: the request starts here (its memory
                # and RSS "before") and the generate with this request_id ends it
                from dslogs_collector.request import RequestSpan

                span = RequestSpan(tracer, session_id, request_id, implicit=True).open(start_clock=False,
                                                                                      count=False)
            elif open_span.implicit:
                span = open_span  # tokenized again for the same turn: both count
    except Exception:
        pass
    kwargs.setdefault("return_tensors", "pt")
    t0 = time.perf_counter()
    enc = tokenizer(text, **kwargs)
    ms = (time.perf_counter() - t0) * 1000.0
    if device is not None:
        enc = enc.to(device)
    try:
        x = enc["input_ids"] if isinstance(enc, Mapping) else getattr(enc, "input_ids", None)
        n = _seq_len(x) if hasattr(x, "shape") else (len(x[0]) if x and isinstance(x[0], list) else len(x or []))
        tracer.event("tokenize", ms, input_len=n, **ids)
        if span is not None:
            span.offset_ms += ms  # tokenize counts in ttft and duration (what the user waits for starts at the request)
    except Exception:
        pass
    return enc


# -- streaming ---------------------------------------------------------------------------------
STREAM_POLL_S = 0.5  # how often a waiting consumer checks that the generate thread is alive
CANCEL_JOIN_S = 10.0  # how long a cancelled stream waits for generate to stop at its next step
END_JOIN_S = 30.0  # after the stream's last piece: generate's recording is all that is left


def _num_beams(model, kwargs) -> int:
    v = kwargs.get("num_beams")
    if v is None:
        gc = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        v = getattr(gc, "num_beams", None)
    try:
        return int(v) if v is not None else 1
    except (TypeError, ValueError):
        return 1


def stream_generate(tracer, model, inputs=None, *, session_id=None, request_id=None, tokenizer=None,
                    think_end_token_id=None, oom_fallback=False, log_text=False, timeout_s=None,
                    **kwargs):
    """Check the arguments now (so a bad call fails at once, not at the first ``next``), then
    return the generator that runs generate on its own thread and yields its text."""
    if tokenizer is None:
        raise ValueError("stream_generate needs tokenizer= to decode the streamed tokens")
    if kwargs.get("streamer") is not None:
        raise ValueError("stream_generate makes its own streamer; pass no streamer= (or use tracer.generate)")
    beams = _num_beams(model, kwargs)
    if beams > 1:
        raise ValueError(f"stream_generate: beam search (num_beams={beams}) cannot stream: transformers "
                         "refuses a streamer with beams. Use num_beams=1, or tracer.generate() without streaming.")
    if request_id is None:
        request_id = new_request_id()
    return _stream(tracer, model, inputs, session_id, request_id, tokenizer, think_end_token_id,
                   oom_fallback, log_text, timeout_s, kwargs)


def _streamer_class():
    from transformers import TextIteratorStreamer

    class Streamer(TextIteratorStreamer):
        """TextIteratorStreamer that notes its first generated token, whether text went out,
        and can be ended from outside (generate raised) or reset for a fallback retry."""

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._dslogs_first_token = None
            self._dslogs_emitted = False
            self._dslogs_cancelled = False
            self._ended = False

        def put(self, value):
            if self._dslogs_first_token is None and not self.next_tokens_are_prompt:
                self._dslogs_first_token = time.perf_counter()
            super().put(value)

        def on_finalized_text(self, text, stream_end=False):
            if text:
                self._dslogs_emitted = True
            if stream_end:
                self._ended = True
            super().on_finalized_text(text, stream_end=stream_end)

        def _dslogs_reset(self):
            self.token_cache = []
            self.print_len = 0
            self.next_tokens_are_prompt = True
            self._dslogs_first_token = None

        def _dslogs_abort(self):
            # generate raised: end the stream without flushing the failed attempt's partial text
            if not self._ended:
                self._ended = True
                self.text_queue.put(self.stop_signal)

    return Streamer


def _stop_criteria(user_criteria, flag):
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Cancelled(StoppingCriteria):
        """Ends generate at its next step once the consumer went away (client cancel)."""

        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), flag.is_set(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([*(user_criteria or []), Cancelled()])


def _stream(tracer, model, inputs, session_id, request_id, tokenizer, think_end_token_id, oom_fallback,
            log_text, timeout_s, kwargs):
    cancel = threading.Event()
    poll = STREAM_POLL_S if timeout_s is None else max(0.01, min(STREAM_POLL_S, float(timeout_s)))
    streamer = _streamer_class()(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=poll)
    kwargs = dict(kwargs, streamer=streamer,
                  stopping_criteria=_stop_criteria(kwargs.get("stopping_criteria"), cancel))
    try:
        span = _span_for(tracer, session_id, request_id)  # here, on the handler's thread (Gradio's queue wait)
    except Exception:
        span = None
    box = {}

    def produce():
        try:
            box["out"] = traced_generate(tracer, model, inputs, session_id=session_id, request_id=request_id,
                                         tokenizer=tokenizer, think_end_token_id=think_end_token_id,
                                         oom_fallback=oom_fallback, log_text=log_text, _span=span, **kwargs)
        except BaseException as e:  # handed to the consumer below
            box["exc"] = e
        finally:
            streamer._dslogs_abort()  # never leave the consumer waiting on a stream nobody ends

    worker = threading.Thread(target=produce, name=f"dslogs-generate-{request_id}", daemon=True)
    worker.start()
    finished = False
    try:
        idle_since = time.monotonic()
        while True:
            try:
                piece = next(streamer)
            except StopIteration:
                break
            except queue.Empty:
                if not worker.is_alive():
                    break  # the producer is gone and ended nothing: don't wait any longer
                if timeout_s is not None and time.monotonic() - idle_since > timeout_s:
                    raise TimeoutError(f"stream_generate: no text for {timeout_s} s") from None
                continue
            idle_since = time.monotonic()
            if piece:
                yield piece
        finished = True
    finally:
        if not finished:  # closed early (client cancel, GeneratorExit) or the consumer raised
            streamer._dslogs_cancelled = True
            cancel.set()
            worker.join(CANCEL_JOIN_S)
    worker.join(END_JOIN_S)
    exc = box.get("exc")
    if exc is not None:
        raise exc
