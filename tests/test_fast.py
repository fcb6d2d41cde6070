"""The fast decode path computes the same function as the plain model."""

import pytest
import torch

from llmperf import generate
from llmperf.fast import BlockedLinear, fuse
from tests.test_model import cached_logits


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_blocked_linear_equals_linear(parts):
    w = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1))
    layer = BlockedLinear(w, parts)
    assert 12 % layer.parts == 0 and layer.parts <= parts  # 12 is not divisible by 5: parts shrinks
    assert torch.allclose(layer(x), x @ w.t(), atol=1e-6)
    one_row = x[:1, :1]  # (1, 1, 5): the single-row fast path
    assert torch.allclose(layer(one_row), one_row @ w.t(), atol=1e-6)


def test_blocked_linear_shrinks_parts_to_a_divisor():
    assert BlockedLinear(torch.zeros(10, 4), 4).parts == 2


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_fused_tiny_matches_plain(tiny, parts):
    fast = fuse(tiny, parts=parts)
    tokens = torch.randint(0, tiny.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        assert torch.allclose(fast(tokens), tiny(tokens), atol=1e-5)
    assert torch.allclose(cached_logits(fast, tokens, 6), cached_logits(tiny, tokens, 6), atol=1e-5)


def test_fused_smollm2_same_logits_and_tokens(smollm2):
    model, tok = smollm2
    fast = fuse(model)
    tokens = torch.tensor([tok.encode("Water boils at one hundred degrees Celsius at sea level, but")])
    with torch.inference_mode():
        assert (fast(tokens) - model(tokens)).abs().max().item() < 1e-3
    prompt = tok.encode_chat("Name three planets.")
    assert generate(fast, prompt, 32).tolist() == generate(model, prompt, 32).tolist()


def test_fuse_shares_embedding_and_norms(tiny):
    fast = fuse(tiny)
    assert fast.tok_embeddings is tiny.tok_embeddings and fast.norm is tiny.norm
    assert fast.layers[0].attention_norm is tiny.layers[0].attention_norm


def test_fuse_rejects_bad_parts(tiny):
    with pytest.raises(ValueError, match="parts must be at least 1"):
        fuse(tiny, parts=-1)
