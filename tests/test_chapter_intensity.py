"""Chapter 3 (decode intensity): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline).
"""

import pytest

from llmperf import cost, hardware
from llmperf.chapters import intensity, wording
from llmperf.chapters.setup import sizes_for_type

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
    assert intensity.per_user_speed(s["step"][-1] / s["step"][0], b_max).startswith("fell")
    # Not "nearly flat": the bytes grow ~11.75-fold, and the cache outweighs the weights from batch ~23.
    growth = s["nbytes"][-1] / s["nbytes"][0]
    assert 11 < growth < 12.5
    kv_eq = s["parts"]["weights"].bytes / s["parts"]["attention"].bytes
    text = intensity.bytes_growth(growth, b_max, kv_eq)
    assert text.startswith("rises") and "within this sweep, from batch 23 on" in text
    # The weight products would cross the H100's ridge only at batch 296: beyond the sweep's 256.
    crossing = cost.compute_bound_batch("smollm2-135m", H100.ridge, s["ctx"] + 1, 2, part="weights")
    assert crossing == 296 and intensity.weights_bound(crossing, b_max, H100.ridge).startswith("No batch in the sweep")
    assert "stays bandwidth-bound" in intensity.attention_bound(s["parts"]["attention"].intensity, H100.ridge)
    # The step sits on the roofline in the prediction, so the trend of the gap stays put.
    assert wording.trend(1.0, 1.0, "at batch 1", "at batch 256").startswith("stays near")


def test_gpu_small_batch_and_low_precision_wording():
    assert intensity.small_batch_kernel("cuda", 1.0).startswith("On a GPU")
    assert "nearly free" in intensity.small_batch_kernel("cuda", 1.0)
    assert "bound by bandwidth" in intensity.low_precision_ridge("bfloat16", H100.ridge, 1.0, H100.flops / 1e9)


def test_cpu_branches():
    # A CPU whose bf16 products crawl (0.9 GFLOP/s against 19.5 GB/s): its bf16 ridge is below 1 FLOP/byte.
    text = intensity.low_precision_ridge("bfloat16", 0.9e9 / 19.5e9, 1.0, 0.9)
    assert "no fast bfloat16" in text and "bound by arithmetic" in text
    assert "more slowly" in intensity.small_batch_kernel("cpu", 1.4)
    assert intensity.weights_bound(22, 64, 10.9).startswith("The weight products cross this device's ridge")
    assert "even attention is bound by arithmetic" in intensity.attention_bound(1.5, 0.05)
    assert intensity.per_user_speed(1.02, 64).startswith("stayed about the same")
    assert intensity.bytes_growth(1.2, 64, 500.0).startswith("is nearly flat")


def test_speed_change_and_fused_result():
    assert wording.speed_change(2.0, 1.0, "A") == "2.0 times faster than A"
    assert wording.speed_change(1.0, 1.31, "A") == "1.31 times slower than A"
    assert wording.speed_change(1.0, 1.02, "A") == "about as fast as A"
    assert "a step about as fast as the plain one," in intensity.fused_result(1.0, 1.01, 50, 50)
    assert "a step 1.50 times faster than the plain one," in intensity.fused_result(1.5, 1.0, 35, 52)


def test_against_roof():
    assert intensity.against_roof(1.2) == "lies above both lines at every batch size"
    assert "within the probe's own error" in intensity.against_roof(0.95)
