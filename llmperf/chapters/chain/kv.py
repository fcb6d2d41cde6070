"""Chapter 1's primer on the KV cache: what it holds per token, by the cost model, and the cache the chain used.

Arithmetic only: `kv_primer` reads model configurations and `cost`; the one measured number, the bytes of the
cache the chain allocated, comes from `ChainLinks` (the KVCache's own buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import cost
from ...config import get_config

MODELS = ("smollm2-135m", "llama-3-8b")  # the course's model and the usual worked example
SERVING_BYTES = 2  # bfloat16 or float16: the usual serving dtype
CONTEXT = 8_192  # the context the table sets the cache against a step's weights at (both models' longest)


@dataclass
class KVRow:
    """One model's cache per token by the cost model, at `SERVING_BYTES` bytes per element."""

    model: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    bytes_per_token: int  # 2 (key and value) × layers × KV heads × head_dim × bytes per element
    cache_at_context: int  # bytes a step reads from the cache of a `context`-token sequence
    step_weights: int  # bytes of weights the same step reads


@dataclass
class KVPrimer:
    """The KV cache per token for each model in `MODELS`, and its read at `context` tokens against a step's weights."""

    context: int
    bytes_per_element: int
    rows: list[KVRow]

    def row(self, model: str) -> KVRow:
        return next(r for r in self.rows if r.model == model)

    def table(self):
        import pandas as pd

        df = pd.DataFrame([{"model": r.model, "layers": r.n_layers, "query heads": r.n_heads, "KV heads": r.n_kv_heads,
                            "head dim": r.head_dim, "KV bytes per token": r.bytes_per_token,
                            f"cache read at {self.context:,} tokens (MB)": r.cache_at_context / 1e6,
                            "weights read (MB)": r.step_weights / 1e6} for r in self.rows])
        return (df.style.format({"KV bytes per token": "{:,}", f"cache read at {self.context:,} tokens (MB)": "{:,.0f}",
                                 "weights read (MB)": "{:,.0f}"}).hide(axis="index")
                .set_caption(f"One decode step at {self.bytes_per_element} bytes per element"))

    def numbers(self) -> dict:
        smol, llama = self.row("smollm2-135m"), self.row("llama-3-8b")
        return {"kv_bytes_el": self.bytes_per_element, "kv_context": self.context,
                "kv_smol_layers": smol.n_layers, "kv_smol_heads": smol.n_kv_heads, "kv_smol_hd": smol.head_dim,
                "kv_smol_token": smol.bytes_per_token, "kv_l8_token": llama.bytes_per_token,
                "kv_l8_ctx_gb": llama.cache_at_context / 1e9,
                "kv_l8_ctx_pct": 100 * llama.cache_at_context / llama.step_weights,
                "kv_smol_ctx_pct": 100 * smol.cache_at_context / smol.step_weights}

    def check(self) -> None:
        for r in self.rows:
            assert r.bytes_per_token == 2 * r.n_layers * r.n_kv_heads * r.head_dim * self.bytes_per_element, r


def kv_primer(models=MODELS, context: int = CONTEXT, bytes_per_element: int = SERVING_BYTES) -> KVPrimer:
    """Each model's KV bytes per token (`cost.kv_bytes_per_token`), and what one decode step reads at `context`
    tokens: the cache (`cost.kv_cache_bytes`) and the weights (`cost.decode_bytes`)."""
    rows = []
    for name in models:
        cfg = get_config(name)
        rows.append(KVRow(cfg.name, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                          cost.kv_bytes_per_token(cfg, bytes_per_element),
                          cost.kv_cache_bytes(cfg, context, 1, bytes_per_element),
                          cost.decode_bytes(cfg, context, 1, bytes_per_element).weights))
    return KVPrimer(context, bytes_per_element, rows)
