"""Chapter 2 (prefill cost): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); its experiments on
the tiny preset (exact counts and the records' structure, never the tiny model's times); and each record's check()
both ways on hand-built records.
"""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from llmperf import PRESETS, build_model, cost, hardware
from llmperf.chapters import prefill
from llmperf.chapters.setup import Setup, sizes_for_type

H100 = hardware.ACCELERATORS["H100 SXM"]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_prefill_cost.ipynb"


def test_quadratic_part_and_share_of_probe():
    assert prefill.quadratic_part(12.5, 31.0, 1536) == "is 31 % of the fitted TTFT at 1,536 tokens"
    assert "no real cost can be" in prefill.quadratic_part(-7013.0, -404.0, 1536)
    assert prefill.share_of_probe(80e9, 100e9, "the probe").startswith("80 % of the 100.0 GFLOP/s")
    assert "lower bound" in prefill.share_of_probe(172e9, 100e9, "the probe")


def test_model_texts():
    assert prefill.sweep_model_text("smollm2-135m", True) == "SmolLM2 itself"
    assert prefill.sweep_model_text("llama-3-8b", False).startswith("llama-3-8b with random weights")
    assert prefill.batch_model_text("smollm2-135m", True) == "SmolLM2 itself"
    assert prefill.batch_model_text("llama-3-8b", False) == "llama-3-8b with random weights, which time exactly like real ones"


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


def test_ttft_sweep_records_every_length(s):
    sweep = prefill.ttft_sweep(s)
    as_json(sweep)
    assert sweep.model == "tiny" and sweep.setup_model and sweep.lengths == [8, 16, 24, 32]
    assert sweep.probe_shape == [32, 64, 128] and sweep.matmul_rate > 0 and sweep.square_rate > 0
    assert len(sweep.ttft) == 4 and all(t > 0 for t in sweep.ttft)
    assert sweep.flops == [cost.prefill_flops("tiny", S, attention="causal", logits_for=1).total for S in sweep.lengths]
    assert sweep.attention_full[-1] == cost.prefill_flops("tiny", 32, attention="full").attention
    assert sweep.ops_per_pass > 0 and sweep.table().data.shape == (4, 6)
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
    check = prefill.FlopCheck("smollm2-135m", [prefill.CountedRow(512, 10, 10, 8)])
    parts = [est.numbers(), check.numbers(), sweep.numbers(), hand_batch(0.10, 0.35).numbers(),
             prefill.exercise_numbers(est, sweep)]
    names = [name for part in parts for name in part]
    assert len(names) == len(set(names)), "a name is glued twice"
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    referenced = {m for c in cells if c["cell_type"] == "markdown"
                  for m in re.findall(r"\{glue:text\}`([A-Za-z0-9_]+)", "".join(c["source"]))}
    assert referenced <= set(names), sorted(referenced - set(names))
    json.dumps(parts)


def test_the_exercise_borrows_a_gpu_reference_probe(s, tmp_path):
    """The GPU fraction of the exercise comes from a committed GPU reference's probes, and its words from
    which GPU that is; without one, the error says what is missing."""
    from llmperf.reference import fileformat, save

    est, sweep = prefill.estimates(s), hand_sweep([0.010, 0.019, 0.040, 0.090])
    with pytest.raises(FileNotFoundError, match="No GPU reference run"):
        prefill.exercise_numbers(est, sweep, where=tmp_path)
    ref = fileformat.empty("cuda", "NVIDIA A100-SXM4-80GB")
    ref["probes"] = {"date": "2026-12-02T00:00:00+00:00", "environment": {}, "values": {"matmul_bfloat16": 234e12}}
    save(ref, tmp_path / "a100.json")
    n = prefill.exercise_numbers(est, sweep, where=tmp_path)
    assert n["gpu_eff_pct"] == pytest.approx(75) and "another GPU than the H100 (A100 SXM 80GB)" in n["gpu_cores_text"]
    assert n["gpu_probe_label"] == "reference run: NVIDIA A100-SXM4-80GB, 2026-12-02"
    n = prefill.exercise_numbers(est, sweep)  # the repository's own: an H200, the H100's tensor cores
    assert "H100's tensor cores" in n["gpu_cores_text"] and 70 < n["gpu_eff_pct"] < 90
