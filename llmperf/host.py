"""The processor a measurement ran on, read without torch: its model name and its feature flags (Linux's
/proc/cpuinfo), and how much of its time a hypervisor took while a benchmark ran (`Steal`, from /proc/stat).
`device` builds on it; the load generator, which never imports torch, uses it directly."""

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


def cpu_times() -> tuple[int, int] | None:
    """(steal, total): all CPUs' time since boot in clock ticks, the part a hypervisor gave to other guests and the
    whole, from the first line of Linux's /proc/stat; None where there is none (macOS, Windows) or it cannot be
    read."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is counted in user already
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


class Steal:
    """The share of the CPUs' time that a hypervisor gave to other guests while a `with` block ran ("steal").

    A virtual machine's cores are lent: while another guest runs on one, every thread there stops, and a product
    split among threads waits for it. A benchmark that records this can say whether its host was quiet.
    `share` is None where the kernel does not report it, or while the block has not ended."""

    def __init__(self):
        self.share: float | None = None
        self._start: tuple[int, int] | None = None

    def __enter__(self) -> "Steal":
        self._start = cpu_times()
        return self

    def __exit__(self, *exc) -> None:
        end = cpu_times()
        if self._start is not None and end is not None and end[1] > self._start[1]:
            self.share = (end[0] - self._start[0]) / (end[1] - self._start[1])
