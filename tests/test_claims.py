"""The sentences chosen from measurements: every branch, and the GPU wording fed the cost model's H100 predictions.

No GPU is needed: on a GPU the chapters measure numbers close to these predictions
(their measurements sit above the roofline, by the fixed costs each chapter names),
so the wording those numbers select must be true of the predictions too.
"""

import pytest

from llmperf import claims, cost, hardware
from llmperf.experiments import sizes_for_type

H100 = hardware.ACCELERATORS["H100 SXM"]


@pytest.fixture(scope="module")
def gpu_batch_sweep():
    """Chapter 3's batch sweep as an H100 would run it: SmolLM2 in bf16 at the CUDA sizes, predicted part by part."""
    sizes = sizes_for_type("cuda", free_memory=80e9)
    ctx, batches = sizes.decode_context, sizes.decode_batches
    step = [hardware.roofline_time_in_parts(cost.decode_parts("smollm2-135m", ctx + 1, b, 2), H100) for b in batches]
    nbytes = [cost.decode_bytes("smollm2-135m", ctx + 1, b, 2).total for b in batches]
    parts = cost.decode_parts("smollm2-135m", ctx + 1, 1, 2)
    return dict(ctx=ctx, batches=batches, step=step, nbytes=nbytes, parts=parts)


def test_gpu_batch_sweep_wording(gpu_batch_sweep):
    s = gpu_batch_sweep
    b_max = s["batches"][-1]
    # Per-user speed falls: SmolLM2's cache grows the step about 12-fold by batch 256.
    assert claims.per_user_speed(s["step"][-1] / s["step"][0], b_max).startswith("fell")
    # Not "nearly flat": the bytes grow ~11.75-fold, and the cache outweighs the weights from batch ~23.
    growth = s["nbytes"][-1] / s["nbytes"][0]
    assert 11 < growth < 12.5
    kv_eq = s["parts"]["weights"].bytes / s["parts"]["attention"].bytes
    text = claims.bytes_growth(growth, b_max, kv_eq)
    assert text.startswith("rises") and "within this sweep, from batch 23 on" in text
    # The weight products would cross the H100's ridge only at batch 296: beyond the sweep's 256.
    crossing = cost.compute_bound_batch("smollm2-135m", H100.ridge, s["ctx"] + 1, 2, part="weights")
    assert crossing == 296 and claims.weights_bound(crossing, b_max, H100.ridge).startswith("No batch in the sweep")
    assert "stays bandwidth-bound" in claims.attention_bound(s["parts"]["attention"].intensity, H100.ridge)
    # The step sits on the roofline in the prediction, so the trend of the gap stays put.
    assert claims.trend(1.0, 1.0, "at batch 1", "at batch 256").startswith("stays near")


def test_gpu_small_batch_and_low_precision_wording():
    assert claims.small_batch_kernel("cuda", 1.0).startswith("On a GPU")
    assert "nearly free" in claims.small_batch_kernel("cuda", 1.0)
    assert "bound by bandwidth" in claims.low_precision_ridge("bfloat16", H100.ridge, 1.0, H100.flops / 1e9)


def test_cpu_branches():
    # A CPU whose bf16 products crawl (0.9 GFLOP/s against 19.5 GB/s): its bf16 ridge is below 1 FLOP/byte.
    text = claims.low_precision_ridge("bfloat16", 0.9e9 / 19.5e9, 1.0, 0.9)
    assert "no fast bfloat16" in text and "bound by arithmetic" in text
    assert "more slowly" in claims.small_batch_kernel("cpu", 1.4)
    assert claims.weights_bound(22, 64, 10.9).startswith("The weight products cross this device's ridge")
    assert "even attention is bound by arithmetic" in claims.attention_bound(1.5, 0.05)
    assert claims.per_user_speed(1.02, 64).startswith("stayed about the same")
    assert claims.bytes_growth(1.2, 64, 500.0).startswith("is nearly flat")


@pytest.mark.parametrize("first, last, word", [(2.8, 2.5, "shrinks"), (1.5, 2.5, "grows"), (2.0, 2.1, "stays near")])
def test_trend(first, last, word):
    assert claims.trend(first, last, "at batch 1", "at batch 64").startswith(word)


def test_speed_change_and_fused_result():
    assert claims.speed_change(2.0, 1.0, "A") == "2.0 times faster than A"
    assert claims.speed_change(1.0, 1.31, "A") == "1.31 times slower than A"
    assert claims.speed_change(1.0, 1.02, "A") == "about as fast as A"
    assert "a step about as fast as the plain one," in claims.fused_result(1.0, 1.01, 50, 50)
    assert "a step 1.50 times faster than the plain one," in claims.fused_result(1.5, 1.0, 35, 52)


def test_against_roof():
    assert claims.against_roof(1.2) == "lies above both lines at every batch size"
    assert "within the probe's own error" in claims.against_roof(0.95)


@pytest.mark.parametrize("t32, t16, share, words", [
    (2.0, 1.0, 0.8, "as the bytes predict"),
    (1.3, 1.0, 0.8, "did not stream their half"),
    (1.0, 1.5, 0.3, "cost more than the halved bytes save"),
    (1.5, 1.0, 0.3, "the work each kernel does per byte"),
])
def test_halved_bytes(t32, t16, share, words):
    assert words in claims.halved_bytes(t32, t16, share)


def test_halved_bytes_on_a_gpu():
    """SmolLM2 on an H100 is bound by launches, not bytes: its float32 step draws a sliver of the bandwidth."""
    t_float32 = t_bfloat16 = 2e-3  # ~2 ms either way, set by ~1,600 launches
    share = cost.decode_bytes("smollm2-135m", 129, 1, 4).total / t_float32 / H100.bandwidth
    text = claims.halved_bytes(t_float32, t_bfloat16, share)
    assert share < 0.1 and "ran about as fast as the float32 one." in text and "did not set its time" in text


def test_quadratic_part_and_share_of_probe():
    assert claims.quadratic_part(12.5, 31.0, 1536) == "is 31 % of the fitted TTFT at 1,536 tokens"
    assert "no real cost can be" in claims.quadratic_part(-7013.0, -404.0, 1536)
    assert claims.share_of_probe(80e9, 100e9, "the probe").startswith("80 % of the 100.0 GFLOP/s")
    assert "lower bound" in claims.share_of_probe(172e9, 100e9, "the probe")


def test_naive_gap_and_gap_by_device():
    assert "close to what was measured" in claims.naive_gap(3.1, 2.8)
    assert "widens the gap" in claims.naive_gap(6.0, 2.8)
    assert "narrows the gap" in claims.naive_gap(1.5, 2.8)
    # An H200 ran chapter 4's GPU sizes (SmolLM2-shaped, 128 + 256 tokens) with every pass on the floor of
    # its ops' fixed costs: naive 4.51 s against cached 4.58 s, where the roofline predicted 1.27 times.
    assert "about as long as the cached one (0.98 times)" in claims.naive_gap(4.51 / 4.58, 1.27)
    # On an H100 itself the comparison must say "about as wide"; a CPU with a low ridge: wider.
    h100_ratio = 2.5
    assert claims.gap_by_device(h100_ratio, H100.ridge, h100_ratio, H100.ridge).startswith("about as wide")
    assert claims.gap_by_device(9.0, 10.9, h100_ratio, H100.ridge).startswith("wider here")
    assert claims.gap_by_device(1.5, 400.0, h100_ratio, H100.ridge).startswith("narrower here")


def test_gpu_naive_gap_wording():
    """The 512+512 Llama-3-8B run predicted on an H100: about 2.5 times; an H200's ridge is lower than an H100's."""
    def predicted_ratio(hw):
        naive, cached = (hardware.roofline_time_of_passes(cost.generation_passes("llama-3-8b", 512, 512, cached=c), hw)
                         for c in (False, True))
        return naive / cached

    h100 = predicted_ratio(H100)
    assert 2 < h100 < 3
    h200 = hardware.ACCELERATORS["H200 SXM"]
    assert claims.gap_by_device(predicted_ratio(h200), h200.ridge, h100, H100.ridge).startswith("wider here")


# --- chapter 5. The GPU figures are those an H200 measured for a SmolLM2-shaped bf16 step after 512 tokens
# (benchmarks/step_anatomy.py, 2026-11-29): eager 38.7 ms, CUDA Graph 3.40 ms, torch.compile 2.34 ms,
# bytes ÷ bandwidth 0.067 ms, 1,632 ops at 17.7 µs each.

def test_duration_picks_a_unit():
    assert claims.duration(0.0385) == "38.5 ms" and claims.duration(6.7e-5) == "67 µs"
    assert claims.duration(2.5) == "2.50 s" and claims.duration(3.2e-6) == "3.2 µs"


@pytest.mark.parametrize("overhead, gap, words", [
    (5.2e-3, 15.4e-3, "about 34 % of it"),          # the 2-core CPU of chapter 5's first run
    (28.9e-3, 38.6e-3, "about 75 % of it"),         # the H200, eager
    (1.0e-3, 20e-3, "only 5 % of it"),
    (9e-3, 10e-3, "nearly all of it"),
    (20e-3, 10e-3, "more than the whole gap"),
    (1e-3, -1e-3, "no gap to explain"),
])
def test_fixed_costs_wording(overhead, gap, words):
    assert words in claims.fixed_costs(overhead, gap)


@pytest.mark.parametrize("ratio, words", [(1.6, "less than"), (1.996, "within"), (2.5, "within"), (3.04, "within"),
                                          (576, "more than")])
def test_roofline_multiple_wording(ratio, words):
    assert f"{words} the 2–3 times" in claims.roofline_multiple(ratio, "The plain step")


def test_graph_result_on_a_gpu_and_elsewhere():
    text = claims.graph_result("cuda", 38.7e-3, 3.40e-3, 2.34e-3, 6.7e-5)
    assert "11.4 times faster than eager" in text and "16.5 times faster" in text and "34.9 times" in text
    assert "91 % of the eager step was spent launching" in text
    assert "no CUDA device (cpu)" in claims.graph_result("cpu", 38e-3, None, None, 20e-3)
    assert "torch.compile" not in claims.graph_result("cuda", 38.7e-3, 3.4e-3, None, 6.7e-5)


@pytest.mark.parametrize("time_share, byte_share, words", [
    (0.13, 0.21, "less than its share"), (0.21, 0.21, "about its share"), (0.40, 0.21, "more than its share")])
def test_head_time_share_wording(time_share, byte_share, words):
    assert words in claims.head_time_share(time_share, byte_share)


def test_fused_ops_wording():
    assert "against the plain model's 1,632" in claims.fused_ops(1632, 1540)
    in_numpy = claims.fused_ops(1632, 9, in_numpy=True)
    assert "hands the whole step to NumPy" in in_numpy and "only the 9 PyTorch ops" in in_numpy


def test_numpy_step_account_wording():
    text = claims.numpy_step_account(0.024, 0.020, 0.0205, 0.0195, 0.0033, 900, 0.0002)
    assert "The step took 24.0 ms against 20.0 ms for its bytes" in text
    assert "95 % of the probed bandwidth: about as fast as" in text and "900 timed stretches of a few NumPy calls each, 3.7 µs a stretch" in text
    assert "the 4.0 ms between the step and its bytes ÷ bandwidth is 1.0 ms of products streaming" in text
    assert "and 3.0 ms of small ops and Python" in text  # the two add up to the gap
    assert "most of it, not all" in claims.numpy_step_account(0.024, 0.020, 0.025, 0.0195, 0.003, 900, 0)
    assert "only 50 %" in claims.numpy_step_account(0.04, 0.020, 0.039, 0.0195, 0.001, 900, 0)
    assert "probe underestimated" in claims.numpy_step_account(0.019, 0.020, 0.016, 0.0195, 0.003, 900, 0)
    cached = claims.numpy_step_account(0.022, 0.020, 0.018, 0.0195, 0.004, 900, 0)
    assert "came from the processor's caches" in cached and "are the whole of the 2.0 ms" in cached


def test_half_precision_wording():
    native = {"avx512_bf16": "bfloat16 dot products (AVX512-BF16)", "f16c": "conversion"}
    rates = {("float32", "NumPy"): 20e9, ("float32", "F.linear"): 19e9, ("bfloat16", "torch.mv"): 12e9,
             ("bfloat16", "F.linear"): 9e9, ("float16", "torch.mv"): 6e9, ("float16", "F.linear"): 10e9}
    text = claims.half_precision(native, rates)
    assert text.startswith("This processor offers bfloat16 dot products (AVX512-BF16).")
    assert "read 20.0 GB/s (NumPy)" in text
    assert "bfloat16 at 12.0 GB/s (torch.mv): its products would take 0.83 times float32's, half the bytes " \
           "bought back only part of the time" in text
    assert "float16 at 10.0 GB/s (F.linear): its products would take 1.00 times float32's, half the bytes " \
           "bought nothing" in text  # the faster of its two kernels
    assert "the kernel, not memory, sets the pace" in text
    none = claims.half_precision({"f16c": "conversion"}, rates)
    assert "reports no native bfloat16 or float16 arithmetic (only F16C's" in none
    fast = {**rates, ("bfloat16", "torch.mv"): 40e9, ("float16", "torch.mv"): 39e9}
    assert "bound by memory, as the roofline says" in claims.half_precision({}, fast)
    assert "half the bytes cost time" in claims.half_precision({}, {**rates, ("float16", "F.linear"): 5e9})


def test_serving_wording():
    assert "within 2 %" in claims.itl_against_tpot(0.100, 0.101)
    assert "above it" in claims.itl_against_tpot(0.100, 0.120) and "longer gaps" in claims.itl_against_tpot(0.1, 0.12)
    assert "below it" in claims.itl_against_tpot(0.100, 0.080)
    batches = [1, 4, 16]
    assert "every batch size" in claims.limits_met(batches, [0.1] * 3, [0.02] * 3, 0.5, 0.03, "interactive")
    text = claims.limits_met(batches, [0.1, 0.3, 3.0], [0.02, 0.05, 0.2], 2.0, 0.1, "server")
    assert "hold at batch 1, 4 and fail at batch 16" in text
    assert "TPOT alone" in claims.limits_met(batches, [0.1] * 3, [0.05] * 3, 0.5, 0.03, "interactive")
    assert "TTFT alone" in claims.limits_met(batches, [1.0] * 3, [0.01] * 3, 0.5, 0.03, "interactive")
    assert "both peak at batch 16" in claims.goodput_peak(batches, [1, 2, 3], [1, 2, 3])
    assert "goodput at batch 4" in claims.goodput_peak(batches, [1, 2, 3], [1, 2, 0])
    assert "zero throughout" in claims.goodput_peak(batches, [1, 2, 3], [0, 0, 0])
    assert "took 3.0 times as long" in claims.warm_up(0.3, 0.1)
    assert "not much slower" in claims.warm_up(0.11, 0.1)
    assert "never sends them" in claims.omission(0, 4, 5.2, 1.0, 2.5, 2.6)
    assert "came out close" in claims.omission(1, 1, 1.2, 1.0, 1.05, 0.5)
    assert "closed loop's worst TTFT was the larger" in claims.omission(0, 1, 1.0, 0.79, 0.33, 0.28)
    assert "sent 1 request and" in claims.omission(1, 1, 1.2, 1.0, 1.05, 0.5)
    assert "times as wide" in claims.percentile_spread((0.3, 0.5), (1.0, 2.0))
    assert "about as steady" in claims.percentile_spread((0.3, 0.5), (1.0, 1.2))
