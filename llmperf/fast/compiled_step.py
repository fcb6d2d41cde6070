"""A batch-1 decode step's layer as one compiled function: the products of `kernel` and everything between them
(norms, RoPE, the KV cache's write and read, attention, SwiGLU, the residuals) in one call to Numba per layer.

Why: with the products at the memory's rate, what is left of a NumPy step is the code between them, a few
dozen NumPy calls per layer. Each is quick alone, but between two products that stream megabytes of weights
through the caches, every call finds its own code and data evicted, and pays for fetching them again. One
compiled function per layer has little code and no interpreter between its loops.

The arithmetic is `NumpyDecodeStep.__call__`'s, written as loops (its rounding differs in the last bits only),
and reads the same arrays: each layer's weights as they are, (out, in), and the KV cache in its blocks
(`ContiguousRows.blocks`, `PagedRows.blocks`): position t of the sequence at block table[t // bs], offset
t % bs, whether the cache is paged or one contiguous row. Whether a step runs it, the NumPy step with the
compiled products, or NumPy's BLAS, is measured on the reader's host (`choices.measured_kernel`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import kernel

numba = kernel.numba
prange = kernel.prange


def _jit(**options):
    """numba.njit with fastmath, cached on disk; without Numba, the function as it is (plain, slow Python)."""
    if numba is None:
        return lambda fn: fn
    return numba.njit(fastmath=True, cache=True, nogil=True, **options)


gemv = _jit(parallel=True)(kernel.gemv)  # the kernel's loop: the blocks of rows shared among the threads


@_jit()
def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, out: np.ndarray) -> None:
    """out = x / sqrt(mean(x²) + eps) · weight, for x, weight and out (d,)."""
    total = np.float32(0)
    for i in range(x.size):
        total += x[i] * x[i]
    scale = np.float32(1 / math.sqrt(total / x.size + eps))
    for i in range(x.size):
        out[i] = x[i] * scale * weight[i]


@_jit()
def rope(qkv: np.ndarray, heads: int, cos: np.ndarray, sin_signed: np.ndarray) -> None:
    """Rotate the first `heads` heads of qkv (q's and k's) in place at one position: each head (2, hd/2) as its two
    halves, out = x·cos + swap(x)·sin_signed, with cos and sin_signed (2, hd/2) as `NumpyDecodeStep` keeps them."""
    half = cos.shape[1]
    for head in range(heads):
        at = head * 2 * half
        for i in range(half):
            a, b = qkv[at + i], qkv[at + half + i]
            qkv[at + i] = a * cos[0, i] + b * sin_signed[0, i]
            qkv[at + half + i] = b * cos[1, i] + a * sin_signed[1, i]


@_jit()
def at(strides, table, bs, layer_id, t, head):
    """Where the key (or value) of `layer_id`, position t, key/value head `head` starts in the cache's flat buffer
    (`kv_cache.Blocks`)."""
    return (layer_id * strides[0] + table[t // bs] * strides[1] + (t % bs) * strides[2] + head * strides[3])


@_jit(parallel=True)
def attention(qkv, k, v, table, bs, strides, layer_id, pos, n_heads, hd, scale, y):
    """y (H·hd,) = each query head's softmax(q·K · scale) · V over positions 0..pos of its key/value head, from
    qkv ((H + 2·Hkv)·hd: q, k, v heads side by side) and the cache's flat k and v (`kv_cache.Blocks`). Stable, as
    `NumpyDecodeStep.softmax_values`: the largest score becomes exp(0), and the weighted sum is divided by the
    weights' sum at the end. The query heads are shared among the threads."""
    n_kv_heads = (qkv.size // hd - n_heads) // 2
    group = n_heads // n_kv_heads  # query heads per key/value head
    for head in prange(n_heads):
        kv_head, q = head // group, qkv[head * hd:(head + 1) * hd]
        scores = np.empty(pos + 1, np.float32)
        for t in range(pos + 1):
            key = k[at(strides, table, bs, layer_id, t, kv_head):][:hd]
            total = np.float32(0)
            for i in range(hd):
                total += q[i] * key[i]
            scores[t] = total
        top, weights, out = scores.max(), np.float32(0), y[head * hd:(head + 1) * hd]
        out[:] = 0
        for t in range(pos + 1):
            weight = np.float32(math.exp((scores[t] - top) * scale))
            weights += weight
            value = v[at(strides, table, bs, layer_id, t, kv_head):][:hd]
            for i in range(hd):
                out[i] += weight * value[i]
        for i in range(hd):
            out[i] /= weights


@_jit()
def layer(x, layer_id, norm1, wqkv, wo, norm2, w13, w2, k, v, table, bs, strides, pos, cos, sin_signed, eps,
          scale, n_heads, at_once):
    """One decoder layer for one token at position `pos`, x (d,) updated in place: attention with the cache's
    positions 0..pos (this token's key and value written first, at pos), then SwiGLU, each added to x. Weights
    (out, in), each product `at_once` rows per pass (`kernel.gemv`); k, v, table, bs and strides: the cache
    (`kv_cache.Blocks`)."""
    d, hd = x.size, cos.shape[1] * 2
    n_kv_heads = (wqkv.shape[0] // hd - n_heads) // 2
    h, qkv = np.empty(d, np.float32), np.empty(wqkv.shape[0], np.float32)
    rms_norm(x, norm1, eps, h)
    gemv(wqkv, h, qkv, at_once)  # ((H + 2·Hkv)·hd,): q, k and v heads
    rope(qkv, n_heads + n_kv_heads, cos, sin_signed)  # q and k rotated together
    for head in range(n_kv_heads):  # this token's key and value into the cache
        start, key = at(strides, table, bs, layer_id, pos, head), (n_heads + head) * hd
        k[start:start + hd] = qkv[key:key + hd]
        v[start:start + hd] = qkv[key + n_kv_heads * hd:key + (n_kv_heads + 1) * hd]
    y, out = np.empty(n_heads * hd, np.float32), np.empty(wo.shape[0], np.float32)
    attention(qkv, k, v, table, bs, strides, layer_id, pos, n_heads, hd, scale, y)
    gemv(wo, y, out, at_once)  # (rows,): wo may carry zero rows, whose outputs are cut off
    for i in range(d):
        x[i] += out[i]
    rms_norm(x, norm2, eps, h)
    d_ff = w13.shape[0] // 2
    gate_up, act = np.empty(2 * d_ff, np.float32), np.empty(d_ff, np.float32)
    gemv(w13, h, gate_up, at_once)  # (2·d_ff,): gate, then up
    for i in range(d_ff):
        gate = gate_up[i]
        act[i] = gate / (1 + np.float32(math.exp(-gate))) * gate_up[d_ff + i]  # SiLU(gate) · up
    gemv(w2, act, out[:d], at_once)
    for i in range(d):
        x[i] += out[i]


@_jit()
def last(x, norm, head, eps, at_once):
    """The logits (vocab,) of x (d,) after the last layer: the final norm, then the LM head (vocab, d)."""
    h, logits = np.empty(x.size, np.float32), np.empty(head.shape[0], np.float32)
    rms_norm(x, norm, eps, h)
    gemv(head, h, logits, at_once)
    return logits


def decode(step, token: int, pos: int, cache) -> np.ndarray:
    """`step`'s (a `NumpyDecodeStep` whose products run compiled) decode step of `token` at `pos`: writes its keys
    and values into `cache` (KVCache or a paged view, holding positions 0..pos-1) and returns the logits,
    (vocab,) float32, as `NumpyDecodeStep.__call__` does, with one compiled call per layer and one for the head."""
    blocks = cache.numpy_layers().blocks()
    x = step.embedding[token].copy()  # (d,): each layer adds to it in place
    cos, sin, eps = step.cos[pos], step.sin_signed[pos], float(step.eps)  # (2, hd/2) each
    with kernel._one_at_a_time:
        for i, w in enumerate(step.layers):
            layer(x, i, w.attention_norm, w.wqkv.weight, w.wo.weight, w.ffn_norm, w.w13.weight, w.w2.weight,
                  blocks.k, blocks.v, blocks.table, blocks.block_size, blocks.strides, pos, cos, sin, eps,
                  step.scale, step.cfg.n_heads, step.at_once)
        return last(x, step.norm, step.head.weight, eps, step.at_once)


@functools.cache
def why_not() -> str | None:
    """Why the compiled step cannot run here, or None if it can (compiling it, the first time: several seconds)."""
    if kernel.why_not() is not None:
        return kernel.why_not()
    try:
        d, hd, heads, kv_heads = 8, 4, 2, 1  # a layer of a tiny model, to compile every function now
        x, ones = np.ones(d, np.float32), np.ones(d, np.float32)
        wqkv, wo = np.ones(((heads + 2 * kv_heads) * hd, d), np.float32), np.ones((d, heads * hd), np.float32)
        w13, w2 = np.ones((16, d), np.float32), np.ones((d, 8), np.float32)
        k, strides = np.zeros(4 * kv_heads * hd, np.float32), np.array([0, 0, kv_heads * hd, hd], np.int64)
        rotation = np.ones((2, hd // 2), np.float32)
        layer(x, 0, ones, wqkv, wo, ones, w13, w2, k, k.copy(), np.zeros(1, np.int64), 4, strides, 0, rotation,
              rotation, 1e-5, 0.5, heads, kernel.AT_ONCE[0])
        last(x, ones, wo, 1e-5, kernel.AT_ONCE[0])
        return None
    except Exception as error:  # LLVM or the threading layer failed on this machine: the step keeps NumPy's code
        return f"Numba could not compile the step here ({type(error).__name__}: {error})."
