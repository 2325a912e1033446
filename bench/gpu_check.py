"""GPU check for the collector's CUDA and NVML paths, on a machine with an NVIDIA GPU.

    python bench/gpu_check.py [--keep-logs DIR]

1. torch allocator: allocate 256 MiB, check ``gpu_memory`` allocated/reserved/max_allocated
   rise by it; free it: allocated falls back, reserved stays (the cache) until empty_cache().
2. NVML sampler: ``gpu_sample`` of the torch device; memory used rises after a 1 GiB
   allocation and falls after empty_cache(); every value in its range.
3. A tiny random Qwen2 generate on cuda through ``Tracer.generate`` with all samplers on:
   prefill/decode/request/gpu_memory/gpu_sample lines, each valid schema v1.
4. A real CUDA OOM inside generate (a forward that asks for more memory than the GPU has):
   an ``error`` event (OutOfMemoryError), num_ooms rising, the exception re-raised, and the
   greedy fallback when asked.
5. ``Tracer.stream_generate`` on cuda (generate on its own thread, a TextIteratorStreamer):
   the stream ends, its text is what a plain greedy generate decodes to, and the events carry
   the first streamed token.
6. A model of DeepSeek-R1-Distill-Qwen-1.5B's shape (random bf16 weights, built on the GPU):
   traced against bare generate, interleaved, for the collector's cost on a real-size decode;
   the traced prefill against a synchronised forward of the same prompt (the first-token
   timing must wait for the GPU, not for the kernel launches); the gpu_memory event against
   the weights' bytes and the kv_cache event against the cache's size from the config.

Prints PASS/FAIL per check and a summary; exits 1 on any FAIL, 0 with "no GPU available" when
there is no CUDA device and no NVML.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dslogs_collector import Tracer  # noqa: E402
from dslogs_collector.samplers import NvmlSampler, Off, torch_memory_rows  # noqa: E402

MB = 1024 * 1024
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'  ' + detail if detail else ''}", flush=True)
    return bool(ok)


def gpu_available() -> tuple[object | None, NvmlSampler | None, str]:
    torch = None
    why = []
    try:
        import torch as _torch

        if _torch.cuda.is_available():
            torch = _torch
        else:
            why.append(f"torch {_torch.__version__}: cuda not available")
    except ImportError:
        why.append("torch not installed")
    nv = None
    try:
        nv = NvmlSampler()
    except Off as e:
        why.append(str(e))
    return torch, nv, "; ".join(why)


def nvml_index_of(torch, nv: NvmlSampler, cuda_index: int) -> int:
    """NVML index of CUDA device ``cuda_index`` (CUDA_VISIBLE_DEVICES may reorder), by UUID."""
    try:
        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        for i, h in enumerate(nv.handles):
            u = nv.nv.nvmlDeviceGetUUID(h)
            u = u.decode() if isinstance(u, bytes) else u
            if u.endswith(uuid) or uuid.endswith(u.replace("GPU-", "")):
                return i
    except Exception:
        pass
    return cuda_index


def mem_row(index=0) -> dict:
    rows = torch_memory_rows(only_device=index)
    return rows[0] if rows else {}


def check_allocator(torch) -> None:
    dev = torch.device("cuda", 0)
    torch.empty(1, device=dev)  # create the context first: torch_memory_rows never does
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    base = mem_row()
    check("gpu_memory before allocating", bool(base) and base["allocated_mb"] >= 0,
          json.dumps(base))
    x = torch.empty(256 * MB, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    up = mem_row()
    check("allocated rises by 256 MiB", up["allocated_mb"] - base["allocated_mb"] >= 255.9,
          f"{base['allocated_mb']} -> {up['allocated_mb']} MB")
    check("reserved >= allocated", up["reserved_mb"] >= up["allocated_mb"],
          f"reserved {up['reserved_mb']} MB")
    check("max_allocated >= 256 MiB", up["max_allocated_mb"] >= 255.9, f"{up['max_allocated_mb']} MB")
    del x
    torch.cuda.synchronize()
    freed = mem_row()
    check("allocated falls back after del", freed["allocated_mb"] <= base["allocated_mb"] + 0.1,
          f"{freed['allocated_mb']} MB")
    check("reserved stays cached after del (ghost memory, 000 §1.1)",
          freed["reserved_mb"] >= up["reserved_mb"] - 0.1, f"{freed['reserved_mb']} MB")
    torch.cuda.empty_cache()
    emptied = mem_row()
    check("reserved falls after empty_cache()", emptied["reserved_mb"] < up["reserved_mb"],
          f"{up['reserved_mb']} -> {emptied['reserved_mb']} MB")


def check_nvml(torch, nv: NvmlSampler) -> None:
    idx = nvml_index_of(torch, nv, 0) if torch is not None else 0
    row = nv.read(idx)
    ranges_ok = (
        row["gpu_mem_total_mb"] and 0 < row["gpu_mem_used_mb"] <= row["gpu_mem_total_mb"]
        and (row["gpu_util_pct"] is None or 0 <= row["gpu_util_pct"] <= 100)
        and (row["gpu_mem_util_pct"] is None or 0 <= row["gpu_mem_util_pct"] <= 100)
        and (row["temp_c"] is None or 0 < row["temp_c"] < 120)
        and (row["power_w"] is None or row["power_w"] >= 0)
        and (row["sm_clock_mhz"] is None or row["sm_clock_mhz"] > 0)
    )
    check("gpu_sample values in range", ranges_ok, json.dumps(row))
    if torch is None:
        return
    torch.cuda.empty_cache()
    before = nv.read(idx)["gpu_mem_used_mb"]
    x = torch.empty(1024 * MB, dtype=torch.uint8, device="cuda:0")
    x.fill_(1)
    torch.cuda.synchronize()
    time.sleep(0.2)
    after = nv.read(idx)["gpu_mem_used_mb"]
    check("NVML memory used rises by ~1 GiB after allocating", after - before >= 900,
          f"{before} -> {after} MB")
    del x
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    time.sleep(0.2)
    released = nv.read(idx)["gpu_mem_used_mb"]
    check("NVML memory used falls after empty_cache()", released <= after - 900,
          f"{after} -> {released} MB")


def read_events(folder: Path) -> list[dict]:
    out = []
    for p in sorted(folder.glob("*.jsonl")):
        out += [json.loads(line) for line in p.read_text().splitlines()]
    return out


def check_generate(torch, log_dir: Path, have_nvml: bool) -> None:
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except ImportError:
        check("transformers installed (for the generate check)", False)
        return
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512)
    model = Qwen2ForCausalLM(cfg).to("cuda").eval()
    ids = torch.randint(0, 256, (1, 32), device="cuda")
    model.generate(ids, max_new_tokens=4)  # warm-up
    tracer = Tracer(log_dir, samplers=True, sample_interval_s=0.2)
    status = tracer.sampler_status
    check("samplers on (gpu, torch, process)",
          status.get("torch") == "on" and status.get("process") == "on"
          and (status.get("gpu") == "on" or not have_nvml), json.dumps(status))
    # a first traced call pays one-time costs (imports, the first torch/NVML readings) that the
    # timing split below is not about
    tracer.generate(model, ids, session_id="gpu-check", request_id="warm", max_new_tokens=2)
    t0 = time.perf_counter()
    out = tracer.generate(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                          session_id="gpu-check", request_id="r1", max_new_tokens=32, do_sample=False,
                          eos_token_id=None)
    wall = (time.perf_counter() - t0) * 1000
    tracer.generate(model, ids, session_id="gpu-check", request_id="r2", max_new_tokens=16, num_beams=2,
                    eos_token_id=None)

    # a real CUDA OOM in the third forward: ask for more than the GPU has
    free, total = torch.cuda.mem_get_info()
    orig = model.forward
    calls = {"n": 0}

    def hungry_forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")
        return orig(*args, **kwargs)

    model.forward = hungry_forward
    raised = None
    try:
        tracer.generate(model, ids, session_id="gpu-check", request_id="oom", max_new_tokens=8, num_beams=2)
    except torch.cuda.OutOfMemoryError as e:
        raised = e
    check("CUDA OOM re-raised to the caller", raised is not None, type(raised).__name__)
    calls["n"] = 0
    fell_back = tracer.generate(model, ids, session_id="gpu-check", request_id="fallback", max_new_tokens=8,
                                num_beams=2, oom_fallback=True, eos_token_id=None)
    del model.forward
    time.sleep(0.5)  # a few sampler ticks
    tracer.close()
    check("greedy fallback returned tokens", fell_back.shape[1] == ids.shape[1] + 8, str(tuple(fell_back.shape)))

    ev = read_events(log_dir)
    try:
        import jsonschema

        from dslogs_collector.schema import json_schema

        v = jsonschema.Draft202012Validator(json_schema())
        bad = [e for e in ev if not v.is_valid(e)]
        check("every line valid schema v1", not bad, f"{len(ev)} lines, {len(bad)} invalid")
    except ImportError:
        check("jsonschema installed (for validation)", False)

    def one(stage, rid):
        return next((e for e in ev if e["stage"] == stage and e.get("request_id") == rid), None)

    pre, dec, req = one("prefill", "r1"), one("decode", "r1"), one("request", "r1")
    check("prefill/decode/request written", pre is not None and dec is not None and req is not None)
    if pre and dec:
        total_ms = pre["duration_ms"] + dec["duration_ms"]
        check("prefill + decode ≈ wall around generate", abs(wall - total_ms) <= max(10, 0.05 * wall),
              f"{total_ms:.1f} vs {wall:.1f} ms; prefill {pre['duration_ms']:.1f} ms")
        check("output_len = tokens returned - prompt", dec["output_len"] == out.shape[1] - ids.shape[1] == 32)
        if have_nvml:
            check("decode carries gpu_util_pct", dec.get("gpu_util_pct") is not None, str(dec.get("gpu_util_pct")))
    mem = one("gpu_memory", "r1")
    check("gpu_memory after generate (allocated > 0)", mem is not None and mem["allocated_mb"] > 0,
          json.dumps(mem))
    beam = one("decode", "r2")
    check("beam search traced (num_beams=2)", beam is not None and beam["params"]["num_beams"] == 2)
    err = one("error", "oom")
    check("OOM error event", err is not None and err["error_type"] == "OutOfMemoryError",
          json.dumps(err)[:200])
    oom_mem = one("gpu_memory", "oom")
    check("num_ooms counted after the OOM", oom_mem is not None and oom_mem["num_ooms"] >= 1,
          json.dumps(oom_mem))
    fb = one("decode", "fallback")
    check("fallback decode logged as greedy", fb is not None and fb.get("fallback") == "greedy"
          and fb["params"]["num_beams"] == 1)
    samples = [e for e in ev if e["stage"] == "gpu_sample"]
    if have_nvml:
        check("gpu_sample events from the sampler", len(samples) >= 2, f"{len(samples)} samples")
    sampled_mem = [e for e in ev if e["stage"] == "gpu_memory" and e.get("request_id") is None]
    check("torch gpu_memory sampler events", len(sampled_mem) >= 1, f"{len(sampled_mem)} samples")


def word_tokenizer(vocab: int):
    """A word-level tokenizer over ``vocab`` ids (w0, w1, ...): no download on the GPU box."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<eos>"] + [f"w{i}" for i in range(vocab - 2)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="<eos>")


def check_stream(torch, log_dir: Path) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    vocab = 256
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512)
    model = Qwen2ForCausalLM(cfg).to("cuda").eval()
    tok = word_tokenizer(vocab)
    ids = torch.randint(2, vocab, (1, 24), device="cuda")
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    plain = model.generate(**inputs, max_new_tokens=24, do_sample=False, eos_token_id=None)
    want = tok.decode(plain[0, ids.shape[1]:], skip_special_tokens=True)
    tracer = Tracer(log_dir / "stream", samplers=False)
    t0 = time.perf_counter()
    pieces = list(tracer.stream_generate(model, inputs, tokenizer=tok, session_id="stream",
                                         request_id="s1", max_new_tokens=24, do_sample=False,
                                         eos_token_id=None, timeout_s=60))
    wall = time.perf_counter() - t0
    tracer.close()
    got = "".join(pieces)
    check("stream_generate on cuda ends", wall < 60, f"{wall * 1000:.0f} ms, {len(pieces)} pieces")
    check("streamed text = greedy generate's text", got.split() == want.split(),
          f"{len(got.split())} words streamed, {len(want.split())} expected")
    ev = read_events(log_dir / "stream")
    pre = next((e for e in ev if e["stage"] == "prefill"), None)
    dec = next((e for e in ev if e["stage"] == "decode"), None)
    req = next((e for e in ev if e["stage"] == "request"), None)
    check("stream: prefill/decode/request written", None not in (pre, dec, req))
    if dec is not None:
        check("stream: output_len = 24", dec.get("output_len") == 24, str(dec.get("output_len")))
    if req is not None:
        check("stream: request carries the first streamed token", req.get("ttft_ms") is not None,
              f"ttft_ms {req.get('ttft_ms')}")


# DeepSeek-R1-Distill-Qwen-1.5B's config.json (the architecture; the weights here are random)
R1_1_5B = dict(vocab_size=151936, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
               num_key_value_heads=2, intermediate_size=8960, max_position_embeddings=131072,
               rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=1e-6)


def check_real_size(torch, log_dir: Path, rounds: int = 5, prompt: int = 512, new: int = 128) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**R1_1_5B)
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = Qwen2ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    weights_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MB
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device="cuda")
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    kw = dict(max_new_tokens=new, do_sample=False, eos_token_id=None)

    def bare():
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(**inputs, **kw)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1000

    def forward_ms():
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model(**inputs, logits_to_keep=1)  # as generate's prefill: the last position's logits only
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1000

    # samplers on at their default interval (5 s), as a user turns them on; what sampling more
    # often costs is bench/gpu_overhead.py's question
    tracer = Tracer(log_dir / "real", samplers=True)

    def traced(i):
        torch.cuda.synchronize()
        t = time.perf_counter()
        tracer.generate(model, inputs, session_id="real", request_id=f"t{i}", **kw)
        return (time.perf_counter() - t) * 1000

    bare(), traced(-1), forward_ms()  # warm-up: kernels, allocator, cuBLAS handles
    b, tr, fw = [], [], []
    for i in range(rounds):  # interleaved so a clock or thermal drift hits both alike
        b.append(bare())
        tr.append(traced(i))
        fw.append(forward_ms())
    tracer.close()
    med = statistics.median
    # best of the rounds: this box's CPU speed wanders by +-8 % between runs of the same call
    ratio = min(tr) / min(b)
    print(f"  1.5B shape, prompt {prompt}, {new} new tokens: bare {min(b):.1f} ms, traced {min(tr):.1f} ms "
          f"(x{ratio:.3f}, best of {rounds}; medians {med(b):.1f} / {med(tr):.1f}), prompt forward "
          f"{med(fw):.2f} ms, weights {weights_mb:.0f} MiB")
    check("real-size traced/bare generate <= 1.05", ratio <= 1.05, f"x{ratio:.3f}, best of {rounds} rounds")
    ev = read_events(log_dir / "real")
    timed = [e for e in ev if e.get("request_id", "").startswith("t") and e["request_id"] != "t-1"]
    pres = [e["duration_ms"] for e in timed if e["stage"] == "prefill"]
    decs = [e for e in timed if e["stage"] == "decode"]
    check("real-size prefill/decode per round", len(pres) == rounds and len(decs) == rounds,
          f"{len(pres)} prefill, {len(decs)} decode")
    if pres:
        # the traced prefill covers generate's set-up plus the prompt's forward; it can't be
        # shorter than the forward unless the first-token time was taken before the GPU finished
        check("real-size prefill >= a synchronised prompt forward", med(pres) >= 0.9 * med(fw),
              f"prefill {med(pres):.2f} ms vs forward {med(fw):.2f} ms")
    if decs:
        per_tok = med([d["duration_ms"] / max(1, d["output_len"] - 1) for d in decs])
        check("real-size decode output_len", all(d["output_len"] == new for d in decs),
              f"{per_tok:.2f} ms per token")
    mem = next((e for e in timed if e["stage"] == "gpu_memory"), None)
    check("real-size gpu_memory allocated >= the weights", mem is not None
          and mem["allocated_mb"] >= weights_mb * 0.99,
          f"allocated {mem and mem['allocated_mb']} MB, weights {weights_mb:.0f} MiB")
    kv = next((e for e in timed if e["stage"] == "kv_cache"), None)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    if kv is not None and kv.get("kv_seq_len"):
        want_mb = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 2 * kv["kv_seq_len"] / MB
        check("real-size kv_cache size = 2·layers·kv_heads·head_dim·bf16·seq",
              kv.get("kv_cache_size_mb") is not None and abs(kv["kv_cache_size_mb"] - want_mb) <= 0.05 * want_mb,
              f"{kv.get('kv_cache_size_mb')} MiB vs {want_mb:.2f} MiB at {kv['kv_seq_len']} tokens")
    else:
        check("real-size kv_cache event", False, json.dumps(kv))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="collector GPU check")
    ap.add_argument("--keep-logs", help="write the trace here and keep it")
    args = ap.parse_args(argv)
    torch, nv, why = gpu_available()
    if torch is None and nv is None:
        print(f"no GPU available ({why}): nothing to check")
        return 0
    if torch is not None:
        print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device 0: {torch.cuda.get_device_name(0)}")
    if nv is None:
        print(f"NVML unavailable: {why}")
    log_dir = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="dslogs-gpu-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        if torch is not None:
            check_allocator(torch)
        if nv is not None:
            check_nvml(torch, nv)
        if torch is not None:
            check_generate(torch, log_dir, nv is not None)
            check_stream(torch, log_dir)
            check_real_size(torch, log_dir)
    except Exception as e:  # a crash is a FAIL with its reason, not a traceback-only exit
        check("gpu check ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        if nv is not None:
            nv.close()
        if not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    failed = [r for r in RESULTS if not r[1]]
    print(f"\nSUMMARY: {'PASS' if not failed else 'FAIL'} — {len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed")
    for name, _, detail in failed:
        print(f"  FAIL {name}: {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
