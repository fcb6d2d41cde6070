"""Chapter 3's context sweep: how much a longer context adds to a decode step. The cost model's KV cache of
Llama-3-8B and SmolLM2 against their weights, and SmolLM2's step timed at each context of the device's sweep."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware
from ...book import Collapsed
from ...device import dtype_name
from ...hardware import Accelerator
from ...profiling import forward_fn
from ...timing import time_in_turns
from . import claims

CONTEXTS = (1024, 8192)  # the two contexts at which the Llama-3-8B step is counted


@dataclass
class KvGrowth:
    """The KV cache against the weights, by the cost model, 2-byte elements: Llama-3-8B's cache and step at two
    contexts, and the cache per token of each model beside its weights (embedding table excluded)."""

    c_lo: int
    c_hi: int
    l8_kv_per_token: int  # bytes
    l8_weight_bytes: int
    l8_kv_lo: int  # one sequence's cache at c_lo
    l8_kv_hi: int
    l8_step_lo: int  # the step's bytes at c_lo
    l8_step_hi: int
    smol_kv_per_token: int
    smol_weight_bytes: int

    def numbers(self) -> dict[str, object]:
        l8_ratio = self.l8_kv_per_token / self.l8_weight_bytes  # KV bytes per token, per byte of weights
        smol_ratio = self.smol_kv_per_token / self.smol_weight_bytes
        return {
            "c_lo": self.c_lo, "c_hi": self.c_hi, "c_ratio": self.c_hi / self.c_lo, "l8_kv_tok": self.l8_kv_per_token,
            "l8_kv_1k_gb": self.l8_kv_lo / 1e9, "l8_kv_8k_gb": self.l8_kv_hi / 1e9,
            "l8_tpot_growth_pct": 100 * (self.l8_step_hi / self.l8_step_lo - 1),
            "smol_kv_tok": self.smol_kv_per_token, "smol_weight_mb": self.smol_weight_bytes / 1e6,
            "kv_ratio_x": smol_ratio / l8_ratio, "smol_kv_eq": 1 / smol_ratio, "l8_kv_eq": 1 / l8_ratio,
        }


def kv_growth(s) -> KvGrowth:
    """Count the caches of Llama-3-8B and of `s.model` (s: the chapter's setup), at CONTEXTS for Llama-3-8B."""
    llama, (lo, hi) = cost.get_config("llama-3-8b"), CONTEXTS
    return KvGrowth(
        c_lo=lo, c_hi=hi, l8_kv_per_token=cost.kv_bytes_per_token(llama),
        l8_weight_bytes=cost.decode_bytes(llama, 1).weights, l8_kv_lo=cost.kv_cache_bytes(llama, lo),
        l8_kv_hi=cost.kv_cache_bytes(llama, hi), l8_step_lo=cost.decode_bytes(llama, lo).total,
        l8_step_hi=cost.decode_bytes(llama, hi).total, smol_kv_per_token=cost.kv_bytes_per_token(s.model.cfg),
        smol_weight_bytes=cost.decode_bytes(s.model.cfg, 1).weights)


@dataclass
class ContextSweep:
    """SmolLM2's decode step at each context length (cached tokens per sequence; the step attends to one more),
    at one batch size: measured median time (TPOT), the cost model's bytes and KV bytes, and the roofline
    part by part on this machine's probe (whose read bandwidth it keeps)."""

    device_type: str
    dtype: str
    batch: int
    contexts: list[int]
    tpot_s: list[float]  # measured median seconds per step
    nbytes: list[int]  # cost.decode_bytes per step
    kv_bytes: list[int]  # of which the KV cache read
    roof_s: list[float]
    bandwidth: float  # this machine's probed read bandwidth (bytes/s)
    floor_s: list[float] | None = None  # the roofline on the faster probe (`hardware.faster_probe`); None: roof_s

    @property
    def predicted_growth(self) -> list[float]:
        """The bytes model: TPOT in proportion to bytes moved, relative to the shortest context."""
        return [b / self.nbytes[0] for b in self.nbytes]

    @property
    def measured_growth(self) -> list[float]:
        return [t / self.tpot_s[0] for t in self.tpot_s]

    @property
    def context_ratio(self) -> float:
        return self.contexts[-1] / self.contexts[0]

    def numbers(self) -> dict[str, object]:
        added_s, added_bytes = self.tpot_s[-1] - self.tpot_s[0], self.nbytes[-1] - self.nbytes[0]
        kv_pct = 100 * added_bytes / added_s / self.bandwidth if added_s > 0 else 0.0
        rest_pct = 100 * self.nbytes[0] / self.tpot_s[0] / self.bandwidth
        return {
            "mismatch_text": claims.context_mismatch(added_s, kv_pct, rest_pct),
            "ctx_lo": self.contexts[0], "ctx_hi": self.contexts[-1], "ctx_x": self.context_ratio,
            "tpot_lo_ms": self.tpot_s[0] * 1e3, "tpot_hi_ms": self.tpot_s[-1] * 1e3,
            "tpot_x": self.measured_growth[-1], "pred_x": self.predicted_growth[-1],
            "kv_share_hi_pct": 100 * self.kv_bytes[-1] / self.nbytes[-1], "sweep_batch": self.batch,
        }

    def table(self):
        df = pd.DataFrame({
            "context (tokens)": self.contexts, "KV read (MB)": [k / 1e6 for k in self.kv_bytes],
            "KV share (%)": [100 * k / b for k, b in zip(self.kv_bytes, self.nbytes)],
            "predicted ×": self.predicted_growth, "TPOT (ms)": [t * 1e3 for t in self.tpot_s],
            "measured ×": self.measured_growth,
        })
        fmt = {"context (tokens)": "{:,d}", "KV read (MB)": "{:.1f}", "KV share (%)": "{:.1f}",
               "predicted ×": "{:.3f}", "TPOT (ms)": "{:.2f}", "measured ×": "{:.3f}"}
        return Collapsed(df.style.format(fmt).hide(axis="index"), "sweep")

    def check(self) -> None:
        """At batch 1, 16x (or more) the context costs less than 2x the TPOT; and no step beats its roofline on the
        faster probe (`floor_s`) by more than the probe's own error (10 %)."""
        ratio, growth = self.context_ratio, self.measured_growth[-1]
        assert self.batch > 1 or (ratio >= 16 and growth < 2), f"{ratio:.0f}x the context cost {growth:.2f}x"
        ratios = [t / r for t, r in zip(self.tpot_s, self.floor_s or self.roof_s)]
        assert min(ratios) >= 0.9, f"context sweep beat the roofline: {[round(x, 3) for x in ratios]}"


def context_sweep(s, here: Accelerator, batch: int = 1, rounds: int | None = None) -> ContextSweep:
    """Time one decode step of `batch` sequences at each context of `s.sizes.decode_contexts`, in turns for
    `rounds` rounds (default 2 · sizes.repeat), and predict each on `here` (this machine's probe); `check` holds
    each to the roofline on the faster of `here` and a probe taken right after the steps (`hardware.faster_probe`)."""
    cfg, bpp, contexts = s.model.cfg, s.dtype.itemsize, list(s.sizes.decode_contexts)
    timings = time_in_turns({c: forward_fn(s.model, batch=batch, context=c) for c in contexts},
                                rounds=rounds or 2 * s.sizes.repeat, device=s.device, desc="decode step, context sweep")
    faster = hardware.faster_probe(here, s.device)
    parts = [cost.decode_parts(cfg, c + 1, batch, bpp) for c in contexts]
    return ContextSweep(
        device_type=s.device.type, dtype=dtype_name(s.dtype), batch=batch, contexts=contexts,
        tpot_s=[timings[c].median for c in contexts],
        nbytes=[cost.decode_bytes(cfg, c + 1, batch, bpp).total for c in contexts],
        kv_bytes=[cost.kv_cache_bytes(cfg, c + 1, batch, bpp) for c in contexts],
        roof_s=[hardware.roofline_time_in_parts(p, here) for p in parts], bandwidth=here.bandwidth,
        floor_s=[hardware.roofline_time_in_parts(p, faster) for p in parts])
