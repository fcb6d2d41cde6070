"""A faster model for decoding: the same weights, fused, and a one-token step that is all memory traffic.

At batch 1 a decode step multiplies one activation row by every weight matrix:
a matrix–vector product (gemv), whose speed is set by how fast the weights
stream out of memory. A step can take no less than its bytes ÷ bandwidth; four
things keep the plain model in model.py well above that.

1. Seven products per layer where four will do. q, k and v are products of the
   same input, and so are the gate and up activations of the MLP. `fuse` stacks
   their matrices: one (q_dim + 2·kv_dim, d) matrix and one (2·d_ff, d) matrix per
   layer. Fewer, larger products mean fewer ops per step.
2. A framework's cost per op. A step of the plain model runs about 1,600 PyTorch
   ops, most of them on vectors of a few hundred numbers, and each has a fixed
   cost to dispatch, whatever its size (chapter 5 measures it, and the share of
   the step it takes, on the reader's machine). So a cached step of one token of
   one sequence, float32 on a CPU, is written in NumPy (`NumpyDecodeStep`), whose
   small ops cost far less each: the same
   arithmetic as model.py, on the same weights and on the KV cache's own
   buffers (Tensor.numpy() shares memory: the cache stays the one PyTorch
   prefilled and reads).
3. The gemv kernel. NumPy's bundled BLAS (OpenBLAS in the PyPI wheels) has a true
   gemv that splits a product over every core (benchmarks/decode.py sets it
   against PyTorch's one-row product on the same machine). OpenBLAS has two
   gemv kernels, and the layout of the matrix picks one (`input_major`): the
   fused matrices and the LM head are stored the way the faster one reads them.
4. Products too small to share. OpenBLAS gives a gemv of fewer than 460,800
   elements one thread (`OPENBLAS_ONE_THREAD_BELOW`), which draws about half
   the bandwidth of two. SmolLM2's wo (576 × 576) is one; it is stored with zero
   rows appended (`threaded_gemv_rows`): 39 % more bytes, read by every thread
   instead of one.

What is left is the products plus a few milliseconds of small NumPy ops
(`profiling.numpy_step_times` splits a step; chapter 5 shows it), which is where
llama.cpp's step stands too: benchmarks/decode.py runs both in the same run.
The extra memory: the fused matrices (q, k, v, gate and up again), and for the
NumPy step a copy of the LM head and the padded wo.

Everything else keeps PyTorch's F.linear on the same weights: prompts and
batches (several rows make a matrix–matrix product, which PyTorch spreads over
the cores), bfloat16 (NumPy has no such type) and float16 (NumPy has no BLAS
kernel for it), GPUs, and calls with autograd on (NumPy carries no gradients;
generate() and stream() run under inference_mode). The plain model stays the
one to read; this one is tested to give the same logits and the same tokens.

After a NumPy step OpenBLAS's threads spin for a while, waiting for the next
product; PyTorch work that uses every thread runs slowly meanwhile (the two
thread pools fight over the cores). Sampling one token is too small to notice,
but give anything timed right after a fused step a few warm-up steps
(`timing.bench_interleaved(..., settle=3)`; benchmarks/decode.py runs the fused
model last). torch.profiler does not see NumPy's work: profile the plain model
to count a step's ops, and time the NumPy step with `profiling.numpy_step_times`.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .cost import ATTENTION, KV_WRITE, LM_HEAD, NORMS, OTHER, PROJECTIONS
from .kv_cache import KVCache
from .model import Attention, FeedForward, Transformer, apply_rope, attend

OPENBLAS_ONE_THREAD_BELOW = 115_200 * 4
"""OpenBLAS runs a float32 gemv on one thread when its matrix has fewer elements than this (its interface/gemv.c:
115,200 × GEMM_MULTITHREAD_THRESHOLD, which is 4 unless OpenBLAS was built otherwise), as in NumPy 2.4's
scipy-openblas 0.3.31."""


@functools.cache
def numpy_blas() -> str:
    """The BLAS NumPy was built with, name and version, as np.show_config reports it ("scipy-openblas 0.3.31...")."""
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()


def numpy_uses_openblas() -> bool:
    """Is NumPy's BLAS OpenBLAS (as in the PyPI wheels)? Only then does `OPENBLAS_ONE_THREAD_BELOW` apply."""
    return "openblas" in numpy_blas().lower()


def openblas_threads() -> int:
    """The threads OpenBLAS starts: $OPENBLAS_NUM_THREADS (or $GOTO_NUM_THREADS, $OMP_NUM_THREADS) if set, else
    one per core this process may run on. PyTorch's own count (torch.set_num_threads) does not change it."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").strip().isdigit():
            return max(1, int(os.environ[name]))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threaded_gemv_rows(rows: int, cols: int, threads: int) -> int:
    """Rows to give a (rows, cols) float32 matrix so that OpenBLAS's gemv splits it over `threads` threads.

    A matrix below `OPENBLAS_ONE_THREAD_BELOW` elements gets one thread, which draws about half the bandwidth
    of two. Zero rows appended lift it over the line: more bytes to read, at up to `threads` times the rate.
    That pays while the padded matrix is at most 1.5 times the size; otherwise, or with one thread, or with
    another BLAS, the matrix keeps its rows.
    """
    if threads < 2 or rows * cols >= OPENBLAS_ONE_THREAD_BELOW or not numpy_uses_openblas():
        return rows
    padded = -(-OPENBLAS_ONE_THREAD_BELOW // cols)  # ceil: the fewest rows that reach the line
    return padded if padded <= 1.5 * rows else rows


def input_major(weight: torch.Tensor, for_numpy: bool) -> torch.Tensor:
    """`weight` (out, in) as it is, or, `for_numpy`, as an (out, in) view of an (in, out) copy.

    NumPy's product `h @ W` with W stored (in, out), one row per input, runs OpenBLAS's "N" gemv kernel:
    it adds x[i] times row i to the output, and streams long rows. `W @ h` with W stored (out, in) runs
    its "T" kernel: one dot product per output, over rows as long as the input. For matrices whose output
    is much longer than their input (q/k/v's 960 × 576 and gate/up's 3,072 × 576 in SmolLM2, and the LM
    head's 49,152 × 576), N streamed faster on the host this layout was chosen on (the README's table);
    for w2 (576 × 1,536), T did. PyTorch reads the view.
    """
    return weight.t().contiguous().t() if for_numpy else weight


def linear(weight: torch.Tensor) -> nn.Linear:
    """An nn.Linear (no bias) whose weight is `weight` itself, (out, in), not a copy."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
    return layer


class FusedAttention(nn.Module):
    """Attention whose q, k, v projections are one matrix, and whose q and k are rotated in one op.

    For the NumPy step (`for_numpy`), that matrix is stored input-major (`input_major`), and wo may be
    stored with zero rows appended (`threaded_gemv_rows`): `wo_padded` holds them, and `wo` is a view of
    its first rows, so PyTorch's path reads the same weights.
    """

    def __init__(self, attn: Attention, for_numpy: bool = False):
        super().__init__()
        self.layer_id = attn.layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = linear(input_major(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]), for_numpy))
        wo = attn.wo.weight  # (d, q)
        rows = threaded_gemv_rows(*wo.shape, openblas_threads()) if for_numpy else wo.shape[0]
        if rows > wo.shape[0]:
            self.wo_padded = torch.cat([wo.detach(), wo.new_zeros(rows - wo.shape[0], wo.shape[1])])  # (rows, q)
            self.wo = linear(self.wo_padded[:wo.shape[0]])  # (d, q): a view of the padded copy
        else:
            self.wo_padded = None
            self.wo = linear(wo)  # shared with the plain model

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

    def __init__(self, ff: FeedForward, for_numpy: bool = False):
        super().__init__()
        self.w13 = linear(input_major(torch.cat([ff.w1.weight, ff.w3.weight]), for_numpy))  # (2·d_ff, d)
        self.w2 = linear(ff.w2.weight)  # shared with the plain model

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, S, 2·d_ff) -> two (B, S, d_ff)
        return self.w2(F.silu(gate) * up)


def no_lap(kind: str) -> None:
    """NumpyDecodeStep's stopwatch when nobody times it: does nothing. (`profiling.numpy_step_times` passes one
    that records the time since the last lap under `kind`.)"""


class NumpyDecodeStep:
    """One cached decode step of one sequence, float32 on a CPU, in NumPy: model.py's arithmetic without
    PyTorch's cost per op. Built from a fused model; it holds NumPy views of its weights (nothing copied).

    Calling it with a token id, its position and the KV cache that holds positions 0..pos-1 writes the
    token's keys and values into the cache, in place, and returns the logits, (vocab,) float32.
    `lap(kind)` is called after each stretch of lines with the kind of op those lines ran
    (`cost.OP_KINDS`), so that a stopwatch can split the step's time the way chapter 5 splits the
    plain model's.
    """

    def __init__(self, model: "FusedTransformer"):
        cfg = model.cfg
        view = lambda t: t.detach().numpy()  # shares memory with the tensor  # noqa: E731
        self.cfg, self.eps = cfg, cfg.norm_eps
        # wqkv, w13 and the head are stored input-major, (in, out) (`input_major`): `h @ W`; wo and w2 are
        # stored (out, in), nn.Linear's layout: `W @ h`. wo may carry zero rows (FusedAttention.wo_padded).
        self.layers = [(view(b.attention_norm.weight), view(b.attention.wqkv.weight).T,
                        view(b.attention.wo_padded if b.attention.wo_padded is not None else b.attention.wo.weight),
                        view(b.ffn_norm.weight), view(b.feed_forward.w13.weight).T, view(b.feed_forward.w2.weight))
                       for b in model.layers]
        self.embedding, self.norm, self.head = (view(model.tok_embeddings.weight), view(model.norm.weight),
                                                view(model.output.weight).T)
        half = cfg.head_dim // 2
        # RoPE's rotate-half, out = x·cos + [-x₂, x₁]·sin, as x·cos + swap(x)·sin_signed: each head's two halves
        # swapped by a view, and the sign folded into a copy of the sine table (max_seq_len, 2, hd/2).
        cos, sin = view(model.rope_cos), view(model.rope_sin)  # (max_seq_len, hd) each
        self.cos = cos.reshape(-1, 2, half)
        self.sin_signed = np.concatenate([-sin[:, None, :half], sin[:, None, half:]], axis=1)
        self.scale = np.float32(1 / math.sqrt(cfg.head_dim))

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x * np.float32(1 / math.sqrt(float(x @ x) / x.size + self.eps)) * weight

    def __call__(self, token: int, pos: int, cache: KVCache, lap=no_lap) -> np.ndarray:
        cfg = self.cfg
        d, H, Hkv, hd = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        keys, values = cache.k.numpy(), cache.v.numpy()  # (L, B, Hkv, capacity, hd): the cache's own memory
        cos, sin = self.cos[pos], self.sin_signed[pos]  # (2, hd/2) each
        x = self.embedding[token]  # (d,), a view: every update below makes a new x
        lap(OTHER)
        for i, (norm1, wqkv, wo, norm2, w13, w2) in enumerate(self.layers):
            h = self.rms_norm(x, norm1)
            lap(NORMS)
            qkv = h @ wqkv  # (d,) @ (d, (H + 2·Hkv)·hd): one gemv for q, k and v
            lap(PROJECTIONS)
            qk = qkv[:(H + Hkv) * hd].reshape(H + Hkv, 2, hd // 2)  # q and k heads, each as its two halves
            qk = qk * cos + qk[:, ::-1] * sin  # RoPE: q and k rotated together, (H + Hkv, 2, hd/2)
            lap(OTHER)
            keys[i, 0, :, pos] = qk[H:].reshape(Hkv, hd)  # (Hkv, hd) into the cache at this position
            values[i, 0, :, pos] = qkv[(H + Hkv) * hd:].reshape(Hkv, hd)
            lap(KV_WRITE)
            q = qk[:H].reshape(Hkv, H // Hkv, hd)  # each key/value head's group of query heads, (Hkv, G, hd)
            k, v = keys[i, 0, :, :pos + 1], values[i, 0, :, :pos + 1]  # (Hkv, T, hd): positions 0..pos
            scores = np.matmul(q, k.transpose(0, 2, 1))  # (Hkv, G, T)
            scores -= scores.max(axis=-1, keepdims=True)  # softmax, stable: the largest score becomes exp(0)
            scores *= self.scale
            weights = np.exp(scores, out=scores)  # unnormalised: divide the weighted sum instead, hd not T values
            y = np.matmul(weights, v)  # (Hkv, G, hd)
            y /= weights.sum(axis=-1, keepdims=True)
            lap(ATTENTION)
            out = wo @ y.reshape(-1)  # (d,), or (rows,) whose first d are the product (FusedAttention.wo_padded)
            lap(PROJECTIONS)
            x = x + out[:d]  # the residual
            lap(OTHER)
            h = self.rms_norm(x, norm2)
            lap(NORMS)
            gate_up = h @ w13  # (d,) @ (d, 2·d_ff)
            lap(PROJECTIONS)
            gate, up = gate_up[:cfg.d_ff], gate_up[cfg.d_ff:]
            act = np.exp(-gate)
            act += 1
            np.divide(gate, act, out=act)  # SiLU: gate / (1 + e^-gate)
            act *= up
            lap(OTHER)
            out = w2 @ act  # (d,)
            lap(PROJECTIONS)
            x = x + out
            lap(OTHER)
        h = self.rms_norm(x, self.norm)
        lap(NORMS)
        logits = h @ self.head  # (d,) @ (d, vocab)
        lap(LM_HEAD)
        return logits


class FusedTransformer(Transformer):
    """`model` with fused layers (see `fuse` for what it shares); a cached one-token step of one sequence,
    float32 on a CPU, runs as NumPy code (`NumpyDecodeStep`).

    It is a Transformer, built by Transformer's own constructor on the meta device
    (a skeleton that allocates nothing), whose parts are then replaced: the
    embedding, norms, w2 and rotary tables by `model`'s own, wo and the LM head by
    `model`'s or by copies laid out for NumPy, and attention and the MLP by their
    fused forms. Transformer.forward runs everything but the NumPy step.
    """

    def __init__(self, model: Transformer):
        with torch.device("meta"):
            super().__init__(model.cfg)
        for_numpy = model.dtype == torch.float32 and model.device.type == "cpu"  # its one-token steps: NumPy
        self.tok_embeddings, self.norm = model.tok_embeddings, model.norm
        for block, plain in zip(self.layers, model.layers):
            block.attention_norm, block.ffn_norm = plain.attention_norm, plain.ffn_norm
            block.attention = FusedAttention(plain.attention, for_numpy)
            block.feed_forward = FusedFeedForward(plain.feed_forward, for_numpy)
        # for_numpy: the LM head in input-major storage, a copy (for tied models the embedding stays as it is)
        self.output = linear(input_major(model.output.weight, for_numpy))
        self.rope_cos, self.rope_sin = model.rope_cos, model.rope_sin
        self.numpy_step = NumpyDecodeStep(self) if for_numpy else None

    def runs_in_numpy(self, tokens: torch.Tensor, input_pos, cache) -> bool:
        """Is this pass one for `numpy_step`? One cached token of one sequence, float32 on a CPU, no autograd
        (NumPy would drop the gradient) and no autocast (NumPy would ignore it)."""
        return (self.numpy_step is not None and tokens.numel() == 1 and cache is not None and input_pos is not None
                and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False) -> torch.Tensor:
        if not self.runs_in_numpy(tokens, input_pos, cache):
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

    Shares the embedding, norms, w2 and rotary tables with `model`, and wo and the
    LM head too unless `model` is float32 on a CPU. The fused matrices are new, so it
    takes extra memory equal to the q, k, v, gate and up matrices; float32 on a CPU
    adds a copy of the LM head stored for NumPy's gemv (`input_major`) and of wo
    with zero rows where it is too small for OpenBLAS to split (`threaded_gemv_rows`).
    Neither model may be moved or cast afterwards (the fused one refuses to be).
    """
    return FusedTransformer(model).eval()
