"""Prometheus text snapshots written by the real ``prometheus_client`` (the library vLLM's
/metrics endpoint uses), with vLLM's metric names, labels and buckets
(vllm/v1/metrics/loggers.py ``PrometheusStatLogger``): what ``curl -s host:8000/metrics >
metrics-$(date +%s).prom`` saves."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ["model_name", "engine"]
MODEL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip


class VllmServer:
    """One vLLM server process's metrics; a new instance is a restarted server."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             LABELS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             LABELS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                        LABELS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     LABELS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         LABELS, registry=r).labels(MODEL, "0")  # fmt: skip
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          LABELS + ["finished_reason"], registry=r)  # fmt: skip
        self.success = {reason: success.labels(MODEL, "0", reason) for reason in ("stop", "length", "abort")}
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              LABELS, buckets=TTFT_BUCKETS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             LABELS, buckets=REQUEST_LATENCY_BUCKETS, registry=r).labels(MODEL, "0")  # fmt: skip
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", LABELS,
                               buckets=REQUEST_LATENCY_BUCKETS, registry=r).labels(MODEL, "0")  # fmt: skip

    def finish(self, ttft: float, e2e: float, queued: float, prompt: int, generated: int, reason: str = "stop"):
        """What ``PrometheusStatLogger.record`` does for one finished request."""
        self.ttft.observe(ttft)
        self.e2e.observe(e2e)
        self.queue.observe(queued)
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.success[reason].inc()

    def scrape(self, folder: Path, t: int) -> Path:
        """``curl -s host:8000/metrics > metrics-<t>.prom``."""
        path = Path(folder) / f"metrics-{t}.prom"
        path.write_bytes(generate_latest(self.registry))
        return path


class SglangServer:
    """SGLang's /metrics (sglang/srt/metrics/collector.py): prometheus_client, as vLLM, with the
    ``sglang:`` names and a ``model_name`` label."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        labels = ["model_name"]
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", labels,
                             registry=r).labels(MODEL)  # fmt: skip
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels,
                            registry=r).labels(MODEL)  # fmt: skip
        self.token_usage = Gauge("sglang:token_usage", "The token usage.", labels, registry=r).labels(MODEL)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", labels,
                                     registry=r).labels(MODEL)  # fmt: skip
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.",
                                         labels, registry=r).labels(MODEL)  # fmt: skip
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=TTFT_BUCKETS, registry=r).labels(MODEL)  # fmt: skip

    def finish(self, ttft: float, prompt: int, generated: int) -> None:
        self.ttft.observe(ttft)
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)

    def scrape(self, folder: Path, t: int) -> Path:
        path = Path(folder) / f"sglang-{t}.prom"
        path.write_bytes(generate_latest(self.registry))
        return path


def llamacpp_text(prompt_total: int, predicted_total: int, processing: int, deferred: int) -> str:
    """llama.cpp's ``llama-server --metrics``: the server formats the text itself (tools/server,
    ``handle_metrics``), a HELP and a TYPE line per metric, no labels, no histograms."""
    rows = [("prompt_tokens_total", "counter", "Number of prompt tokens processed.", prompt_total),
            ("tokens_predicted_total", "counter", "Number of generation tokens processed.", predicted_total),
            ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", 812.5),
            ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", 41.25),
            ("requests_processing", "gauge", "Number of requests processing.", processing),
            ("requests_deferred", "gauge", "Number of requests deferred.", deferred)]
    return "".join(f"# HELP llamacpp:{n} {h}\n# TYPE llamacpp:{n} {k}\nllamacpp:{n} {v}\n" for n, k, h, v in rows)


def tgi_text(durations: list[float], queue_size: int, batch_size: int, buckets: list[float]) -> str:
    """TGI's /metrics, written by the Rust ``metrics-exporter-prometheus`` with TGI's buckets for
    its ``*_duration`` histograms: TYPE lines only, ``le`` labels, ``_sum`` and ``_count``."""
    out = [f"# TYPE tgi_queue_size gauge\ntgi_queue_size {queue_size}\n",
           f"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size {batch_size}\n",
           f"# TYPE tgi_request_count counter\ntgi_request_count {len(durations)}\n",
           "# TYPE tgi_request_duration histogram\n"]
    for le in buckets:
        out.append(f'tgi_request_duration_bucket{{le="{le}"}} {sum(d <= le for d in durations)}\n')
    out.append(f'tgi_request_duration_bucket{{le="+Inf"}} {len(durations)}\n')
    out.append(f"tgi_request_duration_sum {sum(durations)}\ntgi_request_duration_count {len(durations)}\n")
    return "".join(out)


def _rust(x: float) -> str:
    """An f64 as Rust's ``Display`` writes it (the shortest round trip, never an exponent)."""
    if float(x).is_integer():
        return str(int(x))
    text = repr(float(x))
    return format(float(x), "f") if "e" in text else text


def _tgi_histogram(name: str, values: list[float], buckets: list[float], labels: str = "") -> str:
    sep = "," if labels else ""
    out = [f"# TYPE {name} histogram\n"]
    for le in buckets:
        out.append(f'{name}_bucket{{{labels}{sep}le="{_rust(le)}"}} {sum(v <= le for v in values)}\n')
    out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {len(values)}\n')
    tail = f"{{{labels}}}" if labels else ""
    out.append(f"{name}_sum{tail} {_rust(sum(values))}\n{name}_count{tail} {len(values)}\n\n")
    return "".join(out)


class TgiServer:
    """TGI's router /metrics (text-generation-inference 3.3.6-dev0, router/src/server.rs and
    backends/v3/src: ``metrics::counter!`` / ``histogram!`` / ``gauge!``), rendered as the Rust
    ``metrics-exporter-prometheus`` 0.15 renders them: a counter under its own name (``tgi_request_count``,
    no ``_total``), histograms with the buckets ``server.rs`` sets (a 1.5x geometric series from
    0.00015 s for every ``*duration``, max_input_tokens/100 steps for the input length,
    max_total_tokens/100 for generated tokens), and a histogram without buckets
    (``tgi_request_skipped_tokens``) as a summary with quantiles 0..1."""

    DURATION = [0.0001 * 1.5 ** (i + 1) for i in range(35)]

    def __init__(self, max_input_tokens: int = 4096, max_total_tokens: int = 8192):
        self.input_buckets = [max_input_tokens / 100 * (x + 1) for x in range(100)]
        self.generated_buckets = [max_total_tokens / 100 * (x + 1) for x in range(100)]
        self.requests = 0
        self.success = 0
        self.failure: dict[str, int] = {}
        self.duration: list[float] = []
        self.queue: list[float] = []
        self.per_token: list[float] = []
        self.input_length: list[int] = []
        self.generated: list[int] = []
        self.skipped: list[int] = []
        self.queue_size = 0
        self.batch_size = 0

    def finish(self, duration: float, queued: float, prompt: int, generated: int) -> None:
        """What ``generate`` records for a request that succeeds (server.rs)."""
        self.requests += 1
        self.success += 1
        self.duration.append(duration)
        self.queue.append(queued)
        self.per_token.append((duration - queued) / max(generated, 1))
        self.input_length.append(prompt)
        self.generated.append(generated)
        self.skipped.append(0)

    def fail(self, err: str = "validation") -> None:
        self.requests += 1
        self.failure[err] = self.failure.get(err, 0) + 1

    def text(self) -> str:
        out = ["# HELP tgi_request_count Total number of requests\n# TYPE tgi_request_count counter\n"
               f"tgi_request_count {self.requests}\n\n",
               "# HELP tgi_request_success Number of successful requests\n# TYPE tgi_request_success counter\n"
               f"tgi_request_success {self.success}\n\n"]  # fmt: skip
        if self.failure:
            out.append("# TYPE tgi_request_failure counter\n")
            out += [f'tgi_request_failure{{err="{e}"}} {n}\n' for e, n in sorted(self.failure.items())]
            out.append("\n")
        out.append(f"# HELP tgi_queue_size Current queue size\n# TYPE tgi_queue_size gauge\n"
                   f"tgi_queue_size {_rust(self.queue_size)}\n\n")  # fmt: skip
        out.append(f"# HELP tgi_batch_current_size Current batch size\n# TYPE tgi_batch_current_size gauge\n"
                   f"tgi_batch_current_size {_rust(self.batch_size)}\n\n")  # fmt: skip
        out.append(_tgi_histogram("tgi_request_duration", self.duration, self.DURATION))
        out.append(_tgi_histogram("tgi_request_queue_duration", self.queue, self.DURATION))
        out.append(_tgi_histogram("tgi_request_mean_time_per_token_duration", self.per_token, self.DURATION))
        out.append(_tgi_histogram("tgi_request_input_length", self.input_length, self.input_buckets))
        out.append(_tgi_histogram("tgi_request_generated_tokens", self.generated, self.generated_buckets))
        ordered = sorted(self.skipped)
        out.append("# TYPE tgi_request_skipped_tokens summary\n")
        for q in ("0", "0.5", "0.9", "0.95", "0.99", "0.999", "1"):
            v = ordered[min(len(ordered) - 1, int(float(q) * len(ordered)))] if ordered else 0
            out.append(f'tgi_request_skipped_tokens{{quantile="{q}"}} {_rust(v)}\n')
        out.append(f"tgi_request_skipped_tokens_sum {_rust(sum(self.skipped))}\n"
                   f"tgi_request_skipped_tokens_count {len(self.skipped)}\n\n")  # fmt: skip
        return "".join(out)

    def scrape(self, folder: Path, name: str) -> Path:
        path = Path(folder) / name
        path.write_text(self.text())
        return path


class LlamaCppServer:
    """llama.cpp's ``llama-server --metrics`` (examples/server/server.cpp at ggml-org/llama.cpp
    03d4bccb685f1fff604c56abe4cddf0348c26417, ``handle_metrics``): the server writes the text
    itself, a HELP and a TYPE line per metric, counters first (the JSON object's keys in order),
    every value through ``std::ostream <<`` of a double (six significant digits: 1234567 is
    ``1.23457e+06``). ``n_busy_slots_per_decode`` is an average (busy slots over decode calls
    since start) exposed with TYPE counter: it falls when fewer slots are busy."""

    def __init__(self, n_ctx: int = 8192):
        self.n_ctx = n_ctx
        self.prompt_total = 0
        self.prompt_ms = 0.0
        self.predicted_total = 0
        self.predicted_ms = 0.0
        self.n_decode = 0
        self.busy_slots = 0
        self.processing = 0
        self.deferred = 0
        self.kv_tokens = 0

    def serve(self, requests: list[tuple[int, int]], slots: int) -> None:
        """``requests`` (prompt, predicted tokens), ``slots`` at a time: one llama_decode per
        step, each step one token for every busy slot."""
        for i in range(0, len(requests), slots):
            batch = requests[i:i + slots]
            self.prompt_total += sum(p for p, _ in batch)
            self.prompt_ms += sum(p for p, _ in batch) * 0.4
            self.n_decode += 1  # the prompts' batch
            self.busy_slots += len(batch)
            for step in range(max(n for _, n in batch)):
                busy = sum(1 for _, n in batch if n > step)
                self.n_decode += 1
                self.busy_slots += busy
                self.predicted_total += busy
                self.predicted_ms += 25.0

    def text(self) -> str:
        g = "{:g}".format
        counters = [("prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_total),
                    ("prompt_seconds_total", "Prompt process time", int(self.prompt_ms) / 1e3),
                    ("tokens_predicted_total", "Number of generation tokens processed.", self.predicted_total),
                    ("tokens_predicted_seconds_total", "Predict process time", int(self.predicted_ms) / 1e3),
                    ("n_decode_total", "Total number of llama_decode() calls", self.n_decode),
                    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                     self.busy_slots / max(self.n_decode, 1))]  # fmt: skip
        gauges = [("prompt_tokens_seconds", "Average prompt throughput in tokens/s.", 2500.0),
                  ("predicted_tokens_seconds", "Average generation throughput in tokens/s.", 40.0),
                  ("kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", self.kv_tokens / self.n_ctx),
                  ("kv_cache_tokens", "KV-cache tokens.", self.kv_tokens),
                  ("requests_processing", "Number of requests processing.", self.processing),
                  ("requests_deferred", "Number of requests deferred.", self.deferred)]  # fmt: skip
        return "".join(f"# HELP llamacpp:{n} {h}\n# TYPE llamacpp:{n} {kind}\nllamacpp:{n} {g(float(v))}\n"
                       for kind, rows in (("counter", counters), ("gauge", gauges)) for n, h, v in rows)  # fmt: skip

    def scrape(self, folder: Path, name: str) -> Path:
        path = Path(folder) / name
        path.write_text(self.text())
        return path
