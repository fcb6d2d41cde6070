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
cores and a step gets more than ten times slower. So `FusedTransformer` makes a
step that qualifies (one token of one sequence, float32, a CPU, no autograd or
autocast) run inside `numpy_gemv()`: PyTorch on one thread (its ops on one
token's vectors gain little from a second) and the cores left to BLAS. The
thread count is restored afterwards, so sampling the next token runs with every
thread again (holding one thread across the whole loop measured no faster).
Two consequences:

- For about 0.1 s after a fused step, BLAS's threads are still spinning, and
  PyTorch work that uses all threads runs slowly: give anything timed right
  after it a few warm-up steps (benchmarks/decode.py runs the fused model last).
- torch.set_num_threads is process-wide: do not decode with a fused model in two
  Python threads at once.

Everything else keeps PyTorch's F.linear: prompts and batches (several rows make
a matrix–matrix product, which PyTorch spreads over the cores), bfloat16 (NumPy
has no such type) and float16 (NumPy has no BLAS kernel for it; PyTorch's CPU
kernels for both use every core), GPUs, and calls with autograd on (NumPy
carries no gradients): generate() and stream() run under inference_mode.
benchmarks/decode.py measures what all this buys. The plain model stays the one
to read; this one is tested to give the same logits and the same tokens.
torch.profiler does not see NumPy's products: profile the plain model to count a
step's matmuls.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from .model import Attention, FeedForward, Transformer, TransformerBlock, apply_rope

_IN_NUMPY_GEMV = contextvars.ContextVar("llmperf_numpy_gemv", default=False)


@contextmanager
def numpy_gemv():
    """Within this block, DecodeLinear sends one-row products to NumPy's gemv and PyTorch runs on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the cores belong to BLAS's threads
    flag = _IN_NUMPY_GEMV.set(True)
    try:
        yield
    finally:
        _IN_NUMPY_GEMV.reset(flag)
        torch.set_num_threads(threads)


def qualifies_for_numpy_gemv(tokens: torch.Tensor, model: Transformer) -> bool:
    """Is this forward pass one for NumPy's gemv? One token of one sequence, float32 on a CPU, no autograd
    (NumPy would drop the gradient) and no autocast (NumPy would ignore it)."""
    return (tokens.numel() == 1 and model.device.type == "cpu" and model.dtype == torch.float32
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))


class DecodeLinear(nn.Module):
    """y = x @ Wᵀ for W (out, in), nn.Linear's layout; inside `numpy_gemv()`, one float32 CPU row goes to NumPy."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        one_float32_cpu_row = x.numel() == x.shape[-1] and x.dtype == torch.float32 and x.device.type == "cpu"
        if not (_IN_NUMPY_GEMV.get() and one_float32_cpu_row):
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
    """The Transformer with fused layers; a step that qualifies runs inside `numpy_gemv()`."""

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False) -> torch.Tensor:
        if not qualifies_for_numpy_gemv(tokens, self):
            return super().forward(tokens, input_pos, cache, last_only)
        with numpy_gemv():
            return super().forward(tokens, input_pos, cache, last_only)

    def _apply(self, fn, recurse=True):
        # .to(), .cuda(), .half() ... would convert the tensors shared with the original model in place.
        raise RuntimeError("A fused model cannot be moved or cast: it shares tensors with the model it was "
                           "made from. Move or cast that model first, then fuse it: fuse(model.to(...)).")


@torch.no_grad()
def fuse(model: Transformer) -> FusedTransformer:
    """A model computing the same function as `model` with fused q/k/v and gate/up matrices.

    Shares every tensor it does not fuse (embedding, norms, wo, w2, LM head, rotary
    tables) with `model`; the fused matrices are new, so it takes extra memory equal
    to the q, k, v, gate and up matrices. Neither model may be moved or cast
    afterwards (the fused one refuses to be).
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
