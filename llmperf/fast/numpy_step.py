"""One cached decode step, float32 on a CPU, as NumPy code: model.py's arithmetic on views of the fused model's
weights and of the KV cache's own buffers, without PyTorch's fixed cost per op. One sequence (`__call__`: every
product a matrix–vector product, gemv) or a batch of sequences each at its own position (`batch`: every product
one matrix–matrix product over the batch's rows, gemm, so each weight is read once per step for all of them, as
a server's decode step needs).
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import torch

from ..cost import ATTENTION, KV_WRITE, LM_HEAD, NORMS, OTHER, PROJECTIONS
from ..kv_cache import KVCache
from . import blas, compiled_step, kernel
from .threads import ThreadCount, other_count

MATRICES = ("wqkv", "wo", "w13", "w2", "head")  # the matrices the step multiplies, by their fused names


class LayerWeights(NamedTuple):
    """One layer's weights as the NumPy step reads them, in the order it reads them: views of the fused model's
    tensors (nothing copied). wqkv and w13 are (in, out) views, read as `h @ W`; wo and w2 (out, in), read as
    `W @ h`, and wo may carry zero rows (FusedAttention.wo_padded)."""

    attention_norm: np.ndarray  # (d,)
    wqkv: np.ndarray  # (d, (H + 2·Hkv)·hd)
    wo: np.ndarray  # (d, H·hd), or (rows, H·hd) whose first d rows are wo
    ffn_norm: np.ndarray  # (d,)
    w13: np.ndarray  # (d, 2·d_ff)
    w2: np.ndarray  # (d, d_ff)


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
    plain model's. Where the products run compiled, the whole step does, one compiled call per layer
    (`compiled_step`), unless a stopwatch is given: the NumPy code (`numpy_code`) is what it splits.
    """

    def __init__(self, model, compiled: bool = False):
        """`model`: a fused model (`fused.FusedTransformer`), whose tensors the step reads. `compiled`: its batch-1
        products run in the compiled kernel (`kernel.CompiledMatrix`, every weight as it is), not NumPy's BLAS."""
        cfg = model.cfg
        view = lambda t: t.detach().numpy()  # shares memory with the tensor  # noqa: E731
        self.cfg, self.eps, self.compiled = cfg, cfg.norm_eps, compiled

        def weight(layer, in_out=False, padded=None):  # how the step reads a layer's weight, see LayerWeights
            if compiled:
                return kernel.CompiledMatrix(view(layer.weight))  # (out, in), as it is
            array = view(padded) if padded is not None else view(layer.weight)  # (out, in) or (rows, in)
            return array.T if in_out else array  # (in, out) for `h @ W`

        # Each weight is stored input-major or output-major, as this host multiplies it fastest (`choices.in_layout`);
        # a product's expression does not depend on it: NumPy hands BLAS the layout, which picks its kernel.
        # The head, like wqkv and w13, is taken as an (in, out) view: `h @ W` (`LayerWeights`). A CompiledMatrix
        # gives W·h for `h @ W` and `W @ h` alike.
        self.layers = [LayerWeights(
            view(b.attention_norm.weight), weight(b.attention.wqkv, in_out=True),
            weight(b.attention.wo, padded=b.attention.wo_padded),
            view(b.ffn_norm.weight), weight(b.feed_forward.w13, in_out=True), weight(b.feed_forward.w2))
            for b in model.layers]
        self.embedding, self.norm, self.head = (view(model.tok_embeddings.weight), view(model.norm.weight),
                                                weight(model.output, in_out=True))
        # For a batch: the same weights in PyTorch's layers (fused.Linear), each product one call over the rows.
        self.batch_layers = [(b.attention.wqkv, b.attention.wo, b.feed_forward.w13, b.feed_forward.w2)
                             for b in model.layers]
        self.batch_head = model.output
        self.fewest_rows = 1  # a batch's products get zero rows up to this many (`product`; measured by the server)
        self.kernel_rows = 0  # a batch of at most this many rows multiplies in the compiled kernel (measured too)
        # OpenBLAS's threads for the products, set as each step starts (choices.measured_threads); None: as they are
        self.threads: int | None = None
        self.kernel_threads = blas.available_threads()  # the compiled kernel's: Numba's, one per core we may use
        # A batch-1 step's threads chosen again from its steps' times while the machine's load changes (`threads`);
        # None: always `threads` (or `kernel_threads`), as while `choices` measures
        self.adaptive: ThreadCount | None = None
        # A batch step's threads, per batch size and the products' place (`batch_count`), chosen again the same way;
        # None: PyTorch's count (or `kernel_threads`) as it is, as while `choices` measures
        self.batch_counts: dict[tuple[int, bool, int], ThreadCount] | None = None
        half = cfg.head_dim // 2
        # RoPE's rotate-half, out = x·cos + [-x₂, x₁]·sin, as x·cos + swap(x)·sin_signed: each head's two halves
        # swapped by a view, and the sign folded into a copy of the sine table (max_seq_len, 2, hd/2).
        cos, sin = view(model.rope_cos), view(model.rope_sin)  # (max_seq_len, hd) each
        self.cos = cos.reshape(-1, 2, half)
        self.sin_signed = np.concatenate([-sin[:, None, :half], sin[:, None, half:]], axis=1)
        self.scale = np.float32(1 / math.sqrt(cfg.head_dim))

    def set_matrix(self, name: str, arrays: list[np.ndarray]) -> None:
        """Read matrix `name` (one of MATRICES) from `arrays` instead of the views it was built with: one array per
        layer (the head: one), each in the layout `LayerWeights` (or `head`) holds (`choices.step_array`)."""
        if name not in MATRICES:
            raise ValueError(f"No matrix named {name!r}; the step multiplies {', '.join(MATRICES)}.")
        if name == "head":
            (self.head,) = arrays
            return
        self.layers = [layer._replace(**{name: array}) for layer, array in zip(self.layers, arrays, strict=True)]

    def matrix(self, name: str) -> list:
        """What the step reads for matrix `name` (one of MATRICES): one array per layer (the head: one), as
        `set_matrix` takes them."""
        if name not in MATRICES:
            raise ValueError(f"No matrix named {name!r}; the step multiplies {', '.join(MATRICES)}.")
        return [self.head] if name == "head" else [getattr(layer, name) for layer in self.layers]

    at_once = property(lambda self: self.head.at_once, lambda self, rows: kernel.set_at_once(
        [m for name in MATRICES for m in self.matrix(name)], rows, self.compiled), doc="The weight rows the compiled "
        "kernel takes in one pass (`kernel.AT_ONCE`), one count for every matrix of a compiled step.")

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x * np.float32(1 / math.sqrt(float(x @ x) / x.size + self.eps)) * weight

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """One sequence's attention for its one new token: q (H, 2, hd/2) as RoPE left it, k and v (Hkv, T, hd)
        its keys and values so far; returns (H·hd,), the heads side by side."""
        Hkv, _, hd = k.shape
        q = q.reshape(Hkv, -1, hd)  # each key/value head's group of query heads, (Hkv, G, hd)
        scores = np.matmul(q, k.transpose(0, 2, 1))  # (Hkv, G, T)
        return self.softmax_values(scores, v).reshape(-1)  # (Hkv, G, hd) -> (H·hd,)

    def softmax_values(self, scores: np.ndarray, v: np.ndarray) -> np.ndarray:
        """softmax(scores · scale) @ v over the keys' axis, (..., T) @ (..., T, hd) -> (..., hd); overwrites
        `scores`. Stable: the largest score becomes exp(0). The weights stay unnormalised and the weighted sum is
        divided instead: hd values per query, not T."""
        scores -= scores.max(axis=-1, keepdims=True)
        scores *= self.scale
        weights = np.exp(scores, out=scores)
        y = np.matmul(weights, v)
        y /= weights.sum(axis=-1, keepdims=True)
        return y

    def __call__(self, token: int, pos: int, cache: KVCache, lap=no_lap) -> np.ndarray:
        started = time.perf_counter()
        threads = self.adaptive.now() if self.adaptive else self.kernel_threads if self.compiled else self.threads
        if self.compiled:
            kernel.use_threads(threads)  # Numba's count is per calling thread: a server's may differ
        elif threads is not None:
            blas.use_threads(threads)  # another fused model in this process may have set another count
        if self.compiled and lap is no_lap and compiled_step.why_not() is None:
            logits = compiled_step.decode(self, token, pos, cache)  # the lines below, one compiled call a layer
        else:
            logits = self.numpy_code(token, pos, cache, lap)
        if self.adaptive:
            self.adaptive.record(time.perf_counter() - started)
        return logits

    def numpy_code(self, token: int, pos: int, cache: KVCache, lap=no_lap) -> np.ndarray:
        """The step as NumPy code, its products in NumPy's BLAS or the compiled kernel (`__call__`)."""
        cfg = self.cfg
        d, H, Hkv, hd = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        kv, at = cache.numpy_layers(), np.asarray([pos])  # the cache's reads and writes on its own memory
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
            kv.write(i, at, qk[None, H:].reshape(1, Hkv, hd), qkv[None, (H + Hkv) * hd:].reshape(1, Hkv, hd))
            lap(KV_WRITE)
            keys, values = kv.read(i, pos + 1)  # (1, Hkv, pos + 1, hd) each: positions 0..pos
            y = self.attend(qk[:H], keys[0], values[0])  # (H·hd,)
            lap(ATTENTION)
            out = wo @ y  # (d,), or (rows,) whose first d are the product (FusedAttention.wo_padded)
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

    def batch(self, tokens, positions, cache: KVCache, lap=no_lap) -> np.ndarray:
        """One decode step of B sequences, sequence b's token `tokens[b]` at its own position `positions[b]` of
        `cache` (B sequences); writes their keys and values in place and returns the logits, (B, vocab) float32.

        The same arithmetic as `__call__`, on all B rows at once, except for the products: each is one
        (B, in) × (in, out) matrix product, which reads each weight once for all rows: in the compiled kernel for
        a few rows where it measured faster here, else handed to the fused model's PyTorch layer (`product`),
        from its packed copy if the model was packed (`FusedTransformer.pack`), else with PyTorch's own product
        (`choices.measured_products` chooses, on this host). NumPy's own product (OpenBLAS's gemm) would pack
        every weight anew at every call and has no packed copy to read. Attention reads each row's own keys, up
        to its own position (`attend_rows`), all rows in one batched product. Where `batch_counts` is set, the
        products' threads follow the machine's load, per batch size (`batch_count`)."""
        cfg = self.cfg
        H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        kv = cache.numpy_layers()  # the cache's reads and writes on its own memory
        started, pytorchs = time.perf_counter(), torch.get_num_threads()
        in_kernel = self.compiled and len(tokens) <= self.kernel_rows
        counter = self.batch_count(len(tokens), in_kernel)
        if self.threads is not None:
            blas.use_threads(self.threads)  # for its NumPy products (attention); the weights' run in PyTorch
        if in_kernel:
            kernel.use_threads(counter.now() if counter else self.kernel_threads)  # ... or in the compiled kernel
        elif counter and counter.now() != pytorchs:
            torch.set_num_threads(counter.now())
        positions = np.asarray([int(p) for p in positions])  # (B,)
        B, T = len(positions), int(positions.max()) + 1  # T: the longest row's positions, 0..T-1
        # -inf on the keys after each row's own position, 0 elsewhere: (B, 1, 1, T), added to each row's scores
        later = np.where(np.arange(T) > positions[:, None], np.float32(-np.inf), np.float32(0))[:, None, None, :]
        cos, sin = self.cos[positions][:, None], self.sin_signed[positions][:, None]  # (B, 1, 2, hd/2) each
        x = self.embedding[np.asarray(tokens)]  # (B, d), a copy
        lap(OTHER)
        for i, (norm1, wqkv_step, wo_step, norm2, w13_step, w2_step) in enumerate(self.layers):
            wqkv, wo, w13, w2 = self.batch_layers[i]
            h = self.rms_rows(x, norm1)
            lap(NORMS)
            qkv = self.product(h, wqkv, wqkv_step)  # (B, d) × (d, (H + 2·Hkv)·hd): every row's q, k and v
            lap(PROJECTIONS)
            qk = qkv[:, :(H + Hkv) * hd].reshape(B, H + Hkv, 2, hd // 2)  # each row's q and k heads, as halves
            qk = qk * cos + qk[:, :, ::-1] * sin  # RoPE, each row at its own position, (B, H + Hkv, 2, hd/2)
            lap(OTHER)
            kv.write(i, positions, qk[:, H:].reshape(B, Hkv, hd), qkv[:, (H + Hkv) * hd:].reshape(B, Hkv, hd))
            lap(KV_WRITE)
            keys, values = kv.read(i, T)  # (B, Hkv, T, hd) each
            y = self.attend_rows(qk[:, :H], keys, values, later)  # (B, H·hd)
            lap(ATTENTION)
            x = x + self.product(y, wo, wo_step)  # the residual, (B, d)
            lap(PROJECTIONS)
            h = self.rms_rows(x, norm2)
            lap(NORMS)
            gate_up = self.product(h, w13, w13_step)  # (B, d) × (d, 2·d_ff)
            lap(PROJECTIONS)
            gate, up = gate_up[:, :cfg.d_ff], gate_up[:, cfg.d_ff:]
            act = np.exp(-gate)
            act += 1
            np.divide(gate, act, out=act)  # SiLU: gate / (1 + e^-gate)
            act *= up
            lap(OTHER)
            x = x + self.product(act, w2, w2_step)  # (B, d_ff) × (d_ff, d)
            lap(PROJECTIONS)
        h = self.rms_rows(x, self.norm)
        lap(NORMS)
        logits = self.product(h, self.batch_head, self.head)  # (B, d) × (d, vocab)
        lap(LM_HEAD)
        if counter:
            counter.record(time.perf_counter() - started)
            if torch.get_num_threads() != pytorchs:
                torch.set_num_threads(pytorchs)  # a prefill, or any other PyTorch work, on the count it had
        return logits

    def batch_count(self, rows: int, in_kernel: bool) -> ThreadCount | None:
        """The thread count of a batch step of `rows` sequences whose products run in the compiled kernel
        (`in_kernel`) or in PyTorch: its best is the kernel's threads or PyTorch's count now, the other count
        beside it (`threads.other_count`). One per batch size and best: a step of 4 rows and one of 2 take
        different times, and a count's median must compare like with like; a count set anew with
        torch.set_num_threads starts a count of its own. None where `batch_counts` is None."""
        if self.batch_counts is None:
            return None
        best = self.kernel_threads if in_kernel else torch.get_num_threads()
        key = (rows, in_kernel, best)
        if key not in self.batch_counts:
            self.batch_counts[key] = ThreadCount(best, other_count(best, blas.available_threads()))
        return self.batch_counts[key]

    def attend_rows(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, later: np.ndarray) -> np.ndarray:
        """`attend` for B sequences at once, each for its one new token at its own position: q (B, H, 2, hd/2) as
        RoPE left it; k and v (B, Hkv, T, hd), every sequence's keys and values up to the longest one's; `later`
        (B, 1, 1, T) is -inf on each row's keys beyond its own position, which it must not see (another request's
        leftovers, or nothing yet), 0 elsewhere: added to the scores, it makes their weights exp(-inf) = 0.
        Returns (B, H·hd).
        A few batched products per layer, not a few per row: each NumPy call has a fixed cost, which a loop over
        the rows would pay B times; the price is the keys past each row's own position, read and masked."""
        B, Hkv, _, hd = k.shape
        q = q.reshape(B, Hkv, -1, hd)  # each row's key/value heads' groups of query heads, (B, Hkv, G, hd)
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))  # (B, Hkv, G, T)
        scores += later  # every row has position 0, so its largest score stays finite
        return self.softmax_values(scores, v).reshape(B, -1)  # (B, Hkv, G, hd) -> (B, H·hd)

    def product(self, x: np.ndarray, layer: torch.nn.Module, matrix=None) -> np.ndarray:
        """x (B, in) times a weight: by the compiled kernel if the step's batch-1 products run there and B is at
        most `kernel_rows` (`matrix`, the step's `kernel.CompiledMatrix`: each weight read once for all rows;
        `choices.measured_kernel_rows` decides, on this host), else `product(x, layer)`, x given zero rows up to
        `fewest_rows` first and the answer cut back to x's rows: a library's product of two rows can take longer
        than one of four, which reads the weight no more often (`choices.measured_fewest_rows` decides, on this
        host). The zero rows' outputs are zero and thrown away."""
        if self.compiled and len(x) <= self.kernel_rows:
            return matrix.rows(x)
        if len(x) >= self.fewest_rows:
            return product(x, layer)
        padded = np.zeros((self.fewest_rows, x.shape[1]), np.float32)
        padded[:len(x)] = x
        return product(padded, layer)[:len(x)]

    def rms_rows(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """`rms_norm` of each row of x, (B, d)."""
        mean_square = np.einsum("bd,bd->b", x, x) / x.shape[1]  # (B,)
        return x * (1 / np.sqrt(mean_square + self.eps))[:, None] * weight


def product(x: np.ndarray, layer: torch.nn.Module) -> np.ndarray:
    """x (B, in) times `layer`'s weight (out, in) transposed: (B, out), by the layer's PyTorch product on NumPy's
    memory (from_numpy and .numpy() copy nothing). A padded weight's extra rows never reach it: the layer's
    weight is the view PyTorch reads."""
    return layer(torch.from_numpy(np.ascontiguousarray(x))).numpy()
