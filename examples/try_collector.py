"""Try the dslogs collector without downloading a model: a tiny randomly initialised Qwen2 (the
architecture of DeepSeek-R1-Distill-Qwen-1.5B, built from a config on the CPU, as dslogs' own
tests do) answers a few chats through ``Tracer.generate``, then ``dslogs analyze`` reads what it
wrote.

    pip install 'dslogs-llm[hf]'            # or, in a clone: pip install -e '.[hf]' (plus a torch wheel)
    python examples/try_collector.py [LOG_DIR]

The answers are random tokens; the timings, parameters and events are real. Default LOG_DIR: a
new temporary folder (printed)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from pathlib import Path


def tiny_qwen2():
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, max_position_embeddings=512, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    return transformers.Qwen2ForCausalLM(config).eval()


def main(log_dir: Path) -> int:
    import torch

    from dslogs_collector import Tracer

    model = tiny_qwen2()
    tracer = Tracer(log_dir=str(log_dir))
    gen = torch.Generator().manual_seed(1)
    try:
        for chat in range(3):  # three sessions of three turns, the history growing each turn
            session = str(uuid.UUID(int=chat + 1))
            history = torch.randint(3, 96, (1, 12), generator=gen)
            for _turn in range(3):
                inputs = {"input_ids": history, "attention_mask": torch.ones_like(history)}
                out = tracer.generate(model, inputs, session_id=session, max_new_tokens=16, do_sample=True,
                                      num_beams=2 if chat == 2 else 1, eos_token_id=None)  # fmt: skip
                history = torch.cat([out[:, :], torch.randint(3, 96, (1, 8), generator=gen)], dim=1)
    finally:
        tracer.close()
    print(f"wrote the trace to {log_dir}", flush=True)
    cmd = [sys.executable, "-m", "dslogs", "analyze", str(log_dir), "--format", "md", "--no-cache"]
    print("$ dslogs analyze", log_dir, "--format md", flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="dslogs-try-"))
    sys.exit(main(target))
