"""The processor a measurement ran on, read without torch: its model name and its feature flags (Linux's
/proc/cpuinfo), how much of its time a hypervisor took while a benchmark ran (`Steal`, from /proc/stat), and how
many of this process's cores other work held while something was timed (`OtherWork`).
`device` builds on it; the load generator, which never imports torch, uses it directly."""

from __future__ import annotations

import os
import platform
import time

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


def stat_ticks() -> dict[str, list[int]] | None:
    """Linux's /proc/stat CPU lines, {"cpu": all CPUs', "cpu0": the first's, ...}: each line's clock ticks since
    boot, user nice system idle iowait irq softirq steal (guest time is counted in user already, so the guest
    columns are left off). None where there is no /proc/stat (macOS, Windows) or it cannot be read."""
    try:
        with open("/proc/stat") as f:
            return {name: [int(v) for v in fields[:8]] for name, *fields in map(str.split, f)
                    if name.startswith("cpu")}
    except (OSError, ValueError):
        return None


def cpu_times() -> tuple[int, int] | None:
    """(steal, total): all CPUs' time since boot in clock ticks, the part a hypervisor gave to other guests and the
    whole (`stat_ticks`' "cpu" line); None where there is none (macOS, Windows) or it cannot be read."""
    ticks = (stat_ticks() or {}).get("cpu")
    if ticks is None:
        return None
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks)


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


def busy_seconds(cpus: set[int]) -> float | None:
    """Seconds the CPUs numbered `cpus` have spent on any work since boot, from `stat_ticks`' per-CPU lines: all but
    idle and iowait, steal included (a hypervisor's other guests held the core). None where there is no /proc/stat
    (macOS, Windows) or it cannot be read. Counted in clock ticks (`tick`), so exact to a tick or so."""
    lines = stat_ticks()
    if lines is None:
        return None
    try:
        busy = [sum(t) - t[3] - t[4] for name, t in lines.items() if name[3:].isdigit() and int(name[3:]) in cpus]
    except IndexError:  # a line without the idle and iowait columns
        return None
    return sum(busy) * tick()


def tick() -> float:
    """The seconds of one clock tick, the unit /proc/stat counts in (1/100 s on Linux)."""
    return 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def my_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity), else all of them."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


class OtherWork:
    """How many of this process's CPUs other work held, on average, while a `with` block ran: other processes'
    time on them, and a hypervisor's other guests' (steal), over the block's wall time; `cores` is 0.0 on a quiet
    host and about 1.0 while another program keeps one core busy.

    It is the CPUs' busy time (`busy_seconds`) less this process's own (all its threads,
    `time.process_time`); /proc/stat counts in ticks, so up to `slack` of that difference is rounding, and it is
    taken off before dividing. A timing made while `cores` was well above 0 ran with threads that waited for a
    core, and need not rank its options as a quiet run would. `cores` is None where the kernel does not report
    busy time, or while the block has not ended."""

    def __init__(self):
        self.cores: float | None = None
        self._cpus = my_cpus()
        self._start: tuple[float | None, float, float] | None = None

    @property
    def slack(self) -> float:
        """The seconds of the busy-time difference that can be /proc/stat's rounding: two ticks a CPU."""
        return 2 * tick() * len(self._cpus)

    def __enter__(self) -> "OtherWork":
        self._start = busy_seconds(self._cpus), time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        busy, own, wall = busy_seconds(self._cpus), time.process_time(), time.perf_counter()
        if self._start is None or self._start[0] is None or busy is None or wall <= self._start[2]:
            return
        others = (busy - self._start[0]) - (own - self._start[1])
        self.cores = max(0.0, others - self.slack) / (wall - self._start[2])
