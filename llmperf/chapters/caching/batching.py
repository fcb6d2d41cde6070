"""Chapter 4's batch: what one step of B sequences costs with the KV cache and without it.

A step here is the pass that yields the next token of each of B sequences that are `position` tokens long.
With the cache it is a decode step: one new token per sequence, reading the weights once for the whole batch
and each sequence's cache. Without it, it is a full pass over all B·position tokens: the weights are still
read once, but every weight now does 2·B·position FLOPs. The cost model prices both part by part on a
device's roofline (`step_parts`); `predicted_batch_steps` does so for Llama-3-8B on an H100, `batch_steps`
also times SmolLM2's two steps on this machine at small batches (`forward_fn`, in turns).

Activations are left out of the bytes, as everywhere in `llmperf.cost`: the naive pass's grow with B·position,
but its arithmetic grows faster (see the chapter's exercise on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware
from ...cost import OpCost
from ...profiling import forward_fn
from ...timing import time_in_turns
from ..setup import Setup
from .attention import pass_attention_flops
from .claims import batch_gain

BATCHES = (1, 2, 4)  # the batches timed on this machine: small, so that the naive passes stay cheap on a CPU
PREDICTED_BATCHES = (1, 2, 4, 8, 16, 32, 64)  # the cost model's sweep, Llama-3-8B on an H100
LLAMA_POSITION = 1024  # tokens per sequence in the prediction: the 512 + 512 generation's last step


def step_parts(cfg, position: int, batch: int = 1, cached: bool = True, bytes_per_param: int = 2,
               device: str | None = None) -> dict[str, OpCost]:
    """The step that yields token position + 1 of each of `batch` sequences of `position` tokens, as the parts
    that meet the roofline separately ({"weights": ..., "attention": ...}, as `cost.decode_parts`).

    cached: a decode step attending to `position` positions, the new token's included (`cost.decode_parts`).
    naive: a full pass over every sequence's `position` tokens, logits for the last one only, the weights read
    once for the batch, no cache, and attention as `device`'s kernel computes it (`attention.kernel_tiles`;
    None: the full S×S square, `cost.generation_passes`'s naive pass at batch 1)."""
    cfg = cost.get_config(cfg)
    if cached:
        return cost.decode_parts(cfg, position, batch, bytes_per_param)
    flops = cost.prefill_flops(cfg, position, batch, attention="full", logits_for=1)
    attention = flops.attention if device is None else batch * pass_attention_flops(cfg, position, "tiled", device)
    weights = cost.decode_bytes(cfg, 1, 1, bytes_per_param).weights
    return {"weights": OpCost("weights", flops.matmul, weights, 1),
            "attention": OpCost("attention", attention, 0, 1)}


@dataclass(frozen=True)
class BatchSteps:
    """One step of each loop at each batch size, for sequences of `position` tokens: the roofline's time part
    by part on `device`, and, where they were timed, the measured medians (None where only predicted).
    `naive_arithmetic_s` and `naive_stream_s` split the naive step's weight products at batch 1: their FLOPs ÷
    the peak, their bytes ÷ the bandwidth."""

    model: str
    device: str
    position: int
    bytes_per_param: int
    batches: list[int]  # starting at 1
    cached_pred_s: list[float]
    naive_pred_s: list[float]
    naive_arithmetic_s: float
    naive_stream_s: float
    cached_s: list[float] | None = None
    naive_s: list[float] | None = None

    @property
    def measured(self) -> bool:
        return self.cached_s is not None and self.naive_s is not None

    def per_token(self, step_s: list[float]) -> list[float]:
        """Seconds per token: each step yields one token per sequence."""
        return [t / b for t, b in zip(step_s, self.batches)]

    def gain(self, step_s: list[float]) -> float:
        """Time per token at batch 1 ÷ at the largest batch: how much batching made each token cheaper."""
        per_token = self.per_token(step_s)
        return per_token[0] / per_token[-1]

    @property
    def naive_compute_bound(self) -> bool:
        """Whether the roofline puts the naive step's weight products at batch 1 on their arithmetic rather than
        their bytes (`naive_arithmetic_s`, `naive_stream_s`: the weights part alone)."""
        return self.naive_arithmetic_s >= self.naive_stream_s

    def numbers(self, prefix: str, where: str = "") -> dict[str, object]:
        """The glue names of this record, each starting with `prefix`: the batch range, the predicted times per
        token and gains, and the sentence chosen from the measured gains (from the predicted ones where
        nothing was measured)."""
        cached, naive = (self.cached_s, self.naive_s) if self.measured else (self.cached_pred_s, self.naive_pred_s)
        b_max = self.batches[-1]
        out = {
            f"{prefix}position": self.position, f"{prefix}b_max": b_max,
            f"{prefix}cached_1_ms": self.per_token(self.cached_pred_s)[0] * 1e3,
            f"{prefix}cached_max_ms": self.per_token(self.cached_pred_s)[-1] * 1e3,
            f"{prefix}naive_1_ms": self.per_token(self.naive_pred_s)[0] * 1e3,
            f"{prefix}naive_max_ms": self.per_token(self.naive_pred_s)[-1] * 1e3,
            f"{prefix}cached_gain_pred": self.gain(self.cached_pred_s),
            f"{prefix}naive_gain_pred": self.gain(self.naive_pred_s),
            f"{prefix}cached_gain": self.gain(cached), f"{prefix}naive_gain": self.gain(naive),
            f"{prefix}text": batch_gain(self.gain(cached), self.gain(naive), b_max, self.naive_compute_bound,
                                          where),
        }
        return out

    def table(self):
        """Time per token of each loop at each batch: predicted, and measured where it was."""
        ms = 1e3
        columns = {"batch": self.batches,
                   "cached, predicted (ms/token)": [t * ms for t in self.per_token(self.cached_pred_s)]}
        if self.measured:
            columns["cached, measured (ms/token)"] = [t * ms for t in self.per_token(self.cached_s)]
        columns["naive, predicted (ms/token)"] = [t * ms for t in self.per_token(self.naive_pred_s)]
        if self.measured:
            columns["naive, measured (ms/token)"] = [t * ms for t in self.per_token(self.naive_s)]
        caption = f"{self.model}, {self.position} tokens per sequence, {self.device}"
        return (pd.DataFrame(columns).style.format({c: "{:,.2f}" for c in columns if c != "batch"})
                .hide(axis="index").set_caption(caption))

    def check(self) -> None:
        """Batching makes a cached token cheaper, by at least half the batch's growth in the cost model, and a
        naive token no cheaper where the roofline puts the naive step on its arithmetic; where measured, a cached
        token gets cheaper by at least a quarter of the batch's growth, and by at least as much as a naive one,
        less 10 % for noise."""
        b_max = self.batches[-1]
        assert self.gain(self.cached_pred_s) >= b_max / 2, self.cached_pred_s
        assert not self.naive_compute_bound or self.gain(self.naive_pred_s) <= 1 + 1e-9, self.naive_pred_s
        if self.measured:
            cached, naive = self.gain(self.cached_s), self.gain(self.naive_s)
            assert cached >= b_max / 4, f"batch {b_max} made a cached token only {cached:.2f} times cheaper"
            assert cached >= 0.9 * naive, f"the naive loop gained more from batching: {naive:.2f} against {cached:.2f}"


def _predict(cfg, position: int, batches, hw: hardware.Accelerator, bytes_per_param: int, device: str
             ) -> dict[str, object]:
    """The roofline's times of both loops' steps at each batch on `hw` (a `device`), and the naive step at
    batch 1 split."""
    naive_1 = step_parts(cfg, position, 1, cached=False, bytes_per_param=bytes_per_param, device=device)
    return dict(
        position=position, bytes_per_param=bytes_per_param, batches=list(batches),
        cached_pred_s=[hardware.roofline_time_in_parts(step_parts(cfg, position, b, True, bytes_per_param), hw)
                       for b in batches],
        naive_pred_s=[hardware.roofline_time_in_parts(step_parts(cfg, position, b, False, bytes_per_param, device),
                                                      hw) for b in batches],
        naive_arithmetic_s=naive_1["weights"].flops / hw.flops, naive_stream_s=naive_1["weights"].bytes / hw.bandwidth)


def predicted_batch_steps(model: str = "llama-3-8b", device: str = "H100 SXM", position: int = LLAMA_POSITION,
                          batches=PREDICTED_BATCHES) -> BatchSteps:
    """Both loops' steps of `model` (2-byte weights) at each batch, on the table's `device`: the cost model only."""
    cfg = cost.get_config(model)
    hw = hardware.ACCELERATORS[device]
    return BatchSteps(model=cfg.name, device=device, **_predict(cfg, position, batches, hw, 2, "cuda"))


def batch_steps(s: Setup, here: hardware.Accelerator, batches=BATCHES, position: int | None = None,
                rounds: int | None = None) -> BatchSteps:
    """Time one step of each loop for each of `batches`, sequences of `position` tokens (default the step
    sweep's second length, `s.sizes.naive_positions[1]`: long enough for a naive pass's products to be sizeable
    matrices, short enough to stay cheap on a CPU), in turns for `rounds` rounds (default `s.sizes.repeat`),
    keeping the median; and predict each on `here` (this machine's probe)."""
    position = s.sizes.naive_positions[1] if position is None else position
    steps = {("cached", b): forward_fn(s.model, batch=b, context=position - 1) for b in batches}
    steps.update({("naive", b): forward_fn(s.model, batch=b, new_tokens=position) for b in batches})
    timings = time_in_turns(steps, rounds=rounds or s.sizes.repeat, device=s.device,
                                desc="one step of each loop, batch sweep")
    return BatchSteps(model=s.model.cfg.name, device=f"{s.device.type}, {here.name}",
                      **_predict(s.model.cfg, position, batches, here, s.dtype.itemsize, s.device.type),
                      cached_s=[timings["cached", b].median for b in batches],
                      naive_s=[timings["naive", b].median for b in batches])
