"""A DeepSeek-R1-shaped model small enough for CI: a randomly initialised ``Qwen2ForCausalLM``
on CPU (no download) and a word-level tokenizer built here.

Its weights are random, so on its own it would babble. ``TinyR1.generate`` adds a logits
processor that forces the shape of an R1 answer by position: ``<think>`` + ``THINK_WORDS``
words + ``</think>`` + ``ANSWER_WORDS`` words + EOS. Every forward pass is still the real
Qwen2 forward (prefill, then one token per step, a real KV cache), so prefill/decode times,
``output_len``, ``reasoning_len`` and ``kv_seq_len`` are all measured, not assumed. Because
EOS comes after ``OUTPUT_TOKENS`` tokens, ``max_new_tokens=4096`` costs no more than 256.

``TinyR1(oom_at_batch=4)`` stands in for a small GPU: a decode step with 4 or more rows
(``num_beams=4`` or more) raises ``torch.cuda.OutOfMemoryError`` from inside ``generate``, as
article 003 §3.2's beam search did on a T4. CPU builds of torch have that exception class. On
CUDA the step asks the real allocator for ``OOM_ASK_GIB`` per row instead, so the OOM is torch's
own (a per-process memory fraction makes it cheap).
"""

from __future__ import annotations

import functools

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

THINK, THINK_END = "<think>", "</think>"
SPECIALS = ["[UNK]", "<pad>", "<eos>", THINK, THINK_END]
WORDS = [f"w{i}" for i in range(59)]
VOCAB = SPECIALS + WORDS
PAD_ID, EOS_ID, THINK_ID, THINK_END_ID = 1, 2, 3, 4
THINK_WORDS = 8
ANSWER_WORDS = 5
# <think> + thoughts + </think> + answer + <eos>
OUTPUT_TOKENS = 1 + THINK_WORDS + 1 + ANSWER_WORDS + 1
REASONING_LEN = 1 + THINK_WORDS + 1  # generated tokens up to and including </think>
OOM_ASK_GIB = 16  # per beam row, asked of a real GPU's allocator by a step that should OOM


def r1_token(position: int, answer_words: int = ANSWER_WORDS) -> int:
    """The token an R1-style answer of ``answer_words`` words has at generated ``position``
    (0-based)."""
    if position == 0:
        return THINK_ID
    if position <= THINK_WORDS:
        return len(SPECIALS) + (position * 7) % len(WORDS)
    if position == THINK_WORDS + 1:
        return THINK_END_ID
    if position <= THINK_WORDS + 1 + answer_words:
        return len(SPECIALS) + (position * 11) % len(WORDS)
    return EOS_ID


class R1Shape(transformers.LogitsProcessor):
    """Forces ``r1_token(k)`` at the k-th generated position of every row (beams included)."""

    def __init__(self, prompt_len: int, answer_words: int = ANSWER_WORDS):
        self.prompt_len, self.answer_words = prompt_len, answer_words

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        forced = r1_token(input_ids.shape[1] - self.prompt_len, self.answer_words)
        out = torch.full_like(scores, float("-inf"))
        out[:, forced] = 0.0
        return out


class TinyR1(transformers.Qwen2ForCausalLM):
    oom_at_batch: int | None = None

    def forward(self, input_ids=None, *args, **kwargs):
        rows = input_ids.shape[0] if input_ids is not None else 0
        if self.oom_at_batch and rows >= self.oom_at_batch and input_ids.shape[1] == 1:
            if input_ids.is_cuda:
                # a real GPU: ask the caching allocator for what the beams' step would need at a
                # real model's size; under a per-process memory fraction it raises the real
                # OutOfMemoryError (bench/gpu_e2e.py), and the simulated one below never runs
                torch.empty(rows * OOM_ASK_GIB * 1024**3, dtype=torch.uint8, device=input_ids.device)
            raise torch.cuda.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 14.75 GiB total capacity; "
                f"13.10 GiB already allocated) [simulated: {rows} beams on a small GPU]"
            )
        return super().forward(input_ids, *args, **kwargs)

    def generate(self, inputs=None, answer_words: int = ANSWER_WORDS, **kwargs):
        """``answer_words``: the answer's length (a benchmark's request mix); the output is that
        plus the think block and EOS, as long as ``max_new_tokens`` allows."""
        ids = inputs if inputs is not None else kwargs.get("input_ids")
        processors = transformers.LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(R1Shape(ids.shape[1], answer_words))
        return super().generate(inputs, logits_processor=processors, **kwargs)


@functools.lru_cache(maxsize=1)
def load_tokenizer() -> transformers.PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="<pad>", eos_token="<eos>"
    )


def load_model(oom_at_batch: int | None = 4) -> TinyR1:
    """A fresh model (seeded, so every load has the same weights), warmed up: the first
    generate calls of a process are several times slower than the rest."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, max_position_embeddings=8192,
        eos_token_id=EOS_ID, pad_token_id=PAD_ID, bos_token_id=None,
    )
    model = TinyR1(cfg).eval()
    model.generation_config.pad_token_id = PAD_ID
    ids = torch.tensor([[len(SPECIALS) + i for i in range(6)]])
    with torch.no_grad():
        model.generate(ids, max_new_tokens=OUTPUT_TOKENS + 2, do_sample=False)
        model.generate(ids, max_new_tokens=4, num_beams=2)
    model.oom_at_batch = oom_at_batch
    return model


def parse_thinking_chain(response: str) -> str:
    """Article 003's ``parse_thinking_chain`` (its body is not printed there): the reasoning
    as a quote, then the answer."""
    head, sep, answer = response.partition(THINK_END)
    if not sep:
        return response.strip()
    thought = head.replace(THINK, "").strip()
    return f"> {thought}\n\n{answer.strip()}"
