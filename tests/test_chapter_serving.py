"""Chapter 6 (serving metrics): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""


from llmperf import hardware
from llmperf.chapters import serving

H100 = hardware.ACCELERATORS["H100 SXM"]


def test_serving_wording():
    assert "within 2 %" in serving.itl_against_tpot(0.100, 0.101)
    assert "above it" in serving.itl_against_tpot(0.100, 0.120) and "longer gaps" in serving.itl_against_tpot(0.1, 0.12)
    assert "below it" in serving.itl_against_tpot(0.100, 0.080)
    batches = [1, 4, 16]
    assert "every batch size" in serving.limits_met(batches, [0.1] * 3, [0.02] * 3, 0.5, 0.03, "interactive")
    text = serving.limits_met(batches, [0.1, 0.3, 3.0], [0.02, 0.05, 0.2], 2.0, 0.1, "server")
    assert "hold at batch 1, 4 and fail at batch 16" in text
    assert "TPOT alone" in serving.limits_met(batches, [0.1] * 3, [0.05] * 3, 0.5, 0.03, "interactive")
    assert "TTFT alone" in serving.limits_met(batches, [1.0] * 3, [0.01] * 3, 0.5, 0.03, "interactive")
    assert "both peak at batch 16" in serving.goodput_peak(batches, [1, 2, 3], [1, 2, 3])
    assert "goodput at batch 4" in serving.goodput_peak(batches, [1, 2, 3], [1, 2, 0])
    assert "zero throughout" in serving.goodput_peak(batches, [1, 2, 3], [0, 0, 0])
    assert "took 3.0 times as long" in serving.warm_up(0.3, 0.1)
    assert "not much slower" in serving.warm_up(0.11, 0.1)
    assert "never sends them" in serving.omission(0, 4, 5.2, 1.0, 2.5, 2.6)
    assert "came out close" in serving.omission(1, 1, 1.2, 1.0, 1.05, 0.5)
    assert "closed loop's worst TTFT was the larger" in serving.omission(0, 1, 1.0, 0.79, 0.33, 0.28)
    assert "sent 1 request and" in serving.omission(1, 1, 1.2, 1.0, 1.05, 0.5)
    assert "times as wide" in serving.percentile_spread((0.3, 0.5), (1.0, 2.0))
    assert "about as steady" in serving.percentile_spread((0.3, 0.5), (1.0, 1.2))
