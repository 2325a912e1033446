"""Spans written by real third-party GenAI instrumentation around a tiny Qwen2, as OTLP/JSON.

    python tests/thirdparty_traces.py openlit|openllmetry OUT.json

One instrumentor per process (each patches transformers for good): openlit
(``openlit.init``) or OpenLLMetry's ``opentelemetry-instrumentation-transformers``, both
around ``transformers.pipeline("text-generation")`` (neither instruments plain
``model.generate``). The calls: four at once from threads, one of them with a long
``max_new_tokens``; then one whose forward raises a ValueError mid-generate and one whose forward
raises CUDA's OutOfMemoryError mid-generate. The SDK's in-memory exporter keeps the spans; they
are written with the SDK's own OTLP encoder as a Collector's ``file`` exporter writes them
(tests/otlp_helpers.py). Prints the number of pipeline calls made as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from otlp_helpers import Recorder  # noqa: E402


def main(which: str, out: Path) -> int:
    rec = Recorder({"service.name": "tiny-chat", "host.name": "cpu-1", "process.pid": 4321})
    if which == "openlit":
        from opentelemetry import trace

        trace.set_tracer_provider(rec.provider)
        import openlit

        # a local (empty) price list: openlit fetches one from GitHub otherwise
        prices = Path(tempfile.mkdtemp()) / "pricing.json"
        prices.write_text("{}")
        openlit.init(application_name="tiny-chat", disable_metrics=True, disable_events=True,
                     collect_gpu_stats=False, pricing_json=str(prices))  # fmt: skip
    elif which == "openllmetry":
        from opentelemetry.instrumentation.transformers import TransformersInstrumentor

        TransformersInstrumentor().instrument(tracer_provider=rec.provider)
    else:
        raise SystemExit(f"unknown instrumentor {which!r}")
    import torch
    import transformers

    from tests.collector_hf_helpers import OomOn, prompt_text, tiny_qwen2, word_tokenizer

    model, tok = tiny_qwen2(), word_tokenizer()
    pipe = transformers.pipeline("text-generation", model=model, tokenizer=tok, device="cpu")
    calls = 0

    def call(start: int, new_tokens: int) -> None:
        pipe(prompt_text(start), max_new_tokens=new_tokens, do_sample=False)

    # four calls at once: they start together and each forward step takes a little while, so
    # all four are in flight together even on a loaded machine
    start = threading.Barrier(4)
    forward = model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(0.03)
        return forward(*args, **kwargs)

    def together(first: int, new_tokens: int) -> None:
        start.wait()
        call(first, new_tokens)

    model.forward = slow_forward
    threads = [threading.Thread(target=together, args=(5 + i, 96 if i == 0 else 8)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    del model.forward  # back to the class's forward
    calls += len(threads)
    errors = {}
    for exc in (ValueError("logits contain NaN at step 2"),
                torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")):  # fmt: skip
        with OomOn(model, 2, exc=exc):
            try:
                call(20, 16)
            except type(exc):
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
        calls += 1
    rec.provider.force_flush()
    rec.write(out, per_line=3)
    print(json.dumps({"calls": calls, "errors": errors}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], Path(sys.argv[2])))
