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
from llmperf.generation import generate
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
    ways_out = chain.measure_ways_out(small)
    assert list(ways_out.passes) == ["one step, float32", "one step, bfloat16", "one step, batch 2",
                                     "one pass over 2 new tokens"]
    assert ways_out.ratio("one step, bfloat16", "bytes") < 0.51 and ways_out.passes["one step, batch 2"]["tokens"] == 2
    numbers = ways_out.numbers()
    assert numbers["batch"] == 2 and numbers["k"] == 2 and "bfloat16 step ran" in numbers["bf16_text"]
    assert len(ways_out.table().data) == 4
    serialisable(ways_out)
    answers = chain.exercise_numbers(chain.LatencyLine(chain.Ingredients(8, 0.1, 0.02), [2, 4], [0.12, 0.16], 4,
                                                       0.02, 0.02, 0.08, 1.0), ways_out)
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
    ways_out = chain.WaysOut("float32", 2, 2, {"one step, float32": one, "one step, bfloat16": dict(one, seconds=6e-4),
                                               "one step, batch 2": dict(one, tokens=2),
                                               "one pass over 2 new tokens": dict(one, tokens=2)}, 2e9)
    links = chain.ChainLinks("p", [1, 2], ["a", "b"], ["b", "c"], 3, 1000)
    loop = chain.LoopCheck(4, [1, 2, 3], [1, 2, 3], [0.01, 0.012], 0.011)
    parts = [{"device": "cpu", "dtype": "float32"}, links.numbers(), chain.kv_primer().numbers(),
             loop.numbers(), chain.Ingredients(8, 0.1, 0.02).numbers(), line.numbers(),
             chain.SameFlops(4, 10, 12, 10, 12, 0.01, 0.05).numbers(), ways_out.numbers(),
             speculation_run().numbers(), chain.exercise_numbers(line, ways_out), chain.tensor_parallel().numbers()]
    check_glued_once(parts, NOTEBOOK, unread_allowed={"device"})
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    assert any("(kv-cache-primer)=" in "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


# --- the greedy loop written out, and its check ---------------------------------------------------

def test_the_timed_loop_is_generate_with_a_clock(small):
    prompt = list(range(3, 11))
    tokens, seconds = chain.timed_greedy(small.model, prompt, 6)
    assert tokens == generate(small.model, prompt, 6).tolist()
    assert len(seconds) == 5 and all(t > 0 for t in seconds)  # one timed pass per token after the first
    check = chain.check_loop(small, prompt, tokens, seconds, rounds=2)
    # (the tiny model's sub-millisecond passes, the first of them cold, say nothing about the timing margin)
    dataclasses.replace(check, pass_seconds=[check.tpot] * 5).check()
    assert check.reference == tokens and check.tpot > 0
    n = check.numbers()
    assert n["loop_tokens"] == 6 and n["loop_passes"] == 5 and n["loop_ratio"] == pytest.approx(
        n["loop_pass_ms"] / n["loop_tpot_ms"])
    serialisable(check)
    with pytest.raises(ValueError, match="6 tokens come from a prefill and 5 decode passes"):
        chain.check_loop(small, prompt, tokens, seconds[:-1])


def test_the_loop_check_both_ways():
    ok = chain.LoopCheck(4, [1, 2, 3], [1, 2, 3], [0.01, 0.012], 0.011)
    ok.check()
    with pytest.raises(AssertionError, match="tokens differ"):
        dataclasses.replace(ok, reference=[1, 2, 4]).check()
    dataclasses.replace(ok, tpot=0.0055).check()  # the median pass at exactly the margin: 2.0x
    with pytest.raises(AssertionError, match="2.20x the package's TPOT"):
        dataclasses.replace(ok, tpot=0.005).check()
    with pytest.raises(AssertionError, match="0.44x the package's TPOT"):
        dataclasses.replace(ok, tpot=0.025).check()


# --- speculative decoding ---------------------------------------------------------------------

def speculation_run(**changes):
    """A run of 10 tokens: a first pass that drafts nothing, a whole draft of 4, a draft of 4 rejected at its
    second token, a last pass of 1 plain token; plain steps of 10 ms."""
    from llmperf.speculative import Pass, Speculation

    spec = Speculation(list(range(10)), 4, 3, [Pass(0, 0, 0.010), Pass(4, 4, 0.012, 1e-5), Pass(4, 1, 0.012, 1e-5),
                                              Pass(0, 0, 0.010)])
    run = chain.SpeculationRun("task", 20, 10, spec, [0.01] * 9, [0.10, 0.09], [0.05, 0.06], list(range(10)),
                               list(range(10)))
    return dataclasses.replace(run, **changes)


def test_a_speculation_run_holds_every_number_the_chapter_shows():
    run = speculation_run()
    run.check()
    n = run.numbers()
    assert n["spec_passes"] == 4 and n["spec_plain_passes"] == 9 and n["spec_nodraft"] == 2
    assert n["spec_drafted"] == 8 and n["spec_accepted"] == 5 and n["spec_alpha"] == 5 / 8
    assert n["spec_tpp"] == 2.25  # 9 tokens after the first, in 4 passes
    assert n["spec_rejections"] == 1 and n["spec_alpha_iid"] == 5 / 6
    assert n["spec_E_k"] == pytest.approx((1 - (5 / 6) ** 5) / (1 / 6))
    assert n["spec_E_own"] == pytest.approx((1 + 1 + 2 * n["spec_E_k"]) / 4)
    assert n["spec_speedup"] == pytest.approx(0.09 / 0.05)
    assert run.pass_cost == pytest.approx(0.011 / 0.01) and n["spec_draft_cost_pct"] == pytest.approx(
        100 * 2e-5 / 8 / 0.01)
    assert n["spec_decode_speedup"] == pytest.approx(2.25 / 1.1)
    assert run.whole_share == 0.5 and run.whole_share_iid == pytest.approx((5 / 6) ** 4)
    assert "faster than plain greedy decoding" in n["spec_speed_text"]
    assert list(run.table().data["tokens"]) == [1, 5, 2, 1]
    serialisable(run)


def test_a_speculation_run_checks_both_ways():
    run = speculation_run()
    with pytest.raises(AssertionError, match="changed the tokens"):
        dataclasses.replace(run, reference=list(range(1, 11))).check()
    with pytest.raises(AssertionError, match="timed plain loop"):
        dataclasses.replace(run, plain=list(range(1, 11))).check()
    with pytest.raises(AssertionError, match="emitted 9 tokens after the first, not 8"):
        dataclasses.replace(run, n_new=9).check()
    run.check_shown(list(range(10)), [(0, 0), (4, 4), (4, 1), (0, 0)])
    with pytest.raises(AssertionError, match="verify loop's tokens"):
        run.check_shown(list(range(1, 11)), [(0, 0), (4, 4), (4, 1), (0, 0)])
    with pytest.raises(AssertionError, match="passes"):
        run.check_shown(list(range(10)), [(0, 0), (4, 4), (4, 2), (0, 0)])


def test_speculation_measured_on_smollm2(smollm2):
    s = setup_of(*smollm2)
    run = chain.measure_speculation(s, n_new=12, k=4, rounds=1)
    run.check()
    assert run.prompt_len == len(smollm2[1].encode_chat(chain.COPY_TASK)) and len(run.t_spec) == 1
    assert run.spec.alpha > 0.5 and len(run.spec.passes) < 11  # the answer copies its prompt
    assert set(run.numbers()) >= {"spec_tpp", "spec_alpha", "spec_E_k", "spec_speedup", "spec_speed_text"}
    serialisable(run)


@pytest.mark.parametrize("measured, expected, whole, whole_iid, words", [
    (4.0, 3.8, 0.5, 0.4, "within 10 % of the model's 3.80"),
    (4.39, 4.0, 0.5, 0.4, "within 10 %"),  # just under 10 % above: still close
    (4.41, 4.0, 0.5, 0.4, "more than the model"),  # just over it
    (5.6, 4.0, 0.8, 0.35, "Acceptances came in runs: 80 % of the drafts were accepted whole, against the 35 %"),
    (5.6, 4.0, 0.3, 0.35, "the excess lies in drafts accepted in part"),
    (3.0, 4.0, 0.2, 0.35, "Rejections were spread through the drafts rather than bunched"),
    (3.0, 4.0, 0.5, 0.35, "the shortfall lies in drafts rejected early"),
])
def test_formula_fit_has_a_sentence_for_every_gap(measured, expected, whole, whole_iid, words):
    text = chain.formula_fit(measured, expected, whole, whole_iid)
    assert words in text and f"{measured:.2f} tokens each" in text
    if measured / expected > 1.1:
        assert "more than the model's" in text
    elif measured / expected < 0.9:
        assert "fewer than the model's" in text


@pytest.mark.parametrize("t_plain, t_spec, words", [
    (1.0, 0.4, "2.5 times faster than plain greedy decoding. Each of its passes yielded 3.00 tokens"),
    (1.0, 0.97, "about as fast as plain greedy decoding"),
    (1.0, 1.04, "about as fast as plain greedy decoding"),
    (1.0, 1.3, "1.30 times slower than plain greedy decoding"),
])
def test_speculation_speed_has_a_sentence_for_every_outcome(t_plain, t_spec, words):
    text = chain.speculation_speed(t_plain, t_spec, 3.0, 1.2)
    assert words in text and "cost 1.20 plain decode steps" in text
    assert ("saved more passes" in text) == (t_plain / t_spec > 1.05)
    assert ("verifying cost more" in text) == (t_spec / t_plain > 1.05)


# --- tensor parallelism's price ---------------------------------------------------------------

def test_tensor_parallelism_pays_two_allreduces_per_layer():
    tp = chain.tensor_parallel()  # Llama-3-8B, bf16, two H100s at batch 1
    step = cost.decode_bytes("llama-3-8b", 1024, 1, 2).total
    assert tp.t_one == pytest.approx(step / 3.35e12) and tp.t_read_split == pytest.approx(tp.t_one / 2)
    assert tp.allreduces == 64 and tp.message_bytes == 4096 * 2  # one d_model vector in bf16
    assert tp.t_allreduce_bytes == pytest.approx(8192 / 450e9)  # a ring of two: 2(n - 1)/n = 1
    assert tp.t_split == pytest.approx(tp.t_one / 2 + 64 * (10e-6 + 8192 / 450e9))
    assert 1 < tp.t_one / tp.t_split < 2  # the all-reduces take back part of the halving
    # at the break-even latency two GPUs are exactly as fast as one
    even = dataclasses.replace(tp, latency=tp.break_even_latency)
    assert even.t_split == pytest.approx(even.t_one)
    four = chain.tensor_parallel(n=4, batch=64)
    assert four.t_allreduce_bytes == pytest.approx(1.5 * 64 * 8192 / 450e9)
    n = tp.numbers()
    assert n["tp_d"] == 4096 and n["tp_speedup"] == pytest.approx(tp.t_one / tp.t_split)
    assert n["tp_link_both_gbs"] == 900 and 30 < n["tp_break_even_us"] < 40
    with pytest.raises(ValueError, match="2 or more devices"):
        chain.tensor_parallel(n=1)
