"""A faster model for decoding: the same weights, laid out for matrix–vector products.

A decode step multiplies one activation row by every weight matrix: a
matrix–vector product, whose speed is set by how fast the weights stream out of
memory. On a CPU, PyTorch runs a (1 × K) @ (K × N) product on a single thread,
and one core cannot draw all of the memory bandwidth that two or more cores can.
`nn.Linear` also stores W as (N, K) and computes x @ Wᵀ, a slower access pattern
for one row than reading a (K, N) matrix.

`fuse(model)` returns a model that computes exactly the same function with
these changes (benchmarks/decode.py measures what they buy together):

1. Fused projections: q, k and v come from one (d, q_dim + 2·kv_dim) matrix, the
   gate and up activations from one (d, 2·d_ff) matrix. Fewer, larger products,
   fewer dispatched ops.
2. Column blocks (float32 on a CPU): each matrix is stored transposed and split
   into `parts` column blocks, (parts, in, out/parts), and the product runs as one
   batched matmul (bmm), which PyTorch spreads over threads: `parts` cores stream
   weights at once. (bfloat16 and float16 CPU kernels, and GPU kernels, already use
   every core, so there the weights keep nn.Linear's layout.)

The embedding, the norms and the rotary tables are shared with the original
model, not copied. The plain model in model.py stays the one to read; this one
is tested to give the same logits and the same tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .model import Attention, FeedForward, Transformer, TransformerBlock, apply_rope


def default_parts(device: torch.device, dtype: torch.dtype) -> int:
    """Column blocks per matrix: one per thread for float32 on a CPU, else 1.

    PyTorch's bfloat16 and float16 CPU kernels, and every GPU kernel, already
    spread a matrix–vector product over all cores; only float32 on a CPU gains.
    """
    return torch.get_num_threads() if device.type == "cpu" and dtype == torch.float32 else 1


class BlockedLinear(nn.Module):
    """y = x @ Wᵀ for W (out, in), stored as `parts` column blocks of Wᵀ: (parts, in, out/parts).

    With parts=1 the weight stays in nn.Linear's (out, in) layout and F.linear does the work.
    """

    def __init__(self, weight: torch.Tensor, parts: int):
        super().__init__()
        out_features, in_features = weight.shape
        while out_features % parts:  # the largest block count <= parts that divides the width
            parts -= 1
        self.in_features, self.out_features, self.parts = in_features, out_features, parts
        if parts == 1:
            self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)  # (out, in)
            return
        w = weight.detach().t().reshape(in_features, parts, out_features // parts)  # (in, P, out/P)
        self.weight = nn.Parameter(w.transpose(0, 1).contiguous(), requires_grad=False)  # (P, in, out/P)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parts == 1:
            return F.linear(x, self.weight)
        *lead, K = x.shape
        rows = x.reshape(1, -1, K)  # (1, M, in), M = all leading dims
        y = torch.bmm(rows.expand(self.parts, -1, K), self.weight)  # (P, M, out/P): one block per thread
        if rows.shape[1] == 1:  # one row (a decode step at batch 1): (P, 1, out/P) already is (1, out)
            return y.view(*lead, self.out_features)
        return y.transpose(0, 1).reshape(*lead, self.out_features)  # (..., out), blocks side by side


class FusedAttention(Attention):
    """Attention whose q, k, v projections are one blocked matrix."""

    def __init__(self, attn: Attention, parts: int):
        nn.Module.__init__(self)
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = BlockedLinear(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]), parts)
        self.wo = BlockedLinear(attn.wo.weight, parts)

    def rotated_heads(self, x, cos, sin):
        """One matmul for q, k and v, and one rotation for q and k together (they are adjacent heads)."""
        B, S, _ = x.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(B, S, H + 2 * Hkv, self.head_dim)  # (B, S, H + 2·Hkv, hd)
        qk = apply_rope(qkv[:, :, :H + Hkv].transpose(1, 2), cos, sin)  # (B, H + Hkv, S, hd)
        q, k = qk.split([H, Hkv], dim=1)  # (B, H, S, hd), (B, Hkv, S, hd)
        return q, k, qkv[:, :, H + Hkv:].transpose(1, 2)  # v: (B, Hkv, S, hd)


class FusedFeedForward(FeedForward):
    """SwiGLU whose gate (w1) and up (w3) projections are one blocked matrix."""

    def __init__(self, ff: FeedForward, parts: int):
        nn.Module.__init__(self)
        self.w13 = BlockedLinear(torch.cat([ff.w1.weight, ff.w3.weight]), parts)
        self.w2 = BlockedLinear(ff.w2.weight, parts)

    def project_gate_up(self, x):
        return self.w13(x).chunk(2, dim=-1)


@torch.no_grad()
def fuse(model: Transformer, parts: int | None = None) -> Transformer:
    """A copy of `model` with fused, transposed, column-blocked weights (see the module docstring).

    Takes as much extra memory as the model's matrices (the originals are kept).
    """
    parts = parts or default_parts(model.device, model.dtype)
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}.")
    with torch.device("meta"):  # the skeleton only; every module is replaced below
        fast = Transformer(model.cfg, attn_impl=model.attn_impl)
    fast.tok_embeddings, fast.norm = model.tok_embeddings, model.norm  # shared, not copied
    fast.layers = nn.ModuleList()
    for layer in model.layers:
        block = TransformerBlock.__new__(TransformerBlock)
        nn.Module.__init__(block)
        block.attention_norm, block.ffn_norm = layer.attention_norm, layer.ffn_norm
        block.attention = FusedAttention(layer.attention, parts)
        block.feed_forward = FusedFeedForward(layer.feed_forward, parts)
        fast.layers.append(block)
    fast.output = BlockedLinear(model.output.weight, parts)
    fast.rope_cos, fast.rope_sin = model.rope_cos, model.rope_sin
    return fast.eval()


