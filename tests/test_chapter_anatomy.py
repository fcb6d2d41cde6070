"""Chapter 5 (one decode step): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); then every
experiment on the tiny preset (its records' counts, structure and JSON), and every record's check() both ways on
hand-built numbers.
"""

import dataclasses
import json
from pathlib import Path

import matplotlib
import pytest
import torch

from llmperf import build_model, hardware
from llmperf.chapters import anatomy
from llmperf.chapters.setup import Setup, sizes_for_type
from llmperf.cost import OP_KINDS
from llmperf.fast import fuse
from llmperf.plots import anatomy as figures
from llmperf.profiling import OpTime
from tests.prose import check_glued_once

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_step_anatomy.ipynb"

H100 = hardware.ACCELERATORS["H100 SXM"]


@pytest.mark.parametrize("overhead, gap, bandwidth_time, gpu, words", [
    (5.2e-3, 15.4e-3, 18.7e-3, False, "about 34 % of it"),  # the 2-core CPU of chapter 5's first run
    (28.9e-3, 38.6e-3, 0.1e-3, True, "about 75 % of it"),   # the H200, eager
    (1.0e-3, 20e-3, 18e-3, False, "only 5 % of it"),
    (9e-3, 10e-3, 5e-3, False, "nearly all of it (90 %), and more than the 5.0 ms the bytes need. This step is "
                               "bound by the number of ops"),
    (9e-3, 10e-3, 20e-3, False, "nearly all of it (90 %), though less than the 20.0 ms the bytes need. The bytes "
                                "still set most of the step"),
    (7.9e-3, 10e-3, 20e-3, False, "about 79 % of it"),  # under 0.8, the rest explained
    (8e-3, 10e-3, 20e-3, False, "nearly all of it (80 %)"),
    (9.94e-3, 10e-3, 20e-3, False, "nearly all of it (99 %)"),
    (10e-3, 10e-3, 20e-3, False, "about all of it (100 %)"),  # never "nearly" once the costs reach the gap
    (1.2e-3, 1.0e-3, 0.5e-3, False, "about all of it (120 %), and more than the 500 µs"),
    (12.5e-3, 10e-3, 20e-3, False, "about all of it (125 %)"),
    (12.6e-3, 10e-3, 20e-3, False, "more than the whole gap, so the tiny op overstates"),
    (20e-3, 10e-3, 0.1e-3, True, "more than the whole gap. Launches are asynchronous"),
    (20e-3, 10e-3, 18e-3, False, "views and reshapes, which move no data"),
    (1e-3, -1e-3, 18e-3, False, "the step ran no slower than its bytes ÷ bandwidth here, so there is no gap"),
])
def test_fixed_costs_wording(overhead, gap, bandwidth_time, gpu, words):
    text = anatomy.fixed_costs(overhead, gap, bandwidth_time, gpu=gpu)
    assert words in text
    assert ("asynchronous" in text) == (gpu and overhead > 1.25 * gap)  # the GPU's overlap, never on a CPU
    assert ("bound by the number of ops" in text) == (0.8 <= overhead / gap <= 1.25 and overhead >= bandwidth_time)


@pytest.mark.parametrize("ratio, words", [
    (1.0, "about what its bytes allow"), (1.24, "about what its bytes allow"),  # 1.2 as printed
    (1.26, "accounts for at least half of its time"), (2.04, "accounts for at least half of its time"),
    (2.06, "more than half of its time goes to something other than moving its bytes"),
    (576, "more than half of its time goes to something other")])
def test_roofline_multiple_wording(ratio, words):
    text = anatomy.roofline_multiple(ratio, "The plain step")
    assert text.startswith(f"The plain step took {round(ratio, 1):.1f} times") and words in text
    assert "source notes" not in text


def test_graph_result_on_a_gpu_and_elsewhere():
    text = anatomy.graph_result("cuda", 38.7e-3, 3.40e-3, 2.34e-3, 6.7e-5)
    assert "11.4 times faster than eager" in text and "16.5 times faster" in text
    assert "The fastest took 34.9 times the step's bytes ÷ bandwidth (67 µs): even replayed" in text
    assert "the replay removed 91 % of the eager step, the launches and the Python and dispatcher work" in text
    cpu = anatomy.graph_result("cpu", 38e-3, None, None, 20e-3)
    assert "no CUDA device (cpu)" in cpu and "a processor launches none" in cpu
    mps = anatomy.graph_result("mps", 38e-3, None, None, 20e-3)  # an Apple GPU launches kernels, but has no graphs
    assert "Apple's (mps), which has no CUDA Graphs" in mps and "queues a kernel for every op" in mps
    assert "launches none" not in mps
    assert "torch.compile" not in anatomy.graph_result("cuda", 38.7e-3, 3.4e-3, None, 6.7e-5)
    slower = anatomy.graph_result("cuda", 3.0e-3, 3.3e-3, None, 1e-3)  # a graph that gained nothing
    assert "removed" not in slower and "1.10 times slower than eager" in slower


@pytest.mark.parametrize("best, words", [
    (1.05e-3, "1.0 times the step's bytes ÷ bandwidth (1.0 ms): replayed, the step runs about as fast as its bytes "
              "allow"),
    (0.8e-3, "0.8 times the step's bytes ÷ bandwidth (1.0 ms): less than its bytes need"),
    (1.2e-3, "1.2 times the step's bytes ÷ bandwidth (1.0 ms): even replayed, each of its kernels"),
])
def test_graph_result_never_says_still_above_at_or_below_the_bytes(best, words):
    text = anatomy.graph_result("cuda", 5e-3, best, None, 1e-3)
    assert words in text
    assert ("even replayed" in text) == (round(best / 1e-3, 1) > 1.1)


@pytest.mark.parametrize("head_rate, proj_rate, words", [
    (30e9, 20e9, "30.0 GB/s against the projections' 20.0 GB/s: faster"),
    (21e9, 20e9, "about the same rate"),
    (10e9, 20e9, "slower")])
def test_head_time_share_compares_streaming_rates(head_rate, proj_rate, words):
    # the verdict follows the rates, whatever the head's share of the time in ops (which holds the small ops)
    for time_share in (0.05, 0.21, 0.6):
        text = anatomy.head_time_share(time_share, 0.21, head_rate, proj_rate)
        assert words in text and f"took {100 * time_share:.1f} % of the time spent in ops, for 21.0 %" in text
        assert text.startswith("On this machine the LM head took")


def test_fused_ops_wording():
    assert "against the plain model's 1,632" in anatomy.fused_ops(1632, 1540)
    in_numpy = anatomy.fused_ops(1632, 9, in_numpy=True)
    assert "hands the whole step to NumPy" in in_numpy and "only the 9 PyTorch ops" in in_numpy


def account(step, bandwidth_time, weights, weights_bandwidth_time, small, small_stretches, between, attention=1e-3,
            attention_bandwidth_time=0.3e-3):
    return anatomy.numpy_step_account(step=step, bandwidth_time=bandwidth_time, weights=weights,
                                      weights_bandwidth_time=weights_bandwidth_time, attention=attention,
                                      attention_bandwidth_time=attention_bandwidth_time, small=small,
                                      small_stretches=small_stretches, between=between)


def test_numpy_step_account_wording():
    text = account(0.024, 0.020, 0.0205, 0.0195, 0.0023, 690, 0.0002)
    assert "The step took 24.0 ms against 20.0 ms for its bytes" in text
    assert "95 % of the probed bandwidth: about as fast as" in text
    assert "690 timed stretches of a few NumPy calls each, 3.3 µs a stretch" in text
    assert "Attention, which reads the cached keys and values, took 1.0 ms against 300 µs for their bytes" in text
    assert "the 4.0 ms between the step and its bytes ÷ bandwidth is 2.3 ms of small ops and Python, 1.0 ms of the " \
           "products beyond their bytes ÷ bandwidth, and 700 µs of attention beyond" in text  # they add up to the gap
    assert "most of it, not all" in account(0.024, 0.020, 0.025, 0.0195, 0.003, 900, 0)
    assert "only 50 %" in account(0.04, 0.020, 0.039, 0.0195, 0.001, 900, 0)
    assert "probe underestimated" in account(0.019, 0.020, 0.016, 0.0195, 0.003, 900, 0)
    cached = account(0.022, 0.020, 0.018, 0.0195, 0.004, 900, 0, attention=0.2e-3)
    assert "came from the processor's caches" in cached
    assert "less the 1.5 ms by which the products beat" in cached and "less the 100 µs by which attention" in cached
    with pytest.raises(TypeError):
        anatomy.numpy_step_account(0.024, 0.020, 0.0205, 0.0195, 0.0033, 900, 0.0002)  # named, not positional


RATES = {("float32", "NumPy"): 20e9, ("float32", "F.linear"): 19e9, ("bfloat16", "torch.mv"): 12e9,
         ("bfloat16", "F.linear"): 9e9, ("float16", "torch.mv"): 6e9, ("float16", "F.linear"): 10e9}


def test_half_precision_wording():
    native = {"avx512_bf16": "bfloat16 dot products (AVX512-BF16)", "f16c": "conversion"}
    text = anatomy.half_precision(native, RATES, 25e9)
    assert text.startswith("This processor offers bfloat16 dot products (AVX512-BF16).")
    assert "Streaming the same 512 MiB of weights" in text and "read 20.0 GB/s (NumPy)" in text
    assert "bfloat16 at 12.0 GB/s (torch.mv): its products would take 0.83 times float32's, half the bytes " \
           "bought back only part of the time" in text
    assert "float16 at 10.0 GB/s (F.linear): its products would take 1.00 times float32's, half the bytes " \
           "bought nothing" in text  # the faster of its two kernels
    assert "The faster 2-byte dtype, bfloat16, read its 512 MiB in 44.7 ms, against 21.5 ms at the probed " \
           "25.0 GB/s: 48 % of the bandwidth, so the kernel, not memory, sets the pace" in text
    none = anatomy.half_precision({"f16c": "conversion"}, RATES, 25e9)
    assert "reports no native bfloat16 or float16 arithmetic (only F16C's" in none
    two = anatomy.half_precision({"a": "bfloat16 sums", "b": "float16 sums"}, RATES, 25e9)
    assert two.startswith("This processor offers bfloat16 sums and float16 sums.")
    assert "cost time" in anatomy.half_precision({}, {**RATES, ("float16", "F.linear"): 5e9}, 25e9)


@pytest.mark.parametrize("rate, words", [
    (25e9, "0.40 times float32's, half the bytes bought about half the time"),
    (25.64e9, "0.39 times float32's, half the bytes bought back more than half the time, so float32's own kernel"),
    (16.67e9, "0.60 times float32's, half the bytes bought about half the time"),
    (16.39e9, "0.61 times float32's, half the bytes bought back only part of the time"),
    (11.11e9, "0.90 times float32's, half the bytes bought nothing"),
    (9.09e9, "1.10 times float32's, half the bytes bought nothing"),
    (9.0e9, "1.11 times float32's, half the bytes cost time")])
def test_half_precision_against_float32(rate, words):
    # float32 at 20 GB/s, 5 G weights/s: a 2-byte dtype at 20 GB/s, 10 G weights/s, takes 0.50 times its time
    assert words in anatomy.half_precision({}, {**RATES, ("bfloat16", "torch.mv"): rate}, 100e9)


@pytest.mark.parametrize("rate, words", [
    (20e9, "80 % of the bandwidth, so its products are bound by memory, as the roofline says"),
    (19.8e9, "79 % of the bandwidth, so the kernel, not memory, sets the pace"),
    (30e9, "120 % of the bandwidth, so its products are bound by memory")])
def test_half_precision_against_the_probe(rate, words):
    # the verdict follows the probed bandwidth, not float32: a 2-byte product at 80 % of it is bound by memory,
    # whether or not float32's kernel kept up
    text = anatomy.half_precision({}, {**RATES, ("bfloat16", "torch.mv"): rate}, 25e9)
    assert words in text


@pytest.mark.parametrize("best, words", [
    (0.4, "half the bytes would pay: a 2-byte step's products would take 0.40 times"),
    (0.75, "only part of the time"),
    (1.0, "This is why the chapters run on a processor in float32")])
def test_half_precision_choice_follows_the_verdict(best, words):
    text = anatomy.half_precision_choice(best)
    assert words in text and ("This is why" in text) == (best >= 0.9)
    assert "measure in bfloat16, as servers do" in anatomy.no_half_precision_choice("bfloat16")


@pytest.mark.parametrize("ops, words", [(1632, "even replayed, the step stays well above its bytes"),
                                        (200, "replayed, the fixed costs no longer dominate"),
                                        (20, "replayed, the step comes close to its bytes")])
def test_replayed_floor_wording(ops, words):
    text = anatomy.replayed_floor(ops, 0.5e-6, 81e-6)
    assert words in text and f"its {ops:,} kernels would still cost" in text


def test_batch_ops_wording():
    same = anatomy.batch_ops(66, 66, 8)
    assert "the same 66 ops at batch 1 and at batch 8" in same and "falls 8-fold" in same
    assert "66 ops at batch 1 against 70 at batch 8" in anatomy.batch_ops(66, 70, 8)
    assert "falls 7.5-fold" in anatomy.batch_ops(66, 70, 8)


def test_published_launches_quote_nvidia_three_ways():
    n = anatomy.published_launches()
    # NVIDIA's chain of 2.9 µs kernels: 9.6 µs synchronised, 3.8 µs asynchronous, 3.4 µs in a graph
    assert (n["graph_kernel_us"], n["graph_synced_us"], n["graph_async_us"], n["graph_replayed_us"]) == \
        pytest.approx((2.9, 9.6, 3.8, 3.4))
    assert n["sync_us"] == pytest.approx(5.8) and n["synced_gap_us"] == pytest.approx(6.7)
    assert n["sync_us"] > n["synced_gap_us"] / 2  # most of the synchronised gap is the synchronisation
    assert n["async_overhead_us"] == pytest.approx(0.9) and n["graph_overhead_us"] == pytest.approx(0.5)
    assert n["graph_saved_us"] == pytest.approx(0.4) and n["graph_saved_pct"] == pytest.approx(10.5, abs=0.1)
    # (9.28 - 7.06) / 9.28: the replay removed the launches and the work before them, an upper bound on the former
    assert "removed 23.9 % of the eager step" in n["sglang_text"] and "at most 23.9 %" in n["sglang_text"]
    assert "removed nothing" in anatomy.graph_share(9.28e-3, 9.3e-3)
    assert n["gf_compiled_tps"] / n["gf_eager_tps"] == pytest.approx(4.196, abs=1e-3)
    assert "4.2 times as fast" in n["gf_text"] and "at least 4.2 times slower than its bytes allow" in n["gf_text"]
    assert "compiling gained nothing" in anatomy.eager_multiple(25.5, 25.0)
    assert not any("source notes" in str(v) for v in n.values())


@pytest.mark.parametrize("kernels, bandwidth_time, words", [
    (1226, 4.8e-3, "those 1,226 kernels launched one after another add at least 1.1 ms, 23 % of the 4.8 ms"),
    (1100, 81e-6, "add at least 990 µs, 12.2 times as long as the 81 µs the bytes need")])
def test_launch_floor_uses_the_asynchronous_cost(kernels, bandwidth_time, words):
    text = anatomy.launch_floor(kernels, bandwidth_time)
    assert words in text and "at NVIDIA's 0.9 µs a kernel beyond its work" in text and "at 0.5 µs a kernel" in text


def test_launches_by_size_and_the_labels_of_counts_and_threads():
    assert "weighs less on the larger model" in anatomy.launches_by_size(12.0, 0.2)
    assert "weighs no less on the larger model" in anatomy.launches_by_size(0.2, 0.3)
    assert anatomy.roof_threads("cpu", 1) == "on 1 PyTorch thread"
    assert anatomy.roof_threads("cpu", 2) == "on 2 PyTorch threads"
    assert anatomy.roof_threads("cuda", 2) == "on the cuda device"
    assert anatomy.launch_basis(True, 1179) == "This GPU counted 1,179 kernels for a SmolLM2 step"
    assert "each op that is not a view as one kernel: 1,150 for a SmolLM2 step, a lower bound" in \
        anatomy.launch_basis(False, 1150)


# The experiments, on the tiny preset at a tiny context (structure and counts; timings only through hand-built
# records, since the tiny model's times are noise).

MACHINE = hardware.Accelerator("hand-made", 1e12, 20e9, 1e9, "a test's")  # ridge 50: no probe in unit tests


@pytest.fixture(scope="module")
def runs(tiny):
    """Every experiment of the chapter, once, on the tiny preset after 8 cached tokens."""
    sizes = dataclasses.replace(sizes_for_type("cpu"), decode_context=8, repeat=1)
    s = Setup(torch.device("cpu"), torch.float32, sizes, tiny, None)
    fused = fuse(tiny)
    r = {"s": s, "prediction": anatomy.predict(s, MACHINE)}
    r["profile"] = anatomy.profile_step(s, r["prediction"], steps=1)
    r["account"] = anatomy.time_numpy_step(s, fused, r["prediction"])
    r["counts"] = anatomy.count_ops(s, r["profile"], r["prediction"])
    r["fixed"] = anatomy.measure_fixed_cost(s, fused, r["profile"])
    r["replay"] = anatomy.replay_step(s, r["fixed"])
    r["sampling"] = anatomy.time_sampling(s, r["fixed"], repeat=2)
    r["half"] = anatomy.measure_half_precision(s, MACHINE.bandwidth, nbytes=1 << 20, repeat=1)
    r["vocab"] = anatomy.vocab_costs()
    r["compiled"] = anatomy.time_compiled_step(s, r["account"])
    return r


RECORDS = ("prediction", "profile", "account", "counts", "fixed", "replay", "sampling", "half", "vocab", "compiled")


@pytest.mark.parametrize("name", RECORDS)
def test_every_record_is_json_with_numbers_and_a_table(runs, name):
    record = runs[name]
    json.dumps(dataclasses.asdict(record))
    numbers = record.numbers()
    assert numbers and all(isinstance(k, str) for k in numbers)
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in numbers.values()), numbers
    assert "<table" in record.table().to_html()


def test_prediction_on_the_tiny_preset(runs):
    p = runs["prediction"]
    assert (p.device, p.dtype, p.context, p.bandwidth, p.ridge) == ("cpu", "float32", 8, 20e9, 50)
    assert list(p.smol.kinds) == list(OP_KINDS) and p.smol.context == 9 and p.smol.bytes_per_param == 4
    assert p.llama.kinds["other"].bytes == 0 and p.numbers()["emb_row_bytes"] == 4096 * 2
    assert p.table().data["kind"].tolist() == ["projections", "attention", "KV write", "norms", "LM head", "other",
                                              "whole step"]
    p.check()
    assert "SmolLM2, float32, step after 8 tokens" in p.smol_summary()


def test_prediction_check_fails_on_each_assertion(runs):
    p = runs["prediction"]
    for broken in (dataclasses.replace(p, smol_decode_bytes=p.smol_decode_bytes + 1),
                   dataclasses.replace(p, llama_decode_bytes=p.llama_decode_bytes - 1),
                   dataclasses.replace(p, llama=anatomy.step_bytes("mistral-7b", 1), llama_decode_bytes=p.llama.total),
                   dataclasses.replace(p, h100_ridge=10.0),
                   dataclasses.replace(p, ridge=0.1)):
        with pytest.raises(AssertionError):
            broken.check()


def test_profile_counts_the_products(runs):
    prof = runs["profile"]
    assert list(prof.kinds) == list(OP_KINDS) and prof.n_layers == 2 and prof.device == "cpu"
    assert prof.kinds["projections"].ops == 14 and prof.kinds["lm_head"].ops == 1 and prof.kernels == 0
    assert prof.unprofiled > 0 and prof.step >= prof.in_ops > 0
    numbers = prof.numbers()
    assert numbers["outside_label"] == "between ops" and numbers["clock_word"] == "calls"
    assert numbers["table_note"].startswith("The kernels column is empty")
    assert prof.table().data["kind"].tolist()[-3:] == ["between ops", "whole step", "unprofiled"]
    prof.check()
    kinds = dict(prof.kinds, attention=OpTime("attention", 3, 0, 1e-3))
    for broken in (dataclasses.replace(prof, n_layers=3), dataclasses.replace(prof, kinds=kinds)):
        with pytest.raises(AssertionError):
            broken.check()


def test_op_counts_extrapolate_by_layer(runs):
    c = runs["counts"]
    assert set(c.by_depth) == {"1", "2"} and c.by_depth["1"]["linears"] == 8 and c.by_depth["2"]["linears"] == 15
    assert c.at_depth(2) == c.profiled_ops == runs["profile"].ops
    assert c.at_depth(32) == c.fixed() + 32 * c.per_layer() == c.numbers()["ops_l8"]
    assert c.batch == 8 and c.batched_ops == c.by_depth["1"]["ops"]  # the same ops carry 8 sequences
    views = c.per_layer("views")
    assert 0 < views < c.per_layer() and c.by_depth["1"]["views"] < c.by_depth["1"]["ops"]
    n = c.numbers()
    assert n["views_per_layer"] == views and n["work_per_layer"] == c.per_layer() - views
    assert n["work_l8"] == c.launches(32) == c.at_depth(32) - c.at_depth(32, "views")  # no GPU: ops less views
    assert f"those {c.launches(32):,} kernels launched one after another" in n["l8_launch_text"]
    assert "kernels" not in c.table().data.columns  # a processor launches none
    assert "views (launch nothing)" in c.table().data.columns
    c.check()
    linears = {"1": dict(c.by_depth["1"], linears=7), "2": c.by_depth["2"]}
    for broken in (dataclasses.replace(c, by_depth=linears), dataclasses.replace(c, profiled_ops=c.profiled_ops + 1)):
        with pytest.raises(AssertionError):
            broken.check()
    gpu = dataclasses.replace(c, device="cuda", by_depth={"1": {"ops": 66, "kernels": 30, "linears": 8},
                                                          "2": {"ops": 120, "kernels": 50, "linears": 15}})
    assert "launch 20 kernels per layer and 10 outside the layers, 650 for Llama-3-8B" in gpu.numbers()["kernels_text"]
    assert gpu.launches(32) == 650  # on a GPU, the kernels counted, views or not


def hand_account(**change):
    """A fused NumPy step of a 2-layer model: 1 ms of products, 0.4 ms of small ops, 0.1 ms of Python."""
    kinds = {"projections": OpTime("projections", 8, 0, 0.8e-3), "attention": OpTime("attention", 2, 0, 0.1e-3),
             "kv_write": OpTime("kv_write", 2, 0, 0.05e-3), "norms": OpTime("norms", 5, 0, 0.1e-3),
             "lm_head": OpTime("lm_head", 1, 0, 0.2e-3), "other": OpTime("other", 6, 0, 0.15e-3)}
    nbytes = dict.fromkeys(OP_KINDS, 0) | {"projections": 16_000_000, "lm_head": 4_000_000}
    return dataclasses.replace(anatomy.NumpyAccount("cpu", kinds, 1.5e-3, nbytes, 20e9, "cpu", n_layers=2), **change)


def test_numpy_account_on_the_tiny_preset(runs):
    a = runs["account"]
    assert a.skipped is None and {k: t.ops for k, t in a.kinds.items()} == {
        "projections": 8, "attention": 2, "kv_write": 2, "norms": 5, "lm_head": 1, "other": a.kinds["other"].ops}
    assert a.table().data["kind"].tolist()[-2:] == ["Python", "whole step"]


def test_numpy_account_check_both_ways():
    good = hand_account()
    good.check()
    assert "The step took 1.5 ms against 1.0 ms for its bytes" in good.numbers()["account_text"]
    assert good.numbers()["stretches_per_layer"] == 6.5  # (2 KV writes + 5 norms + 6 others) / 2 layers
    kinds = good.kinds
    for broken in (dict(kinds, projections=OpTime("projections", 7, 0, 0.8e-3)),
                   dict(kinds, lm_head=OpTime("lm_head", 2, 0, 0.2e-3)),
                   dict(kinds, attention=OpTime("attention", 3, 0, 0.1e-3)),
                   dict(kinds, norms=OpTime("norms", 4, 0, 0.1e-3))):
        with pytest.raises(AssertionError):
            hand_account(kinds=broken).check()
    with pytest.raises(AssertionError, match="0.001"):
        hand_account(step=2.5e-3).check()  # the products under half of the step


def test_numpy_account_skipped_off_a_float32_cpu(runs):
    half_model = build_model("tiny", device="cpu", dtype=torch.bfloat16, seed=0)
    s = runs["s"]._replace(dtype=torch.bfloat16, model=half_model)
    a = anatomy.time_numpy_step(s, fuse(half_model), runs["prediction"])
    assert a.kinds == {} and "This run is bfloat16 on cpu" in a.skipped
    assert a.numbers() == {"account_text": a.skipped, "stretches_per_layer": 0}
    assert "not measured" in a.table().to_html()
    a.check()  # nothing to check
    assert figures.by_kind(a) is None
    json.dumps(dataclasses.asdict(a))


def test_compiled_step_on_the_tiny_preset_and_by_hand(runs):
    from llmperf.fast import compiled_step

    c = runs["compiled"]
    if compiled_step.why_not() is not None:
        assert c.skipped == compiled_step.why_not()
    else:
        assert c.skipped is None and c.numpy_code > 0 and c.compiled > 0 and c.small > 0
        assert c.difference <= 1e-4 * max(1.0, c.scale)
        assert c.table().data["step"].tolist()[:2] == ["NumPy code, compiled products", "compiled whole"]
    c.check()
    hand = anatomy.CompiledStep(numpy_code=30e-3, compiled=27e-3, small=5e-3, difference=1e-5, scale=20.0)
    hand.check()
    assert hand.numbers()["compiled_text"].endswith("it saved 3.0 ms, 60 % of the 5.0 ms the stopwatch gave the "
                                                    "small ops and the Python between them")
    with pytest.raises(AssertionError):
        dataclasses.replace(hand, difference=0.1).check()  # not the same logits
    assert anatomy.closing_line(runs["replay"], hand_account(), hand).count("not run") == 1  # check 7 only


@pytest.mark.parametrize("compiled, words", [
    (31e-3, "compiling the small ops saved nothing here"), (30e-3, "compiling the small ops saved nothing here"),
    (29e-3, "it saved 1.0 ms, 50 % of the 2.0 ms"),
    (27e-3, "it saved 3.0 ms, more than the 2.0 ms the stopwatch gave the small ops and the Python between them, "
            "so as NumPy calls they cost the step more than their own time")])
def test_compiled_small_ops_wording(compiled, words):
    text = anatomy.compiled_small_ops(30e-3, compiled, 2e-3)
    assert text.startswith(f"Compiled whole, one call per layer, the step took {compiled * 1e3:.1f} ms against "
                           "30.0 ms as NumPy code with the same compiled products: ") and words in text


def test_compiled_step_skipped_where_it_cannot_run(runs, monkeypatch):
    from llmperf.fast import compiled_step

    half = runs["s"]._replace(dtype=torch.bfloat16)
    c = anatomy.time_compiled_step(half, runs["account"])
    assert "This run is bfloat16 on cpu" in c.skipped and "not measured" in c.table().to_html()
    assert c.numbers()["compiled_text"] == c.skipped
    c.check()
    monkeypatch.setattr(compiled_step, "why_not", lambda: "Numba is not installed (pip install numba); ...")
    c = anatomy.time_compiled_step(runs["s"], runs["account"])
    assert c.skipped.startswith("Numba is not installed")
    assert "check 10 not run: Numba is not installed" in anatomy.closing_line(runs["replay"], hand_account(), c)


def test_fixed_cost_on_the_tiny_preset_and_by_hand(runs):
    f = runs["fixed"]
    assert f.fused_in_numpy and f.plain_ops == runs["profile"].ops and 0 < f.fused_ops < f.plain_ops
    assert f.op > 0 and f.bandwidth_time == runs["profile"].bandwidth_time
    hand = anatomy.FixedCost("cpu", 3e-6, 40e-3, 25e-3, 1632, 9, 20e-3, True)
    hand.check()
    numbers = hand.numbers()
    assert numbers["t_op_us"] == pytest.approx(3) and "hands the whole step to NumPy" in numbers["fused_ops_text"]
    assert "2.0 times its bytes" in numbers["plain_multiple_text"] and numbers["fused_multiple"] == 1.25
    assert hand.table().data["ops × fixed cost (ms)"].tolist() == pytest.approx([4.896, 0.027])
    with pytest.raises(AssertionError):
        dataclasses.replace(hand, plain=17e-3).check()  # faster than its bytes, beyond the probe's 10 %


def test_replay_skipped_on_a_cpu_and_checked_on_a_gpu(runs):
    r = runs["replay"]
    assert r.skipped.endswith("need a CUDA device; this is cpu") and r.graph is None
    assert r.eager == runs["fixed"].plain
    assert "no CUDA device (cpu)" in r.numbers()["graph_text"]
    r.check()
    gpu = anatomy.Replay("cuda", 38.7e-3, 6.7e-5, 3.4e-3, 2.34e-3, 20.0, 0.05, 0.1)
    gpu.check()
    assert "11.4 times faster than eager" in gpu.numbers()["graph_text"]
    assert gpu.table().data["step"].tolist() == ["eager", "CUDA Graph", "torch.compile"]
    for broken in (dataclasses.replace(gpu, graph_gap=0.5), dataclasses.replace(gpu, graph=40e-3)):
        with pytest.raises(AssertionError):
            broken.check()
    assert anatomy.closing_line(gpu, hand_account()) == "All checks passed."
    line = anatomy.closing_line(r, hand_account(skipped="no NumPy step"))
    assert line.startswith("All checks passed. (check 7 not run: CUDA Graphs") and "check 8 not run: no NumPy" in line


def test_sampling_half_precision_and_vocabulary(runs):
    sm = runs["sampling"]
    assert sm.vocab == 256 and sm.greedy > 0 and sm.topk > 0 and sm.plain == runs["fixed"].plain
    half = runs["half"]
    assert set(half.rates) == {"float32", "bfloat16", "float16"} and half.nbytes == 1 << 20
    assert "the same 1 MiB of weights" in half.numbers()["half_text"] and half.numbers()["half_mib"] == 1
    assert half.bandwidth == MACHINE.bandwidth
    assert 0 < half.best_ratio and half.numbers()["dtype_text"] == anatomy.half_precision_choice(half.best_ratio)
    made = anatomy.HalfPrecision({}, {"float32": {"NumPy": 20e9}, "bfloat16": {"torch.mv": 8e9, "F.linear": 20e9},
                                      "float16": {"torch.mv": 10e9}}, bandwidth=20e9)
    assert made.best_ratio == pytest.approx(0.5) and "half the bytes would pay" in made.numbers()["dtype_text"]
    assert half.table().caption.startswith("half-precision features reported:")
    gpu = anatomy.measure_half_precision(runs["s"]._replace(device=torch.device("cuda"), dtype=torch.bfloat16), 4.8e12)
    assert gpu.rates == {} and "This run is on cuda" in gpu.numbers()["half_text"]
    assert gpu.numbers()["half_mib"] == 512  # the prose names the size on every device
    assert "measure in bfloat16" in gpu.numbers()["dtype_text"]
    v = runs["vocab"]
    assert list(v.heads) == ["llama-3-8b", "mistral-7b", "smollm2-135m"]
    assert v.numbers()["mistral_vocab"] == 32000 and round(100 * v.heads["llama-3-8b"].share, 1) == 7.0
    counts = runs["counts"]
    ex = anatomy.exercise_numbers(runs["s"].model.cfg, counts)  # the 2-layer step's ops less views at 0.9 µs
    assert ex["ex_vocab"] == 2 * 128256 and ex["ex_batch"] == 64 and ex["ex_batch_intensity"] == 64.0
    kernels = counts.at_depth(2) - counts.at_depth(2, "views")
    assert ex["ex_smol_launch_us"] == pytest.approx(0.9 * kernels)
    assert f"{kernels:,} for a SmolLM2 step" in ex["ex_launch_basis"]
    assert ex["ex_l8_kernels"] == counts.launches(32) and ex["ex_l8_launch_ms"] == pytest.approx(0.9e-3 * counts.launches(32))
    assert ex["ex_ops_1layer"] == runs["counts"].by_depth["1"]["ops"] and ex["ex_ops_batch"] == 8
    assert "the same" in ex["ex_batch_ops_text"]  # a step's ops do not depend on its batch
    assert f"{kernels:,} kernels would still cost" in ex["ex_replayed_text"]
    assert "weighs less on the larger model" in ex["ex_depth_text"]


def test_figures_draw_the_records(runs):
    matplotlib.use("Agg")
    for fig in (figures.by_kind(runs["profile"]), figures.by_kind(runs["account"]),
                figures.fixed_costs(runs["fixed"]), figures.vocab(runs["vocab"])):
        assert isinstance(fig, matplotlib.figure.Figure) and fig.axes[0].get_xlabel()
        matplotlib.pyplot.close(fig)


def test_gpu_wording_of_the_profile_and_its_tables():
    assert "the GPU had no kernel to run" in anatomy.outside_text(True)
    note = anatomy.table_note(True, 4.2e-6, 9e-6, 1e-9, 1e-7)
    assert note.startswith("The kernels column counts the kernels") and "a norm's 4.2 µs" in note
    assert anatomy.clock_text(True).startswith("the kernels' run time") and anatomy.clock_word(True) == "kernels"
    assert anatomy.outside_label(True) == "GPU idle"
    assert anatomy.HalfPrecision().features() == "half-precision features reported: none"
    skipped = anatomy.HalfPrecision(skipped="This run is on cuda", dtype="bfloat16")
    assert "not measured" in skipped.table().to_html()
    gpu = anatomy.OpCounts("cuda", 8, {"1": {"ops": 66, "kernels": 30, "linears": 8},
                                       "2": {"ops": 120, "kernels": 50, "linears": 15}}, 2, 32, 120, 1e-3, 8, 66)
    assert "kernels" in gpu.table().data.columns


@pytest.mark.parametrize("attention_call, words", [
    (31e-6, "an attention call took 31 µs against 10 µs for its bytes ÷ bandwidth, 3.1 times: far longer"),
    (30e-6, "3.0 times: longer than its bytes need"),
    (15.1e-6, "1.51 times: longer than its bytes need"),
    (15e-6, "1.50 times: about what its bytes need"),
    (8e-6, "0.80 times: about what its bytes need"),
    (7.9e-6, "0.79 times: less than its bytes need at the probed bandwidth, so they came from the processor's")])
def test_table_note_sets_each_call_against_its_bytes(attention_call, words):
    # an attention call at context 128 in float32 reads about 196 kB: 10 µs at 20 GB/s
    note = anatomy.table_note(False, 10e-6, attention_call, 1e-5, 10e-6)  # a norm that took its bytes' time
    assert note.startswith("The kernels column is empty") and words in note
    assert "An RMSNorm call took 10 µs against 10 µs for its bytes ÷ bandwidth, 1.00 times: about" in note
    assert ("The time beyond the bytes is fixed cost" in note) == (attention_call / 10e-6 > 1.5)
    assert ("neither call costs much beyond its bytes" in note) == (attention_call / 10e-6 <= 1.5)


def test_table_note_far_longer_norm():
    note = anatomy.table_note(False, 12e-6, 10e-6, 0.12e-6, 10e-6)  # 2304 bytes of weights: 0.12 µs at 20 GB/s
    assert "An RMSNorm call took 12 µs against 0.12 µs for its bytes ÷ bandwidth, 100 times: far longer" in note
    assert "The time beyond the bytes is fixed cost" in note


@pytest.mark.parametrize("norm_call, bytes_time, words", [
    (43e-6, 0.0796e-6, "took 43 µs against 0.08 µs for its bytes ÷ bandwidth, 540 times: far longer"),
    (12.34e-6, 0.01e-6, "took 12 µs against 0.01 µs for its bytes ÷ bandwidth, 1,230 times: far longer"),
    (43e-6, 0.43e-6, "against 0.43 µs for its bytes ÷ bandwidth, 100 times"),
    (43e-6, 0.4345e-6, "against 0.43 µs for its bytes ÷ bandwidth, 99.0 times"),
    (2.5e-6, 1.2e-6, "took 2.5 µs against 1.2 µs for its bytes ÷ bandwidth, 2.1 times: longer")])
def test_table_note_ratio_as_the_printed_figures_give_it(norm_call, bytes_time, words):
    # at most 3 significant figures in the ratio, and two in a bytes time under a microsecond, so that the ratio
    # can be rebuilt from the figures printed: 43 ÷ 0.08 = 537.5, about 540
    note = anatomy.table_note(False, norm_call, 10e-6, bytes_time, 10e-6)
    assert words in note


def test_the_prose_reads_every_glued_name_and_no_other(runs):
    parts = [runs[name].numbers() for name in RECORDS] + [
        anatomy.published_launches(), anatomy.exercise_numbers(runs["s"].model.cfg, runs["counts"])]
    check_glued_once(parts, NOTEBOOK, unread_allowed=set())


def layer_cells() -> list[str]:
    """The chapter's shown code of one layer's step, from its setup cell to the MLP's: the cells between the
    section's heading and the profiler's."""
    import nbformat

    cells = nbformat.read(NOTEBOOK, 4).cells
    start = next(i for i, c in enumerate(cells) if c.source.startswith("(anatomy-layer)="))
    end = next(i for i, c in enumerate(cells) if c.source.startswith("## The measurement"))
    return [c.source for c in cells[start:end] if c.cell_type == "code"]


def test_the_written_out_layer_is_the_models_layer(tiny):
    # the chapter's own cells, run on the tiny preset (grouped-query attention, as SmolLM2)
    s = Setup(torch.device("cpu"), torch.float32, sizes_for_type("cpu"), tiny, None)
    cells = layer_cells()
    assert len(cells) == 8 and all(len(c.splitlines()) <= 15 for c in cells)
    assert all(len(line) <= 72 for c in cells for line in c.splitlines())
    assert tiny.cfg.n_kv_heads < tiny.cfg.n_heads
    names = {"s": s}
    for cell in cells:
        exec(cell, names)
    result = anatomy.check_layer(tiny, 0, names["x0"], names["p"], names["cache"], names["out"])
    assert result.matches and result.difference <= 1e-5 * result.largest
    with pytest.raises(AssertionError):  # a layer that forgot the MLP's residual add
        anatomy.check_layer(tiny, 0, names["x0"], names["p"], names["cache"], names["out"] - names["x"])
    with pytest.raises(AssertionError):
        anatomy.LayerCheck(2e-4, 10.0, 1e-5).check()
    anatomy.LayerCheck(1e-4, 10.0, 1e-5).check()  # 1e-5 of the largest value


def test_busiest_ops_tabulates_a_profile(tiny):
    from torch.profiler import ProfilerActivity, profile

    from llmperf.profiling import forward_fn

    step = forward_fn(tiny, context=8)
    step()
    with anatomy.quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    data = anatomy.busiest_ops(prof, n=5).data
    assert len(data) == 5 and all(op.startswith("aten::") for op in data["op"])
    assert list(data["own time (µs)"]) == sorted(data["own time (µs)"], reverse=True)


def test_prediction_records_the_thread_count(runs):
    p = runs["prediction"]
    assert p.threads == torch.get_num_threads() >= 1
    assert p.numbers()["roof_threads"] == anatomy.roof_threads("cpu", p.threads)
