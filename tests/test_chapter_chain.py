"""Chapter 1 (the dependency chain): its experiments on SmolLM2 at tiny sizes, each record's check both ways,
and every branch of the sentences chosen from its numbers (the GPU wording fed the cost model's H100
predictions: no GPU needed, a GPU's measurements sit near them, above the roofline).
"""

import dataclasses
import json

import pytest
import torch

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


SIZES = dict(repeat=1, chain_prompt=8, chain_new_tokens=(2, 3, 4), chain_batch=2, chain_multi_token=2)


def setup_of(model, tokenizer=None):
    """Chapter 1's setup for `model` in float32 on the CPU, with sweeps a few tokens long."""
    from llmperf.chapters.setup import Setup, sizes_for_type

    return Setup(torch.device("cpu"), torch.float32, dataclasses.replace(sizes_for_type("cpu"), **SIZES), model,
                 tokenizer)


@pytest.fixture(scope="module")
def small(tiny):
    return setup_of(tiny)


def serialisable(record):
    return json.loads(json.dumps(dataclasses.asdict(record)))


def test_the_chain_feeds_each_step_the_last_output(smollm2):
    links = chain.show_chain(setup_of(*smollm2), "The three primary colours are", steps=3)
    assert len(links.positions) == 3 and links.positions[0] == len(smollm2[1].encode(links.prompt))
    links.check()
    assert links.numbers() == {"chain_steps": 3} and len(links.table().data) == 3
    serialisable(links)
    broken = dataclasses.replace(links, fed=["x", "y", "z"])
    with pytest.raises(AssertionError, match="fed the token"):
        broken.check()


def test_the_latency_line_holds_every_number_the_chapter_shows(small):
    ingredients = chain.measure_ingredients(small)
    assert ingredients.prompt_len == 8 and 0 < ingredients.t_step and 0 < ingredients.ttft
    line = chain.measure_latency_line(small, ingredients)
    assert line.Ns == [2, 3, 4] and line.block == 4 and len(line.e2e) == 3
    assert line.predicted[0] == pytest.approx(ingredients.ttft + ingredients.t_step)
    assert set(line.numbers()) >= {"fit_slope_ms", "fit_r2", "slope_vs_step", "slope_tol_pct"}
    assert list(line.table().data.columns) == ["N", "measured (s)", "predicted (s)", "measured ÷ predicted"]
    assert serialisable(line)["ingredients"]["prompt_len"] == 8


def test_the_latency_line_check_both_ways():
    ok = chain.LatencyLine(chain.Ingredients(32, 0.1, 0.02), [8, 16], [0.24, 0.40], 16, 0.02, 0.02, 0.08, 0.999)
    ok.check()
    with pytest.raises(AssertionError, match="not linear"):
        dataclasses.replace(ok, r2=0.9).check()
    with pytest.raises(AssertionError, match=r"1.30x the measured step"):
        dataclasses.replace(ok, slope=0.026).check()


def test_same_flops_counts_exactly_and_checks_both_ways(small):
    same = chain.measure_same_flops(small, N=4)
    assert same.decode_matmul == same.prefill_matmul == cost.prefill_flops(small.model.cfg, 4).matmul
    serialisable(same)
    ok = dataclasses.replace(same, t_prefill=0.01, t_decode=0.05)
    ok.check()
    with pytest.raises(AssertionError, match="only 2.0x a prefill"):
        dataclasses.replace(ok, t_decode=0.02).check()
    with pytest.raises(AssertionError, match="identical matmul FLOPs"):
        dataclasses.replace(ok, decode_matmul=ok.decode_matmul + 1).check()


def test_the_ways_out_compare_each_pass_with_a_plain_step(small, monkeypatch):
    monkeypatch.setattr(hardware, "measure_bandwidth", lambda device: {"read": 20e9, "copy": 20e9})
    ways = chain.measure_ways_out(small)
    assert list(ways.ways) == ["one step, float32", "one step, bfloat16", "one step, batch 2", "one pass over 2 new tokens"]
    assert ways.ratio("one step, bfloat16", "bytes") < 0.51 and ways.ways["one step, batch 2"]["tokens"] == 2
    numbers = ways.numbers()
    assert numbers["batch"] == 2 and numbers["k"] == 2 and "bfloat16 step ran" in numbers["bf16_text"]
    assert len(ways.table().data) == 4
    serialisable(ways)
    answers = chain.exercise_numbers(chain.LatencyLine(chain.Ingredients(8, 0.1, 0.02), [2, 4], [0.12, 0.16], 4,
                                                       0.02, 0.02, 0.08, 1.0), ways)
    assert answers["ex_t500"] == pytest.approx(0.1 + 499 * 0.02) and answers["ex_n_long"] == 8


def test_the_sweep_takes_other_token_counts_and_refuses_bad_ones(small):
    ingredients = chain.Ingredients(8, 0.1, 0.02)
    assert chain.measure_latency_line(small, ingredients, new_tokens=[5, 2, 3]).Ns == [2, 3, 5]
    with pytest.raises(ValueError, match="at least 3 token counts"):
        chain.measure_latency_line(small, ingredients, new_tokens=[2, 4])
    with pytest.raises(ValueError, match="exceed"):
        chain.measure_latency_line(small, ingredients, new_tokens=[2, 4, 10**6])


def test_the_figures_draw_from_records_alone():
    import matplotlib.pyplot as plt

    from llmperf.plots import chain as figures

    line = chain.LatencyLine(chain.Ingredients(8, 0.1, 0.02), [2, 3, 4], [0.12, 0.14, 0.16], 4, 0.02, 0.02, 0.08,
                             1.0)
    same = chain.SameFlops(4, 10, 12, 10, 12, 0.01, 0.05)
    assert len(figures.latency_line(line).axes[0].lines) == 3 and len(figures.same_flops(same).axes[0].patches) == 2
    assert list(same.table().data["time (ms)"]) == [10.0, 50.0]
    plt.close("all")
