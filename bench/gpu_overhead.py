"""Where the collector's cost on a real-size decode goes, on a machine with an NVIDIA GPU.

    python bench/gpu_overhead.py [--rounds 4] [--new 128] [--prompt 512]

A model of DeepSeek-R1-Distill-Qwen-1.5B's shape (random bf16 weights, built on the GPU; the
config from bench/gpu_check.py) generates greedily, the variants interleaved round by round so a
clock or thermal drift hits all alike; each printed as median ms and x bare:

  phase 1, no sampler thread in the process:
  bare               model.generate alone
  hooks              the first-token forward hooks attached (dslogs_collector.hf._Probe), nothing else
  traced             Tracer(samplers=False).generate
  phase 2, bare generate with one sampler thread beside it (every 0.5 s; 5 s is the default):
  none, gpu (NVML), torch (allocator), process, all three

and what one reading of each sampler costs (each NVML call apart), and a cProfile of one traced
generate restricted to the collector's own functions.

"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check import R1_1_5B  # noqa: E402

from dslogs_collector import Tracer  # noqa: E402
from dslogs_collector.hf import _Probe  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model on CPU: try the script itself")
    args = ap.parse_args(argv)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dev = "cpu" if args.tiny else "cuda"
    if not args.tiny and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    shape = dict(R1_1_5B)
    if args.tiny:
        shape.update(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128)
    cfg = Qwen2Config(**shape)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = Qwen2ForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt), device=dev)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    kw = dict(max_new_tokens=args.new, do_sample=False, eos_token_id=None)
    tmp = Path(tempfile.mkdtemp(prefix="dslogs-gpu-overhead-"))
    plain_tracer = Tracer(tmp / "plain", samplers=False)

    def timed(fn):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        return (time.perf_counter() - t) * 1000

    def bare():
        model.generate(**inputs, **kw)

    def hooks():
        p = _Probe(args.prompt)
        p.attach(model)
        try:
            model.generate(**inputs, **kw)
        finally:
            p.detach()

    n = [0]

    def traced(tracer):
        def run():
            n[0] += 1
            tracer.generate(model, inputs, session_id="s", request_id=f"r{n[0]}", **kw)
        return run

    def measure(variants):
        for fn in variants.values():
            timed(fn)  # warm-up each path
        times = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                times[name].append(timed(fn))
        return times

    # what one reading of each sampler costs on the calling thread
    from dslogs_collector.samplers import SAMPLERS

    print("one sample, on the calling thread (median / p99 of 50, µs):")
    for name, cls in SAMPLERS.items():
        try:
            smp = cls()
        except Exception as e:
            print(f"  {name:8s} off: {e}")
            continue
        ts = []
        for _ in range(50):
            t = time.perf_counter()
            smp.sample()
            ts.append((time.perf_counter() - t) * 1e6)
        ts.sort()
        print(f"  {name:8s} {statistics.median(ts):9.0f} {ts[int(len(ts) * 0.99) - 1]:9.0f}")
        if name == "gpu":
            nv, h = smp.nv, smp.handles[0]
            for fn, a in ((nv.nvmlDeviceGetUtilizationRates, ()), (nv.nvmlDeviceGetMemoryInfo, ()),
                          (nv.nvmlDeviceGetPowerUsage, ()), (nv.nvmlDeviceGetTemperature, (nv.NVML_TEMPERATURE_GPU,)),
                          (nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_SM,))):
                ts = []
                for _ in range(50):
                    t = time.perf_counter()
                    fn(h, *a)
                    ts.append((time.perf_counter() - t) * 1e6)
                print(f"    {fn.__name__:32s} {statistics.median(ts):9.0f}")
        smp.close()

    # phase 1: no sampler thread in the process
    times = measure({"bare": bare, "hooks": hooks, "traced": traced(plain_tracer)})
    # phase 2: bare generate with one sampler thread (every 0.5 s) beside it, started per call
    full_tracer = Tracer(tmp / "full", samplers=False)

    def with_sampler(which):
        def run():
            if which:
                full_tracer.start_samplers(which, interval_s=0.5)
            try:
                bare()
            finally:
                full_tracer.stop_samplers()
        return run

    times.update(measure({f"bare, {w or 'no'} sampler": with_sampler(w)
                          for w in ("", "gpu", "torch", "process", ["gpu", "torch", "process"])}))
    base = statistics.median(times["bare"])
    print(f"prompt {args.prompt}, {args.new} new tokens, {args.rounds} rounds, ms: median (x phase-1 bare "
          f"median), min, all")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {str(name):32s} {m:8.1f} x{m / base:.3f}  min {min(ts):8.1f}  ({', '.join(f'{t:.0f}' for t in ts)})")

    prof = cProfile.Profile()
    prof.enable()
    timed(traced(plain_tracer))
    prof.disable()
    st = pstats.Stats(prof)
    print("\n--- cProfile of one traced generate (samplers off): the collector's functions, by cumulative time")
    st.sort_stats("cumulative").print_stats("collector/", 16)
    plain_tracer.close()
    full_tracer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
