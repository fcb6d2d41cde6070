"""Chapter 2's clock: TTFT over a sweep of prompt lengths, and batch 1 against batch B.

- `model_for(s, name)`: the chapter's choice of model. `s.sizes` names one per
  experiment: the setup's SmolLM2 on a CPU, a larger preset with random weights on
  a GPU, where SmolLM2's prefill is all fixed cost.
- `ttft_sweep(s)`: the matmul rate at the model's largest product of the longest
  prefill and of a large square product (`hardware.measure_matmul`), then one
  prefill per prompt length (`profiling.forward_fn`: an empty KV cache, logits for
  the last position), the lengths timed in turns and each keeping its fastest run,
  with the cost model's FLOPs of each pass.
- `batch_prefill(s, matmul_rate)`: prefills of one length at batch 1 and batch B,
  taking turns, each keeping its median run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import cost, hardware
from ...book import Collapsed
from ...config import get_config
from ...device import dtype_name
from ...fit import Fit, poly_fit
from ...profiling import forward_fn, op_counts
from ...timing import time_in_turns
from ...weights import build_model
from .claims import (batch_gain_text, batch_model_text, batch_ttft_text, doubling_text, gap_text, growth_exponent,
                     intercept_text, quadratic_part, share_of_probe, sweep_model_text)


def model_for(s, name: str):
    """The model an experiment of the chapter times: the setup's own, `s.model`, when `name` is its preset's name,
    else preset `name` with random weights (`build_model`: they time about like real ones, not exactly), built on
    `s.device` in `s.dtype`."""
    return s.model if name == s.model.cfg.name else build_model(name, s.device, s.dtype)


def _causal(model: str, seq_len: int, batch: int = 1) -> cost.Flops:
    """The FLOPs of the pass `forward_fn` runs: causal attention, logits for the last position."""
    return cost.prefill_flops(model, seq_len, batch=batch, attention="causal", logits_for=1)


@dataclass
class TTFTSweep:
    """TTFT at each prompt length against the cost model's FLOPs at the probed matmul rate."""

    model: str  # the preset timed
    setup_model: bool  # whether it is the setup's own model (SmolLM2, real weights)
    device: str
    dtype: str
    probe_shape: list[int]  # (m, k, n): the longest prompt's rows times the MLP's gate matrix
    matmul_rate: float  # FLOP/s at probe_shape, the prediction's rate
    square_rate: float  # FLOP/s of a large square product
    lengths: list[int]  # prompt lengths S
    ttft: list[float]  # seconds: the fastest run at each length
    flops: list[int]  # causal attention, logits for the last position
    flops_full: list[int]  # the same pass with full attention
    attention: list[int]  # the causal attention part of `flops`
    attention_full: list[int]  # the attention part of `flops_full`
    ops_per_pass: int  # aten ops one decode step of the model dispatches (a prefill runs the same ones)

    @property
    def predicted(self) -> list[float]:
        """Seconds: each pass's causal FLOPs at the probed rate."""
        return [f / self.matmul_rate for f in self.flops]

    @property
    def achieved(self) -> list[float]:
        """FLOP/s: each pass's causal FLOPs over its TTFT."""
        return [f / t for f, t in zip(self.flops, self.ttft)]

    @property
    def per_token(self) -> list[float]:
        """Seconds per prompt token at each length."""
        return [t / S for t, S in zip(self.ttft, self.lengths)]

    @property
    def fit(self) -> Fit:
        """TTFT ≈ a + b·S + c·S² (seconds), least squares."""
        return poly_fit(self.lengths, self.ttft, 2)

    @property
    def pairs(self) -> list[tuple[int, int, float]]:
        """(S, next S, TTFT at next S ÷ TTFT at S) for each pair of consecutive lengths of the sweep."""
        return [(a, b, tb / ta) for a, b, ta, tb in zip(self.lengths, self.lengths[1:], self.ttft, self.ttft[1:])]

    def ratio_table(self):
        """Each pair of consecutive lengths: how many times longer the prompt, the measured TTFT and the predicted
        one, and the exponent k of the measured growth (TTFT ratio = length ratio ** k)."""
        rows = [{"from (tokens)": a, "to (tokens)": b, "length ratio": b / a, "TTFT ratio, measured": r,
                 "TTFT ratio, predicted": fb / fa, "exponent k": growth_exponent(b / a, r) if b > a else float("nan")}
                for (a, b, r), fa, fb in zip(self.pairs, self.flops, self.flops[1:])]
        return (pd.DataFrame(rows).style.format("{:.2f}").format("{:,}", subset=["from (tokens)", "to (tokens)"])
                .hide(axis="index").set_caption("TTFT ratio against prompt length ratio"))

    def predicted_curve(self, points: int = 200) -> tuple[list[int], list[float], list[float]]:
        """(S, causal seconds, full seconds) on a grid over the sweep: the prediction's two lines."""
        grid = [int(S) for S in np.linspace(self.lengths[0], self.lengths[-1], points).round()]
        full = [cost.prefill_flops(self.model, S, attention="full", logits_for=1).total for S in grid]
        return (grid, [_causal(self.model, S).total / self.matmul_rate for S in grid],
                [f / self.matmul_rate for f in full])

    def numbers(self) -> dict[str, object]:
        fit, per_token, achieved = self.fit, self.per_token, self.achieved
        S_max, cheapest, best = self.lengths[-1], int(np.argmin(per_token)), int(np.argmax(achieved))
        quad_share = fit.coeffs[2] * S_max**2 / float(fit(S_max))
        cfg = get_config(self.model)
        return {
            "dtype_name": self.dtype, "matmul_rate_gflops": self.matmul_rate / 1e9,
            "square_rate_gflops": self.square_rate / 1e9, "probe_m": self.probe_shape[0],
            "sweep_model_text": sweep_model_text(self.model, self.setup_model),
            "S_min": self.lengths[0], "S_max": S_max, "ttft_min_ms": self.ttft[0] * 1e3,
            "ttft_max_ms": self.ttft[-1] * 1e3, "pred_max_ms": self.predicted[-1] * 1e3,
            "meas_over_pred_max": self.ttft[-1] / self.predicted[-1], "achieved_gflops": achieved[-1] / 1e9,
            "gap_text": gap_text(self.ttft[-1] / self.predicted[-1], S_max),
            "sweep_d": cfg.d_model, "sweep_head_dim": cfg.head_dim,
            "achieved_text": share_of_probe(achieved[-1], self.matmul_rate, "the model's largest product alone"),
            "achieved_best_gflops": achieved[best] / 1e9, "achieved_best_S": self.lengths[best],
            "doubling_text": doubling_text(self.pairs),
            "intercept_text": intercept_text(fit.coeffs[0] * 1e3, self.ttft[0] * 1e3, self.lengths[0]),
            "fit_r2": fit.r2,
            "quad_text": quadratic_part(fit.coeffs[2] * 1e9, 100 * quad_share, S_max),
            "per_token_min_us": per_token[cheapest] * 1e6, "per_token_min_S": self.lengths[cheapest],
            "per_token_max_us": per_token[-1] * 1e6,
            "flops_per_token_growth": (self.flops[-1] / S_max) / (self.flops[cheapest] / self.lengths[cheapest]),
            "attn_share_pct": 100 * self.attention[-1] / self.flops[-1],
            "attn_full_share_pct": 100 * self.attention_full[-1] / self.flops_full[-1],
            "n_ops_prefill": self.ops_per_pass,
        }

    def table(self):
        df = pd.DataFrame({"prompt (tokens)": self.lengths, "FLOPs (GFLOP)": [f / 1e9 for f in self.flops],
                           "predicted (ms)": [t * 1e3 for t in self.predicted],
                           "measured (ms)": [t * 1e3 for t in self.ttft],
                           "measured ÷ predicted": [t / p for t, p in zip(self.ttft, self.predicted)],
                           "achieved (GFLOP/s)": [r / 1e9 for r in self.achieved]})
        shown = (df.style.format("{:,.1f}").format("{:,}", subset=["prompt (tokens)"])
                 .format("{:.2f}", subset=["measured ÷ predicted"]).hide(axis="index")
                 .set_caption(f"{self.model} prefill, {self.device}, {self.dtype}"))
        return Collapsed(shown, "sweep")

    def check(self) -> None:
        # TTFT grows with the prompt, and bends upward: per prompt token, the longest prompt costs more than the
        # cheapest point of the sweep (the attention term's S² at work). Each point is the fastest of its runs.
        assert self.ttft[-1] > 2 * self.ttft[0], self.ttft
        per_token = self.per_token
        assert per_token[-1] > min(per_token), f"per-token prefill time did not rise at the longest prompt: {per_token}"


def ttft_sweep(s, lengths=None) -> TTFTSweep:
    """Probe the matmul rate, then time one prefill per prompt length (default `s.sizes.prefill_lengths`) of
    the model `s.sizes.prefill_model` names, `s.sizes.repeat` rounds in turns, each length keeping its fastest run
    (noise only ever adds time), and count one decode step's ops of that model."""
    lengths = [int(S) for S in (s.sizes.prefill_lengths if lengths is None else lengths)]
    model = model_for(s, s.sizes.prefill_model)
    cfg = model.cfg
    probe_shape = (lengths[-1], cfg.d_model, cfg.d_ff)  # (S, d_model) @ (d_model, d_ff): the MLP's gate and up
    matmul_rate = hardware.measure_matmul(s.device, s.dtype, shape=probe_shape)
    square_rate = hardware.measure_matmul(s.device, s.dtype)
    # The lengths in turn, round after round, so that a burst of other work lands on one run of several lengths,
    # not on every run of one.
    runs = time_in_turns({S: forward_fn(model, new_tokens=S) for S in lengths}, rounds=s.sizes.repeat,
                             device=s.device, desc="prefill, length sweep")
    causal = [_causal(cfg, S) for S in lengths]
    full = [cost.prefill_flops(cfg, S, attention="full", logits_for=1) for S in lengths]
    return TTFTSweep(cfg.name, model is s.model, s.device.type, dtype_name(s.dtype), list(probe_shape),
                     float(matmul_rate), float(square_rate), lengths, [runs[S].min for S in lengths],
                     [f.total for f in causal], [f.total for f in full], [f.attention for f in causal],
                     [f.attention for f in full], sum(op_counts(model, context=1)["ops"].values()))


@dataclass
class BatchedPrefill:
    """Prefills of `prompt_len` tokens at batch 1 and batch `batch`, against the probed matmul rate."""

    model: str
    setup_model: bool  # whether it is the setup's own model (SmolLM2, real weights)
    prompt_len: int
    batch: int  # B
    time_1: float  # seconds: the median pass at batch 1
    time_b: float  # the same at batch B
    flops_1: int  # causal FLOPs of the batch-1 pass, logits for the last position
    flops_b: int  # the same at batch B
    matmul_rate: float  # FLOP/s of the sweep's probe

    @property
    def tokens_per_s(self) -> tuple[float, float]:
        """Prompt tokens per second at batch 1 and at batch B."""
        return self.prompt_len / self.time_1, self.batch * self.prompt_len / self.time_b

    @property
    def gain(self) -> float:
        """Throughput at batch B over throughput at batch 1."""
        one, b = self.tokens_per_s
        return b / one

    @property
    def ttft_growth(self) -> float:
        """How many times longer each request waits for its first token at batch B."""
        return self.time_b / self.time_1

    def rate_pct(self) -> tuple[float, float]:
        """Achieved FLOP rate at batch 1 and at batch B, in % of the matmul probe."""
        return 100 * self.flops_1 / self.time_1 / self.matmul_rate, 100 * self.flops_b / self.time_b / self.matmul_rate

    def numbers(self) -> dict[str, object]:
        (tps_1, tps_b), (pct_1, pct_b) = self.tokens_per_s, self.rate_pct()
        return {"batch_B": self.batch, "batch_len": self.prompt_len,
                "batch_model_text": batch_model_text(self.model, self.setup_model),
                "batch_ttft_x": self.ttft_growth, "tps_1": tps_1, "tps_B": tps_b, "batch_gain": self.gain,
                "batch_ttft_text": batch_ttft_text(self.ttft_growth, self.batch),
                "batch_gain_text": batch_gain_text(self.gain, self.batch),
                "batch_rate_1_pct": pct_1, "batch_rate_B_pct": pct_b}

    def table(self):
        times, flops = (self.time_1, self.time_b), (self.flops_1, self.flops_b)
        df = pd.DataFrame({"batch": [1, self.batch], "time (ms)": [t * 1e3 for t in times],
                           "tokens/s": list(self.tokens_per_s),
                           "GFLOP/s": [f / t / 1e9 for f, t in zip(flops, times)],
                           "% of matmul probe": list(self.rate_pct())})
        return (df.style.format({"time (ms)": "{:,.1f}", "tokens/s": "{:,.0f}", "GFLOP/s": "{:,.1f}",
                                 "% of matmul probe": "{:.0f}"}).hide(axis="index")
                .set_caption(f"{self.model}, prompts of {self.prompt_len:,} tokens"))

    def check(self) -> None:
        # Batching prefill buys little throughput, and costs each request about B times the TTFT.
        B = self.batch
        assert self.gain <= 1.6, f"batch-{B} prefill throughput gain {self.gain:.2f}x"
        assert self.ttft_growth >= B / 2, f"batch {B} took only {self.ttft_growth:.2f}x batch 1"


def batch_prefill(s, matmul_rate: float, batch: int = 4) -> BatchedPrefill:
    """Time prefills of `s.sizes.prefill_batch_len` tokens of the model `s.sizes.prefill_batch_model` names at
    batch 1 and `batch`, taking turns for `s.sizes.repeat` rounds, each keeping its median run; `matmul_rate` is
    the sweep's probe (`TTFTSweep.matmul_rate`), which the achieved rates are set against."""
    L = s.sizes.prefill_batch_len
    model = model_for(s, s.sizes.prefill_batch_model)
    timings = time_in_turns({b: forward_fn(model, batch=b, new_tokens=L) for b in (1, batch)},
                                rounds=s.sizes.repeat, device=s.device)  # the two batch sizes take turns
    return BatchedPrefill(model.cfg.name, model is s.model, L, batch, timings[1].median, timings[batch].median,
                          _causal(model.cfg, L).total, _causal(model.cfg, L, batch).total, float(matmul_rate))
