"""Chapter 1 (the dependency chain): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""

import pytest

from llmperf import cost, hardware
from llmperf.chapters import chain

H100 = hardware.ACCELERATORS["H100 SXM"]


@pytest.mark.parametrize("t32, t16, share, words", [
    (2.0, 1.0, 0.8, "as the bytes predict"),
    (1.3, 1.0, 0.8, "did not stream their half"),
    (1.0, 1.5, 0.3, "cost more than the halved bytes save"),
    (1.5, 1.0, 0.3, "the work each kernel does per byte"),
])
def test_halved_bytes(t32, t16, share, words):
    assert words in chain.halved_bytes(t32, t16, share)


def test_halved_bytes_on_a_gpu():
    """SmolLM2 on an H100 is bound by launches, not bytes: its float32 step draws a sliver of the bandwidth."""
    t_float32 = t_bfloat16 = 2e-3  # ~2 ms either way, set by ~1,600 launches
    share = cost.decode_bytes("smollm2-135m", 129, 1, 4).total / t_float32 / H100.bandwidth
    text = chain.halved_bytes(t_float32, t_bfloat16, share)
    assert share < 0.1 and "ran about as fast as the float32 one." in text and "did not set its time" in text
