"""A faster model for decoding: the same weights, fused, and one-row products on the right kernel.

At batch 1 a decode step multiplies one activation row by every weight matrix:
a matrix–vector product (gemv), whose speed is set by how fast the weights
stream out of memory. Three things keep the plain model in model.py off that roof.

1. Seven products per layer where four will do. q, k and v are products of the
   same input, and so are the gate and up activations of the MLP. `fuse` stacks
   their matrices: one (q_dim + 2·kv_dim, d) matrix and one (2·d_ff, d) matrix per
   layer. Fewer, larger products mean fewer dispatched ops per step.
2. A kernel that uses one core. On a CPU in float32, PyTorch may give a one-row
   product to a general matrix–matrix routine that runs on a single core,
   whatever torch.get_num_threads() says (on one 2-core host it did; on another
   it used both cores, still slower than NumPy's gemv), and one core cannot draw the memory
   bandwidth that all of them can (benchmarks/decode.py and the README give the
   figures). NumPy's bundled BLAS (OpenBLAS in the PyPI wheels) has a true gemv
   that splits the work over every core. So a one-row
   product on a CPU in float32 goes to NumPy, on the same memory:
   Tensor.numpy() and torch.from_numpy() share buffers, nothing is copied.

3. A framework's cost per op. A step of the plain model runs about 1,600 PyTorch
   ops, most of them on vectors of a few hundred numbers, and on a small
   virtual machine each costs 10-20 µs to dispatch, whatever its size: on one
   2-core host that was ~16 ms of a ~38 ms step whose products took ~20 ms.
   So a cached step of one token (`NumpyDecodeStep`) is written in NumPy, whose
   small ops cost a microsecond or two: the same arithmetic as model.py, on
   views of the same weights and of the KV cache's own buffers (nothing is
   copied, and the cache stays the one PyTorch prefilled and reads). What is
   left is about the products alone, which is what llama.cpp's step costs too
   (benchmarks/decode.py runs both).

Two thread pools must not share the cores at the same time. After each product
the BLAS threads spin for a while, waiting for the next one; if PyTorch's OpenMP
threads run the norms and attention meanwhile, the two pools fight over the
cores and a step gets many times slower. So `FusedTransformer` makes a
step that qualifies (one token of one sequence, float32, a CPU, no autograd or
autocast) run inside `numpy_gemv()`: PyTorch on one thread (its ops on one
token's vectors gain little from a second) and the cores left to BLAS. The
thread count is restored afterwards, so sampling the next token runs with every
thread again (holding one thread across the whole loop measured no faster).
Two consequences:

- For a moment after a fused step, BLAS's threads are still spinning, and
  PyTorch work that uses all threads runs slowly: give anything timed right
  after it a few warm-up steps (`timing.bench_interleaved(..., settle=3)`;
  benchmarks/decode.py runs the fused model last).
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
import math
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache
from .model import Attention, FeedForward, Transformer, apply_rope, attend

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


class FusedAttention(nn.Module):
    """Attention whose q, k, v projections are one matrix, and whose q and k are rotated in one op."""

    def __init__(self, attn: Attention):
        super().__init__()
        self.layer_id = attn.layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = DecodeLinear(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]))  # (q+2kv, d)
        self.wo = DecodeLinear(attn.wo.weight)  # shared with the plain model

    def forward(self, x, rope, mask, input_pos, cache):
        B, S, _ = x.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(B, S, H + 2 * Hkv, self.head_dim).transpose(1, 2)  # (B, H + 2·Hkv, S, hd)
        qk = apply_rope(qkv[:, :H + Hkv], *rope)  # q and k are adjacent heads: one rotation, (B, H + Hkv, S, hd)
        q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + Hkv:]  # (B, H, S, hd), (B, Hkv, S, hd), (B, Hkv, S, hd)
        if cache is not None:
            k, v = cache.update(self.layer_id, input_pos, k, v)  # (B, Hkv, T, hd)
        y = attend(q, k, v, mask)  # (B, H, S, hd)
        return self.wo(y.transpose(1, 2).reshape(B, S, -1))  # (B, S, H*hd) -> (B, S, d)


class FusedFeedForward(nn.Module):
    """SwiGLU whose gate (w1) and up (w3) projections are one matrix."""

    def __init__(self, ff: FeedForward):
        super().__init__()
        self.w13 = DecodeLinear(torch.cat([ff.w1.weight, ff.w3.weight]))  # (2·d_ff, d)
        self.w2 = DecodeLinear(ff.w2.weight)  # shared with the plain model

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, S, 2·d_ff) -> two (B, S, d_ff)
        return self.w2(F.silu(gate) * up)


class NumpyDecodeStep:
    """One cached decode step of one sequence, float32 on a CPU, in NumPy: model.py's arithmetic without
    PyTorch's cost per op. Built from a fused model; it holds NumPy views of its weights (nothing copied).

    Calling it with a token id, its position and the KV cache that holds positions 0..pos-1 writes the
    token's keys and values into the cache, in place, and returns the logits, (vocab,) float32.
    """

    def __init__(self, model: "FusedTransformer"):
        cfg = model.cfg
        view = lambda t: t.detach().numpy()  # shares memory with the tensor  # noqa: E731
        self.cfg, self.eps = cfg, cfg.norm_eps
        self.layers = [(view(b.attention_norm.weight), view(b.attention.wqkv.weight), view(b.attention.wo.weight),
                        view(b.ffn_norm.weight), view(b.feed_forward.w13.weight), view(b.feed_forward.w2.weight))
                       for b in model.layers]
        self.embedding, self.norm, self.head = (view(model.tok_embeddings.weight), view(model.norm.weight),
                                                view(model.output.weight))
        self.cos, self.sin = view(model.rope_cos), view(model.rope_sin)  # (max_seq_len, hd) each
        self.scale = np.float32(1 / math.sqrt(cfg.head_dim))

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x * np.float32(1 / math.sqrt(float(x @ x) / x.size + self.eps)) * weight

    def __call__(self, token: int, pos: int, cache: KVCache) -> np.ndarray:
        cfg = self.cfg
        H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        keys, values = cache.k.numpy(), cache.v.numpy()  # (L, B, Hkv, capacity, hd): the cache's own memory
        cos, sin = self.cos[pos], self.sin[pos]  # (hd,) each
        x = self.embedding[token].copy()  # (d,)
        for i, (norm1, wqkv, wo, norm2, w13, w2) in enumerate(self.layers):
            qkv = wqkv @ self.rms_norm(x, norm1)  # ((H + 2·Hkv)·hd,): one gemv for q, k and v
            qk = qkv[:(H + Hkv) * hd].reshape(H + Hkv, hd)  # q and k heads, rotated together
            half = hd // 2
            qk = qk * cos + np.concatenate([-qk[:, half:], qk[:, :half]], axis=1) * sin  # RoPE, rotate-half
            keys[i, 0, :, pos] = qk[H:]  # (Hkv, hd) into the cache at this position
            values[i, 0, :, pos] = qkv[(H + Hkv) * hd:].reshape(Hkv, hd)
            q = qk[:H].reshape(Hkv, H // Hkv, hd)  # each key/value head's group of query heads
            k, v = keys[i, 0, :, :pos + 1], values[i, 0, :, :pos + 1]  # (Hkv, T, hd): positions 0..pos
            scores = np.matmul(q, k.transpose(0, 2, 1)) * self.scale  # (Hkv, G, T)
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)  # softmax over the keys
            x = x + wo @ np.matmul(probs, v).reshape(-1)  # (H·hd,) -> (d,)
            gate_up = w13 @ self.rms_norm(x, norm2)  # (2·d_ff,)
            gate, up = gate_up[:cfg.d_ff], gate_up[cfg.d_ff:]
            x = x + w2 @ (gate / (1 + np.exp(-gate)) * up)  # SwiGLU: silu(gate)·up, then down
        return self.head @ self.rms_norm(x, self.norm)  # (vocab,)


class FusedTransformer(Transformer):
    """`model` with fused layers, sharing every tensor it does not fuse; a step that qualifies runs
    inside `numpy_gemv()`, and a cached one (float32 on a CPU) runs as NumPy code (`NumpyDecodeStep`).

    It is a Transformer, built by Transformer's own constructor on the meta device
    (a skeleton that allocates nothing), whose parts are then replaced: the
    embedding, norms, wo, w2, LM head and rotary tables by `model`'s own, and
    attention and the MLP by their fused forms. Transformer.forward runs it.
    """

    def __init__(self, model: Transformer):
        with torch.device("meta"):
            super().__init__(model.cfg)
        self.tok_embeddings, self.norm = model.tok_embeddings, model.norm
        for block, plain in zip(self.layers, model.layers):
            block.attention_norm, block.ffn_norm = plain.attention_norm, plain.ffn_norm
            block.attention = FusedAttention(plain.attention)
            block.feed_forward = FusedFeedForward(plain.feed_forward)
        self.output = DecodeLinear(model.output.weight)  # shared: for tied models, the embedding
        self.rope_cos, self.rope_sin = model.rope_cos, model.rope_sin
        self.numpy_step = NumpyDecodeStep(self) if self.dtype == torch.float32 and self.device.type == "cpu" else None

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False) -> torch.Tensor:
        if not qualifies_for_numpy_gemv(tokens, self):
            return super().forward(tokens, input_pos, cache, last_only)
        with numpy_gemv():
            if cache is None or input_pos is None or self.numpy_step is None:
                return super().forward(tokens, input_pos, cache, last_only)
            cache.window(input_pos.reshape(-1), 1)  # checks that the position fits, as the plain model does
            logits = self.numpy_step(int(tokens), int(input_pos), cache)
            return torch.from_numpy(logits).view(1, 1, -1)  # (B, S, vocab) as Transformer.forward returns

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
    return FusedTransformer(model).eval()
