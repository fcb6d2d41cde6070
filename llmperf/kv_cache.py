"""A static key/value cache: every buffer allocated once, up front.

During decoding, the keys and values of earlier positions never change, so the
model stores them instead of recomputing them. This cache preallocates one key
and one value buffer per layer, each of shape

    (batch, n_kv_heads, capacity, head_dim)

and writes new entries in place. Nothing is allocated while generating, so the
memory is known before the first token (`nbytes`) and a decode step always
touches the same addresses, which is what CUDA Graph capture needs (chapter 5).
"""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig


class CacheOverflowError(ValueError):
    """Raised when a write would go past the cache's capacity."""


class KVCache(nn.Module):
    """Preallocated keys and values for every layer.

    `static=False` (the default) lets attention read only the filled prefix of the
    buffers, which is the cheapest on a CPU. `static=True` makes attention read the
    whole capacity under a mask, so every step has identical shapes: the form a
    CUDA Graph can capture and replay.
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, capacity: int,
                 dtype: torch.dtype = torch.float32, device: "torch.device | str | None" = None,
                 static: bool = False):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 token, got {capacity}.")
        if capacity > cfg.max_seq_len:
            raise CacheOverflowError(
                f"A cache of {capacity} tokens exceeds {cfg.name}'s max_seq_len of {cfg.max_seq_len}: "
                "the model was never trained on positions that far. Ask for fewer tokens.")
        self.n_layers, self.batch_size, self.capacity = cfg.n_layers, batch_size, capacity
        self.static = static
        shape = (cfg.n_layers, batch_size, cfg.n_kv_heads, capacity, cfg.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers together (the whole capacity)."""
        return self.k.nbytes + self.v.nbytes

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write `k`, `v` of shape (B, n_kv_heads, S, head_dim) at positions `input_pos` (S,).

        Returns this layer's whole key and value buffers, (B, n_kv_heads, capacity, head_dim);
        the caller decides how much of them to read.
        """
        # input_pos is checked by the model before any layer runs (see check_positions).
        self.k[layer].index_copy_(2, input_pos, k)
        self.v[layer].index_copy_(2, input_pos, v)
        return self.k[layer], self.v[layer]

    def check_positions(self, batch_size: int, last_pos: int) -> None:
        """Fail clearly before a write that would not fit."""
        if batch_size != self.batch_size:
            raise ValueError(
                f"This cache was allocated for batch size {self.batch_size}, but the tokens have "
                f"batch size {batch_size}. Allocate a new KVCache for this batch.")
        if last_pos >= self.capacity:
            raise CacheOverflowError(
                f"Position {last_pos} does not fit in a KV cache of capacity {self.capacity} tokens. "
                "Allocate a cache with capacity >= prompt length + max_new_tokens.")

    def reset(self) -> None:
        """Zero the buffers (not needed for correctness: positions are overwritten before use)."""
        self.k.zero_()
        self.v.zero_()
