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
