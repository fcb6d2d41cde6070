"""Chapter 1 (the dependency chain): its experiments on SmolLM2 at tiny sizes, each record's check both ways,
and every branch of the sentences chosen from its numbers (the GPU wording fed the cost model's H100
predictions: no GPU needed, a GPU's measurements sit near them, above the roofline).
"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from llmperf import cost, hardware
from llmperf.chapters import chain
from tests.prose import check_glued_once

H100 = hardware.ACCELERATORS["H100 SXM"]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_dependency_chain.ipynb"


@pytest.mark.parametrize("t32, t16, share, words", [
    (2.0, 1.0, 0.8, "as the bytes predict"),
    (1.3, 1.0, 0.8, "did not stream their half"),
    (1.59, 1.0, 0.6, "did not stream their half"),  # just under 1.6, at the bound share
    (1.6, 1.0, 0.6, "as the bytes predict"),
    (2.4, 1.0, 0.6, "as the bytes predict"),
    (2.41, 1.0, 0.6, "more than halving the bytes predicts"),
    (3.0, 1.0, 0.8, "streamed their half of the bytes faster"),
    (2.0, 1.0, 0.59, "did not set its time"),  # just under the bound share: the bytes' prediction is not applied
    (1.0, 1.5, 0.3, "cost more than the halved bytes save"),
    (1.5, 1.0, 0.3, "the time followed the kernels' work, not the bytes"),
])
def test_halved_bytes(t32, t16, share, words):
    text = chain.halved_bytes(t32, t16, share)
    assert words in text
    assert "not the number of bytes" not in text  # the bytes did halve, whatever the time did
    if t32 / t16 > 2.4:
        assert "did not stream" not in text


def test_halved_bytes_on_a_gpu():
    """SmolLM2 on an H100 is bound by launches, not bytes: its float32 step draws a sliver of the bandwidth."""
    t_float32 = t_bfloat16 = 2e-3  # ~2 ms either way, set by ~1,600 launches
    share = cost.decode_bytes("smollm2-135m", 129, 1, 4).total / t_float32 / H100.bandwidth
    text = chain.halved_bytes(t_float32, t_bfloat16, share)
    assert share < 0.1 and "ran about as fast as the float32 one." in text and "did not set its time" in text


@pytest.mark.parametrize("ratio, growth, words", [
    (1.02, 0.003, "matches the bare step to within 5 %"),
    (0.97, 0.0, "too small to see"),
    (1.10, 0.08, "If the step were bound by its bytes, they would account for most of the difference"),
    (1.25, 0.125, "they would account for most of the difference"),  # growth = 0.5 × the excess: the lower bound
    (1.25, 0.1249, "too little to account for the difference"),  # just under it
    (1.25, 0.375, "they would account for most of the difference"),  # growth = 1.5 × the excess: the upper bound
    (1.25, 0.3751, "more than enough to account for the difference"),  # just over it
    (1.10, 0.30, "the context alone would predict more than the 10 % measured"),  # three times the excess
    (1.20, 0.01, "too little to account for the difference"),
    (0.85, 0.01, "scatter in the measurement"),
])
def test_slope_text_has_a_sentence_for_every_slope(ratio, growth, words):
    text = chain.slope_text(ratio, growth, 32)
    assert words in text and "32 more positions" in text and f"{100 * growth:.1f} % more bytes" in text
    if ratio < 0.95:  # below the step: nothing inside generate is offered as the cause
        assert "below the bare step" in text and "accounts for" not in text
    if ratio > 1.05:
        assert f"{100 * (ratio - 1):.0f} % above the bare step" in text
        assert "if the step were bound by its bytes" in text.lower()  # bytes become time only for such a step
        assert text.count("which") <= 1  # one clause at a time
    if "more than enough" in text:
        assert "most of the difference" not in text


def test_slope_text_on_a_gpu_reference():
    """SmolLM2 on an H100 at the GPU sizes: the cost model's growth of the longest run's average step (128 more
    positions after a 128-token prompt, bfloat16) is a few per cent at most, so a slope 20 % above the step is
    not put down to the context."""
    cfg, P, extra = "smollm2-135m", 128, 128
    growth = cost.decode_bytes(cfg, P + extra, 1, 2).total / cost.decode_bytes(cfg, P, 1, 2).total - 1
    assert 0 < growth < 0.05
    assert "too little to account" in chain.slope_text(1.2, growth, extra)


def test_the_kv_primer_is_the_configs_arithmetic():
    primer = chain.kv_primer()
    primer.check()
    n = primer.numbers()
    assert n["kv_l8_token"] == 131_072 == cost.kv_bytes_per_token("llama-3-8b", 2)  # facts.md
    assert n["kv_smol_token"] == 23_040 == 2 * 30 * 3 * 64 * 2
    assert (n["kv_smol_layers"], n["kv_smol_heads"], n["kv_smol_hd"], n["kv_bytes_el"]) == (30, 3, 64, 2)
    assert n["kv_l8_ctx_gb"] == pytest.approx(8_192 * 131_072 / 1e9)
    assert 5 < n["kv_l8_ctx_pct"] < 10 and n["kv_smol_ctx_pct"] > 50  # SmolLM2's small weights: the cache weighs more
    table = primer.table().data
    assert list(table["model"]) == ["smollm2-135m", "llama-3-8b"] and list(table["KV heads"]) == [3, 8]
    serialisable(primer)
    broken = dataclasses.replace(primer, rows=[dataclasses.replace(primer.rows[0], bytes_per_token=1)])
    with pytest.raises(AssertionError):
        broken.check()


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
    # The cache was allocated once for the prompt and every step, at the cost model's bytes per token (float32).
    assert links.capacity == links.positions[0] + 3
    assert links.cache_bytes == cost.kv_cache_bytes("smollm2-135m", links.capacity, 1, 4)
    assert links.numbers() == {"chain_steps": 3, "chain_capacity": links.capacity,
                               "chain_cache_kb": links.cache_bytes / 1e3}
    assert len(links.table().data) == 3
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
    assert set(line.numbers()) >= {"fit_slope_ms", "fit_r2", "slope_vs_step", "slope_tol_pct", "slope_text"}
    # the bare step the slope is set against, shown beside it: the block's step, not the ingredients' step
    n = line.numbers()
    assert n["sweep_step_ms"] == pytest.approx(line.t_step_sweep * 1e3)
    assert n["fit_slope_ms"] / n["sweep_step_ms"] == pytest.approx(n["slope_vs_step"])
    assert line.extra_positions == 2 and 0 < line.context_growth < 0.05  # 2 more positions of the tiny model
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
    import matplotlib
    import matplotlib.pyplot as plt

    from llmperf import plots
    from llmperf.plots import chain as figures

    line = chain.LatencyLine(chain.Ingredients(8, 0.1, 0.02), [2, 3, 4], [0.12, 0.14, 0.16], 4, 0.02, 0.02, 0.08,
                             1.0)
    same = chain.SameFlops(4, 10, 12, 10, 12, 0.01, 0.05)
    lines = figures.latency_line(line).axes[0].lines
    bars = figures.same_flops(same).axes[0].patches
    assert len(lines) == 3 and len(bars) == 2
    assert list(same.table().data["time (ms)"]) == [10.0, 50.0]
    # The colour convention: measurements in MEASURED (as markers), the fit in FIT, the prediction in PREDICTED,
    # both of them lines without markers.
    colours = {ln.get_label(): (ln.get_color(), ln.get_marker()) for ln in lines}
    assert colours["measured"] == (plots.MEASURED, "o")
    assert colours["least-squares fit"][0] == plots.FIT and colours["least-squares fit"][1] in ("None", "", None)
    predicted = colours["TTFT + (N − 1)·step, predicted"]
    assert predicted[0] == plots.PREDICTED and predicted[1] in ("None", "", None)
    assert all(matplotlib.colors.same_color(bar.get_facecolor(), plots.MEASURED) for bar in bars)
    plt.close("all")


def test_every_glued_name_of_the_chapter_comes_from_a_record():
    """Each {glue:text} name in the chapter's prose is one of its records' numbers() (or the setup's glue)."""
    line = chain.LatencyLine(chain.Ingredients(8, 0.1, 0.02), [2, 3, 4], [0.12, 0.14, 0.16], 4, 0.02, 0.02, 0.08,
                             1.0)
    one = {"bytes": 1e6, "seconds": 1e-3, "tokens": 1}
    ways = chain.WaysOut("float32", 2, 2, {"one step, float32": one, "one step, bfloat16": dict(one, seconds=6e-4),
                                           "one step, batch 2": dict(one, tokens=2),
                                           "one pass over 2 new tokens": dict(one, tokens=2)}, 2e9)
    links = chain.ChainLinks("p", [1, 2], ["a", "b"], ["b", "c"], 3, 1000)
    parts = [{"device": "cpu", "dtype": "float32"}, links.numbers(), chain.kv_primer().numbers(),
             chain.Ingredients(8, 0.1, 0.02).numbers(), line.numbers(),
             chain.SameFlops(4, 10, 12, 10, 12, 0.01, 0.05).numbers(), ways.numbers(),
             chain.exercise_numbers(line, ways)]
    check_glued_once(parts, NOTEBOOK, unread_allowed={"device"})
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    assert any("(kv-cache-primer)=" in "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
