"""A tiny randomly initialised Qwen2ForCausalLM on CPU torch (no download), a word-level
tokenizer built here, and an OOM injector: shared by the collector's HF and streaming tests."""

from __future__ import annotations

import torch
import transformers

from tests.collector_helpers import data_events, read_lines, validate

VOCAB = 96
PROMPT = 12


def tiny_qwen2():
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256,
        eos_token_id=2, pad_token_id=0,
    )
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    ids = torch.randint(3, VOCAB, (1, PROMPT))
    m.generate(ids, max_new_tokens=2, do_sample=False)  # warm-up: first calls are slow
    m.generate(ids, max_new_tokens=2, num_beams=2)
    return m


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "<pad>", "<eos>", "</think>"] + [f"w{i}" for i in range(VOCAB - 4)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="<pad>", eos_token="<eos>",
        additional_special_tokens=["</think>"],
    )


def prompt_ids(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (1, PROMPT), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def prompt_text(start=5):
    return " ".join(f"w{i}" for i in range(start, start + PROMPT))


def events_of(folder):
    events = read_lines(folder)
    for e in events:
        validate(e)
    return data_events(events)


def by_stage(events, stage):
    return [e for e in events if e["stage"] == stage]


class OomOn:
    """Make the model's forward raise torch.cuda.OutOfMemoryError on call number ``n``."""

    def __init__(self, model, n, times=1, exc=None):
        self.model, self.n, self.times, self.calls = model, n, times, 0
        self.exc = exc or torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.orig = model.forward

    def __enter__(self):
        def forward(*args, **kwargs):
            self.calls += 1
            if self.n <= self.calls < self.n + self.times:
                raise self.exc
            return self.orig(*args, **kwargs)

        self.model.forward = forward
        return self

    def __exit__(self, *exc):
        del self.model.forward  # back to the class's forward
