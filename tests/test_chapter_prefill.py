"""Chapter 2 (prefill cost): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""


from llmperf import hardware
from llmperf.chapters import prefill

H100 = hardware.ACCELERATORS["H100 SXM"]


def test_quadratic_part_and_share_of_probe():
    assert prefill.quadratic_part(12.5, 31.0, 1536) == "is 31 % of the fitted TTFT at 1,536 tokens"
    assert "no real cost can be" in prefill.quadratic_part(-7013.0, -404.0, 1536)
    assert prefill.share_of_probe(80e9, 100e9, "the probe").startswith("80 % of the 100.0 GFLOP/s")
    assert "lower bound" in prefill.share_of_probe(172e9, 100e9, "the probe")
