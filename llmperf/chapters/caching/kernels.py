"""Chapter 4's timing of the attention kernel itself: what telling it `is_causal` saves, against what its tiles
predict.

`time_causal` calls the model's own `attend` (the fused scaled_dot_product_attention) over S tokens with the
model's heads, once with the causal mask (the kernel is told `is_causal`) and once with no mask (the full
square), in turns. If the time goes with the (query, key) pairs scored, causal ÷ full time is the kernel's
tiled pairs ÷ S² (`attention.tiled_pairs`): 1 on a CPU up to 512 tokens, 0.625 at 2,048. Random q, k and v
(values do not change which tiles run).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd
import torch

from ...model import attend
from ...timing import time_in_turns
from ..setup import Setup
from .attention import kernel_tiles, pairs
from .claims import causal_timing

LENGTHS = (512, 2048)  # one key tile of PyTorch's CPU kernel, and four


@dataclass(frozen=True)
class CausalTiming:
    """One attention call at each length, told `is_causal` and unmasked (medians of rounds in turns), beside
    the tiles' prediction of their ratio (tiled pairs ÷ S²) and causal attention's own, S(S+1)/2 ÷ S²."""

    device: str
    lengths: list[int]
    causal_s: list[float]
    full_s: list[float]
    predicted: list[float]

    @property
    def measured(self) -> list[float]:
        """Causal ÷ full time at each length."""
        return [c / f for c, f in zip(self.causal_s, self.full_s)]

    def table(self):
        ms = 1e3
        df = pd.DataFrame({"S (tokens)": self.lengths, "is_causal (ms)": [t * ms for t in self.causal_s],
                           "no mask (ms)": [t * ms for t in self.full_s], "causal ÷ full, measured": self.measured,
                           "causal ÷ full, tiles": self.predicted,
                           "causal half": [(S + 1) / (2 * S) for S in self.lengths]})
        return (df.style.format({"S (tokens)": "{:,}", "is_causal (ms)": "{:.2f}", "no mask (ms)": "{:.2f}",
                                 "causal ÷ full, measured": "{:.2f}", "causal ÷ full, tiles": "{:.2f}",
                                 "causal half": "{:.2f}"})
                .hide(axis="index").set_caption(f"one attention call, {self.device}"))

    def numbers(self) -> dict[str, object]:
        return {"ct_text": causal_timing(self.lengths, self.measured, self.predicted)}


def time_causal(s: Setup, lengths=LENGTHS, rounds: int | None = None) -> CausalTiming:
    """Time the model's attention call over each of `lengths` tokens, told `is_causal` and unmasked, in turns
    for `rounds` rounds (default `s.sizes.repeat`), keeping the medians; and predict each ratio from the tiles
    of the kernel that `s.device` runs (`attention.kernel_tiles`)."""
    cfg, steps = s.model.cfg, {}
    for S in lengths:
        q = torch.randn(1, cfg.n_heads, S, cfg.head_dim, device=s.device, dtype=s.dtype)
        k, v = (torch.randn(1, cfg.n_kv_heads, S, cfg.head_dim, device=s.device, dtype=s.dtype) for _ in "kv")
        square = torch.ones(S, S, dtype=torch.bool, device=s.device).tril()  # attend: is_causal
        steps["causal", S] = partial(attend, q, k, v, square)
        steps["full", S] = partial(attend, q, k, v, None)
    timings = time_in_turns(steps, rounds=rounds or s.sizes.repeat, device=s.device,
                                desc="attention, causal and unmasked")
    return CausalTiming(s.device.type, list(lengths), [timings["causal", S].median for S in lengths],
                        [timings["full", S].median for S in lengths],
                        [pairs(S, "tiled", kernel_tiles(s.device.type, cfg.head_dim, S)) / S ** 2 for S in lengths])
