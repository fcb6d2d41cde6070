"""Chapter 4 (naive against cached): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""


from llmperf import cost, hardware
from llmperf.chapters import caching

H100 = hardware.ACCELERATORS["H100 SXM"]


def test_naive_gap_and_gap_by_device():
    assert "close to what was measured" in caching.naive_gap(3.1, 2.8)
    assert "widens the gap" in caching.naive_gap(6.0, 2.8)
    assert "narrows the gap" in caching.naive_gap(1.5, 2.8)
    # An H200 ran chapter 4's GPU sizes (SmolLM2-shaped, 128 + 256 tokens) with every pass on the floor of
    # its ops' fixed costs: naive 4.51 s against cached 4.58 s, where the roofline predicted 1.27 times.
    assert "about as long as the cached one (0.98 times)" in caching.naive_gap(4.51 / 4.58, 1.27)
    # On an H100 itself the comparison must say "about as wide"; a CPU with a low ridge: wider.
    h100_ratio = 2.5
    assert caching.gap_by_device(h100_ratio, H100.ridge, h100_ratio, H100.ridge).startswith("about as wide")
    assert caching.gap_by_device(9.0, 10.9, h100_ratio, H100.ridge).startswith("wider here")
    assert caching.gap_by_device(1.5, 400.0, h100_ratio, H100.ridge).startswith("narrower here")


def test_gpu_naive_gap_wording():
    """The 512+512 Llama-3-8B run predicted on an H100: about 2.5 times; an H200's ridge is lower than an H100's."""
    def predicted_ratio(hw):
        naive, cached = (hardware.roofline_time_of_passes(cost.generation_passes("llama-3-8b", 512, 512, cached=c), hw)
                         for c in (False, True))
        return naive / cached

    h100 = predicted_ratio(H100)
    assert 2 < h100 < 3
    h200 = hardware.ACCELERATORS["H200 SXM"]
    assert caching.gap_by_device(predicted_ratio(h200), h200.ridge, h100, H100.ridge).startswith("wider here")
