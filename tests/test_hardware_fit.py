"""The accelerator table, rooflines, the probe of this machine, and the fitting helpers."""

import numpy as np
import pytest
import torch

from llmperf import cost, hardware
from llmperf.timing import Timing
from llmperf.fit import linear_fit, poly_fit

# facts.md: ridge points in FLOP/byte
RIDGES = {"H100 SXM": 295, "H100 PCIe": 378, "H200 SXM": 206, "A100 SXM 80GB": 153, "A100 40GB": 201,
          "L4": 403, "L40S": 419, "RTX 4090": 164, "MI300X": 247, "B200": 281}


@pytest.mark.parametrize("name", RIDGES)
def test_ridge_points_match_facts(name):
    assert round(hardware.ACCELERATORS[name].ridge) == RIDGES[name]


def test_roofline_time_takes_the_binding_limit():
    h100 = hardware.ACCELERATORS["H100 SXM"]
    assert hardware.roofline_time(989e12, 1.0, h100) == pytest.approx(1.0)  # compute-bound
    assert hardware.roofline_time(1.0, 3.35e12, h100) == pytest.approx(1.0)  # bandwidth-bound


def test_probe_measures_this_machine():
    hw = hardware.probe("cpu")  # its time is not asserted: a unit test times nothing
    assert isinstance(hw, hardware.Accelerator)  # the same type as the table's rows
    assert hw.name.startswith("this machine")
    assert set(hw.measured) == {"read_bandwidth", "copy_bandwidth", "matmul_float32", "matmul_bfloat16"}
    assert all(v > 0 for v in hw.measured.values())
    assert hw.flops == hw.measured["matmul_float32"] and hw.bandwidth == hw.measured["read_bandwidth"]
    assert hw.ridge == hardware.ridge_point(hw) == hw.flops / hw.bandwidth
    assert hw.memory > 0
    bf16 = hardware.probe("cpu", torch.bfloat16, repeat=2)
    assert bf16.flops == bf16.measured["matmul_bfloat16"]


def test_probe_reports_the_best_run(monkeypatch):
    """Noise only adds time, so the probe reports the fastest of its repeats, not the median."""
    samples = (0.5, 0.1, 0.9, 0.2, 0.7)
    calls = []

    def fake_time_calls(fn, warmup, repeat, device):
        calls.append(repeat)
        return Timing(samples)

    monkeypatch.setattr(hardware, "time_calls", fake_time_calls)
    n = 64
    assert hardware.measure_matmul("cpu", torch.float32, n=n, repeat=5) == pytest.approx(2 * n**3 / 0.1)
    bw = hardware.measure_bandwidth("cpu", nbytes=4096, repeat=5)
    assert bw == pytest.approx({"read": 4096 / 0.1, "copy": 2 * 4096 / 0.1})
    assert hardware.probe("cpu").measured["read_bandwidth"] == pytest.approx(hardware._probe_sizes(
        torch.device("cpu"))[0] / 0.1)
    assert calls[-1] == 10  # ~10 repeats by default


def test_the_square_grows_to_the_probe_side_unless_a_product_is_slow(monkeypatch):
    """A product's time grows as side³; the side doubles from 256 while the next would still fit the budget."""
    def product_at(flops_per_second):
        def fake_time_calls(fn, warmup, repeat, device):
            side = fn().shape[0]
            return Timing((2 * side**3 / flops_per_second,))
        return fake_time_calls

    monkeypatch.setattr(hardware, "time_calls", product_at(300e9))  # a float32 kernel: 1024 takes 7 ms
    assert hardware.square_side(torch.device("cpu"), torch.float32, 1024) == 1024
    monkeypatch.setattr(hardware, "time_calls", product_at(1e9))  # 256 takes 34 ms, 512 would take 270
    assert hardware.square_side(torch.device("cpu"), torch.bfloat16, 1024) == 256
    monkeypatch.setattr(hardware, "time_calls", product_at(5e9))  # 512 takes 54 ms, 1024 would take 430
    assert hardware.square_side(torch.device("cpu"), torch.bfloat16, 1024) == 512
    assert hardware.square_side(torch.device("cpu"), torch.float32, 100) == 100  # never past the largest


def test_roofline_of_a_decode_step_on_the_table():
    """Llama-3-8B at batch 1 on an H100: bandwidth-bound, 4.48 ms, 0.36 % of peak compute (with 2·N FLOPs)."""
    from llmperf import cost

    h100 = hardware.ACCELERATORS["H100 SXM"]
    b, f = cost.decode_bytes("llama-3-8b", 1), cost.decode_flops("llama-3-8b", 1)
    assert round(hardware.roofline_time(f.total, b.total, h100) * 1e3, 2) == 4.48
    assert hardware.roofline_time(f.total, b.total, h100) == b.total / h100.bandwidth
    assert round(100 * cost.decode_intensity("llama-3-8b", 1, flops="2n") / h100.ridge, 2) == 0.36


def test_chapter_3_sizes_on_the_cpu():
    from llmperf.chapters.setup import sizes_for

    s = sizes_for("cpu")
    assert 1 in s.decode_batches and 16 in s.decode_batches and list(s.decode_batches) == sorted(s.decode_batches)
    assert s.decode_contexts[-1] >= 16 * s.decode_contexts[0]
    assert s.decode_contexts[-1] + 1 <= 8192 and s.decode_context >= 1  # SmolLM2's max_seq_len


def test_setup_loads_the_dtype_asked_for(capsys):
    """The assignments ask setup() for float32 on every device; by default a CPU gets float32 too."""
    import torch

    from llmperf.chapters.setup import default_dtype, setup

    before = torch.get_num_threads()
    try:
        device, dtype, _, model, _ = setup("cpu", dtype=torch.bfloat16)
        assert dtype == model.dtype == torch.bfloat16 and default_dtype("cpu") == torch.float32
        assert "bfloat16" in capsys.readouterr().out  # the environment it prints names the dtype
    finally:
        torch.set_num_threads(before)
    with pytest.raises(TypeError, match="float64 is not supported"):  # before any loading
        setup("cpu", dtype=torch.float64)


def test_fits_recover_exact_polynomials():
    x = np.arange(1, 9)
    line = linear_fit(x, 3.0 + 2.0 * x)
    assert line.slope == pytest.approx(2.0) and line.intercept == pytest.approx(3.0) and line.r2 == pytest.approx(1.0)
    quad = poly_fit(x, 1.0 + 0.5 * x + 0.25 * x**2, 2)
    assert quad.coeffs == pytest.approx((1.0, 0.5, 0.25)) and quad(10) == pytest.approx(31.0)
    noisy = linear_fit(x, [1, 5, 2, 6, 3, 7, 4, 8])
    assert 0 < noisy.r2 < 1


def test_fit_needs_enough_points():
    with pytest.raises(ValueError, match="needs at least 4 points"):
        poly_fit([1, 2, 3], [1, 4, 9], 2)


def test_matmul_at_a_models_shape(monkeypatch):
    monkeypatch.setattr(hardware, "time_calls", lambda fn, warmup, repeat, device: Timing((0.5, 0.25)))
    assert hardware.measure_matmul("cpu", torch.float32, shape=(3, 4, 5)) == pytest.approx(2 * 3 * 4 * 5 / 0.25)
    with pytest.raises(ValueError, match="positive sides"):
        hardware.measure_matmul("cpu", torch.float32, shape=(0, 4, 5))


def test_the_table_holds_datasheets_only():
    # What one H200 measured lives in its reference run (references/), not in the table.
    assert all(not hw.measured for hw in hardware.ACCELERATORS.values())
    assert hardware.ACCELERATORS["H100 SXM"].memory == 81_559 * 2**20  # as nvidia-smi reports it
    assert hardware.ACCELERATORS["H200 SXM"].memory == 143_771 * 2**20  # nvidia-smi on an H200, not the 141 GB sold
    assert hardware.table_row("NVIDIA H200").name == "H200 SXM"
    assert hardware.table_row("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert hardware.table_row("NVIDIA A100-SXM4-80GB").name == "A100 SXM 80GB"
    assert hardware.table_row("AMD EPYC") is None


def test_op_overhead_is_a_few_microseconds_or_more():
    from llmperf.hardware import measure_op_overhead

    t = measure_op_overhead("cpu", n_ops=50, repeat=3)
    assert 1e-8 < t < 1e-2  # positive, and an add of one number cannot take 10 ms
    with pytest.raises(ValueError, match="n_ops >= 1"):
        measure_op_overhead("cpu", n_ops=0)


@pytest.mark.parametrize("free_memory", [80e9, 24e9])
def test_chapter_2_gpu_sweep_model_leaves_the_launch_floor(free_memory):
    """Chapter 2 asserts that TTFT at least doubles over its sweep. On a GPU that needs a model whose longest
    prefill takes well over the fixed cost of its ops: at 5 µs an op (the source notes' launch cost) and an
    H100's datasheet rate, the longest prompt's arithmetic must exceed twice the shortest pass's floor.
    SmolLM2-135M does not (an H200 measured its TTFT flat at 17-20 ms from 1,024 to 8,192 tokens)."""
    from llmperf import build_model
    from llmperf.chapters.setup import sizes_for_type
    from llmperf.profiling import op_counts

    s = sizes_for_type("cuda", free_memory=free_memory)
    h100 = hardware.ACCELERATORS["H100 SXM"]
    per_layer = sum(op_counts(build_model("tiny", "cpu"), context=4)["ops"].values())  # any depth-2 model
    for name, ok in ((s.prefill_model, True), ("smollm2-135m", False)):
        cfg = cost.get_config(name)
        assert s.prefill_lengths[-1] <= cfg.max_seq_len
        floor = per_layer / 2 * (cfg.n_layers + 1) * 5e-6  # ops grow with depth; ~1 layer's worth outside
        first, last = (max(cost.prefill_flops(cfg, S, logits_for=1).total / h100.flops, floor)
                       for S in (s.prefill_lengths[0], s.prefill_lengths[-1]))
        assert (last > 2 * first) is ok, (name, first, last)


def test_one_row_products_cover_every_kernel_and_refuse_a_bad_shape():
    from llmperf.hardware import ONE_ROW_KERNELS, measure_one_row_products

    rates = measure_one_row_products(shape=(64, 32), nbytes=1 << 16, repeat=1)
    assert set(rates) == {(d, k) for d, kernels in ONE_ROW_KERNELS.items() for k in kernels}
    assert all(r > 0 for r in rates.values())
    with pytest.raises(ValueError, match="positive shape"):
        measure_one_row_products(shape=(0, 32))


def test_cpu_half_precision_reads_the_flags(tmp_path, monkeypatch):
    import builtins

    from llmperf import device as device_module

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 f16c avx512_bf16 amx_tile\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(cpuinfo if f == "/proc/cpuinfo" else f, *a, **k))
    assert list(device_module.cpu_half_precision()) == ["avx512_bf16", "f16c"]
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2\n")
    assert device_module.cpu_half_precision() == {}
