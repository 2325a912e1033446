"""The what-if proof's request sizes from a public trace (bench/whatif_proof.py --trace): rows read
and scaled as the Azure LLM inference trace lays them out, and the R1-shaped test model answering
with exactly the requested number of tokens (real generate)."""

from __future__ import annotations

import random

import pytest

from bench.whatif_proof import OUT_RE, PROMPT_CAP, load_trace, prompt


def test_trace_rows_scaled_and_capped(tmp_path):
    csv = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,1020,129\n"
                   "2023-11-16 18:15:50.9951690,3,2\n"
                   "2023-11-16 18:15:51.2224670,14050,1000\n", encoding="utf-8")
    assert load_trace(csv, 0.125) == [(128, 16), (1, 1), (PROMPT_CAP, 125)]


def test_trace_prompt_carries_its_output_length():
    trace = [(7, 42)]
    msg = prompt(random.Random(0), trace)
    m = OUT_RE.match(msg)
    assert m and int(m.group(1)) == 42
    assert len(msg[m.end():].split()) == 7


def test_tiny_r1_answers_with_the_requested_length():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.e2e.apps import tiny_r1

    model = tiny_r1.load_model()
    ids = torch.tensor([[len(tiny_r1.SPECIALS) + i for i in range(5)]])
    with torch.no_grad():
        default = model.generate(ids, max_new_tokens=256, do_sample=False)
        longer = model.generate(ids, max_new_tokens=256, do_sample=False, answer_words=30)
    assert default.shape[1] - ids.shape[1] == tiny_r1.OUTPUT_TOKENS
    assert longer.shape[1] - ids.shape[1] == tiny_r1.OUTPUT_TOKENS - tiny_r1.ANSWER_WORDS + 30
    assert longer[0, -1].item() == tiny_r1.EOS_ID
