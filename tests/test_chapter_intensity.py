"""Chapter 3 (decode intensity): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); then each
experiment on the tiny preset, each record's check() both ways on hand-built records, and each figure.
"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from llmperf import cost, hardware, wording
from llmperf.chapters import intensity
from llmperf.chapters.setup import Setup, sizes_for_type
from tests import intensity_records as records
from tests.prose import check_glued_once

H100 = hardware.ACCELERATORS["H100 SXM"]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_decode_intensity.ipynb"


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


def test_gpu_small_batch_and_low_precision_wording(gpu_batch_sweep):
    s = gpu_batch_sweep  # the predicted H100 step: batch 2 takes what the roofline says, by construction
    gbs = tuple(n / t / 1e9 for n, t in zip(s["nbytes"][:2], s["step"][:2]))
    text = intensity.small_batch_kernel("cuda", s["batches"][1], s["step"][1] / s["step"][0],
                                        s["step"][1] / s["step"][0], gbs, H100.bandwidth / 1e9)
    assert text.startswith("On a GPU") and text.endswith("The extra row costs about what its bytes and FLOPs predict")
    assert "whole chip" not in text and f"against the probe's {H100.bandwidth / 1e9:,.1f} GB/s" in text
    assert "bound by bandwidth" in intensity.low_precision_ridge("bfloat16", H100.ridge, 1.0, H100.flops / 1e9)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("step, ending", [(1.6 * 1.16, "The 4-row kernel streams the weights more slowly"),
                                          (1.6 * 1.15, "The 3 extra rows cost about what their bytes and FLOPs predict"),
                                          (1.6 * 0.95, "The 3 extra rows cost about what their bytes and FLOPs predict"),
                                          (1.6 * 0.94, "The one-row kernel is the slower of the two")])
def test_small_batch_kernel_every_branch(device, step, ending):
    text = intensity.small_batch_kernel(device, 4, step, 1.6, (20.0, 30.0), 25.0)  # the roofline expects 1.6x
    assert text.endswith(ending) and "tested on" not in text and "this course" not in text
    assert "batch 1 moved 20.0 GB/s and batch 4 30.0 GB/s, against the probe's 25.0 GB/s" in text
    assert "where the roofline expects 1.60 times" in text


@pytest.mark.parametrize("growth, shape", [(1.0, "is nearly flat"), (1.09, "is nearly flat"), (1.1, "rises by 10 %"),
                                           (1.49, "rises by 49 %"), (1.99, "rises by 99 %"), (2.0, "rises 2.0-fold"),
                                           (11.75, "rises 11.8-fold")])
def test_bytes_growth_verdict_fits_its_number(growth, shape):
    assert intensity.bytes_growth(growth, 64, 500.0).startswith(shape + ":")


@pytest.mark.parametrize("kv_eq, where", [(22.4, "within this sweep, from batch 23 on"), (22.0, "from batch 22 on"),
                                          (63.2, "within this sweep, from batch 64 on"),
                                          (64.01, "only from batch 65, beyond this sweep")])
def test_bytes_growth_first_whole_batch(kv_eq, where):
    assert intensity.bytes_growth(3.0, 64, kv_eq).endswith(where)


@pytest.mark.parametrize("growth, verdict, trade", [
    (0.8, "rose", "no user paid for it in speed"), (1.02, "stayed about the same", "no user paid for it in speed"),
    (1.5, "fell", "at the cost of every user's speed")])
def test_per_user_speed_and_the_trade_agree(growth, verdict, trade):
    assert intensity.per_user_speed(growth, 64).startswith(verdict) and "batch 64" in intensity.per_user_speed(growth, 64)
    assert trade in intensity.batch_trade(growth)


@pytest.mark.parametrize("gap1, gapmax, start", [
    (1.1, 1.1, "At batch 1 the step took 1.10 times its roofline time"), (0.95, 0.9, "At batch 1 the step took 0.95"),
    (2.0, 1.89, "The roofline leaves part of each step's time unexplained, and that part weighs less"),
    (2.0, 1.9, "Part of each step's time is a cost that the bytes and the FLOPs leave out"),
    (1.11, 3.0, "Part of each step's time is a cost that the bytes and the FLOPs leave out")])
def test_batch_fixed_cost_every_branch(gap1, gapmax, start):
    text = intensity.batch_fixed_cost(gap1, gapmax)
    assert text.startswith(start)
    if "weighs less" in text:  # a fall with the batch: both causes named, neither asserted
        assert "a cost per step that depends on neither the bytes nor the FLOPs" in text
        assert "stream the weights faster when they multiply more rows" in text and "do not say which" in text


@pytest.mark.parametrize("measured, ends", [
    (1.05 * 1.2, "here the bigger batch cost as little extra time as the roofline says"),  # at the bound
    (1.06 * 1.2, "cost more extra time than the roofline says, and still raised the throughput"),
    (3.99, "cost more extra time than the roofline says, and still raised the throughput"),
    (4.0, "the bigger batch bought no throughput at all"), (5.0, "bought no throughput at all")])
def test_batch_against_prediction_every_branch(measured, ends):
    text = intensity.batch_against_prediction(4, measured, 1.2)  # the roofline: batch 4 at 1.2x batch 1's step
    assert text.startswith("The roofline predicts the step at batch 4 at 1.20 times the step at batch 1")
    assert f"tokens per second came to {4 / measured:.1f} times batch 1's, against 3.3 times predicted" in text
    assert text.endswith(ends)


@pytest.mark.parametrize("device, threads, words", [
    ("cpu", 1, "this chapter runs on 1 thread, the count `setup` found fastest"),
    ("cpu", 2, "this chapter runs on 2 threads,"), ("cuda", 2, "does not change"), ("mps", 1, "does not change")])
def test_threads_note_and_label(device, threads, words):
    assert words in intensity.threads_note(device, threads)
    label = intensity.probed_label(device, "float32", threads)
    assert label.startswith("this machine, probed, float32")
    assert ("PyTorch thread" in label) == (device == "cpu")
    assert label.endswith({1: "1 PyTorch thread", 2: "2 PyTorch threads"}[threads]) or device != "cpu"


def test_probe_margin_is_the_runs_spread_with_a_floor():
    assert intensity.probe_margin([1.0, 1.1, 1.05]) == 1.5
    assert intensity.probe_margin([1.0, 2.0]) == 2.0


@pytest.mark.parametrize("plain, fused, gf, ends", [
    (30.0, 60.0, 63.1, ": tuned GPU code gets closer to its roof"),  # just over the better step's share
    (30.0, 60.0, 63.0, ", so the two shares do not say which code got closer to its roof"),  # at the bound
    (60.0, 30.0, 57.0, ", so the two shares do not say which code got closer to its roof"),
    (60.0, 82.0, 69.0, ", so the two shares do not say which code got closer to its roof")])
def test_tuned_code_every_branch(plain, fused, gf, ends):
    text = intensity.tuned_code(plain, fused, gf)
    # each share is named with its roof, and a datasheet's is never ranked above a probe's as a fact of speed
    assert text.startswith(f"Here the better step reached {max(plain, fused):.0f} % of this machine's probed bandwidth")
    assert f"reached {gf:.0f} % of an A100's datasheet bandwidth, a roof a probe would put lower" in text
    assert text.endswith(ends) and "got closer to its roof than" not in text


@pytest.mark.parametrize("gf, plain, device, words", [
    (69.0, 30.0, "cpu", "the plain model reached 30 % of the probed bandwidth on this machine's CPU, while the "
                        "datasheet's ceiling is a roof a probe would put lower, raising gpt-fast's share: the tuned "
                        "GPU loop gets closer to its roof"),
    (63.0, 60.0, "cuda", "so the two shares do not say which code got closer"),  # at the bound
    (63.1, 60.0, "mps", "this Mac's GPU, while"), (63.1, 60.0, "cuda", ": the tuned GPU loop gets closer to its roof"),
    (69.0, 80.0, "cuda", "so the two shares do not say"),
    (69.0, 80.0, "xpu", "on xpu")])
def test_gptfast_beside_every_branch(gf, plain, device, words):
    text = intensity.gptfast_beside(gf, plain, device)
    assert words in text and "a roof a probe would put lower" in text


@pytest.mark.parametrize("pct, start", [(40.0, "The measured step reads its bytes more slowly than the probe does"),
                                        (94.9, "The measured step reads its bytes more slowly than the probe does"),
                                        (95.0, "The measured step reads its bytes about as fast as the probe does"),
                                        (105.0, "The measured step reads its bytes about as fast as the probe does"),
                                        (108.0, "The measured step read its bytes faster than the probe did")])
def test_probe_gap_worded_from_the_ratio(pct, start):
    text = intensity.probe_gap(pct, pct / 4, 25.0)
    assert text.startswith(start) and f"{pct:.0f} % of the 25.0 GB/s" in text


@pytest.mark.parametrize("rest_pct, kv_pct, parts", [
    (36.0, 28.0, ["36 %", "read at 28 %", "fixed cost", "attention streams the cache less well", "exceeds"]),
    (36.0, 0.899 * 36.0, ["cost more time", "exceeds"]), (36.0, 0.901 * 36.0, ["about the same", "close to"]),
    (95.0, 1.099 * 95.0, ["close to the probe", "about the same"]),
    (95.0, 1.101 * 95.0, ["close to the probe", "falls short"]),
    (36.0, 80.0, ["fixed cost", "falls short", "dilute the cache's share"]), (94.0, 50.0, ["close to the probe", "exceeds"]),
    (36.0, None, ["hid beneath the rest", "fixed cost"]),
])
def test_context_mismatch_every_branch(rest_pct, kv_pct, parts):
    record = records.contexts_at(rest_pct, kv_pct)
    text = record.numbers()["mismatch_text"]
    assert all(p in text for p in parts), text
    if rest_pct >= 90:
        assert "fixed cost" not in text and "dilute" not in text  # fixed costs named only where the numbers point
    measured, predicted = record.measured_growth[-1], record.predicted_growth[-1]  # the verdict matches the growths
    assert ("exceeds" not in text or measured > predicted) and ("falls short" not in text or measured < predicted)


def test_cpu_branches():
    # A CPU whose bf16 products crawl (0.9 GFLOP/s against 19.5 GB/s): its bf16 ridge is below 1 FLOP/byte.
    text = intensity.low_precision_ridge("bfloat16", 0.9e9 / 19.5e9, 1.0, 0.9)
    assert "no fast bfloat16" in text and "bound by arithmetic" in text
    assert intensity.weights_bound(22, 64, 10.9).startswith("The weight products cross this device's ridge")
    assert "even attention is bound by arithmetic" in intensity.attention_bound(1.5, 0.05)


def test_where_the_fused_products_ran_is_said_as_measured():
    assert "Numba compiles" in intensity.fused_products("compiled") and "ran the step faster here than NumPy's BLAS" \
        in intensity.fused_products("compiled")
    assert "faster here than the compiled loop" in intensity.fused_products("BLAS")
    said = intensity.fused_products("BLAS", "Numba is not installed")
    assert "cannot run here: Numba is not installed" in said and "faster" not in said
    assert "whichever the machine runs faster" in intensity.fused_products("none")


def test_speed_change_fused_result_and_against_roof():
    assert wording.speed_change(2.0, 1.0, "A") == "2.0 times faster than A"
    assert wording.speed_change(1.0, 1.31, "A") == "1.31 times slower than A"
    assert wording.speed_change(1.0, 1.02, "A") == "about as fast as A"
    assert "a step about as fast as the plain one," in intensity.fused_result(1.0, 1.01, 50, 50)
    assert "a step 1.50 times faster than the plain one," in intensity.fused_result(1.5, 1.0, 35, 52)
    assert intensity.launches_vs_bytes(300, 12.0).endswith("as small as SmolLM2 cost more time than its bytes")
    assert "if most of them launch a kernel" in intensity.launches_vs_bytes(300, 12.0)
    assert intensity.launches_vs_bytes(12, 12.0).startswith("no fewer than the step's 12 ops")
    assert intensity.against_roof(1.2) == "lies above both lines at every batch size"
    assert "within the probe's own error" in intensity.against_roof(0.95)


# --- the records and experiments ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_batch_sweep():
    return records.gpu_batch_sweep()


@pytest.fixture(scope="module")
def tiny_setup(tiny):
    sizes = dataclasses.replace(sizes_for_type("cpu"), repeat=1, decode_batches=(1, 2, 4), decode_context=8,
                                decode_contexts=(8, 32, 128))
    return Setup(torch.device("cpu"), torch.float32, sizes, tiny, None)


def test_llama_counts():
    c = intensity.llama_counts()
    c.check()
    n = c.numbers()
    assert round(n["l8_int_2n"], 2) == 1.07 and round(n["qkv_mb"], 1) == 50.3 and round(n["qkv_params_m"], 1) == 25.2
    assert n["l8_layers"] == 32 and n["gqa_group"] == 4 and n["gate_S"] == 2000 and n["ops_ctx"] == 1024
    assert round(n["lm_head_pct"]) == 7
    assert records.as_json(c)["ops"][0]["label"] == "q/k/v projections"
    assert list(records.shown(c.ops_table())["op"])[-1] == "whole step" and len(records.shown(c.ops_table())) == 8
    assert len(records.shown(c.table())) == 2 and list(records.shown(c.gate_table())["rows"]) == [2000, 1]


@pytest.mark.parametrize("change, message", [
    (dict(intensity_2n=1.2), "1.2"), (dict(intensity_exact=1.1), "1.1"), (dict(weight_bytes=15.5e9), "15500000000"),
    (dict(ops_step_bytes=1), "the ops add up to"),
])
def test_llama_counts_check_fails(change, message):
    with pytest.raises(AssertionError, match=message):
        dataclasses.replace(intensity.llama_counts(), **change).check()


def test_llama_counts_check_fails_on_qkv():
    c = intensity.llama_counts()
    c.ops[0] = dataclasses.replace(c.ops[0], bytes=c.ops[0].bytes // 2)  # the source notes' 25 MB per layer
    with pytest.raises(AssertionError):
        c.check()


def test_latency_throughput():
    lt = intensity.latency_throughput()
    # 90 % of the H100's 81,559 MiB (vLLM's default share, as chapter 6 takes it) less 16.06 GB of weights, in
    # caches of 4,096 tokens at 131,072 bytes each
    assert lt.context == 4096 and lt.batches[0] == 1 and lt.batches[-1] == lt.max_batch == 113
    assert lt.utilisation == 0.9 and lt.numbers()["lt_util_pct"] == pytest.approx(90)
    assert lt.step_s == sorted(lt.step_s) and len(lt.batches) == len(lt.step_s)
    n = lt.numbers()
    assert n["lt_user_1"] > n["lt_user_max"] and n["lt_all_gain"] > 1 and records.as_json(lt)["device"] == "H100 SXM"


def test_exercise_numbers(tiny_setup):
    n = intensity.exercise_numbers(tiny_setup)
    assert n["ex_b_h100"] == cost.compute_bound_batch("llama-3-8b", H100.ridge, context=1)
    assert n["ex_users"] == 256 and n["ex_users_h100"] < n["ex_users_h200"] and 0 < n["ex_gf_pct"] < 100
    assert n["ex_users_h100"] == intensity.users_that_fit(H100, cost.weight_bytes("llama-3-8b", 2), 2**29)
    assert n["ex_users_h100"] == int((0.9 * H100.memory - cost.weight_bytes("llama-3-8b", 2)) // 2**29) == 113
    # the exercise's power cap is the one the published figure was measured at
    assert f"{n['ex_gf_watts']} W" in hardware.PUBLISHED["gpt-fast"].source and n["ex_gf_watts"] == 330
    assert n["ex_ctx_pred"] > n["ex_ctx_pred_1"] > 1  # more sequences: more of the bytes are cache
    # attention over the cache is a small part of what one sequence adds to the step: 4·q_dim·L·context FLOPs
    assert n["ex_att_gflop"] == pytest.approx(4 * 4096 * 32 * 1024 / 1e9) and n["ex_att_gflop"] < n["ex_f_gflop"] / 10
    json.dumps(n)


def test_roofline(monkeypatch, tiny_setup):
    monkeypatch.setattr(hardware, "probe", lambda device, dtype: records.HERE)
    r = intensity.roofline(tiny_setup, intensity.llama_counts())
    r.check()
    n = r.numbers()
    assert n["here_ridge"] == 5.0 and n["here_bf16_ridge"] == 0.5 and "bound by arithmetic" in n["here_bf16_text"]
    assert n["h100_x2_floor_ms"] == pytest.approx(n["h100_floor_ms"])  # more arithmetic buys nothing
    assert n["h200_speedup"] == pytest.approx(4.8 / 3.35) and records.as_json(r)["here"]["measured"]["copy_bandwidth"] == 8e9
    assert len(records.shown(r.table())) == 3 and len(records.shown(r.probe_table())) == 5
    # the roof is named with the thread count it was probed on, in the tables and the prose
    threads = torch.get_num_threads()
    assert r.threads == threads and n["here_threads"] == threads and f"runs on {threads} thread" in n["threads_text"]
    assert records.shown(r.table())["device"].iloc[-1] == intensity.probed_label("cpu", "bfloat16", threads)
    assert list(records.shown(r.probe_table()).iloc[-1]) == ["PyTorch threads", threads]
    assert intensity.setup_numbers(tiny_setup) == {"device": "cpu", "dtype_name": "float32", "bpp": 4}
    with pytest.raises(AssertionError, match="reaches the ridge"):
        dataclasses.replace(r, table_ridges={"slow chip": 0.5}).check()


def test_batch_counts(tiny_setup):
    b = intensity.batch_counts(tiny_setup, records.HERE)
    assert b.batches == [1, 2, 4] and b.context == 8 and b.bytes_per_param == 4
    assert b.smol_intensity == sorted(b.smol_intensity) and len(records.shown(b.table())) == 3
    assert b.numbers()["ctx"] == 8 and records.as_json(b)["here_ridge"] == 5.0
    b.check()
    with pytest.raises(AssertionError):
        dataclasses.replace(b, here_ridge=0.01).check()


def test_batch_sweep_runs(tiny_setup):
    sweep = intensity.batch_sweep(tiny_setup, records.HERE, rounds=1)
    assert sweep.batches == [1, 2, 4] and len(sweep.step_s) == 3 and all(t > 0 for t in sweep.step_s)
    assert sweep.nbytes == [cost.decode_bytes(tiny_setup.model.cfg, 9, b, 4).total for b in (1, 2, 4)]
    n = sweep.numbers()
    assert n["B_max"] == 4 and n["B_mid"] == 2 and isinstance(n["small_batch_text"], str)
    assert len(records.shown(sweep.table())) == 3 and records.as_json(sweep)["device_type"] == "cpu"


def test_batch_sweep_check():
    n = records.sweep([2e-3, 3e-3, 6e-3], batches=(1, 8, 64)).numbers()  # the summary names the middle batch
    assert n["per_user_mid_text"].startswith("fell: at batch 8 each user waits 1.50 times as long")
    assert n["per_user_text"].startswith("fell: at batch 64 each user waits 3.0 times as long")
    records.sweep([2e-3, 2.1e-3, 2.4e-3]).check()
    with pytest.raises(AssertionError, match="gave only"):  # batch 2 barely more tokens/s: 2 / 4 · batch 1's needed
        records.sweep([2e-3, 8.1e-3, 9e-3]).check()
    with pytest.raises(AssertionError, match="beat the roofline"):
        records.sweep([2e-3, 2.1e-3, 2.4e-3], roof_s=(1e-3, 3e-3, 1e-3)).check()
    # a probe that read low (the machine busy meanwhile): held to the faster probe taken after the steps instead
    low = records.sweep([2e-3, 2.1e-3, 2.4e-3], roof_s=(1e-3, 3e-3, 1e-3))
    dataclasses.replace(low, floor_s=[1e-3, 2e-3, 1e-3]).check()
    with pytest.raises(AssertionError, match="beat the roofline"):
        dataclasses.replace(low, floor_s=[1e-3, 3e-3, 1e-3]).check()


def test_gap_to_roof(tiny_setup):
    g = intensity.gap_to_roof(tiny_setup, records.HERE, rounds=1)
    assert g.plain_s > 0 and g.fused_s > 0 and g.n_ops > 0 and g.kipply_ratio == pytest.approx(22.0 / 16.8)
    assert g.step_bytes == cost.decode_bytes(tiny_setup.model.cfg, 9, 1, 4).total
    assert "the plain one" in g.numbers()["fused_text"] and len(records.shown(g.table())) == 2
    assert "this machine's CPU" in g.numbers()["gptfast_text"] and g.numbers()["smol_h100_launches"] > 0
    n = g.numbers()  # the launches are counted in overheads: each asynchronous launch's time less the kernel's own
    assert n["gray_overhead_us"] == pytest.approx(n["gray_async_us"] - n["gray_kernel_us"]) == pytest.approx(0.9)
    assert n["gray_graph_overhead_us"] == pytest.approx(0.5) and n["gray_synced_us"] == pytest.approx(9.6)
    assert n["smol_h100_launches"] == pytest.approx(n["smol_h100_us"] / n["gray_overhead_us"])
    assert n["smol_h100_graph_launches"] == pytest.approx(n["smol_h100_us"] / 0.5)
    records.as_json(g)


def test_long_context():
    lc = intensity.long_context()
    lc.check()
    n = lc.numbers()
    # Llama-3-8B at 131,072 tokens: 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 131,072 bytes per token
    assert n["lc_gqa_tok"] == 2 * 32 * 8 * 128 * 2 and n["lc_gqa_gb"] == pytest.approx(17.179869184)
    assert n["lc_gqa_gib"] == 16.0 and n["lc_over_weights"] > 1 and 122_000 < n["lc_equal_tokens"] < 123_000
    gqa, mha, mqa, kv8, mla = (lc.lever(k) for k in ("GQA", "MHA", "MQA", "GQA, 8-bit K/V", "MLA"))
    assert mha.per_token == 4 * gqa.per_token == 32 * mqa.per_token and kv8.per_token == gqa.per_token // 2
    assert mla.per_token == 32 * (512 + 64) * 2 == intensity.mla_bytes_per_token(cost.get_config("llama-3-8b"))
    # every row but MLA's is the cost model's own step, with the lever applied to the configuration
    llama = cost.get_config("llama-3-8b")
    assert gqa.step_bytes == cost.decode_bytes(llama, 131072).total
    assert mha.step_bytes == cost.decode_bytes(llama.with_(n_kv_heads=32), 131072).total
    assert kv8.step_bytes == cost.decode_bytes(llama, 131072, kv_bytes_per_element=1).total
    assert mla.step_bytes == cost.decode_bytes(llama, 1).weights + 131073 * mla.per_token
    assert mha.weights > gqa.weights > mqa.weights  # wk and wv follow n_kv_heads
    assert [lv.fits for lv in lc.levers] == [True, False, True, True, True]  # MHA's 68.7 GB cache does not
    table = records.shown(lc.table())
    assert len(table) == 5 and list(table.iloc[:, -1]) == ["yes", "no", "yes", "yes", "yes"]
    with pytest.raises(AssertionError):
        dataclasses.replace(lc, weight_bytes=10**12).check()
    records.as_json(lc)


def test_kv_growth(tiny_setup):
    k = intensity.kv_growth(tiny_setup)
    n = k.numbers()
    assert n["c_lo"] == 1024 and n["c_hi"] == 8192 and n["c_ratio"] == 8 and n["l8_kv_tok"] == 131072
    assert 0 < n["l8_tpot_growth_pct"] < 10 and n["kv_ratio_x"] > 1  # the tiny model: a large cache per weight
    records.as_json(k)


def test_context_sweep_runs(tiny_setup):
    c = intensity.context_sweep(tiny_setup, records.HERE, rounds=1)
    assert c.contexts == [8, 32, 128] and c.batch == 1 and len(c.tpot_s) == 3 and c.dtype == "float32"
    assert c.kv_bytes == [cost.kv_cache_bytes(tiny_setup.model.cfg, x + 1, 1, 4) for x in (8, 32, 128)]
    n = c.numbers()
    assert n["ctx_x"] == 16 and n["sweep_batch"] == 1 and n["pred_x"] > 1
    assert len(records.shown(c.table())) == 3 and records.as_json(c)["contexts"] == [8, 32, 128]


def test_context_sweep_numbers():
    # 500 more bytes in 0.5 ms: read at the probed 1 MB/s; the shortest step read 1,000 bytes in 2 ms (50 %).
    text = records.contexts([2e-3, 2.5e-3]).numbers()["mismatch_text"]
    assert "at 50 % of the probed bandwidth" in text and "read at 100 %" in text and "falls short" in text
    assert "hid beneath" in records.contexts([2e-3, 1.9e-3]).numbers()["mismatch_text"]


def test_context_sweep_check():
    records.contexts([2e-3, 2.5e-3]).check()
    records.contexts([2e-3, 5e-3], batch=8).check()  # the exercise's batch: growth not asserted
    with pytest.raises(AssertionError, match="16x the context cost 2.50x"):
        records.contexts([2e-3, 5e-3]).check()
    with pytest.raises(AssertionError, match="8x the context"):
        records.contexts([2e-3, 2.5e-3], contexts=(256, 2048)).check()
    with pytest.raises(AssertionError, match="beat the roofline"):
        records.contexts([2e-3, 2.5e-3], roof_s=(1e-3, 3e-3)).check()
    dataclasses.replace(records.contexts([2e-3, 2.5e-3], roof_s=(1e-3, 3e-3)), floor_s=[1e-3, 2e-3]).check()


def test_the_faster_probe_keeps_the_faster_read_bandwidth(monkeypatch):
    here = records.HERE
    for again, want in ((2 * here.bandwidth, 2 * here.bandwidth), (here.bandwidth / 2, here.bandwidth)):
        monkeypatch.setattr(hardware, "measure_bandwidth", lambda device, repeat=5, rate=again: {"read": rate})
        faster = hardware.faster_probe(here, "cpu")
        assert faster.bandwidth == want and faster.flops == here.flops and faster.name == here.name


def test_figures(tiny_setup):
    """Each figure draws from hand-built records, without measuring anything."""
    import matplotlib

    matplotlib.use("Agg")
    from llmperf.plots import intensity as figures

    sweep, counts = records.sweep([2e-3, 2.1e-3, 2.4e-3]), intensity.llama_counts()
    roofs = records.roofs(counts)
    for fig in (figures.batch_sweep(sweep), figures.latency_throughput(sweep, intensity.latency_throughput()),
                figures.roofline(roofs, sweep), figures.context_sweep(records.contexts([2e-3, 2.5e-3]))):
        assert fig.axes
        matplotlib.pyplot.close(fig)


def test_every_glued_name(tiny_setup):
    """Every name the chapter's prose reads is glued, and by one record only (hand-built records, nothing timed)."""
    parts = [intensity.setup_numbers(tiny_setup), intensity.llama_counts().numbers(), records.roofs().numbers(),
             intensity.batch_counts(tiny_setup, records.HERE).numbers(), records.sweep([2e-3, 2.1e-3, 2.4e-3]).numbers(),
             intensity.latency_throughput().numbers(), records.gap().numbers(), intensity.kv_growth(tiny_setup).numbers(),
             records.contexts([2e-3, 2.5e-3]).numbers(), intensity.exercise_numbers(tiny_setup),
             intensity.long_context().numbers()]
    check_glued_once(parts, NOTEBOOK)
    assert records.roofs().numbers()["table_min_ridge"] > 100  # the opening's "at least ... FLOPs" per byte


def test_probe_agreement_runs_the_two_probes_in_turns():
    """A probe that times the same sum as the package's agrees with it; one that counts half the bytes it
    reads is off by 2x, outside the margin."""
    import time

    def probe(nbytes, halve=False):
        x = torch.ones(nbytes // 4)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            x.sum()
            times.append(time.perf_counter() - start)
        return x.nbytes / (2 if halve else 1) / min(times), times

    ratio, margin = intensity.probe_agreement(probe, torch.device("cpu"), rounds=2, nbytes=64 << 20)
    assert 1 / margin <= ratio <= margin
    wrong, margin = intensity.probe_agreement(lambda n: probe(n, halve=True), torch.device("cpu"), rounds=2,
                                              nbytes=64 << 20)
    assert wrong < ratio
