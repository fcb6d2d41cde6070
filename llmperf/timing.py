"""Timing GPU and CPU work correctly.

Three rules, each a classic mistake when broken:
1. Warm up first: the first calls pay for allocation, kernel selection and caches.
2. Wait for the device: GPU kernels run asynchronously, so on CUDA we time with
   events recorded on the stream, elsewhere with perf_counter after a synchronise.
3. Repeat and report the median and percentiles, not one number: machines are
   noisy (CI's more than most), and the median shrugs off the outliers.

This module is only a clock: it times any function. What to time (a decode
step, a prefill) is built by `llmperf.profiling.forward_fn`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch

from .device import pick_device, synchronize
from .metrics import percentile
from .progress import progress

K = TypeVar("K")


@dataclass(frozen=True)
class Timing:
    """Seconds per call over `samples` repeats."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    def percentile(self, q: float) -> float:
        """q-th percentile (0..100), interpolated between samples (`metrics.percentile`'s "linear")."""
        return percentile(self.samples, q)

    @property
    def p10(self) -> float:
        return self.percentile(10)

    @property
    def p90(self) -> float:
        return self.percentile(90)

    def __str__(self) -> str:
        return (f"median {self.median * 1e3:.3f} ms (p10 {self.p10 * 1e3:.3f}, p90 {self.p90 * 1e3:.3f}; "
                f"{len(self.samples)} runs)")


def time_calls(fn: Callable[[], object], warmup: int = 2, repeat: int = 10,
          device: "torch.device | str | None" = None) -> Timing:
    """Time `fn()` `repeat` times after `warmup` untimed calls, on `device` (default: pick_device())."""
    if warmup < 0 or repeat < 1:
        raise ValueError(f"Need warmup >= 0 and repeat >= 1, got warmup={warmup}, repeat={repeat}.")
    device = pick_device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    if device.type == "cuda":
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in ms
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            samples.append(time.perf_counter() - t0)
    return Timing(tuple(samples))


def time_in_turns(fns: "Mapping[K, Callable[[], object]]", rounds: int, warmup: int = 1, settle: int = 0,
                      device: "torch.device | str | None" = None, desc: str | None = None) -> "dict[K, Timing]":
    """Time several functions in turns: every round runs each of them once.

    Timing A ten times and then B ten times lets a shared machine's slow drift
    (another program starting, the CPU clocking down) land on one of them only;
    taking turns spreads it over all. `warmup` untimed calls of each function
    come before the first round; `settle` untimed calls come right before each
    timed one, for functions that disturb whatever runs next (llmperf.fast's
    BLAS threads keep spinning after a step). Returns one Timing per key,
    `rounds` samples each. `desc` shows a progress bar over the rounds.
    """
    if rounds < 1 or warmup < 0 or settle < 0:
        raise ValueError(f"Need rounds >= 1, warmup >= 0 and settle >= 0; got {rounds}, {warmup}, {settle}.")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {key: [] for key in fns}
    for _ in progress(range(rounds), desc) if desc else range(rounds):
        for key, fn in fns.items():
            samples[key] += time_calls(fn, warmup=settle, repeat=1, device=device).samples
    return {key: Timing(tuple(s)) for key, s in samples.items()}

