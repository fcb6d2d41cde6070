"""Chapter 4's attention counts: how many (query, key) pairs a full pass over S tokens scores, counted three
ways, and the whole generations priced with the one that matches the kernel that runs.

Pure Python (no torch). Each pair costs 4·head_dim FLOPs per head per layer (q·k and the weighted sum of v),
so a pass's attention is 4·q_dim·n_layers FLOPs per pair, as in `cost.attention_flops`.

    full    S² pairs: every query scores every key. What PyTorch's "math" attention computes (the whole score
            matrix, then the mask), and so what FlopCounterMode counts under `profiling.count_flops`; its
            formula for the fused CUDA kernels leaves is_causal out too (torch/utils/flop_counter.py,
            `sdpa_flop`), and it sees the fused CPU kernel as 0 FLOPs.
    causal  S(S+1)/2 pairs: query i scores keys 0..i. The work causal attention needs.
    tiled   what a fused kernel told `is_causal` computes. It works in tiles of q_block queries by k_block
            keys and skips every key tile that lies wholly above the diagonal, so it computes the causal
            pairs plus the masked corner of each diagonal tile (`tiled_pairs`).

The tiles, from PyTorch's source (`kernel_tiles`):
- CPU flash attention (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): query tiles of 32, 64 or 256
  queries (S < 192, S < 768, longer), key tiles of 512 keys. A pass of 512 tokens or fewer fits one key
  tile, so nothing is skipped: the kernel computes the full square.
- CUDA FlashAttention-2 (flash_attn/flash_fwd_launch_template.h, A100/H100, no dropout): 128 queries by 128
  keys for a head dimension of 64 or less, by 64 keys for 128. (The memory-efficient kernel,
  mem_eff_attention/kernel_forward.h, likewise stops each query tile's keys at the tile's last query.)
Any other device is counted as the math form runs: the full square.

Invariants: causal ≤ tiled ≤ full for every S, tiled == full when one key tile holds every key, and
tiled − causal is at most S·q_block (the diagonal tiles).
"""

from __future__ import annotations

import dataclasses
import math

from ... import cost

COUNTS = ("full", "causal", "tiled")
CPU_KEY_TILE = 512  # keys per tile of PyTorch's CPU flash attention
FLASH_QUERY_TILE = 128  # queries per tile of CUDA FlashAttention-2 (forward, no dropout)


def kernel_tiles(device: str, head_dim: int, seq_len: int) -> tuple[int, int] | None:
    """(queries, keys) per tile of the fused attention kernel PyTorch runs for a causal pass of `seq_len`
    tokens on `device` ("cpu", "cuda", ...), or None where the math form runs (the full square)."""
    if device == "cpu":
        return (32 if seq_len < 192 else 64 if seq_len < 768 else 256), CPU_KEY_TILE
    if device == "cuda":
        return FLASH_QUERY_TILE, (128 if head_dim <= 64 else 64)
    return None


def tiled_pairs(seq_len: int, q_block: int, k_block: int) -> int:
    """(query, key) pairs a causal kernel with these tiles computes over S = `seq_len` tokens: for the query
    tile starting at m, every key tile that starts before its last query, m + q_block − 1, is computed whole
    (up to the last key)."""
    S, pairs = seq_len, 0
    for m in range(0, S, q_block):
        rows = min(q_block, S - m)
        keys = min(math.ceil((m + rows) / k_block) * k_block, S)
        pairs += rows * keys
    return pairs


def pairs(seq_len: int, count: str, tiles: tuple[int, int] | None = None) -> int:
    """Pairs scored by a pass over `seq_len` tokens, by `count` (one of COUNTS; "tiled" with `tiles`, which
    None turns into "full")."""
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}.")
    if count == "causal":
        return seq_len * (seq_len + 1) // 2
    if count == "full" or tiles is None:
        return seq_len * seq_len
    return tiled_pairs(seq_len, *tiles)


def pass_attention_flops(cfg, seq_len: int, count: str, device: str = "cpu") -> int:
    """Attention FLOPs of a full pass over `seq_len` tokens, all layers, by `count` ("tiled": the kernel that
    `device` runs, `kernel_tiles`)."""
    cfg = cost.get_config(cfg)
    tiles = kernel_tiles(device, cfg.head_dim, seq_len) if count == "tiled" else None
    return 4 * cfg.q_dim * cfg.n_layers * pairs(seq_len, count, tiles)


def counted_passes(cfg, prompt: int, new_tokens: int, cached: bool, count: str = "tiled", device: str = "cpu",
                   bytes_per_param: int = 2) -> list[dict[str, cost.OpCost]]:
    """`cost.generation_passes` (exact form) with the attention of every full pass (each naive pass, the cached
    loop's prefill) counted by `count` on `device`. A cached decode step's one query scores its whole context,
    masked by nothing: left as it is."""
    cfg = cost.get_config(cfg)
    passes = cost.generation_passes(cfg, prompt, new_tokens, cached, bytes_per_param=bytes_per_param)
    full_lengths = [prompt] if cached else list(range(prompt, prompt + new_tokens))
    out = [dict(p) for p in passes]
    for i, length in enumerate(full_lengths):
        out[i]["attention"] = dataclasses.replace(out[i]["attention"],
                                                  flops=pass_attention_flops(cfg, length, count, device))
    return out


def attention_total(passes) -> int:
    """The attention FLOPs of a list of passes, summed."""
    return sum(p["attention"].flops for p in passes)


def causal_crossover(cfg) -> int:
    """Tokens a naive loop must generate (from a one-token prompt) before its causal attention FLOPs, summed
    over every pass, reach its recomputed weight products (`cost.naive_attention_crossover` counts the full
    square instead). Pass S scores S(S+1)/2 pairs, so over passes 1..n attention totals
    4·q_dim·L·n(n+1)(n+2)/6 against body·n(n+1)/2 + head·n of products: equal near n ≈ 3·body / (4·q_dim·L),
    twice the full square's length. At such lengths a kernel's diagonal tiles add under 1 % to the causal
    count. The model's max_seq_len is ignored."""
    cfg = cost.get_config(cfg)
    per_position = cost.matmul_flops(cfg, 1)  # one position through every weight matrix
    head = per_position.pop("lm_head")
    body = sum(per_position.values())
    a = 4 * cfg.q_dim * cfg.n_layers

    def reaches(n: int) -> bool:
        return a * n * (n + 1) * (n + 2) // 6 >= body * n * (n + 1) // 2 + head * n

    lo, hi = 1, max(2, 2 * math.ceil(3 * body / a))
    while not reaches(hi):
        hi *= 2
    while lo < hi:  # the first n that reaches: attention's share only grows with n
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not reaches(mid) else (lo, mid)
    return lo
