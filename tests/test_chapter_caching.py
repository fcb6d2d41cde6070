"""Chapter 4 (naive against cached): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); each experiment run
on the tiny preset (counts, structure, JSON), and each record's check() on hand-built records, both ways.
"""

import dataclasses
import json
import re
from pathlib import Path

import matplotlib
import pytest
import torch

from llmperf import build_model, cost, hardware
from llmperf.chapters import caching
from llmperf.chapters.setup import Setup, sizes_for_type
from llmperf.cost import GenerationCost

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


# --- The experiments, at tiny sizes, and each record's check() both ways on hand-built records. ---

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "04_naive_vs_cached.ipynb"
HERE = hardware.Accelerator("test machine", 1e12, 1e11, 1e10, "hand-built", {"matmul_bfloat16": 2e12})


def tiny_setup(model, tokenizer=None, **sizes) -> Setup:
    return Setup(torch.device("cpu"), torch.float32, dataclasses.replace(sizes_for_type("cpu"), repeat=1, **sizes),
                 model, tokenizer)


def as_json(record) -> str:
    return json.dumps(dataclasses.asdict(record))


class ByteTokenizer:
    """Token ids are a text's UTF-8 bytes: enough for the tiny preset's 256-token vocabulary."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids) -> str:
        return bytes(ids).decode(errors="replace")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_check_agreement(tiny, dtype):
    model = tiny if dtype == torch.float32 else build_model("tiny", device="cpu", dtype=dtype, seed=0)
    s = tiny_setup(model, ByteTokenizer(), naive_new_tokens=3)._replace(dtype=dtype)
    r = caching.check_agreement(s)  # in float32 either way
    assert r.n_check == len(r.naive_ids) == 3 and r.same_tokens and r.logit_gap < 1e-2
    assert all(isinstance(i, int) for i in r.cached_ids) and isinstance(r.text, str)
    assert r.numbers() == {"n_check": 3, "logit_gap": r.logit_gap, "same_text": "the same"}
    assert r.summary().startswith("3 tokens each; identical: True")
    assert model.tok_embeddings.weight.dtype == dtype  # the float32 copy left the model as it was
    r.check()
    as_json(r)


def test_time_steps_counts(tiny):
    r = caching.time_steps(tiny_setup(tiny, naive_positions=(4, 8, 16)))
    assert (r.model, r.device, r.dtype, r.positions) == ("tiny", "cpu", "float32", [4, 8, 16])
    assert len(r.naive_s) == len(r.cached_s) == 3 and all(isinstance(t, float) and t > 0 for t in r.naive_s + r.cached_s)
    assert r.table().data.shape == (3, 4)
    assert {"S_lo", "S_hi", "naive_slope_us", "device", "dtype_name"} <= set(r.numbers())
    as_json(r)


def test_count_generation_flops_is_exact(tiny):
    r = caching.count_generation_flops(tiny_setup(tiny), prompt=5, new_tokens=3)
    assert set(r.counted) == {"naive", "cached"} and r.counted == r.predicted
    assert r.numbers() == {"short_prompt": 5, "short_n": 3} and r.table().data.shape == (2, 3)
    r.check()  # exact counts, no timing: safe to assert on what ran
    as_json(r)


def test_whole_generation_counts(tiny):
    r = caching.whole_generation(tiny_setup(tiny, naive_prompt=4, naive_new_tokens=5), new_tokens=3, here=HERE,
                                 repeat=1)
    assert (r.prompt, r.new_tokens, r.bytes_per_param, r.here) == (4, 3, 4, HERE)
    assert r.naive.total.passes == r.cached.total.passes == 3
    assert r.naive.total.weight_bytes == r.cached.total.weight_bytes and r.cached.total.kv_bytes > 0 == r.naive.total.kv_bytes
    assert r.naive.total == cost.generation_cost(tiny.cfg, 4, 3, cached=False, bytes_per_param=4)
    assert r.naive.measured_s > 0 and r.cached.roofline_s > 0 and r.flop_ratio > 1
    assert r.table().data.shape == (2, 8)
    ex = caching.exercise_numbers(r, tiny.cfg)
    assert ex["ex_n_double"] == 6 and ex["ex_pred_now"] == r.pred_ratio and ex["ex_r2"] > ex["ex_r1"] > 1
    as_json(r)


def test_quoted_table_and_crossovers():
    q = caching.quoted_table(HERE)
    q.check()  # the widely quoted 512 + 512 figures
    assert q.h100_ratio == pytest.approx(2.5, abs=0.5) and q.here_ridge == 20.0 and q.table().data.shape == (2, 8)
    assert q.numbers()["device_gap_text"].startswith("wider here")
    as_json(q)
    c = caching.naive_crossovers(models=("tiny",), points=5)
    (curve,) = c.curves
    assert curve.crossover == cost.naive_attention_crossover("tiny") and len(curve.new_tokens) == len(curve.matmul_flops)
    assert c.numbers() == {"tiny_naive_cross": curve.crossover}
    as_json(c)


def step_sweep(naive_slope: float) -> caching.StepSweep:
    positions = [100, 200, 300]
    return caching.StepSweep("tiny", "cpu", "float32", positions, [1e-3 + naive_slope * S for S in positions],
                             [1e-3 + 1e-7 * S for S in positions])


def generation(naive_s: float, cached_s: float = 1.0) -> caching.Generation:
    total = GenerationCost(3, 10, 1, 100, 0)
    return caching.Generation("tiny", "cpu", "float32", 4, 3, 4, HERE, caching.LoopRun(total, 2.0, naive_s),
                              caching.LoopRun(dataclasses.replace(total, matmul_flops=5, kv_bytes=9), 1.0, cached_s))


def test_checks_pass_and_fail_on_hand_built_records():
    good = caching.Agreement("p", [1, 2], [1, 2], 1e-5, "ab")
    good.check()
    for bad in (dataclasses.replace(good, naive_ids=[1, 3]), dataclasses.replace(good, logit_gap=0.02)):
        with pytest.raises(AssertionError):
            bad.check()
    step_sweep(5e-7).check()
    with pytest.raises(AssertionError, match="naive slope only 4.0x the cached slope"):
        step_sweep(4e-7).check()
    caching.FlopCheck(8, 4, {"naive": 10, "cached": 5}, {"naive": 10, "cached": 5}).check()
    with pytest.raises(AssertionError):
        caching.FlopCheck(8, 4, {"naive": 10, "cached": 5}, {"naive": 10, "cached": 6}).check()
    generation(0.91).check()
    with pytest.raises(AssertionError):
        generation(0.9).check()
    q = caching.quoted_table(HERE)
    e = q.naive.estimate
    for loop in (dataclasses.replace(q.naive, estimate=dataclasses.replace(e, matmul_flops=e.matmul_flops // 2)),
                 dataclasses.replace(q.naive, estimate=dataclasses.replace(e, attention_flops=e.attention_flops // 2)),
                 dataclasses.replace(q.naive, exact=dataclasses.replace(q.naive.exact, weight_bytes=1))):
        with pytest.raises(AssertionError):
            dataclasses.replace(q, naive=loop).check()


def test_every_glue_name_of_the_chapter_comes_from_a_record():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    names = set(re.findall(r"\{glue:text\}`([A-Za-z0-9_]+)", text))
    gen = generation(2.0)
    glued = {**caching.Agreement("p", [1], [1], 0.0, "a").numbers(), **step_sweep(5e-7).numbers(),
             **caching.FlopCheck(8, 4, {}, {}).numbers(), **gen.numbers(), **caching.quoted_table(HERE).numbers(),
             **caching.Crossovers([caching.CrossoverCurve(m, 1, [], [], []) for m in ("llama-3-8b", "smollm2-135m")]
                                  ).numbers(),
             **caching.exercise_numbers(gen, cost.get_config("tiny"))}
    assert names and names <= set(glued), sorted(names - set(glued))


def test_figures_draw_from_records():
    matplotlib.use("Agg")
    from llmperf.plots import caching as figures

    assert len(figures.step_times(step_sweep(5e-7)).axes[0].lines) == 4
    curves = [caching.CrossoverCurve("tiny", 20, [16, 32, 64], [1, 4, 16], [1, 8, 64])]
    assert len(figures.crossovers(caching.Crossovers(curves)).axes[0].lines) == 3
