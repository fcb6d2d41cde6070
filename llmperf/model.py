"""The Llama architecture, written to be read.

One forward pass maps token ids to next-token logits:

    tokens (B, S) -> embedding -> n_layers x [RMSNorm -> attention -> +residual
                                              RMSNorm -> SwiGLU MLP -> +residual]
                  -> RMSNorm -> LM head -> logits (B, S, vocab)

The same `forward` serves every use in the course:
- no cache: the whole sequence at positions 0..S-1 (training-style, and the naive
  generation loop that re-runs everything each step);
- with a `KVCache`: `input_pos` says where the S new tokens sit; their keys and
  values are written into the cache and attention reads every cached position up
  to the last new one. Prefill is S = prompt length, a decode step is S = 1.

Names follow Meta's reference implementation: wq wk wv wo for attention,
w1 (gate) w3 (up) w2 (down) for the MLP, n_kv_heads for grouped-query attention.
Rotary embeddings use the "rotate half" layout of Hugging Face checkpoints.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .kv_cache import KVCache

ATTENTION_IMPLS = ("sdpa", "math")


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 for stability, returned in x's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x * rsqrt(mean(x²) + eps), as one fused op; float() and type_as are no-ops in float32
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every (position, frequency) pair, each (max_seq_len, head_dim), float32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (hd/2,)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)  # (T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, hd): rotate-half layout pairs i with i + hd/2
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, H, S, hd) by the angles of its positions; cos, sin are (S, hd)."""
    x1, x2 = x.chunk(2, dim=-1)  # two halves, each (B, H, S, hd/2)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).type_as(x)


class Attention(nn.Module):
    """Grouped-query self-attention: n_heads query heads share n_kv_heads key/value heads."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.q_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=False)

    def project_qkv(self, x):
        """The three input projections: (B, S, d) -> (B, S, H*hd), (B, S, Hkv*hd), (B, S, Hkv*hd)."""
        return self.wq(x), self.wk(x), self.wv(x)

    def rotated_heads(self, x, cos, sin):
        """Project, split the features into heads, rotate q and k by their positions.

        Returns q (B, H, S, hd), k and v (B, Hkv, S, hd).
        """
        B, S, _ = x.shape
        q, k, v = self.project_qkv(x)
        q = q.view(B, S, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, S, hd)
        k = k.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, hd)
        v = v.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, hd)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, mask, cache: KVCache | None, layer: int, input_pos, end: int | None,
                impl: str):
        B, S, _ = x.shape
        q, k, v = self.rotated_heads(x, cos, sin)

        if cache is not None:
            k, v = cache.update(layer, input_pos, k, v)  # (B, Hkv, capacity, hd)
            if end is not None:  # dynamic cache: read only the filled prefix
                k, v = k[:, :, :end], v[:, :, :end]  # (B, Hkv, T, hd)

        y = attend(q, k, v, mask, impl, self.n_heads // self.n_kv_heads)  # (B, H, S, hd)
        y = y.transpose(1, 2).reshape(B, S, self.n_heads * self.head_dim)  # (B, S, H*hd)
        return self.wo(y)


def attend(q, k, v, mask, impl: str, group: int):
    """softmax(q k^T / sqrt(hd) + mask) v for q (B, H, S, hd) and k, v (B, Hkv, T, hd).

    Each of the Hkv key/value heads serves `group` = H / Hkv query heads.

    `mask` is a boolean (S, T) tensor, True where a query may attend, or None for
    no mask. "sdpa" calls PyTorch's fused kernel; "math" writes the two matmuls out,
    which is slower but visible to torch.utils.flop_counter (it counts sdpa as zero
    FLOPs on a CPU).

    A square mask (S = T) can only come from positions 0..S-1, so it is the plain
    causal mask: sdpa is then told `is_causal`, which lets the kernel skip the masked
    half of the score matrix instead of computing it and throwing it away.
    """
    gqa = group > 1
    if impl == "sdpa":
        if mask is not None and mask.shape[0] == mask.shape[1]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    k = k.repeat_interleave(group, dim=1)  # (B, H, T, hd): each kv head serves `group` query heads
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, S, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).type_as(q) @ v  # (B, H, S, hd)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x). w1 is the gate, w3 the up projection, w2 the down."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def project_gate_up(self, x):
        """(B, S, d) -> gate and up activations, each (B, S, d_ff)."""
        return self.w1(x), self.w3(x)

    def forward(self, x):
        gate, up = self.project_gate_up(x)
        return self.w2(F.silu(gate) * up)


class TransformerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask, cache, layer, input_pos, end, impl):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, cache, layer, input_pos, end, impl)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """A Llama-architecture decoder. `attn_impl` is "sdpa" (fast) or "math" (countable)."""

    def __init__(self, cfg: ModelConfig, attn_impl: str = "sdpa"):
        super().__init__()
        self.cfg = cfg
        self.attn_impl = attn_impl
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.tie_weights()
        self.init_rope()

    def tie_weights(self) -> None:
        """With tied embeddings, make the LM head and the embedding one matrix, used twice."""
        if self.cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_rope(self) -> None:
        """(Re)compute the rotary cos/sin tables, float32, on the model's device."""
        cos, sin = rope_tables(self.cfg.head_dim, self.cfg.max_seq_len, self.cfg.rope_theta)
        self.register_buffer("rope_cos", cos.to(self.device), persistent=False)
        self.register_buffer("rope_sin", sin.to(self.device), persistent=False)

    @property
    def device(self) -> torch.device:
        return self.tok_embeddings.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.tok_embeddings.weight.dtype

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits (B, S, vocab) for tokens (B, S) at positions input_pos (S,).

        Without a cache, input_pos defaults to 0..S-1 and attention is causal over the
        S tokens. With a cache, input_pos is required and must be contiguous.
        `last_only` computes the LM head for the last position only, (B, 1, vocab):
        all a prefill needs, and for SmolLM2's large vocabulary a fifth of its FLOPs.
        """
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (batch, seq_len), got {tuple(tokens.shape)}. "
                             "Add a batch dimension with tokens[None].")
        if self.attn_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTENTION_IMPLS}, got {self.attn_impl!r}.")
        B, S = tokens.shape
        if input_pos is None:
            if cache is not None:
                raise ValueError("With a KV cache, pass input_pos: the positions of the new tokens.")
            input_pos = torch.arange(S, device=tokens.device)
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]  # (S, hd) each

        end = None
        if cache is None:
            last = S - 1
            n_keys = S
        elif cache.static:
            last, n_keys = None, cache.capacity  # shapes fixed: read the whole buffer under a mask
        else:
            last = int(input_pos[-1])
            n_keys = end = last + 1
        if last is not None:
            if last >= self.cfg.max_seq_len:
                raise ValueError(f"Position {last} is past {self.cfg.name}'s max_seq_len "
                                 f"({self.cfg.max_seq_len}). Use a shorter sequence.")
            if cache is not None:
                cache.check_positions(B, last)
        # mask[i, j]: may the query at input_pos[i] see the key at position j? (S, n_keys)
        mask = None
        if S > 1 or (cache is not None and cache.static):
            mask = torch.arange(n_keys, device=tokens.device)[None, :] <= input_pos[:, None]

        x = self.tok_embeddings(tokens)  # (B, S, d)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, cache, i, input_pos, end, self.attn_impl)
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return self.output(self.norm(x))  # (B, S or 1, vocab)
