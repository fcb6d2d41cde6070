"""Chapter 4's account of what the naive loop wastes, by arithmetic alone: for each loop over a whole generation,
the time its weight products' FLOPs, its attention's FLOPs and its bytes would each take on a device (FLOPs ÷ the
peak, bytes ÷ the bandwidth, summed over the passes of `cost.generation_passes`), beside the roofline time of
its passes (`hardware.roofline_time_of_passes`, each pass part by part). Attention is counted as the kernel on
the device computes it (`attention.counted_passes`, "tiled").

Both loops read the weights once per pass, so their streaming times are equal: whatever the naive loop adds
must come from its arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware
from .attention import attention_total, counted_passes
from .claims import dominant_waste


@dataclass(frozen=True)
class LoopAccount:
    """One loop over a whole generation on one device: seconds of arithmetic and of streaming, summed over its
    passes, and the roofline time of its passes."""

    products_s: float  # the weight products' FLOPs ÷ the peak
    attention_s: float  # attention's FLOPs ÷ the peak
    weights_s: float  # the weights' bytes ÷ the bandwidth
    cache_s: float  # the KV cache's bytes ÷ the bandwidth (the naive loop keeps none)
    roofline_s: float


def loop_account(cfg, prompt: int, new_tokens: int, cached: bool, hw: hardware.Accelerator,
                 bytes_per_param: int = 2, device: str = "cuda") -> LoopAccount:
    """Account for one loop's generation of `new_tokens` after `prompt` tokens on `hw`, a `device` ("cuda",
    "cpu", ...): exact weight products, attention as that device's kernel computes it."""
    passes = counted_passes(cfg, prompt, new_tokens, cached, "tiled", device, bytes_per_param)
    total = cost.generation_cost(cfg, prompt, new_tokens, cached, bytes_per_param=bytes_per_param)
    return LoopAccount(total.matmul_flops / hw.flops, attention_total(passes) / hw.flops,
                       total.weight_bytes / hw.bandwidth, total.kv_bytes / hw.bandwidth,
                       hardware.roofline_time_of_passes(passes, hw))


@dataclass(frozen=True)
class WasteAccount:
    """Both loops' accounts for one generation of one model on one device."""

    label: str  # what the row shows: the model, the generation, the device
    naive: LoopAccount
    cached: LoopAccount

    @property
    def text(self) -> str:
        """Which of the naive loop's costs sets its time (`claims.dominant_waste`)."""
        n, c = self.naive, self.cached
        return dominant_waste(n.products_s, n.attention_s, n.weights_s, n.roofline_s - c.roofline_s, c.roofline_s)


def waste_account(model, prompt: int, new_tokens: int, hw: hardware.Accelerator, bytes_per_param: int = 2,
                  label: str | None = None, device: str = "cuda") -> WasteAccount:
    """Both loops' accounts for `model` (a name or config), `prompt` + `new_tokens`, on `hw` (a `device`)."""
    cfg = cost.get_config(model)
    label = label or f"{cfg.name}, {prompt} + {new_tokens} tokens, {hw.name}"
    return WasteAccount(label, *(loop_account(cfg, prompt, new_tokens, c, hw, bytes_per_param, device)
                                 for c in (False, True)))


@dataclass(frozen=True)
class Wastes:
    """The accounts the chapter shows: Llama-3-8B's 512 + 512 on an H100 (`h100`), and this machine's whole
    generation (`here`)."""

    h100: WasteAccount
    here: WasteAccount

    def numbers(self) -> dict[str, object]:
        n = self.h100.naive
        return {"h100_waste_text": self.h100.text, "here_waste_text": self.here.text,
                "h100_products_s": n.products_s, "h100_stream_s": n.weights_s, "h100_attention_s": n.attention_s,
                "h100_excess_s": self.h100.naive.roofline_s - self.h100.cached.roofline_s}

    def table(self):
        rows = [{"generation": account.label, "loop": loop, "weight products, arithmetic (s)": a.products_s,
                 "attention, arithmetic (s)": a.attention_s, "weights, streamed (s)": a.weights_s,
                 "KV cache, streamed (s)": a.cache_s, "roofline (s)": a.roofline_s}
                for account in (self.h100, self.here) for loop, a in (("naive", account.naive),
                                                                         ("cached", account.cached))]
        fmt = {c: "{:,.3f}" for c in rows[0] if c not in ("generation", "loop")}
        return pd.DataFrame(rows).style.format(fmt).hide(axis="index")


def wastes(generation, cfg) -> Wastes:
    """The chapter's two accounts: Llama-3-8B, 512 + 512 tokens, 2-byte weights, on an H100 SXM; and
    `generation`'s prompt and new tokens on the machine it ran on, in its dtype (a `records.Generation`, whose
    model's config is `cfg`)."""
    g = generation
    return Wastes(waste_account("llama-3-8b", 512, 512, hardware.ACCELERATORS["H100 SXM"]),
                  waste_account(cfg, g.prompt, g.new_tokens, g.here, g.bytes_per_param,
                                label=f"{g.model}, {g.prompt} + {g.new_tokens} tokens, this machine ({g.dtype})",
                                device=g.device))
