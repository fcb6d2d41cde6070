"""Chapter 4's 512 + 512 table: Llama-3-8B generating 512 tokens after a 512-token prompt, both loops counted
(by the back-of-envelope rule and exactly, attention as the full square, causal and as FlashAttention-2's tiles
compute it) and priced on an H100 SXM and on this machine. Records only; `experiments.quoted_table` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...cost import GenerationCost
from ...hardware import ACCELERATORS
from .claims import gap_by_device, gpu_cores

T = 1e12  # tera: the table's TFLOP and TB
H100_PEAK = ACCELERATORS["H100 SXM"].flops


@dataclass(frozen=True)
class QuotedLoop:
    """One loop of the 512 + 512 table: totals by the back-of-envelope conventions (2·N per position, the full
    S×S square) and exact (the full square's attention), its attention as causal attention needs it and as
    FlashAttention-2's tiles on an H100 compute it, and its roofline time on an H100 SXM and on this machine at
    its 2-byte matmul rate, each with attention as the kernel there computes it; `h100_full_s`: the H100's
    time had every full pass computed the whole square."""

    estimate: GenerationCost
    exact: GenerationCost
    causal_attention: int
    tiled_attention: int
    h100_s: float
    here_s: float
    h100_full_s: float


@dataclass(frozen=True)
class GpuShare:
    """The share of its datasheet peak that a committed GPU reference's bfloat16 matmul probe reached, and the
    H100's naive ÷ cached roofline ratio with its peak lowered to that share."""

    label: str  # the reference, as references.compare names it
    device: str  # its device, as the driver names it
    same_peak: bool  # whether its datasheet peak is the H100 SXM's (the same tensor cores)
    efficiency: float  # probe ÷ datasheet peak
    h100_ratio: float


@dataclass(frozen=True)
class QuotedTable:
    """Llama-3-8B, 512 + 512 tokens, 2-byte weights: both loops counted and priced."""

    model: str
    prompt: int
    new_tokens: int
    here_ridge: float  # FLOP/byte, at this machine's bfloat16 matmul rate
    h100_ridge: float
    naive: QuotedLoop
    cached: QuotedLoop
    gpu: GpuShare

    @property
    def h100_ratio(self) -> float:
        return self.naive.h100_s / self.cached.h100_s

    @property
    def here_ratio(self) -> float:
        return self.naive.here_s / self.cached.here_s

    @property
    def h100_full_ratio(self) -> float:
        """The H100's naive ÷ cached roofline time had every full pass computed the whole square."""
        return self.naive.h100_full_s / self.cached.h100_full_s

    def table(self):
        rows = [{"loop": name, "matmul, 2·N (TFLOP)": r.estimate.matmul_flops / T,
                 "matmul, exact (TFLOP)": r.exact.matmul_flops / T,
                 "attention, full S×S (TFLOP)": r.exact.attention_flops / T,
                 "attention, causal (TFLOP)": r.causal_attention / T, "weights (TB)": r.exact.weight_bytes / T,
                 "H100 SXM (s)": r.h100_s, "this machine (s)": r.here_s}
                for name, r in (("naive", self.naive), ("cached", self.cached))]
        caption = f"Llama-3-8B, {self.prompt}-token prompt + {self.new_tokens} new tokens, 2-byte weights"
        return (pd.DataFrame(rows).style.format(
            {"matmul, 2·N (TFLOP)": "{:,.1f}", "matmul, exact (TFLOP)": "{:,.1f}",
             "attention, full S×S (TFLOP)": "{:.2f}", "attention, causal (TFLOP)": "{:.2f}", "weights (TB)": "{:.2f}",
             "H100 SXM (s)": "{:.2f}",
             "this machine (s)": "{:,.0f}"}).hide(axis="index").set_caption(caption))

    def numbers(self) -> dict[str, object]:
        return {"l8_naive_tflop": self.naive.estimate.matmul_flops / T,
                "l8_cached_tflop": self.cached.estimate.matmul_flops / T,
                "l8_naive_attn": self.naive.estimate.attention_flops / T,
                "l8_cached_attn": self.cached.estimate.attention_flops / T,
                "l8_naive_causal": self.naive.causal_attention / T, "l8_naive_tiled": self.naive.tiled_attention / T,
                "l8_tile_excess_pct": 100 * (self.naive.tiled_attention / self.naive.causal_attention - 1),
                "h100_full_ratio": self.h100_full_ratio,
                "l8_weights_tb": self.naive.exact.weight_bytes / T,
                "l8_flop_ratio": self.naive.exact.flops / self.cached.exact.flops,
                "h100_naive_s": self.naive.h100_s, "h100_cached_s": self.cached.h100_s, "h100_ratio": self.h100_ratio,
                "device_gap_text": gap_by_device(self.here_ratio, self.here_ridge, self.h100_ratio, self.h100_ridge),
                "gpu_eff_pct": 100 * self.gpu.efficiency,
                "h100_real_ratio": self.gpu.h100_ratio, "h100_ridge": self.h100_ridge,
                "h100_peak_tflops": H100_PEAK / T,
                "gpu_cores_text": gpu_cores(self.gpu.device, self.gpu.same_peak)}

    def check(self) -> None:
        """The 512 + 512 figures by the back-of-envelope conventions (facts.md: 6,311 and 16.4 TFLOP of products,
        164 and 0.34 of attention), the same weight bytes for both loops, and the attention counts in order:
        causal < tiled < full square."""
        naive, cached = self.naive, self.cached
        assert round(naive.estimate.matmul_flops / T) == 6311 and round(cached.estimate.matmul_flops / T, 1) == 16.4, \
            (naive.estimate, cached.estimate)
        assert (round(naive.estimate.attention_flops / T) == 164
                and round(cached.estimate.attention_flops / T, 2) == 0.34), (naive.estimate, cached.estimate)
        assert naive.exact.weight_bytes == cached.exact.weight_bytes, (naive.exact, cached.exact)
        for loop in (naive, cached):
            assert loop.causal_attention < loop.tiled_attention < loop.exact.attention_flops, loop
