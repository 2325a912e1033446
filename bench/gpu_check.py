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

Prints PASS/FAIL per check and a summary; exits 1 on any FAIL, 0 with "no GPU available" when
there is no CUDA device and no NVML.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector import Tracer  # noqa: E402
from collector.samplers import NvmlSampler, Off, torch_memory_rows  # noqa: E402

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

        from collector.schema import json_schema

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
