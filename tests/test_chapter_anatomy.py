"""Chapter 5 (one decode step): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""

import pytest

from llmperf import hardware
from llmperf.chapters import anatomy

H100 = hardware.ACCELERATORS["H100 SXM"]


@pytest.mark.parametrize("overhead, gap, words", [
    (5.2e-3, 15.4e-3, "about 34 % of it"),          # the 2-core CPU of chapter 5's first run
    (28.9e-3, 38.6e-3, "about 75 % of it"),         # the H200, eager
    (1.0e-3, 20e-3, "only 5 % of it"),
    (9e-3, 10e-3, "nearly all of it"),
    (20e-3, 10e-3, "more than the whole gap"),
    (1e-3, -1e-3, "no gap to explain"),
])
def test_fixed_costs_wording(overhead, gap, words):
    assert words in anatomy.fixed_costs(overhead, gap)


@pytest.mark.parametrize("ratio, words", [(1.6, "less than"), (1.996, "within"), (2.5, "within"), (3.04, "within"),
                                          (576, "more than")])
def test_roofline_multiple_wording(ratio, words):
    assert f"{words} the 2–3 times" in anatomy.roofline_multiple(ratio, "The plain step")


def test_graph_result_on_a_gpu_and_elsewhere():
    text = anatomy.graph_result("cuda", 38.7e-3, 3.40e-3, 2.34e-3, 6.7e-5)
    assert "11.4 times faster than eager" in text and "16.5 times faster" in text and "34.9 times" in text
    assert "91 % of the eager step was spent launching" in text
    assert "no CUDA device (cpu)" in anatomy.graph_result("cpu", 38e-3, None, None, 20e-3)
    assert "torch.compile" not in anatomy.graph_result("cuda", 38.7e-3, 3.4e-3, None, 6.7e-5)


@pytest.mark.parametrize("time_share, byte_share, words", [
    (0.13, 0.21, "less than its share"), (0.21, 0.21, "about its share"), (0.40, 0.21, "more than its share")])
def test_head_time_share_wording(time_share, byte_share, words):
    assert words in anatomy.head_time_share(time_share, byte_share)


def test_fused_ops_wording():
    assert "against the plain model's 1,632" in anatomy.fused_ops(1632, 1540)
    in_numpy = anatomy.fused_ops(1632, 9, in_numpy=True)
    assert "hands the whole step to NumPy" in in_numpy and "only the 9 PyTorch ops" in in_numpy


def test_numpy_step_account_wording():
    text = anatomy.numpy_step_account(0.024, 0.020, 0.0205, 0.0195, 0.0033, 900, 0.0002)
    assert "The step took 24.0 ms against 20.0 ms for its bytes" in text
    assert "95 % of the probed bandwidth: about as fast as" in text and "900 timed stretches of a few NumPy calls each, 3.7 µs a stretch" in text
    assert "the 4.0 ms between the step and its bytes ÷ bandwidth is 1.0 ms of products streaming" in text
    assert "and 3.0 ms of small ops and Python" in text  # the two add up to the gap
    assert "most of it, not all" in anatomy.numpy_step_account(0.024, 0.020, 0.025, 0.0195, 0.003, 900, 0)
    assert "only 50 %" in anatomy.numpy_step_account(0.04, 0.020, 0.039, 0.0195, 0.001, 900, 0)
    assert "probe underestimated" in anatomy.numpy_step_account(0.019, 0.020, 0.016, 0.0195, 0.003, 900, 0)
    cached = anatomy.numpy_step_account(0.022, 0.020, 0.018, 0.0195, 0.004, 900, 0)
    assert "came from the processor's caches" in cached and "are the whole of the 2.0 ms" in cached


def test_half_precision_wording():
    native = {"avx512_bf16": "bfloat16 dot products (AVX512-BF16)", "f16c": "conversion"}
    rates = {("float32", "NumPy"): 20e9, ("float32", "F.linear"): 19e9, ("bfloat16", "torch.mv"): 12e9,
             ("bfloat16", "F.linear"): 9e9, ("float16", "torch.mv"): 6e9, ("float16", "F.linear"): 10e9}
    text = anatomy.half_precision(native, rates)
    assert text.startswith("This processor offers bfloat16 dot products (AVX512-BF16).")
    assert "read 20.0 GB/s (NumPy)" in text
    assert "bfloat16 at 12.0 GB/s (torch.mv): its products would take 0.83 times float32's, half the bytes " \
           "bought back only part of the time" in text
    assert "float16 at 10.0 GB/s (F.linear): its products would take 1.00 times float32's, half the bytes " \
           "bought nothing" in text  # the faster of its two kernels
    assert "the kernel, not memory, sets the pace" in text
    none = anatomy.half_precision({"f16c": "conversion"}, rates)
    assert "reports no native bfloat16 or float16 arithmetic (only F16C's" in none
    fast = {**rates, ("bfloat16", "torch.mv"): 40e9, ("float16", "torch.mv"): 39e9}
    assert "bound by memory, as the roofline says" in anatomy.half_precision({}, fast)
    assert "half the bytes cost time" in anatomy.half_precision({}, {**rates, ("float16", "F.linear"): 5e9})
