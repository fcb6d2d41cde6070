"""Which device to run on, how to wait for it, and what it is.

Every notebook starts with `print(describe())`, so a reader comparing numbers
knows what machine produced them. The choice is cuda > mps > cpu unless the
environment variable LLMPERF_DEVICE names one.
"""

from __future__ import annotations

import os
import platform

import torch

from .host import cpu_flags, cpu_name  # noqa: F401  (cpu_flags: part of this module's API)
from .prefills import default_chunk

# The floating-point dtypes the model runs in, by the name a reader types (--dtype float32).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_TYPES = ("cpu", "cuda", "mps")  # what pick_device chooses among, and the model is tested on


def dtype_name(dtype: torch.dtype) -> str:
    """The short name of a dtype, as in DTYPES: torch.bfloat16 -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def pick_device(device: "str | torch.device | None" = None) -> torch.device:
    """The device to use: `device` if given, else $LLMPERF_DEVICE, else cuda > mps > cpu."""
    if device is None:
        device = os.environ.get("LLMPERF_DEVICE")
    if device is None:
        if torch.cuda.is_available():
            device = "cuda"
        elif torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA was requested but this PyTorch build sees no CUDA device. "
                           "Use device='cpu', or install a CUDA build of torch on a machine with a GPU.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("MPS was requested but is not available (it needs Apple silicon and macOS 12.3+). "
                           "Use device='cpu'.")
    return device


def check_dtype(device: torch.device, dtype: torch.dtype) -> None:
    """Raise a clear error if the model cannot run in `dtype` on `device`."""
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"Device type {device.type!r} is not supported; use {', '.join(DEVICE_TYPES)}.")
    if dtype not in DTYPES.values():
        raise TypeError(f"dtype {dtype} is not supported: the model runs in {', '.join(DTYPES)}.")
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise TypeError(f"{torch.cuda.get_device_name(device)} has no bfloat16 support; use float16 or float32.")


def synchronize(device: "torch.device | str") -> None:
    """Wait until every kernel queued on `device` has finished (a no-op on the CPU).

    GPU work is asynchronous: without this, a timer measures how long it took to
    *queue* the work, not to do it.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: torch.device) -> str:
    """A human-readable name: the GPU model, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU ({platform.machine()})"
    return cpu_name()


HALF_PRECISION_FLAGS = {
    "avx512_bf16": "bfloat16 dot products (AVX512-BF16)",
    "amx_bf16": "bfloat16 matrix tiles (AMX-BF16)",
    "avx512_fp16": "float16 arithmetic (AVX512-FP16)",
    "amx_fp16": "float16 matrix tiles (AMX-FP16)",
    "f16c": "float16 ↔ float32 conversion only (F16C)",
    "bf16": "bfloat16 arithmetic (Arm BF16)",
    "fphp": "float16 arithmetic (Arm FP16)",
}
"""CPU feature flags, as Linux's /proc/cpuinfo names them, that bear on half-precision work."""


def cpu_half_precision() -> dict[str, str]:
    """What this processor offers for bfloat16 and float16: {flag: what it does} for each flag of
    `HALF_PRECISION_FLAGS` that /proc/cpuinfo lists (empty where there is no /proc/cpuinfo, as on macOS).
    Without a native flag, a half-precision product converts every weight to float32 before the arithmetic."""
    flags = cpu_flags()
    return {flag: what for flag, what in HALF_PRECISION_FLAGS.items() if flag in flags}


def free_memory_bytes(device: torch.device) -> int:
    """Bytes that can still be allocated on `device` (system memory for cpu and mps)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def total_memory_bytes(device: torch.device) -> int:
    """Bytes of memory `device` has in all, free or not (the GPU's own; system memory for cpu and mps)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def prefill_chunk(device: torch.device) -> int:
    """The positions a serving step prefills by default on `device` (`prefills.default_chunk`: llama.cpp's 512 on a
    CPU; on a GPU, vLLM's server budget by the GPU's memory and name)."""
    if device.type != "cuda":
        return default_chunk(device.type)
    return default_chunk("cuda", total_memory_bytes(device), device_name(device))


def environment(device: "torch.device | str | None" = None, dtype: torch.dtype = torch.float32) -> dict:
    """The facts a reader needs to interpret a measurement, as a dict."""
    device = pick_device(device)
    return {
        "device": str(device),
        "device_name": device_name(device),
        "dtype": dtype_name(dtype),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def describe(device: "torch.device | str | None" = None, dtype: torch.dtype = torch.float32) -> str:
    """The environment as a few aligned lines, for the first cell of a notebook."""
    env = environment(device, dtype)
    labels = {"device": "device", "device_name": "name", "dtype": "dtype", "torch": "torch",
              "threads": "torch threads", "cpu_count": "CPU cores", "python": "python"}
    return "\n".join(f"{labels[k]:>13}: {v}" for k, v in env.items())
