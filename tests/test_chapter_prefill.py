"""Chapter 2 (prefill cost): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); its experiments on
the tiny preset (exact counts and the records' structure, never the tiny model's times); and each record's check()
both ways on hand-built records.
"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from llmperf import PRESETS, build_model, cost, hardware
from llmperf.chapters import prefill
from llmperf.chapters.setup import Setup, sizes_for_type
from tests.prose import check_glued_once

H100 = hardware.ACCELERATORS["H100 SXM"]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_prefill_cost.ipynb"


def test_quadratic_part_and_share_of_probe():
    assert prefill.quadratic_part(12.5, 31.0, 1536) == "is 31 % of the fitted TTFT at 1,536 tokens"
    for c_ns in (-7013.0, 0.0):  # at or below zero: TTFT bent downward, for one of two reasons
        text = prefill.quadratic_part(c_ns, -404.0, 1536)
        assert "bent downward" in text and "other work" in text.lower()
        assert "more efficient as the prompt grew" in text
        assert "says nothing about the quadratic term" in text and "%" not in text
    assert prefill.quadratic_part(0.001, 0.0, 1536) == "is 0 % of the fitted TTFT at 1,536 tokens"
    assert prefill.share_of_probe(80e9, 100e9, "the probe").startswith("80 % of the 100.0 GFLOP/s")
    assert "lower bound" in prefill.share_of_probe(172e9, 100e9, "the probe")


@pytest.mark.parametrize("pairs, words", [
    ([(64, 128, 1.95), (128, 256, 2.05)], "The rule holds across this sweep"),
    ([(64, 128, 1.30), (128, 256, 1.95), (256, 512, 2.70)], "The rule fails at both ends"),
    ([(64, 128, 1.30), (128, 256, 1.95)], "The rule holds for the longer prompts, but not the shortest"),
    ([(1024, 2048, 2.0), (2048, 3072, 1.5), (3072, 4096, 1.6)], "The rule holds for the shorter prompts"),
    # A slow pair at the long end, none at the short one: counted, not put at "the shortest".
    ([(64, 128, 2.0), (128, 256, 1.3)], "The rule fails at 1 of 2 pairs of this sweep"),
    # A fast pair before a slow one: the ends are not named.
    ([(64, 128, 2.8), (128, 256, 1.3)], "The rule fails at 2 of 2 pairs of this sweep"),
    # Every pair off the rule, slow before fast: still counted, since no pair holds between them.
    ([(64, 128, 1.3), (128, 256, 2.8)], "The rule fails at 2 of 2 pairs of this sweep"),
    # A slow pair in the middle of the sweep.
    ([(64, 128, 2.0), (128, 256, 1.3), (256, 512, 2.0)], "The rule fails at 1 of 3 pairs of this sweep"),
    # A fast pair before the end.
    ([(64, 128, 2.0), (128, 256, 2.8), (256, 512, 2.0)], "The rule fails at 1 of 3 pairs of this sweep"),
    # Slow pairs at the start, one holding, a slow one later: not all at the short end.
    ([(64, 128, 1.3), (128, 256, 2.0), (256, 512, 1.3)], "The rule fails at 2 of 3 pairs of this sweep"),
    ([(64, 64, 1.0)], "no two prompt lengths to compare"),
    ([], "no two prompt lengths to compare"),
])
def test_doubling_text_has_a_verdict_for_every_sweep(pairs, words):
    text = prefill.doubling_text(pairs)
    assert text.startswith(words) or words in text
    if "fails at both ends" in text:  # the shortest slow pair and the longest fast pair, with their numbers
        assert "from 64 to 128 tokens (2.00 times the prompt) TTFT grew 1.30-fold" in text
        assert "from 256 to 512 tokens" in text and "2.70-fold" in text
    if " pairs of this sweep" in text:  # counted: no end is named, and every pair off the rule is
        assert "short end" not in text and "long end" not in text and "shortest" not in text
        ks = [prefill.growth_exponent(b / a, r) for a, b, r in pairs]
        for (a, b, r), k in zip(pairs, ks):
            named = f"from {a:,} to {b:,} tokens" in text
            assert named == (abs(k - 1) > prefill.claims.PROPORTIONAL), (a, b, text)
        assert ("Less than in proportion" in text) == any(k < 1 - prefill.claims.PROPORTIONAL for k in ks)
        assert ("More than in proportion" in text) == any(k > 1 + prefill.claims.PROPORTIONAL for k in ks)


def test_doubling_text_names_every_pair_of_a_group():
    """Two slow pairs at the short end: both are named, not only the first."""
    text = prefill.doubling_text([(64, 128, 1.3), (128, 256, 1.4), (256, 512, 2.0)])
    assert text.startswith("The rule holds for the longer prompts, but not the shortest")
    assert "from 64 to 128 tokens" in text and "from 128 to 256 tokens" in text and "256 to 512" not in text


def test_growth_exponent():
    assert prefill.growth_exponent(2, 2) == pytest.approx(1)
    assert prefill.growth_exponent(2, 4) == pytest.approx(2)
    assert prefill.growth_exponent(1.5, 1.5) == pytest.approx(1)


def test_intercept_text():
    assert prefill.intercept_text(3.2, 8.0, 64) == ("The fit's intercept, a = 3.20 ms, estimates this fixed cost: "
                                                     "40 % of the 8.0 ms TTFT at 64 tokens")
    text = prefill.intercept_text(-1.5, 8.0, 64)
    assert "a = -1.50 ms, at or below zero" in text and "estimates this fixed cost" not in text
    for a in (12.0, 8.0):  # at or above the shortest TTFT: a fixed cost can only be a part of that TTFT
        text = prefill.intercept_text(a, 8.0, 64)
        assert f"a = {a:.2f} ms, at or above the 8.0 ms TTFT at 64 tokens" in text and "%" not in text
    assert "99 % of the 8.0 ms TTFT" in prefill.intercept_text(7.92, 8.0, 64)  # just under it


def test_gap_text():
    assert prefill.gap_text(1.8, 1536).startswith("Measured TTFT sat above the prediction (1.80 times the "
                                                  "prediction at 1,536 tokens)")
    for ratio in (1.049, 0.951, 1.0):
        assert "matched the prediction to within 5 %" in prefill.gap_text(ratio, 1536)
    assert "sat above" in prefill.gap_text(1.051, 1536)
    low = prefill.gap_text(0.94, 1536)
    assert "below the prediction (0.94 times" in low and "understated the rate" in low


@pytest.mark.parametrize("growth, words", [
    (3.9, "close to 4-fold, for 1.03 times the tokens per second"),
    (4.4, "close to 4-fold"),
    (5.0, "more than 4-fold: the batched pass was slower per prompt token"),
    (2.5, "well short of 4-fold, so batching bought 1.60 times the tokens per second"),
    (1.5, "grew only 1.50-fold, less than half of 4-fold"),
    (1.051, "grew only 1.05-fold"),
    (1.049, "stayed about what it was at batch 1 (1.05-fold), within the noise"),
    (1.0, "stayed about what it was at batch 1 (1.00-fold)"),
    (0.951, "stayed about what it was at batch 1 (0.95-fold)"),
    (0.949, "shrank to 0.95 times batch 1's"),
    (0.8, "shrank to 0.80 times batch 1's: the batched pass ran faster than one prompt alone"),
])
def test_batch_ttft_text(growth, words):
    text = prefill.batch_ttft_text(growth, 4)
    assert words in text
    if growth < 1:
        assert "grew" not in text.split(":")[0]  # a shrinking TTFT is never said to grow


@pytest.mark.parametrize("gain, words", [(1.02, "about the same throughput as batch 1 (1.02×)"),
                                         (0.8, "less throughput than batch 1 (0.80×)"),
                                         (1.3, "a gain of 1.30×")])
def test_batch_gain_text(gain, words):
    assert prefill.batch_gain_text(gain, 4) == f"{words}, against the 4× that free batching would give"


def test_model_texts():
    assert prefill.sweep_model_text("smollm2-135m", True) == "SmolLM2 itself"
    text = prefill.sweep_model_text("llama-3-8b", False)
    assert text.startswith("llama-3-8b with random weights") and "whatever its length" not in text
    assert prefill.batch_model_text("smollm2-135m", True) == "SmolLM2 itself"
    for text in (text, prefill.batch_model_text("llama-3-8b", False)):
        # Random weights time about like real ones, not exactly: the values matter a little, and the text says how.
        assert text.startswith("llama-3-8b with random weights of its shape") and "exactly like" not in text
        assert "time about like real ones, not exactly" in text and "clock" in text and "subnormal" in text
    assert "dispatching and launching" in prefill.sweep_model_text("llama-3-8b", False)


@pytest.mark.parametrize("attention, words", [
    (0, "counted the fused attention kernel as 0 FLOPs: this PyTorch has no FLOP formula for the kernel"),
    (1_000, "counted 1,000 FLOPs of attention, the full square, although the model passed is_causal"),
    (550, "counted 550 FLOPs of attention, the causal pairs only"),
    (700, "counted 700 FLOPs of attention, neither the full square (1,000) nor the causal pairs (550)"),
])
def test_sdpa_count_text_names_what_the_counter_charged(attention, words):
    text = prefill.sdpa_count_text(attention, 1_000, 550)
    assert text.startswith(words)
    assert ("not the 550 that the causal pairs need" in text) == (attention == 1_000)


# --- the experiments, on the tiny preset ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s(tiny):
    sizes = dataclasses.replace(sizes_for_type("cpu"), repeat=2, prefill_lengths=(8, 16, 24, 32), prefill_model="tiny",
                                prefill_batch_len=16, prefill_batch_model="tiny")
    return Setup(torch.device("cpu"), torch.float32, sizes, tiny, None)


def as_json(record) -> str:
    return json.dumps(dataclasses.asdict(record))


def first_row_off(record, **change):
    """`record` with its first row's fields moved by `change` ({field: amount}): a count the check must refuse."""
    row = record.rows[0]
    moved = dataclasses.replace(row, **{name: getattr(row, name) + amount for name, amount in change.items()})
    return dataclasses.replace(record, rows=[moved, *record.rows[1:]])


def test_model_for_takes_the_setups_model_or_builds_the_preset(s):
    assert prefill.model_for(s, "tiny") is s.model
    twin = build_model(dataclasses.replace(PRESETS["tiny"], name="tiny-twin"), "cpu")
    built = prefill.model_for(s._replace(model=twin), "tiny")
    assert built is not twin and built.cfg == PRESETS["tiny"]


def test_estimates_are_the_cost_models(s):
    est = prefill.estimates(s)
    as_json(est)
    llama = PRESETS["llama-3-8b"]
    assert [r.seq_len for r in est.rows] == [2_000, 32_000]
    assert est.rows[1].full == cost.prefill_flops(llama, 32_000, attention="full").attention
    assert est.rows[1].causal == cost.prefill_flops(llama, 32_000, attention="causal").attention
    assert est.per_token_2n == cost.estimate_2n(llama) and est.ridge == H100.ridge
    assert est.setup_model == "tiny" and est.setup_crossover == cost.prefill_attention_crossover("tiny")
    assert est.numbers()["l8_cross"] == pytest.approx(30_600, rel=0.01)
    assert est.table().data.shape == (2, 5)
    est.check()
    with pytest.raises(AssertionError):
        first_row_off(est, full=2).check()


def test_count_check_matches_the_counter_exactly(s):
    check = prefill.count_check(s)
    as_json(check)
    assert [r.seq_len for r in check.rows] == [8, 16]
    assert check.rows[-1].full == cost.prefill_flops("tiny", 16, attention="full").total
    check.check()  # an exact count, not a time: it holds on the tiny model too
    assert check.numbers()["check_diff"] == 0 and check.table().data.shape == (2, 5)
    with pytest.raises(AssertionError):
        first_row_off(check, counted=1).check()
    # The fused kernel, at the first length: this CPU's has no FLOP formula, so the counter sees the weights only.
    k = check.kernel
    assert (k.seq_len, k.device) == (8, "cpu")
    assert k.full == cost.prefill_flops("tiny", 8, attention="full").attention
    assert k.causal == cost.prefill_flops("tiny", 8, attention="causal").attention
    assert k.counted - k.attention == cost.prefill_flops("tiny", 8).matmul
    assert k.attention in (0, k.full, k.causal)  # one of the branches that name a count
    assert check.numbers()["sdpa_text"] == prefill.sdpa_count_text(k.attention, k.full, k.causal)
    assert check.numbers()["kernel_counted"] == k.counted
    with pytest.raises(AssertionError):  # the weight products the counter saw are off the cost model's
        dataclasses.replace(check, kernel=dataclasses.replace(k, counted=k.counted + 2)).check()
    with pytest.raises(AssertionError):  # counted at another length than the first row's
        dataclasses.replace(check, kernel=dataclasses.replace(k, seq_len=16)).check()


def test_the_counter_sees_the_weight_products_as_mm():
    """`weight_products` reads the counter's aten.mm; the math form's attention is aten.bmm, which it leaves out."""
    from torch.utils.flop_counter import FlopCounterMode

    from llmperf.profiling import count_flops

    model, tokens = build_model("tiny", "cpu"), torch.randint(0, 256, (1, 12))
    with count_flops() as counter:
        model(tokens)
    assert prefill.weight_products(counter) == cost.prefill_flops("tiny", 12).matmul
    assert counter.get_total_flops() - prefill.weight_products(counter) == cost.prefill_flops(
        "tiny", 12, attention="full").attention  # the math form: the full square
    with torch.inference_mode(), FlopCounterMode(display=False) as fused:
        model(tokens)
    assert prefill.weight_products(fused) == cost.prefill_flops("tiny", 12).matmul


def test_ttft_sweep_records_every_length(s):
    sweep = prefill.ttft_sweep(s)
    as_json(sweep)
    assert sweep.model == "tiny" and sweep.setup_model and sweep.lengths == [8, 16, 24, 32]
    assert sweep.probe_shape == [32, 64, 128] and sweep.matmul_rate > 0 and sweep.square_rate > 0
    assert len(sweep.ttft) == 4 and all(t > 0 for t in sweep.ttft)
    assert sweep.flops == [cost.prefill_flops("tiny", S, attention="causal", logits_for=1).total for S in sweep.lengths]
    assert sweep.attention_full[-1] == cost.prefill_flops("tiny", 32, attention="full").attention
    assert sweep.ops_per_pass > 0 and sweep.table().data.shape == (4, 6)
    assert [(a, b) for a, b, _ in sweep.pairs] == [(8, 16), (16, 24), (24, 32)]
    ratios = sweep.ratio_table().data
    assert list(ratios.columns) == ["from (tokens)", "to (tokens)", "length ratio", "TTFT ratio, measured",
                                    "TTFT ratio, predicted", "exponent k"]
    assert list(ratios["length ratio"]) == [2.0, 1.5, pytest.approx(4 / 3)]
    assert ratios["TTFT ratio, measured"][0] == pytest.approx(sweep.ttft[1] / sweep.ttft[0])
    assert ratios["TTFT ratio, predicted"][0] == pytest.approx(sweep.flops[1] / sweep.flops[0])
    grid, causal, full = sweep.predicted_curve(points=5)
    assert grid == [8, 14, 20, 26, 32] and all(f >= c for f, c in zip(full, causal))


def test_batch_prefill_records_both_batches(s):
    batched = prefill.batch_prefill(s, matmul_rate=1e9, batch=2)
    as_json(batched)
    assert (batched.model, batched.setup_model, batched.prompt_len, batched.batch) == ("tiny", True, 16, 2)
    assert batched.flops_b == cost.prefill_flops("tiny", 16, batch=2, attention="causal", logits_for=1).total
    assert batched.flops_b == 2 * batched.flops_1 and batched.time_1 > 0 and batched.time_b > 0
    assert batched.table().data.shape == (2, 5)


# --- check() both ways, on hand-built records ----------------------------------------------------------------------

def hand_sweep(ttft) -> prefill.TTFTSweep:
    lengths = [64, 128, 256, 512]
    causal = [cost.prefill_flops("smollm2-135m", S, attention="causal", logits_for=1) for S in lengths]
    full = [cost.prefill_flops("smollm2-135m", S, attention="full", logits_for=1) for S in lengths]
    return prefill.TTFTSweep("smollm2-135m", True, "cpu", "float32", [512, 576, 1536], 50e9, 60e9, lengths, ttft,
                             [f.total for f in causal], [f.total for f in full], [f.attention for f in causal],
                             [f.attention for f in full], 900)


def hand_batch(time_1: float, time_b: float) -> prefill.BatchedPrefill:
    return prefill.BatchedPrefill("smollm2-135m", True, 512, 4, time_1, time_b, 70_000_000_000, 280_000_000_000, 50e9)


def test_sweep_check_both_ways():
    hand_sweep([0.010, 0.019, 0.040, 0.090]).check()
    with pytest.raises(AssertionError):  # TTFT did not even double over the sweep
        hand_sweep([0.010, 0.012, 0.015, 0.019]).check()
    with pytest.raises(AssertionError, match="did not rise"):  # per token, the longest prompt is the cheapest
        hand_sweep([0.010, 0.019, 0.036, 0.060]).check()


def test_the_sweep_glues_its_verdicts():
    n = hand_sweep([0.010, 0.019, 0.040, 0.090]).numbers()
    assert n["doubling_text"].startswith("The rule") and n["intercept_text"].startswith("The fit's intercept")
    assert "len_ratio" not in n and "ttft_ratio" not in n  # replaced by the table and its verdict
    # The gap's widths are the timed model's, here SmolLM2's; glued numbers no prose reads are gone.
    assert (n["sweep_d"], n["sweep_head_dim"]) == (576, 64) and n["gap_text"].startswith("Measured TTFT")
    assert not {"achieved_pct", "fit_a_ms", "fit_b_us", "fit_c_ns", "quad_share_pct"} & set(n)
    assert "batch_model" not in hand_batch(0.10, 0.35).numbers()
    big = dataclasses.replace(hand_sweep([0.010, 0.019, 0.040, 0.090]), model="llama-3-8b", setup_model=False)
    assert (big.numbers()["sweep_d"], big.numbers()["sweep_head_dim"]) == (4096, 128)  # on a GPU: the big model's
    b = hand_batch(0.10, 0.35).numbers()
    assert "close to 4-fold" in b["batch_ttft_text"] and b["batch_gain_text"].startswith("a gain of 1.14×")


def test_batch_check_both_ways():
    hand_batch(0.10, 0.35).check()  # gain 1.14, TTFT 3.5 times
    with pytest.raises(AssertionError, match="throughput gain"):
        hand_batch(0.10, 0.20).check()  # gain 2.0
    # Each request's TTFT under B/2 times batch 1's: gain = B ÷ TTFT growth is then above 2, so the gain's
    # assertion (1.6 at most) fires first; the TTFT one can never fail alone, and breaking it raises all the same.
    with pytest.raises(AssertionError):
        hand_batch(0.10, 0.19).check()


def test_numbers_are_what_the_prose_glues(s):
    """Every {glue:text} name of the chapter comes from exactly one of its records' numbers() (or the exercises')."""
    est, sweep = prefill.estimates(s), hand_sweep([0.010, 0.019, 0.040, 0.090])
    check = prefill.FlopCheck("smollm2-135m", [prefill.CountedRow(512, 10, 10, 8)],
                              prefill.KernelCount(512, "cpu", 6, 0, 4, 2))
    parts = [est.numbers(), check.numbers(), sweep.numbers(), hand_batch(0.10, 0.35).numbers(),
             prefill.exercise_numbers(est, sweep)]
    check_glued_once(parts, NOTEBOOK)
    json.dumps(parts)


def test_the_exercise_borrows_a_gpu_reference_probe(s, tmp_path):
    """The GPU fraction of the exercise comes from a committed GPU reference's probes, and its words from
    which GPU that is; without one, the error says what is missing."""
    from llmperf.references import fileformat, save

    est, sweep = prefill.estimates(s), hand_sweep([0.010, 0.019, 0.040, 0.090])
    with pytest.raises(FileNotFoundError, match="No GPU reference run"):
        prefill.exercise_numbers(est, sweep, where=tmp_path)
    ref = fileformat.empty("cuda", "NVIDIA A100-SXM4-80GB")
    ref["probes"] = {"date": "2026-12-02T00:00:00+00:00", "environment": {}, "values": {"matmul_bfloat16": 234e12}}
    save(ref, tmp_path / "a100.json")
    t4 = fileformat.empty("cuda", "NVIDIA Tesla T4")  # newer, but not in the accelerator table: passed over
    t4["probes"] = {"date": "2026-12-03T00:00:00+00:00", "environment": {}, "values": {"matmul_bfloat16": 50e12}}
    save(t4, tmp_path / "t4.json")
    n = prefill.exercise_numbers(est, sweep, where=tmp_path)
    assert n["gpu_eff_pct"] == pytest.approx(75) and "another GPU than the H100 (A100 SXM 80GB)" in n["gpu_cores_text"]
    assert (n["gpu_probe_device"], n["gpu_probe_date"]) == ("NVIDIA A100-SXM4-80GB", "2026-12-02")
    n = prefill.exercise_numbers(est, sweep)  # the repository's own: an H200, the H100's tensor cores
    assert "H100's tensor cores" in n["gpu_cores_text"] and 70 < n["gpu_eff_pct"] < 90
