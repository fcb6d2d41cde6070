"""A static KV cache: every buffer allocated once, up front, and the rule for what attention reads.

During decoding, the keys and values of earlier positions never change, so the
model stores them instead of recomputing them. This cache preallocates one key
and one value buffer per layer, each of shape

    (batch, n_kv_heads, capacity, head_dim)

and writes new entries in place. Nothing is allocated while generating, so the
memory is known before the first token (`nbytes`) and a decode step always
touches the same addresses, which is what CUDA Graph capture needs (chapter 5).

The cache also decides which keys a forward pass reads (`begin_pass`), and under
which mask (`mask`), because that depends only on how the cache is laid out:

- dynamic (the default): attention reads the filled prefix, positions 0..last,
  where `last` is the newest token's position. The shapes grow by one each step;
  finding `last` costs the host one look at the position tensor.
- static: attention reads the whole capacity, and a mask hides the positions not
  yet written. Every step has identical shapes and the host never looks at the
  positions: the form a CUDA Graph replays and `torch.compile` compiles once.

Positions come in two forms. `input_pos` of shape (S,) puts every sequence's
new tokens at the same positions: a prompt, or a batch that started together.
`input_pos` of shape (B, S) gives each sequence its own: what a server needs
when it batches requests that arrived at different times, each at its own
length (continuous batching, chapter 6). Then every row has its own mask.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from .config import ModelConfig


class CacheOverflowError(ValueError):
    """Raised when a write would go past the cache's capacity."""


def causal_mask(input_pos: torch.Tensor, n_keys: int) -> torch.Tensor:
    """mask[..., i, j]: may the token at position input_pos[..., i] read the key at position j? Boolean,
    (S, n_keys) for input_pos (S,), or (B, 1, S, n_keys) for input_pos (B, S): one mask per sequence, shared
    by its heads.

    A token reads itself and every earlier position, never a later one.
    """
    mask = torch.arange(n_keys, device=input_pos.device) <= input_pos[..., None]  # (S, n_keys) or (B, S, n_keys)
    return mask if input_pos.dim() == 1 else mask[:, None]


class KVCache(nn.Module):
    """Preallocated keys and values for every layer, and the keys each forward pass reads.

    A forward pass calls `begin_pass(input_pos, batch_size)` once, before any
    layer runs, and takes its attention mask from `mask(input_pos)`; then each
    layer calls `update(layer, input_pos, k, v)`, which writes the new keys and
    values and returns the keys and values that the pass may read.
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
        self.n_keys = capacity  # keys `update` returns; a dynamic cache sets it in every `begin_pass`
        shape = (cfg.n_layers, batch_size, cfg.n_kv_heads, capacity, cfg.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers together (the whole capacity)."""
        return self.k.nbytes + self.v.nbytes

    def begin_pass(self, input_pos: torch.Tensor, batch_size: int) -> None:
        """Begin a forward pass that writes `batch_size` sequences' tokens at positions `input_pos`, (S,) for
        all sequences alike or (B, S) for each its own: check that they fit, and fix how many keys `update`
        returns (`n_keys`, T).

        A static cache reads its whole capacity and does not check positions:
        that would make the host wait for the device, which a CUDA Graph cannot do.
        """
        if batch_size != self.batch_size:
            raise ValueError(
                f"This cache was allocated for batch size {self.batch_size}, but the tokens have "
                f"batch size {batch_size}. Allocate a new KVCache for this batch.")
        per_sequence = input_pos.dim() == 2
        if per_sequence and input_pos.shape[0] != batch_size:
            raise ValueError(f"Per-sequence positions need one row per sequence: got {input_pos.shape[0]} rows "
                             f"for a batch of {batch_size}.")
        if self.static:
            return  # n_keys stays the capacity; the mask hides the unwritten positions
        last = int(input_pos.max())
        if last >= self.capacity:
            raise CacheOverflowError(
                f"Position {last} does not fit in a KV cache of capacity {self.capacity} tokens. "
                "Allocate a cache with capacity >= prompt length + max_new_tokens.")
        self.n_keys = last + 1  # read the filled prefix only (the longest sequence's, with per-sequence positions)

    def mask(self, input_pos: torch.Tensor) -> torch.Tensor | None:
        """The keys each new token at `input_pos` may read in the pass `begin_pass` began: (S, T), or
        (B, 1, S, T) for per-sequence positions; None when every new token may read all T of them (one new
        token at one shared position, dynamic cache)."""
        if self.static or input_pos.dim() == 2 or len(input_pos) > 1:
            return causal_mask(input_pos, self.n_keys)
        return None

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write `k`, `v` of shape (B, n_kv_heads, S, head_dim) at positions `input_pos`, (S,) or (B, S), of `layer`.

        Returns the keys and values this pass reads, each (B, n_kv_heads, T, head_dim),
        T as fixed by `begin_pass`.
        """
        if input_pos.dim() == 1:  # the same positions in every sequence
            self.k[layer].index_copy_(2, input_pos, k)
            self.v[layer].index_copy_(2, input_pos, v)
        else:  # each sequence at its own positions: input_pos (B, S) -> an index for every element written
            index = input_pos[:, None, :, None].expand_as(k)  # (B, Hkv, S, hd)
            self.k[layer].scatter_(2, index, k)
            self.v[layer].scatter_(2, index, v)
        return self.k[layer][:, :, :self.n_keys], self.v[layer][:, :, :self.n_keys]

    def load(self, slot: int, source: "KVCache", length: int, source_slot: int = 0) -> None:
        """Copy positions 0..length-1 of sequence `source_slot` of `source` (which may be this cache) into
        sequence `slot` of this cache.

        Sequences prefilled alone, each in a cache of its own, become rows of one batch's cache so.
        """
        if source.n_layers != self.n_layers:
            raise ValueError("load() copies between caches of the same model: the layer counts differ.")
        for s, cache in ((slot, self), (source_slot, source)):
            if not 0 <= s < cache.batch_size:
                raise ValueError(f"Slot {s} does not exist in a cache of batch size {cache.batch_size}.")
        if not 0 < length <= min(self.capacity, source.capacity):
            raise CacheOverflowError(f"Cannot copy {length} positions between caches of capacity "
                                     f"{source.capacity} and {self.capacity}.")
        self.k[:, slot, :, :length] = source.k[:, source_slot, :, :length]  # (L, Hkv, length, hd)
        self.v[:, slot, :, :length] = source.v[:, source_slot, :, :length]

    def numpy_layers(self) -> "ContiguousRows":
        """The cache's reads and writes for NumPy code (`fast.NumpyDecodeStep`), on the buffers' own memory."""
        return ContiguousRows(self)


class ContiguousRows:
    """A decode step's keys and values in NumPy: `write` one new position per row, `read` each row's first T (views,
    no copy)."""

    def __init__(self, cache: KVCache):
        self.k, self.v = cache.k.numpy(), cache.v.numpy()  # (L, B, Hkv, capacity, hd)
        self.batch_size = cache.batch_size

    def write(self, layer: int, positions: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Row b's key and value (k[b], v[b]: (Hkv, hd)) at its position positions[b]."""
        rows = np.arange(len(positions))
        self.k[layer, rows, :, positions] = k
        self.v[layer, rows, :, positions] = v

    def read(self, layer: int, T: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row's keys and values at positions 0..T-1, each (B, Hkv, T, hd)."""
        return self.k[layer, :self.batch_size, :, :T], self.v[layer, :self.batch_size, :, :T]

    def blocks(self) -> "Blocks":
        """Row 0's keys and values where they are, as a paged cache's (`Blocks`): one block, the row's whole
        capacity, whose table is [0]."""
        layer, row, head, position, _ = (n // self.k.itemsize for n in self.k.strides)  # (L, B, Hkv, capacity, hd)
        return Blocks(self.k.reshape(-1), self.v.reshape(-1), np.zeros(1, np.int64), self.k.shape[3],
                      np.array([layer, row, position, head], np.int64))


class Blocks(NamedTuple):
    """One sequence's keys and values for code that reads them in place (`fast.compiled_step`), paged or not: the
    key of layer l, position t, key/value head h is the hd elements of `k` from
    l·strides[0] + table[t // block_size]·strides[1] + (t % block_size)·strides[2] + h·strides[3] on (and the
    value, of `v`)."""

    k: np.ndarray  # the whole buffer, flat: a view
    v: np.ndarray
    table: np.ndarray  # (blocks,) int64: the sequence's block ids, in order
    block_size: int
    strides: np.ndarray  # (4,) int64: elements between layers, blocks, positions in a block, and heads
