"""What this device can do: a probe of the machine you are on, beside the accelerator table.

`probe()` measures the device in a few seconds and returns an `Accelerator`, the
type of the datasheet rows in `llmperf.accelerators` (re-exported here with the
roofline's arithmetic), so your laptop can sit on the same roofline figure as an
H100.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from .accelerators import (  # noqa: F401  (hardware.ACCELERATORS and the roofline, as before)
    ACCELERATORS, GB, MiB, PUBLISHED, TB, Accelerator, PublishedDecode, ridge_point, roofline_time,
    roofline_time_by_part, roofline_time_in_parts, roofline_time_of_passes, table_row,
)
from .device import device_name, dtype_name, pick_device, total_memory_bytes
from .timing import time_calls


def _probe_sizes(device: torch.device) -> tuple[int, int]:
    """(bytes of the bandwidth buffer, matmul side n): large enough to leave the caches, quick to run."""
    if device.type == "cuda":
        return 2 << 30, 8192
    if device.type == "mps":
        return 1 << 30, 4096
    return 256 << 20, 1024


SQUARE_SECONDS = 0.2
"""The longest one product of `measure_matmul`'s default square may take. A processor without 2-byte arithmetic
(no AVX512-BF16, AMX or AVX512-FP16 on x86) computes a bfloat16 or float16 product one element at a time, hundreds
of times slower than a float32 one: there a 1024-square product takes seconds, and the side stops growing before it."""


def square_side(device: torch.device, dtype: torch.dtype, largest: int, seconds: float = SQUARE_SECONDS) -> int:
    """The side of the square product `measure_matmul` times by default: 256, doubled while it is below
    `largest` and a product of the current side took at most `seconds` ÷ 8 (doubling the side multiplies the
    FLOPs by 8). A fast kernel reaches `largest`; one computing an element at a time stops where a product
    takes about `seconds`, and its rate, limited by arithmetic rather than memory, is the same at that size."""
    side = min(256, largest)
    while side < largest:
        a = torch.ones(side, side, device=device, dtype=dtype)
        if time_calls(lambda: a @ a, warmup=1, repeat=1, device=device).min * 8 > seconds:
            break
        side = min(2 * side, largest)
    return side


def measure_matmul(device: torch.device, dtype: torch.dtype, n: int | None = None, repeat: int = 10,
                   shape: tuple[int, int, int] | None = None) -> float:
    """FLOP/s of a matrix product in `dtype`: the best of `repeat` runs.

    By default an n×n by n×n product, large enough to reach the device's peak: n is the device's probe side
    (`_probe_sizes`), or less where one product would take longer than `SQUARE_SECONDS` (`square_side`).
    `shape=(m, k, n)` times (m, k) @ (k, n) instead: a model's own products
    (rows = tokens, k and n = a weight matrix's sides) run below the square peak
    when they are small or thin, and a prediction for the model should use their rate.

    The fastest run, not the median: other work on a shared machine can only add
    time to a run, never remove it, so the minimum is the closest to what the
    device can do.
    """
    device = pick_device(device)
    if shape is None:
        side = n or square_side(device, dtype, _probe_sizes(device)[1])
        shape = (side, side, side)
    m, k, n = shape
    if min(shape) < 1:
        raise ValueError(f"A matrix product needs positive sides, got shape={shape}.")
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    return 2 * m * k * n / time_calls(lambda: a @ b, warmup=2, repeat=repeat, device=device).min


def measure_bandwidth(device: torch.device, nbytes: int | None = None, repeat: int = 10) -> dict[str, float]:
    """Memory bandwidth in bytes/s, the best of `repeat` runs (see `measure_matmul`).

    "read": a sum over a buffer far larger than any cache (bytes read / time);
    "copy": a copy of that buffer into another (read + write bytes counted).
    """
    device = pick_device(device)
    nbytes = nbytes or _probe_sizes(device)[0]
    x = torch.ones(nbytes // 4, device=device)  # float32
    y = torch.empty_like(x)
    read = time_calls(lambda: x.sum(), warmup=2, repeat=repeat, device=device).min
    copy = time_calls(lambda: y.copy_(x), warmup=2, repeat=repeat, device=device).min
    return {"read": x.nbytes / read, "copy": 2 * x.nbytes / copy}


ONE_ROW_KERNELS = {
    "float32": ("NumPy's gemv (OpenBLAS; the fused step's)", "PyTorch F.linear"),
    "bfloat16": ("PyTorch torch.mv", "PyTorch F.linear"),
    "float16": ("PyTorch torch.mv", "PyTorch F.linear"),
}
"""The one-row products `measure_one_row_products` times, per dtype: NumPy has no bfloat16, and no BLAS for
float16."""


def measure_one_row_products(shape: tuple[int, int] = (3072, 576), nbytes: int = 512 << 20,
                             repeat: int = 5) -> dict[tuple[str, str], float]:
    """Bytes per second at which one-row products stream their weights on the CPU: {(dtype, kernel): B/s}
    for each kernel of `ONE_ROW_KERNELS`, the best of `repeat` runs (see `measure_matmul`).

    Each run multiplies one activation row by every matrix of a set of (out, in) = `shape` matrices
    (SmolLM2's gate and up together by default) holding `nbytes` of weights in that dtype, the same bytes
    for every dtype: a bandwidth-bound kernel takes half the float32 time in a 2-byte dtype. The default
    512 MB is larger than the last-level cache of most processors, so the weights come from memory. Only
    the weights' bytes are counted; their values (all 0.01) do not change the time.
    """
    rows, cols = shape
    if rows < 1 or cols < 1 or nbytes < 1:
        raise ValueError(f"Need a positive shape and byte count, got shape={shape}, nbytes={nbytes}.")
    rates = {}
    for name, kernels in ONE_ROW_KERNELS.items():
        rates.update(_one_row_rates(name, kernels, rows, cols, nbytes, repeat))  # each set freed on return
    return rates


@torch.inference_mode()
def _one_row_rates(name: str, kernels: tuple[str, str], rows: int, cols: int, nbytes: int,
                   repeat: int) -> dict[tuple[str, str], float]:
    dtype = getattr(torch, name)
    count = max(1, nbytes // (rows * cols * dtype.itemsize))
    weights = [torch.full((rows, cols), 0.01, dtype=dtype) for _ in range(count)]
    x = torch.randn(cols).to(dtype)
    if name == "float32":
        arrays, row = [w.numpy() for w in weights], x.numpy()  # the same memory, through NumPy
        first = lambda: [w @ row for w in arrays]  # noqa: E731
    else:
        first = lambda: [torch.mv(w, x) for w in weights]  # noqa: E731
    second = lambda: [F.linear(x, w) for w in weights]  # noqa: E731
    total = count * rows * cols * dtype.itemsize
    return {(name, kernel): total / time_calls(run, warmup=1, repeat=repeat, device=torch.device("cpu")).min
            for kernel, run in zip(kernels, (first, second))}


def measure_op_overhead(device: torch.device, n_ops: int = 200, repeat: int = 10) -> float:
    """Seconds one tiny op costs on `device`: the best of `repeat` runs of `n_ops` one-element adds, per add.

    Each add moves 8 bytes and does one FLOP, so its time is all fixed cost: on a
    CPU, PyTorch's dispatch (argument checks, picking a kernel, allocating the
    result); on a GPU, also the kernel launch. The adds depend on each other,
    one after the next, as a model's ops do.
    """
    if n_ops < 1:
        raise ValueError(f"Need n_ops >= 1, got {n_ops}.")
    device = pick_device(device)
    x = torch.zeros(1, device=device)

    @torch.inference_mode()
    def chain():
        y = x
        for _ in range(n_ops):
            y = y + 1.0
        return y

    return time_calls(chain, warmup=2, repeat=repeat, device=device).min / n_ops


def probe(device=None, dtype: torch.dtype = torch.float32, repeat: int = 10) -> Accelerator:
    """Measure this device in a few seconds and return it as a row of the accelerator table.

    `flops` is the matmul rate in `dtype`, `bandwidth` the read rate; `measured`
    holds every figure (read and copy bandwidth, float32 and bfloat16 matmul
    rates). Each is the best of `repeat` runs, so that a busy machine reads close
    to what it can do rather than to how busy it was.
    """
    device = pick_device(device)
    bw = measure_bandwidth(device, repeat=repeat)
    measured = {
        "read_bandwidth": bw["read"],
        "copy_bandwidth": bw["copy"],
        "matmul_float32": measure_matmul(device, torch.float32, repeat=repeat),
        "matmul_bfloat16": measure_matmul(device, torch.bfloat16, repeat=repeat),
    }
    key = f"matmul_{dtype_name(dtype)}"
    flops = measured[key] if key in measured else measure_matmul(device, dtype, repeat=repeat)
    memory = total_memory_bytes(device)
    return Accelerator(f"this machine ({device_name(device)})", flops, bw["read"], memory,
                       f"measured by llmperf.hardware.probe on {device.type}, {dtype}", measured)


def faster_probe(here: Accelerator, device=None, repeat: int = 5) -> Accelerator:
    """`here` with the faster of its read bandwidth and one probed again now (`measure_bandwidth`): the roof a
    sweep's steps are held to once they are timed. A probe taken while other work held the memory, or while the
    hypervisor lent a core away, reads low for all its runs, and a step timed minutes later then "beats" it; the
    memory can go no faster than the faster probe says."""
    again = measure_bandwidth(pick_device(device), repeat=repeat)["read"]
    return dataclasses.replace(here, bandwidth=max(here.bandwidth, again))
