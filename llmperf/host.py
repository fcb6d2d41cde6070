"""The processor a measurement ran on, read without torch: its model name and its feature flags (Linux's
/proc/cpuinfo). `device` builds on it; the load generator, which never imports torch, uses it directly."""

from __future__ import annotations

import platform

CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
             "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "bf16", "fphp")
"""The processor flags a measurement's speed can depend on (vector width, instruction sets, matrix units): what a
reference run records and what the fused model's saved layouts are keyed by."""


def cpu_name() -> str:
    """The processor's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The processor's feature flags as /proc/cpuinfo lists them (x86 "flags", Arm "Features"); empty where
    there is no /proc/cpuinfo, as on macOS."""
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith(("flags", "Features"))
                    for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()
