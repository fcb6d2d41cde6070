"""Our SmolLM2 against transformers' implementation of the same GGUF file: the same logits."""

import os

import pytest
import torch

from llmperf.generation import decode_step, new_cache, prefill

TEXT = ("In 1969, two astronauts walked on the Moon while a third orbited above. The mission, "
        "Apollo 11, was watched on television by an estimated six hundred million people around the world.")


@pytest.fixture(scope="module")
def tokens(smollm2):
    ids = smollm2[1].encode(TEXT)[:40]
    assert len(ids) == 40
    return torch.tensor([ids])


def test_full_forward_matches_transformers(smollm2, hf_smollm2, tokens):
    with torch.inference_mode():
        ours = smollm2[0](tokens)
        theirs = hf_smollm2(tokens).logits
    assert ours.shape == theirs.shape == (1, 40, 49152)
    assert (ours - theirs).abs().max().item() < 1e-3


def test_prefill_and_cached_decode_match_transformers(smollm2, hf_smollm2, tokens):
    model = smollm2[0]
    n_prefill = 30
    cache = new_cache(model, 1, 40)
    with torch.inference_mode():
        theirs = hf_smollm2(tokens).logits[0]  # (40, V)
        first = prefill(model, tokens[:, :n_prefill], cache, all_logits=True)[0]  # (30, V)
        steps = [decode_step(model, tokens[:, p:p + 1], p, cache)[0] for p in range(n_prefill, 40)]
    ours = torch.cat([first, torch.stack(steps)])
    assert (ours - theirs).abs().max().item() < 1e-3


def test_tokenizer_matches_transformers(smollm2):
    transformers = pytest.importorskip("transformers")
    from llmperf.weights import smollm2_gguf_path

    path = smollm2_gguf_path()
    theirs = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    ours = smollm2[1]
    for text in [TEXT, "Prices rose 12.5% in 2023; héllo wörld!  Two  spaces\nand a newline.",
                 "def f(x):\n    return x ** 2  # square", "<|im_start|>user\nHi<|im_end|>"]:
        expected = theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text
        assert ours.decode(expected) == text
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
