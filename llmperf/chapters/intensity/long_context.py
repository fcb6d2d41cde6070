"""Chapter 3's long context: where one sequence's KV cache outgrows the weights, and the levers that shrink it,
each priced by the cost model (`llmperf.cost`, no measurement).

The model is Llama-3-8B's shapes (Llama-3.1-8B has the same shapes and a 131,072-token window) at
`CONTEXT` tokens, batch 1, 2-byte weights. Each lever changes only what the cache holds per token:

- MHA, GQA, MQA: the number of key/value heads (`n_kv_heads` 32, 8 as built, 1), through
  `cfg.with_(n_kv_heads=...)`; the cost model then counts the smaller or larger wk and wv too;
- 8-bit keys and values: GQA's cache at 1 byte per element (`kv_bytes_per_element=1`; the scales that
  an 8-bit format keeps beside each block are left out);
- MLA (DeepSeek-V2's multi-head latent attention): one compressed latent of `MLA_LATENT` values and a
  rotary key of `MLA_ROPE` values per token per layer, shared by every head, in place of the keys and
  values. The cost model has no MLA form, so that row keeps Llama-3-8B's weights as the cost model counts
  them and adds the latent's bytes by the same rule (the cache read once, the new token's entry written).

Bytes in GB are 10⁹ bytes. Invariant: every row but MLA's step bytes is `cost.decode_bytes(...).total`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware
from ..serving.sums import UTILISATION
from .counts import users_that_fit

CONTEXT = 131_072  # tokens: 128 · 1024, Llama-3.1-8B's context window
MLA_LATENT, MLA_ROPE = 512, 64  # DeepSeek-V2's cached latent and its decoupled rotary key, per token per layer
DEVICE = "H100 SXM"  # the accelerator on which each step's floor is shown


@dataclass
class Lever:
    """One way of holding a sequence's keys and values: bytes per token (every layer) and the step it gives."""

    name: str  # "GQA", "MHA", "MQA", "GQA, 8-bit K/V", "MLA"
    label: str  # as the table names it
    weights: int  # bytes of every parameter (MHA's and MQA's wk and wv differ from GQA's)
    per_token: int  # bytes of cache per token, all layers
    cache: int  # bytes for CONTEXT tokens
    step_bytes: int  # one decode step at batch 1, CONTEXT positions attended
    floor_s: float  # step_bytes ÷ DEVICE's bandwidth
    fits: bool  # weights and cache within a server's share (UTILISATION) of DEVICE's memory


@dataclass
class LongContext:
    """Llama-3-8B at `context` tokens, one sequence, 2-byte weights: its weights in memory (every parameter) and
    each lever's cache and decode step (`levers`, GQA as built first)."""

    context: int
    weight_bytes: int  # cost.weight_bytes: every parameter, the embedding table included
    step_weight_bytes: int  # what a step reads of them (cost.decode_bytes(...).weights)
    device: str
    levers: list[Lever]

    def lever(self, name: str) -> Lever:
        return next(lv for lv in self.levers if lv.name == name)

    def numbers(self) -> dict[str, object]:
        gqa, mha, mqa = self.lever("GQA"), self.lever("MHA"), self.lever("MQA")
        mla, kv8 = self.lever("MLA"), self.lever("GQA, 8-bit K/V")
        return {
            "lc_ctx": self.context, "lc_weights_gb": self.weight_bytes / 1e9,
            "lc_gqa_tok": gqa.per_token, "lc_gqa_gb": gqa.cache / 1e9, "lc_gqa_gib": gqa.cache / 2**30,
            "lc_over_weights": gqa.cache / self.weight_bytes,
            "lc_equal_tokens": self.weight_bytes / gqa.per_token,
            "lc_gqa_step_gb": gqa.step_bytes / 1e9, "lc_gqa_cache_pct": 100 * gqa.cache / gqa.step_bytes,
            "lc_step_x": gqa.step_bytes / self.step_weight_bytes, "lc_device": self.device,
            "lc_mha_gb": mha.cache / 1e9, "lc_mqa_gb": mqa.cache / 1e9, "lc_mla_gb": mla.cache / 1e9,
            "lc_kv8_gb": kv8.cache / 1e9, "lc_mla_values": MLA_LATENT + MLA_ROPE,
            "lc_mla_latent": MLA_LATENT, "lc_mla_rope": MLA_ROPE, "lc_mla_x": gqa.per_token / mla.per_token,
            "lc_mha_x": mha.per_token / gqa.per_token,
        }

    def table(self):
        rows = [{"cache": lv.label, "per token (KiB)": lv.per_token / 1024,
                 f"{self.context:,d} tokens (GB)": lv.cache / 1e9,
                 "÷ weights": lv.cache / self.weight_bytes, "step reads (GB)": lv.step_bytes / 1e9,
                 f"{self.device} floor (ms)": lv.floor_s * 1e3,
                 f"fits {100 * UTILISATION:.0f} % of an {self.device}": "yes" if lv.fits else "no"}
                for lv in self.levers]
        fmt = {"per token (KiB)": "{:,.1f}", f"{self.context:,d} tokens (GB)": "{:,.2f}", "÷ weights": "{:.2f}",
               "step reads (GB)": "{:,.2f}", f"{self.device} floor (ms)": "{:,.2f}"}
        return pd.DataFrame(rows).style.format(fmt).hide(axis="index")

    def check(self) -> None:
        """GQA's cache outgrows the weights at this context, and every lever's cache is smaller than MHA's."""
        gqa, mha = self.lever("GQA"), self.lever("MHA")
        assert gqa.cache > self.weight_bytes, (gqa.cache, self.weight_bytes)
        assert all(lv.cache < mha.cache for lv in self.levers if lv is not mha)


def mla_bytes_per_token(cfg, bytes_per_element: int = 2) -> int:
    """Bytes MLA caches per token, all layers: the latent and the rotary key, once per layer (not per head)."""
    return cfg.n_layers * (MLA_LATENT + MLA_ROPE) * bytes_per_element


def long_context(model: str = "llama-3-8b", context: int = CONTEXT, device: str = DEVICE) -> LongContext:
    """Price each lever for one sequence of `model` at `context` tokens (2-byte weights) on `device`."""
    cfg, hw = cost.get_config(model), hardware.ACCELERATORS[device]

    def priced(name, label, c, per_token, step):
        weights, cache = cost.weight_bytes(c, 2), context * per_token
        return Lever(name, label, weights, per_token, cache, step, step / hw.bandwidth,
                     users_that_fit(hw, weights, cache) >= 1)

    def lever(name, label, c, kv_elem=2):
        step = cost.decode_bytes(c, context, 1, 2, kv_bytes_per_element=kv_elem).total
        return priced(name, label, c, cost.kv_bytes_per_token(c, kv_elem), step)

    heads = f"{cfg.n_kv_heads} KV heads"
    mla_token = mla_bytes_per_token(cfg)
    weights_read = cost.decode_bytes(cfg, context).weights
    mla_step = weights_read + (context + 1) * mla_token  # the cache read, and the new token's entry written
    levers = [lever("GQA", f"GQA, {heads} (as built)", cfg),
              lever("MHA", f"MHA, {cfg.n_heads} KV heads", cfg.with_(n_kv_heads=cfg.n_heads)),
              lever("MQA", "MQA, 1 KV head", cfg.with_(n_kv_heads=1)),
              lever("GQA, 8-bit K/V", f"GQA, {heads}, 8-bit K/V", cfg, kv_elem=1),
              priced("MLA", f"MLA, {MLA_LATENT} + {MLA_ROPE} latent", cfg, mla_token, mla_step)]
    return LongContext(context, cost.weight_bytes(cfg, 2), weights_read, device, levers)
