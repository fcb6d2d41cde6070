"""A faster model for decoding: the same weights, fused, and one-row products on the right kernel.

At batch 1 a decode step multiplies one activation row by every weight matrix:
a matrix–vector product (gemv), whose speed is set by how fast the weights
stream out of memory. Two things keep the plain model in model.py off that roof.

1. Seven products per layer where four will do. q, k and v are products of the
   same input, and so are the gate and up activations of the MLP. `fuse` stacks
   their matrices: one (q_dim + 2·kv_dim, d) matrix and one (2·d_ff, d) matrix per
   layer. Fewer, larger products mean fewer dispatched ops per step.
2. A kernel that uses one core. On a CPU in float32, PyTorch gives a one-row
   product to a general matrix–matrix routine that runs on a single core, and one
   core cannot draw the memory bandwidth that all of them can: it streams about
   15 GB/s on the 2-core machine this was written on, whatever
   torch.get_num_threads() says. NumPy's bundled BLAS (OpenBLAS in the PyPI
   wheels) has a true gemv that splits the work over every core. So a one-row
   product on a CPU in float32 goes to NumPy, on the same memory:
   Tensor.numpy() and torch.from_numpy() share buffers, nothing is copied.

Two thread pools must not share the cores at the same time. After each product
the BLAS threads spin for a while, waiting for the next one; if PyTorch's OpenMP
threads run the norms and attention meanwhile, the two pools fight over the
cores and a step gets more than ten times slower. So during a one-token step on
a CPU in float32, `FusedTransformer` runs PyTorch on one thread (its ops on
576-wide vectors gain nothing from a second) and leaves the cores to BLAS; it
restores the thread count afterwards.

Everything else keeps PyTorch's F.linear: prompts and batches (several rows make
a matrix–matrix product, which PyTorch spreads over the cores), bfloat16 and
float16 (NumPy has no bfloat16; PyTorch's CPU kernels for both use every core),
GPUs, and any call with autograd on (NumPy carries no gradients). benchmarks/decode.py
measures what all this buys. The plain model stays the one to read; this one is
tested to give the same logits and the same tokens. Note that torch.profiler does
not see NumPy's products: profile the plain model to count a step's matmuls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .model import Attention, FeedForward, Transformer, TransformerBlock, apply_rope


def numpy_gemv(rows: int, device: torch.device, dtype: torch.dtype) -> bool:
    """Do products with `rows` input rows go to NumPy's gemv? One float32 row on a CPU, outside autograd.

    (NumPy cannot carry gradients, so with autograd on, every product stays in PyTorch.)
    """
    return rows == 1 and device.type == "cpu" and dtype == torch.float32 and not torch.is_grad_enabled()


class DecodeLinear(nn.Module):
    """y = x @ Wᵀ for W (out, in), nn.Linear's layout; a single float32 CPU row goes to NumPy's gemv.

    Run the NumPy path with PyTorch on one thread (FusedTransformer does): see the module docstring.
    """

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not numpy_gemv(x.numel() // x.shape[-1], x.device, x.dtype):
            return F.linear(x, self.weight)
        y = self.weight.detach().numpy() @ x.detach().reshape(-1).numpy()  # (out, in) @ (in,) -> (out,)
        return torch.from_numpy(y).view(*x.shape[:-1], -1)  # (..., out), sharing y's memory


class FusedAttention(Attention):
    """Attention whose q, k, v projections are one matrix."""

    def __init__(self, attn: Attention):
        nn.Module.__init__(self)
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = DecodeLinear(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]))  # (q+2kv, d)
        self.wo = DecodeLinear(attn.wo.weight)  # shared with the plain model

    def project_qkv(self, x):
        kv_dim = self.n_kv_heads * self.head_dim
        return self.wqkv(x).split([self.n_heads * self.head_dim, kv_dim, kv_dim], dim=-1)

    def rotated_heads(self, x, cos, sin):
        """One product for q, k and v, and one rotation for q and k together (they are adjacent heads)."""
        B, S, _ = x.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(B, S, H + 2 * Hkv, self.head_dim)  # (B, S, H + 2·Hkv, hd)
        qk = apply_rope(qkv[:, :, :H + Hkv].transpose(1, 2), cos, sin)  # (B, H + Hkv, S, hd)
        q, k = qk.split([H, Hkv], dim=1)  # (B, H, S, hd), (B, Hkv, S, hd)
        return q, k, qkv[:, :, H + Hkv:].transpose(1, 2)  # v: (B, Hkv, S, hd)


class FusedFeedForward(FeedForward):
    """SwiGLU whose gate (w1) and up (w3) projections are one matrix."""

    def __init__(self, ff: FeedForward):
        nn.Module.__init__(self)
        self.w13 = DecodeLinear(torch.cat([ff.w1.weight, ff.w3.weight]))  # (2·d_ff, d)
        self.w2 = DecodeLinear(ff.w2.weight)  # shared with the plain model

    def project_gate_up(self, x):
        return self.w13(x).chunk(2, dim=-1)


class FusedTransformer(Transformer):
    """The Transformer with fused layers; steps that use NumPy's gemv run PyTorch on one thread."""

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False) -> torch.Tensor:
        if not numpy_gemv(tokens.numel(), self.device, self.dtype):
            return super().forward(tokens, input_pos, cache, last_only)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the cores belong to BLAS's gemv threads during this step
        try:
            return super().forward(tokens, input_pos, cache, last_only)
        finally:
            torch.set_num_threads(threads)


@torch.no_grad()
def fuse(model: Transformer) -> FusedTransformer:
    """A model computing the same function as `model` with fused q/k/v and gate/up matrices.

    Shares every tensor it does not fuse (embedding, norms, wo, w2, LM head, rotary
    tables) with `model`; the fused matrices are new, so it takes extra memory equal
    to the q, k, v, gate and up matrices.
    """
    with torch.device("meta"):  # the skeleton only; every module is replaced below
        fast = FusedTransformer(model.cfg, attn_impl=model.attn_impl)
    fast.tok_embeddings, fast.norm = model.tok_embeddings, model.norm
    fast.layers = nn.ModuleList()
    for layer in model.layers:
        block = TransformerBlock.__new__(TransformerBlock)
        nn.Module.__init__(block)
        block.attention_norm, block.ffn_norm = layer.attention_norm, layer.ffn_norm
        block.attention = FusedAttention(layer.attention)
        block.feed_forward = FusedFeedForward(layer.feed_forward)
        fast.layers.append(block)
    fast.output = DecodeLinear(model.output.weight)  # shared: for tied models, the embedding
    fast.rope_cos, fast.rope_sin = model.rope_cos, model.rope_sin
    return fast.eval()
