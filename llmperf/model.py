"""The Llama architecture, written to be read.

One forward pass maps token ids to next-token logits:

    tokens (B, S) -> embedding -> n_layers x [RMSNorm -> attention -> +residual
                                              RMSNorm -> SwiGLU MLP -> +residual]
                  -> RMSNorm -> LM head -> logits (B, S, vocab)

The same `forward` serves every use in the course:
- no cache: the whole sequence at positions 0..S-1 (training-style, and the naive
  generation loop that re-runs everything each step);
- with a `KVCache`: `input_pos` says where the S new tokens sit; their keys and
  values are written into the cache, and attention reads the earlier positions
  back from it (the cache decides which: `KVCache.begin_pass`). Prefill is
  S = prompt length, a decode step is S = 1.

Names follow Meta's reference implementation: wq wk wv wo for attention,
w1 (gate) w3 (up) w2 (down) for the MLP, n_kv_heads for grouped-query attention.
Rotary embeddings use the "rotate half" layout of Hugging Face checkpoints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .kv_cache import KVCache, causal_mask


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
    """cos and sin of every (position, frequency) pair, each (max_seq_len, head_dim), float32, on the CPU."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim)  # (hd/2,)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64, device="cpu"), inv_freq)  # (T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, hd): rotate-half layout pairs i with i + hd/2
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, H, S, hd) by the angles of its positions; cos, sin are (S, hd)."""
    x1, x2 = x.chunk(2, dim=-1)  # two halves, each (B, H, S, hd/2)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).type_as(x)


class Attention(nn.Module):
    """Grouped-query self-attention: n_heads query heads share n_kv_heads key/value heads.

    `layer_id` says which of the KV cache's layers this attention reads and writes.
    """

    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.q_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=False)

    def forward(self, x, rope, mask, input_pos, cache: KVCache | None):
        B, S, _ = x.shape
        q = self.wq(x).view(B, S, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, S, hd)
        k = self.wk(x).view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, hd)
        v = self.wv(x).view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, hd)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # rotate by position; v is not rotated
        if cache is not None:
            k, v = cache.update(self.layer_id, input_pos, k, v)  # (B, Hkv, T, hd): every key this pass reads
        y = attend(q, k, v, mask)  # (B, H, S, hd)
        return self.wo(y.transpose(1, 2).reshape(B, S, -1))  # heads side by side again: (B, S, H*hd) -> (B, S, d)


def attend(q, k, v, mask):
    """softmax(q kᵀ / sqrt(hd) + mask) v for q (B, H, S, hd) and k, v (B, Hkv, T, hd) -> (B, H, S, hd).

    Each of the Hkv key/value heads serves H / Hkv query heads (grouped-query
    attention). `mask` is a boolean (S, T) tensor, or (B, 1, S, T) with one per
    sequence, True where a query may read a key; or None for no mask.

    PyTorch's fused kernel does the work. A square mask (S = T) can only come
    from positions 0..S-1, so it is the plain causal mask: the kernel is then told
    `is_causal`, which lets a fused kernel skip the tiles of the score matrix that lie
    wholly above the diagonal instead of computing them and throwing them away
    (PyTorch's CPU kernel works in tiles of 512 keys, so below 512 tokens it skips
    nothing; `llmperf.chapters.caching` counts the tiles). (`torch.utils.flop_counter` counts this
    kernel as 0 FLOPs on a CPU; `llmperf.profiling.count_flops` runs PyTorch's
    "math" form of it instead, whose two matmuls it can count.)
    """
    gqa = q.shape[1] != k.shape[1]
    if mask is not None and mask.dim() == 2 and mask.shape[0] == mask.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x). w1 is the gate, w3 the up projection, w2 the down."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (B, S, d) -> (B, S, d_ff) -> (B, S, d)


class TransformerBlock(nn.Module):
    """One layer: attention, then the MLP, each on a normalised copy of x added back to x (pre-norm residual)."""

    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg, layer_id)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, rope, mask, input_pos, cache):
        x = x + self.attention(self.attention_norm(x), rope, mask, input_pos, cache)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """A Llama-architecture decoder."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        # Placeholder values, as weights.py fills every parameter: nn.Embedding's own normal draw, on the meta device
        # where weights.empty_model builds the tree, runs PyTorch's Python reference ops, which import SymPy.
        self.tok_embeddings = nn.Embedding.from_pretrained(torch.empty(cfg.vocab_size, cfg.d_model), freeze=False)
        self.layers = nn.ModuleList(TransformerBlock(cfg, i) for i in range(cfg.n_layers))
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
                cache: KVCache | None = None, last_only: bool = False,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, S, vocab) for tokens (B, S).

        Without a cache the tokens are a whole sequence at positions 0..S-1, and
        attention is causal over them. With a cache, input_pos (S,) says where the
        new tokens sit (contiguous positions), or input_pos (B, S) where each sequence's sit; the cache checks
        they fit and says which keys they read (see KVCache.begin_pass and KVCache.mask).
        `last_only` computes the LM head for the last position only, (B, 1, vocab):
        all a prefill needs, and for SmolLM2's large vocabulary a large share of its FLOPs.
        With `lengths` (B,) each sequence's last position is its own, lengths[b] - 1:
        prompts of several lengths padded at the end to S, prefilled in one pass
        (causal attention never lets a real token see the padding after it).
        """
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (batch, seq_len), got {tuple(tokens.shape)}. "
                             "Add a batch dimension with tokens[None].")
        B, S = tokens.shape
        if cache is None:
            if input_pos is not None:
                raise ValueError("input_pos needs a KV cache: without one, the tokens are a whole sequence "
                                 "at positions 0..S-1. Pass a cache, or leave input_pos out.")
            if S > self.cfg.max_seq_len:
                raise ValueError(f"{S} tokens are more than {self.cfg.name}'s max_seq_len "
                                 f"({self.cfg.max_seq_len}). Use a shorter sequence.")
            input_pos = torch.arange(S, device=tokens.device)
            mask = causal_mask(input_pos, S) if S > 1 else None  # (S, S)
        elif input_pos is None:
            raise ValueError("With a KV cache, pass input_pos: the positions of the new tokens.")
        else:
            cache.begin_pass(input_pos, B)  # they fit; the pass reads T keys
            mask = cache.mask(input_pos)  # (S, T) or None
        rope = self.rope_cos[input_pos], self.rope_sin[input_pos]  # cos and sin, (S, hd) each, or (B, S, hd)
        if input_pos.dim() == 2:  # each sequence at its own positions: one set of angles per sequence
            rope = rope[0][:, None], rope[1][:, None]  # (B, 1, S, hd), shared by the heads

        x = self.tok_embeddings(tokens)  # (B, S, d)
        for layer in self.layers:
            x = layer(x, rope, mask, input_pos, cache)
        if last_only:
            x = x[:, -1:] if lengths is None else x[torch.arange(B), lengths - 1][:, None]  # (B, 1, d)
        return self.output(self.norm(x))  # (B, S or 1, vocab)
