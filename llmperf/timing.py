"""Timing GPU and CPU work correctly.

Three rules, each a classic mistake when broken:
1. Warm up first: the first calls pay for allocation, kernel selection and caches.
2. Wait for the device: GPU kernels run asynchronously, so on CUDA we time with
   events recorded on the stream, elsewhere with perf_counter after a synchronise.
3. Repeat and report the median and percentiles, not one number: machines are
   noisy (CI's more than most), and the median shrugs off the outliers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .device import pick_device, synchronize


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
        """q-th percentile (0..100), linear interpolation between samples (numpy's default)."""
        s = sorted(self.samples)
        pos = (len(s) - 1) * q / 100
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def p10(self) -> float:
        return self.percentile(10)

    @property
    def p90(self) -> float:
        return self.percentile(90)

    def __str__(self) -> str:
        return (f"median {self.median * 1e3:.3f} ms (p10 {self.p10 * 1e3:.3f}, p90 {self.p90 * 1e3:.3f}; "
                f"{len(self.samples)} runs)")


def bench(fn: Callable[[], object], warmup: int = 2, repeat: int = 10,
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


def bench_forward(model, batch: int = 1, new_tokens: int = 1, context: int = 0, last_only: bool = False,
                  warmup: int = 2, repeat: int = 10, static: bool = False) -> Timing:
    """Time one cached forward pass of `new_tokens` tokens per sequence after `context` cached ones.

    new_tokens=1 is a decode step; context=0 and last_only=True is a prefill of
    `new_tokens` tokens (logits for the last position only, as generate's prefill).
    The cache is allocated but not filled: its values do not change the time, only
    how many positions attention reads does. Token ids are random. `static=True`
    uses a static cache (see KVCache), the form a CUDA Graph replays.
    """
    from .kv_cache import KVCache  # here, not at the top: timing.py is also used without a model

    if batch < 1 or new_tokens < 1 or context < 0:
        raise ValueError(f"Need batch >= 1, new_tokens >= 1 and context >= 0; got {batch}, {new_tokens}, {context}.")
    cfg, device = model.cfg, model.device
    cache = KVCache(cfg, batch, context + new_tokens, dtype=model.dtype, device=device, static=static)
    tokens = torch.randint(0, cfg.vocab_size, (batch, new_tokens), device=device)
    input_pos = torch.arange(context, context + new_tokens, device=device)

    def step():
        with torch.inference_mode():
            model(tokens, input_pos, cache, last_only=last_only)

    return bench(step, warmup=warmup, repeat=repeat, device=device)


def progress(iterable, desc: str):
    """A progress bar for a sweep, printed to stdout at its start and end only.

    (Intermediate states would all be kept in a notebook's saved output and shown on
    the website, one line each.)
    """
    import sys

    from tqdm import tqdm

    return tqdm(iterable, desc=desc, file=sys.stdout, mininterval=float("inf"), ncols=80)
