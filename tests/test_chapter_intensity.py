"""Chapter 3 (decode intensity): every branch of the sentences chosen from its numbers, and the GPU wording fed the cost
model's H100 predictions (no GPU needed: a GPU's measurements sit near them, above the roofline); then each
experiment on the tiny preset, each record's check() both ways on hand-built records, and each figure.
"""

import dataclasses
import json

import pytest
import torch

from llmperf import cost, hardware
from llmperf.chapters import intensity, wording
from llmperf.chapters.setup import Setup, sizes_for_type

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
    assert "whole chip" not in intensity.small_batch_kernel("cuda", 1.0)  # nothing said of how a kernel spreads
    assert "bound by bandwidth" in intensity.low_precision_ridge("bfloat16", H100.ridge, 1.0, H100.flops / 1e9)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("ratio, ending", [(1.4, "the two-row kernel streams the weights more slowly"),
                                           (1.1, "one more row is nearly free"), (0.96, "one more row is nearly free"),
                                           (0.8, "the one-row kernel is the slower of the two")])
def test_small_batch_kernel_every_branch(device, ratio, ending):
    text = intensity.small_batch_kernel(device, ratio)
    assert text.endswith(ending) and "tested on" not in text and "this course" not in text


@pytest.mark.parametrize("growth, shape", [(1.0, "is nearly flat"), (1.09, "is nearly flat"), (1.1, "rises by 10 %"),
                                           (1.49, "rises by 49 %"), (1.99, "rises by 99 %"), (2.0, "rises 2.0-fold"),
                                           (11.75, "rises 11.8-fold")])
def test_bytes_growth_verdict_fits_its_number(growth, shape):
    assert intensity.bytes_growth(growth, 64, 500.0).startswith(shape + ":")


@pytest.mark.parametrize("growth, verdict, trade", [
    (0.8, "rose", "no user paid for it in speed"), (1.02, "stayed about the same", "no user paid for it in speed"),
    (1.5, "fell", "at the cost of every user's speed")])
def test_per_user_speed_and_the_trade_agree(growth, verdict, trade):
    assert intensity.per_user_speed(growth, 64).startswith(verdict)
    assert trade in intensity.batch_trade(growth)


@pytest.mark.parametrize("pct, start", [(40.0, "The measured step reads its bytes more slowly than the probe does"),
                                        (94.9, "The measured step reads its bytes more slowly than the probe does"),
                                        (95.0, "The measured step reads its bytes about as fast as the probe does"),
                                        (105.0, "The measured step reads its bytes about as fast as the probe does"),
                                        (108.0, "The measured step read its bytes faster than the probe did")])
def test_probe_gap_worded_from_the_ratio(pct, start):
    text = intensity.probe_gap(pct, pct / 4, 25.0)
    assert text.startswith(start) and f"{pct:.0f} % of the 25.0 GB/s" in text


@pytest.mark.parametrize("args, parts", [
    # (measured, predicted, added_s, kv_pct, rest_pct): the AMD EPYC reference's shape, cache slower per byte
    ((1.43, 1.34 * 1.1, 0.025, 29.0, 36.0), ["36 %", "fixed cost", "close to the bytes model's"]),
    ((1.60, 1.34, 0.025, 29.0, 36.0), ["fixed cost", "attention streams the cache less well", "exceeds"]),
    ((1.60, 1.34, 0.025, 50.0, 95.0), ["close to the probe", "exceeds"]),
    ((1.10, 1.34, 0.005, 80.0, 36.0), ["fixed cost", "falls short", "dilute the cache's share"]),
    ((1.10, 1.34, 0.005, 120.0, 95.0), ["close to the probe", "falls short of the bytes model's"]),
    ((0.99, 1.34, -0.001, 0.0, 36.0), ["hid beneath the rest", "fixed cost"]),
])
def test_context_mismatch_every_branch(args, parts):
    text = intensity.context_mismatch(*args)
    assert all(p in text for p in parts), text
    if args[-1] >= 90:
        assert "fixed cost" not in text and "dilute" not in text  # fixed costs named only where the numbers point


def test_cpu_branches():
    # A CPU whose bf16 products crawl (0.9 GFLOP/s against 19.5 GB/s): its bf16 ridge is below 1 FLOP/byte.
    text = intensity.low_precision_ridge("bfloat16", 0.9e9 / 19.5e9, 1.0, 0.9)
    assert "no fast bfloat16" in text and "bound by arithmetic" in text
    assert "more slowly" in intensity.small_batch_kernel("cpu", 1.4)
    assert intensity.weights_bound(22, 64, 10.9).startswith("The weight products cross this device's ridge")
    assert "even attention is bound by arithmetic" in intensity.attention_bound(1.5, 0.05)
    assert intensity.per_user_speed(1.02, 64).startswith("stayed about the same")
    assert intensity.bytes_growth(1.05, 64, 500.0).startswith("is nearly flat")


def test_speed_change_and_fused_result():
    assert wording.speed_change(2.0, 1.0, "A") == "2.0 times faster than A"
    assert wording.speed_change(1.0, 1.31, "A") == "1.31 times slower than A"
    assert wording.speed_change(1.0, 1.02, "A") == "about as fast as A"
    assert "a step about as fast as the plain one," in intensity.fused_result(1.0, 1.01, 50, 50)
    assert "a step 1.50 times faster than the plain one," in intensity.fused_result(1.5, 1.0, 35, 52)


def test_against_roof():
    assert intensity.against_roof(1.2) == "lies above both lines at every batch size"
    assert "within the probe's own error" in intensity.against_roof(0.95)


# --- the records and experiments ------------------------------------------------------------------------------

HERE = hardware.Accelerator("this machine (test)", flops=50e9, bandwidth=10e9, memory=16e9, source="by hand",
                            measured={"read_bandwidth": 10e9, "copy_bandwidth": 8e9, "matmul_float32": 50e9,
                                      "matmul_bfloat16": 5e9})


def _json(record):
    return json.loads(json.dumps(dataclasses.asdict(record)))


def _shown(table):
    """The DataFrame behind a table (a Styler or a DataFrame), and its HTML renders."""
    df = getattr(table, "data", table)
    assert table.to_html()
    return df


@pytest.fixture(scope="module")
def tiny_setup(tiny):
    sizes = dataclasses.replace(sizes_for_type("cpu"), repeat=1, decode_batches=(1, 2, 4), decode_context=8,
                                decode_contexts=(8, 32, 128))
    return Setup(torch.device("cpu"), torch.float32, sizes, tiny, None)


def test_llama_counts():
    c = intensity.llama_counts()
    c.check()
    n = c.numbers()
    assert round(n["l8_int_2n"], 2) == 1.07 and round(n["qkv_mb"], 1) == 50.3 and n["notes_qkv_mb"] == 25
    assert n["l8_layers"] == 32 and n["gqa_group"] == 4 and n["gate_S"] == 2000 and n["ops_ctx"] == 1024
    assert round(n["lm_head_pct"]) == 7 and round(n["notes_qkv_total_gb"], 1) == 14.2
    assert _json(c)["ops"][0]["label"] == "q/k/v projections"
    assert list(_shown(c.ops_table())["op"])[-1] == "whole step" and len(_shown(c.ops_table())) == 8
    assert len(_shown(c.table())) == 2 and list(_shown(c.gate_table())["rows"]) == [2000, 1]


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
    assert lt.context == 4096 and lt.batches[0] == 1 and lt.batches[-1] == lt.max_batch == 129
    assert lt.step_s == sorted(lt.step_s) and len(lt.batches) == len(lt.step_s)
    n = lt.numbers()
    assert n["lt_user_1"] > n["lt_user_max"] and n["lt_all_gain"] > 1 and _json(lt)["device"] == "H100 SXM"


def test_exercise_numbers(tiny_setup):
    n = intensity.exercise_numbers(tiny_setup)
    assert n["ex_b_h100"] == cost.compute_bound_batch("llama-3-8b", H100.ridge, context=1)
    assert n["ex_users"] == 256 and n["ex_users_h100"] < n["ex_users_h200"] and 0 < n["ex_gf_pct"] < 100
    assert n["ex_ctx_pred"] > n["ex_ctx_pred_1"] > 1  # more sequences: more of the bytes are cache
    json.dumps(n)


def test_roofline(monkeypatch, tiny_setup):
    monkeypatch.setattr(hardware, "probe", lambda device, dtype: HERE)
    r = intensity.roofline(tiny_setup, intensity.llama_counts())
    r.check()
    n = r.numbers()
    assert n["here_ridge"] == 5.0 and n["here_bf16_ridge"] == 0.5 and "bound by arithmetic" in n["here_bf16_text"]
    assert n["h100_x2_floor_ms"] == pytest.approx(n["h100_floor_ms"])  # more arithmetic buys nothing
    assert n["h200_speedup"] == pytest.approx(4.8 / 3.35) and _json(r)["here"]["measured"]["copy_bandwidth"] == 8e9
    assert len(_shown(r.table())) == 3 and len(_shown(r.probe_table())) == 4
    assert intensity.setup_numbers(tiny_setup) == {"device": "cpu", "dtype_name": "float32", "bpp": 4}
    with pytest.raises(AssertionError, match="reaches the ridge"):
        dataclasses.replace(r, table_ridges={"slow chip": 0.5}).check()


def test_batch_counts(tiny_setup):
    b = intensity.batch_counts(tiny_setup, HERE)
    assert b.batches == [1, 2, 4] and b.context == 8 and b.bytes_per_param == 4
    assert b.smol_intensity == sorted(b.smol_intensity) and len(_shown(b.table())) == 3
    assert b.numbers()["ctx"] == 8 and _json(b)["here_ridge"] == 5.0
    b.check()
    with pytest.raises(AssertionError):
        dataclasses.replace(b, here_ridge=0.01).check()


def test_batch_sweep_runs(tiny_setup):
    sweep = intensity.batch_sweep(tiny_setup, HERE, rounds=1)
    assert sweep.batches == [1, 2, 4] and len(sweep.step_s) == 3 and all(t > 0 for t in sweep.step_s)
    assert sweep.nbytes == [cost.decode_bytes(tiny_setup.model.cfg, 9, b, 4).total for b in (1, 2, 4)]
    n = sweep.numbers()
    assert n["B_max"] == 4 and n["B_mid"] == 2 and isinstance(n["small_batch_text"], str)
    assert len(_shown(sweep.table())) == 3 and _json(sweep)["device_type"] == "cpu"


def _sweep(step_s, roof_s=(1e-3, 1e-3, 1e-3)):
    return intensity.BatchSweep("cpu", 8, [1, 2, 4], list(step_s), [1000, 1100, 1200], [10, 20, 40], 1e6,
                                list(roof_s), 30.0)


def test_batch_sweep_check():
    _sweep([2e-3, 2.1e-3, 2.4e-3]).check()
    with pytest.raises(AssertionError, match="gave only"):  # batch 2 barely more tokens/s: 2 / 4 · batch 1's needed
        _sweep([2e-3, 8.1e-3, 9e-3]).check()
    with pytest.raises(AssertionError, match="beat the roofline"):
        _sweep([2e-3, 2.1e-3, 2.4e-3], roof_s=(1e-3, 3e-3, 1e-3)).check()


def test_gap_to_roof(tiny_setup):
    g = intensity.gap_to_roof(tiny_setup, HERE, rounds=1)
    assert g.plain_s > 0 and g.fused_s > 0 and g.n_ops > 0 and g.kipply_ratio == pytest.approx(22.0 / 16.8)
    assert g.step_bytes == cost.decode_bytes(tiny_setup.model.cfg, 9, 1, 4).total
    assert "the plain one" in g.numbers()["fused_text"] and len(_shown(g.table())) == 2
    _json(g)


def test_kv_growth(tiny_setup):
    k = intensity.kv_growth(tiny_setup)
    n = k.numbers()
    assert n["c_lo"] == 1024 and n["c_hi"] == 8192 and n["c_ratio"] == 8 and n["l8_kv_tok"] == 131072
    assert 0 < n["l8_tpot_growth_pct"] < 10 and n["kv_ratio_x"] > 1  # the tiny model: a large cache per weight
    _json(k)


def test_context_sweep_runs(tiny_setup):
    c = intensity.context_sweep(tiny_setup, HERE, rounds=1)
    assert c.contexts == [8, 32, 128] and c.batch == 1 and len(c.tpot_s) == 3 and c.dtype == "float32"
    assert c.kv_bytes == [cost.kv_cache_bytes(tiny_setup.model.cfg, x + 1, 1, 4) for x in (8, 32, 128)]
    n = c.numbers()
    assert n["ctx_x"] == 16 and n["sweep_batch"] == 1 and n["pred_x"] > 1
    assert len(_shown(c.table())) == 3 and _json(c)["contexts"] == [8, 32, 128]


def _contexts(tpot_s, batch=1, contexts=(128, 2048), roof_s=(1e-3, 1e-3)):
    return intensity.ContextSweep("cpu", "float32", batch, list(contexts), list(tpot_s), [1000, 1500], [100, 600],
                                  list(roof_s), 1e6)


def test_context_sweep_numbers():
    # 500 more bytes in 0.5 ms: read at the probed 1 MB/s; the shortest step read 1,000 bytes in 2 ms (50 %).
    text = _contexts([2e-3, 2.5e-3]).numbers()["mismatch_text"]
    assert "at 50 % of the probed bandwidth" in text and "read at 100 %" in text and "falls short" in text
    assert "hid beneath" in _contexts([2e-3, 1.9e-3]).numbers()["mismatch_text"]


def test_context_sweep_check():
    _contexts([2e-3, 2.5e-3]).check()
    _contexts([2e-3, 5e-3], batch=8).check()  # the exercise's batch: growth not asserted
    with pytest.raises(AssertionError, match="16x the context cost 2.50x"):
        _contexts([2e-3, 5e-3]).check()
    with pytest.raises(AssertionError, match="8x the context"):
        _contexts([2e-3, 2.5e-3], contexts=(256, 2048)).check()
    with pytest.raises(AssertionError, match="beat the roofline"):
        _contexts([2e-3, 2.5e-3], roof_s=(1e-3, 3e-3)).check()


def test_figures(tiny_setup):
    """Each figure draws from hand-built records, without measuring anything."""
    import matplotlib

    matplotlib.use("Agg")
    from llmperf.plots import intensity as figures

    sweep, counts = _sweep([2e-3, 2.1e-3, 2.4e-3]), intensity.llama_counts()
    roofs = intensity.Roofs(HERE, "float32", H100, hardware.ACCELERATORS["H200 SXM"], {}, counts.flops_exact,
                            counts.step_bytes, counts.intensity_2n, counts.intensity_exact)
    for fig in (figures.batch_sweep(sweep), figures.latency_throughput(sweep, intensity.latency_throughput()),
                figures.roofline(roofs, sweep), figures.context_sweep(_contexts([2e-3, 2.5e-3]))):
        assert fig.axes
        matplotlib.pyplot.close(fig)
