"""A paged KV cache: one pool of blocks for every layer, read and written through each sequence's block table.

The pool holds the keys and values of `num_blocks` blocks of `block_size` positions, for every layer at once:

    k, v: (n_layers, num_blocks + 1, block_size, n_kv_heads, head_dim)

Block b of every layer belongs to the same sequence (the scheduler lends block ids, `llmperf.scheduler`), and
position p of a sequence whose block table is `table` lives at block table[p // block_size], offset
p % block_size. The extra last block is scratch: a pass's padding (a short prompt padded to its group's longest)
is written there, where no sequence reads it.

A forward pass sees the pool through a `PagedView` of its sequences' tables, which the model uses as it uses a
`KVCache`: `begin_pass` and `mask` once per pass, `update` once per layer. `update` writes the new keys and values
into their blocks, then gathers every key the pass reads into a contiguous (B, n_kv_heads, T, head_dim) tensor: one
copy of the sequences' keys and values per layer, the price of paging without a kernel that reads the blocks in
place (vLLM's PagedAttention kernel does). Its cost is measured in chapter 6 and `benchmarks/serving.py`.
"""

from __future__ import annotations

import numpy as np
import torch

from .config import ModelConfig
from .kv_cache import Blocks, causal_mask


def bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one block: keys and values of `block_size` positions in every layer."""
    return 2 * cfg.n_layers * block_size * cfg.n_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8


class PagedKVCache:
    """The pool of blocks (k and v), allocated once, in the model's dtype and on its device."""

    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype = torch.float32,
                 device: "torch.device | str | None" = None):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"A paged KV cache needs at least 1 block of at least 1 position, got {num_blocks} "
                             f"blocks of {block_size}.")
        self.cfg, self.num_blocks, self.block_size = cfg, num_blocks, block_size
        self.scratch = num_blocks  # the padding's block
        shape = (cfg.n_layers, num_blocks + 1, block_size, cfg.n_kv_heads, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def nbytes(self) -> int:
        """Bytes of the pool's lendable blocks (the scratch block not counted)."""
        return self.num_blocks * bytes_per_block(self.cfg, self.block_size, self.k.dtype)

    def view(self, tables: list[list[int]], n_keys: int) -> "PagedView":
        """The pool as a pass over sequences with these block tables sees it, reading positions 0..n_keys-1."""
        return PagedView(self, tables, n_keys)


class PagedView:
    """One forward pass's cache: B sequences' block tables, and the positions 0..n_keys-1 the pass reads (the
    longest sequence's, known to the host: nothing is read back from the device)."""

    def __init__(self, cache: PagedKVCache, tables: list[list[int]], n_keys: int):
        bs = cache.block_size
        width = -(-n_keys // bs)  # blocks a row reads
        self.cache, self.batch_size, self.n_keys, self.width = cache, len(tables), n_keys, width
        self.table_list = [table[:width] + [cache.scratch] * (width - len(table[:width])) for table in tables]
        self._table: torch.Tensor | None = None  # made for PyTorch's path only (NumPy's reads table_list)

    @property
    def table(self) -> torch.Tensor:
        """The block tables, (B, width), on the pool's device."""
        if self._table is None:
            self._table = torch.tensor(self.table_list, dtype=torch.long, device=self.cache.k.device)
        return self._table

    def begin_pass(self, input_pos: torch.Tensor, batch_size: int) -> None:
        """Begin a pass writing `batch_size` sequences' tokens at `input_pos`, (S,) for all alike or (B, S) each
        its own: one row per block table, the new tokens' blocks found anew by the pass's first `update`."""
        if batch_size != self.batch_size:
            raise ValueError(f"This view holds {self.batch_size} block tables, but the tokens have batch size "
                             f"{batch_size}.")
        self.blocks = None  # where the new tokens go: found by the first `update`

    def mask(self, input_pos: torch.Tensor) -> torch.Tensor | None:
        """The keys each new token may read, as `KVCache.mask` gives them."""
        return causal_mask(input_pos, self.n_keys) if input_pos.dim() == 2 or input_pos.numel() > 1 else None

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write `k`, `v` (B, n_kv_heads, S, head_dim) into their blocks of `layer`; return the keys and values the
        pass reads, each (B, n_kv_heads, n_keys, head_dim), gathered from the blocks."""
        B, Hkv, _, hd = k.shape
        if self.blocks is None:
            pos = input_pos if input_pos.dim() == 2 else input_pos.expand(B, -1)  # (B, S)
            self.blocks = self.table.gather(1, pos // self.cache.block_size)  # (B, S): each new token's block
            self.offsets = pos % self.cache.block_size  # (B, S)
        out = []
        for pool, new in ((self.cache.k[layer], k), (self.cache.v[layer], v)):  # pool: (blocks, bs, Hkv, hd)
            pool[self.blocks, self.offsets] = new.transpose(1, 2)  # (B, S, Hkv, hd) into their cells
            rows = pool[self.table]  # (B, width, bs, Hkv, hd): every block each row reads
            out.append(rows.view(B, -1, Hkv, hd)[:, :self.n_keys].transpose(1, 2))  # (B, Hkv, n_keys, hd)
        return out[0], out[1]

    def numpy_layers(self) -> "PagedRows":
        """The same reads and writes for NumPy code (`fast.NumpyDecodeStep`), on the pool's own memory."""
        return PagedRows(self)


class PagedRows:
    """A decode step's keys and values in NumPy: `write` one new position per row, `read` each row's first T.

    One row whose blocks are consecutive in the pool (as a lone request's usually are) is read as a view of
    them, with no copy; otherwise the rows' blocks are gathered."""

    def __init__(self, view: PagedView):
        self.k, self.v = view.cache.k.numpy(), view.cache.v.numpy()  # (L, blocks + 1, bs, Hkv, hd)
        self.table, self.bs = np.asarray(view.table_list, dtype=np.int64), view.cache.block_size  # (B, width)
        self.rows = np.arange(len(self.table))
        first = self.table[0, 0]
        self.consecutive = len(self.table) == 1 and bool((self.table[0] == first + np.arange(view.width)).all())

    def write(self, layer: int, positions: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Row b's key and value (k[b], v[b]: (Hkv, hd)) at its position positions[b]."""
        blocks = self.table[self.rows, positions // self.bs]  # (B,)
        self.k[layer, blocks, positions % self.bs] = k
        self.v[layer, blocks, positions % self.bs] = v

    def read(self, layer: int, T: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row's keys and values at positions 0..T-1, each (B, Hkv, T, hd)."""
        B, n = len(self.table), -(-T // self.bs)  # rows, and the blocks each reads
        out = []
        for pool in (self.k[layer], self.v[layer]):  # (blocks + 1, bs, Hkv, hd)
            if self.consecutive:
                start = self.table[0, 0]
                rows = pool[None, start:start + n]  # (1, n, bs, Hkv, hd): a view
            else:
                rows = pool[self.table[:, :n]]  # (B, n, bs, Hkv, hd): gathered
            out.append(rows.reshape(B, n * self.bs, *rows.shape[3:])[:, :T].transpose(0, 2, 1, 3))  # (B, Hkv, T, hd)
        return out[0], out[1]

    def blocks(self) -> Blocks:
        """Row 0's keys and values where they are, in the pool (`kv_cache.Blocks`): no copy, no gather."""
        layer, block, position, head, _ = (n // self.k.itemsize for n in self.k.strides)  # (L, blocks + 1, bs, Hkv, hd)
        return Blocks(self.k.reshape(-1), self.v.reshape(-1), self.table[0], self.bs,
                      np.array([layer, block, position, head], np.int64))
