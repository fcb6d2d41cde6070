"""The fused model: q/k/v and gate/up as one matrix each, sharing everything else with the plain model; a
cached float32 decode step on a CPU, of one sequence or of a batch, runs as NumPy code
(`numpy_step.NumpyDecodeStep`). How each matrix is stored for that step, and the other choices this host's
measurements make, are `choices`; a step's thread count is chosen again as it runs (`threads`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import hugepages
from ..model import Attention, FeedForward, Transformer, apply_rope, attend
from . import blas, choices, packing, tuning
from .choices import in_layout, matrices
from .numpy_step import NumpyDecodeStep
from .threads import ThreadCount, other_count


class Linear(nn.Linear):
    """nn.Linear (no bias) that may also hold its weight packed for products of several rows (`packed`): then,
    with no autograd, it multiplies by the packed copy."""

    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"):
            return packing.linear(x, self.packed)
        return F.linear(x, self.weight)


def linear(weight: torch.Tensor) -> Linear:
    """A `Linear` whose weight is `weight` itself, (out, in), not a copy."""
    layer = Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
    return layer


class FusedAttention(nn.Module):
    """Attention whose q, k, v projections are one matrix, and whose q and k are rotated in one op.

    For the NumPy step, that matrix and wo are stored as `layouts` says (`choices.in_layout`; None: not for
    NumPy); wo may be stored with zero rows appended: `wo_padded` holds them, and `wo` is a view of its first
    rows, so PyTorch's path reads the same weights.
    """

    def __init__(self, attn: Attention, layouts: dict[str, str] | None = None):
        super().__init__()
        layouts = layouts or {}
        self.layer_id = attn.layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        wqkv = hugepages.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight])  # (q_dim + 2·kv_dim, d)
        self.wqkv = linear(in_layout(wqkv, layouts.get("wqkv"))[0])
        wo, self.wo_padded = in_layout(attn.wo.weight, layouts.get("wo"))  # (d, q): shared, unless stored otherwise
        self.wo = linear(wo)

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

    def __init__(self, ff: FeedForward, layouts: dict[str, str] | None = None):
        super().__init__()
        layouts = layouts or {}
        self.w13 = linear(in_layout(hugepages.cat([ff.w1.weight, ff.w3.weight]), layouts.get("w13"))[0])  # (2·d_ff, d)
        self.w2 = linear(in_layout(ff.w2.weight, layouts.get("w2"))[0])  # shared with the plain model unless copied

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, S, 2·d_ff) -> two (B, S, d_ff)
        return self.w2(F.silu(gate) * up)


class FusedTransformer(Transformer):
    """`model` with fused layers (see `fuse` for what it shares); a cached decode step (one new token per
    sequence, of one sequence or of a batch), float32 on a CPU, runs as NumPy code (`NumpyDecodeStep`).

    It is a Transformer, built by Transformer's own constructor on the meta device
    (a skeleton that allocates nothing), whose parts are then replaced: the
    embedding, norms and rotary tables by `model`'s own, wo, w2 and the LM head by
    `model`'s or by copies laid out for NumPy as `layouts` says (by default, as
    `choices.measured_layouts` finds fastest here; every weight as it is where the compiled
    kernel won, `choices.measured_kernel`), and attention and the MLP by their fused forms.
    Transformer.forward runs everything but the NumPy step.
    """

    def __init__(self, model: Transformer, layouts: dict[str, str] | None = None):
        with torch.device("meta"):
            super().__init__(model.cfg)
        for_numpy = model.dtype == torch.float32 and model.device.type == "cpu"  # its decode steps: NumPy
        # How each kind of matrix is stored for NumPy: given, or as this host multiplies it fastest (measured once,
        # after the thread count OpenBLAS runs them on)
        threads = None
        if not for_numpy:
            layouts = None
        elif not layouts:
            threads = choices.measured_threads(model, numpy_step_of)
            layouts = choices.measured_layouts(model, numpy_step_of)
            if choices.measured_kernel(model, numpy_step_of, layouts) == tuning.COMPILED:
                layouts = dict.fromkeys(layouts, tuning.COMPILED)  # every weight as it is, for the kernel
        self.tok_embeddings, self.norm = model.tok_embeddings, model.norm
        for block, plain in zip(self.layers, model.layers):
            block.attention_norm, block.ffn_norm = plain.attention_norm, plain.ffn_norm
            block.attention = FusedAttention(plain.attention, layouts)
            block.feed_forward = FusedFeedForward(plain.feed_forward, layouts)
        # The LM head, a copy if stored otherwise than as it is (for tied models the embedding stays as it is)
        self.output = linear(in_layout(model.output.weight, layouts and layouts["head"])[0])
        self.rope_cos, self.rope_sin = model.rope_cos, model.rope_sin
        compiled = bool(layouts) and set(layouts.values()) == {tuning.COMPILED}
        self.numpy_step = NumpyDecodeStep(self, compiled) if for_numpy else None
        if compiled and threads is not None:  # chosen here, not given: the kernel's rows per pass too (saved)
            self.numpy_step.at_once = choices.measured_at_once(model, numpy_step_of)
        if threads is not None:
            self.numpy_step.threads = threads  # its steps run OpenBLAS on them, whatever another model set
            if compiled or blas.can_limit_threads():  # and a batch-1 step on fewer or more while the load says so
                best = self.numpy_step.kernel_threads if compiled else threads
                self.numpy_step.adaptive = ThreadCount(best, other_count(best, blas.available_threads()))
            self.numpy_step.batch_counts = {}  # a batch step's too, per batch size (PyTorch's threads can be set)

    def linears(self) -> list[Linear]:
        """Every product's layer: each block's wqkv, wo, w13 and w2, and the LM head."""
        return [m for b in self.layers for m in (b.attention.wqkv, b.attention.wo, b.feed_forward.w13,
                                                   b.feed_forward.w2)] + [self.output]

    @torch.no_grad()
    def pack(self) -> bool:
        """Pack every weight for products of several rows (`packing`), if oneDNN is here and this host multiplies
        several rows faster so (`choices.measured_products`: measured once, saved), give a batch step's products
        the fewest rows this host multiplies fastest (`choices.measured_fewest_rows`, saved too), and, where the
        batch-1 products run compiled, the most rows the compiled kernel takes (`choices.measured_kernel_rows`).
        Each is measured with the batch steps' thread counts held fixed. Returns whether it packed."""
        if self.numpy_step is None or not packing.available():
            return False
        step, counts = self.numpy_step, self.numpy_step.batch_counts
        step.batch_counts = None  # each choice is measured on fixed thread counts
        try:
            return self._pack()
        finally:
            step.batch_counts = None if counts is None else {}  # counted afresh on the products chosen

    def _pack(self) -> bool:
        chosen = tuning.saved_choice(tuning.PRODUCTS, matrices(self))
        packs = {} if chosen == "plain" else {layer: packing.pack(layer.weight) for layer in self.linears()}
        if chosen is None:
            chosen = choices.measured_products(self, packs)
        for layer, pack in packs.items():
            layer.packed = pack if chosen == "packed" else None
        rows = tuning.saved_choice(tuning.FEWEST_ROWS, matrices(self))
        if rows is None:
            rows = choices.measured_fewest_rows(self)
        self.numpy_step.fewest_rows = rows
        most = tuning.saved_choice(tuning.KERNEL_ROWS, matrices(self)) if self.numpy_step.compiled else 0
        if most is None:
            most = choices.measured_kernel_rows(self)
        self.numpy_step.kernel_rows = most
        return chosen == "packed"

    def products_said(self) -> str:
        """Where this model's decode steps multiply, as this host's measurements chose (for a server's banner), e.g.
        "compiled (Numba, 2 threads, 1 while that measures faster) up to 4 rows, then packed (oneDNN)"."""
        step = self.numpy_step
        if step is None:
            return "PyTorch's"
        library = "packed (oneDNN)" if any(layer.packed is not None for layer in self.linears()) else "PyTorch's"
        alone = step.kernel_rows if step.compiled else 1  # rows the library never sees
        if step.fewest_rows > alone + 1:
            library += f", fewer than {step.fewest_rows} rows given zero rows up to {step.fewest_rows}"
        torch_threads = torch.get_num_threads()
        other = other_count(torch_threads, blas.available_threads())
        if step.batch_counts is not None and other != torch_threads:  # a batch step's threads follow the load too
            library += f"; {tuning.threads_name(torch_threads)}, {other} while that measures faster"
        counter = step.adaptive
        count = counter.best if counter else step.kernel_threads if step.compiled else step.threads
        threads = tuning.threads_name(count) if count else "its threads"
        if counter and counter.adapts:
            threads += f", {counter.other} while that measures faster"
        if not step.compiled:
            return f"NumPy's BLAS at 1 row ({threads}), then {library}"
        most = f"up to {step.kernel_rows} rows" if step.kernel_rows else "at 1 row"
        return f"compiled (Numba, {threads}) {most}, then {library}"

    def runs_in_numpy(self, tokens: torch.Tensor, input_pos, cache) -> bool:
        """Is this pass one for `numpy_step`? One cached token per sequence (a decode step, of one sequence or
        of a batch), float32 on a CPU, no autograd (NumPy would drop the gradient) and no autocast (NumPy would
        ignore it)."""
        return (self.numpy_step is not None and tokens.dim() == 2 and tokens.shape[1] == 1 and cache is not None
                and input_pos is not None and input_pos.numel() in (1, tokens.shape[0])
                and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False, lengths: torch.Tensor | None = None) -> torch.Tensor:
        if not self.runs_in_numpy(tokens, input_pos, cache):
            return super().forward(tokens, input_pos, cache, last_only, lengths)
        B = tokens.shape[0]
        cache.begin_pass(input_pos if input_pos.dim() == 2 else input_pos.reshape(-1), B)  # they fit, as in model.py
        if B == 1:
            logits = self.numpy_step(int(tokens), int(input_pos), cache)
        else:  # each sequence at its own position (B, 1), or all at one (1,)
            positions = input_pos.reshape(-1).tolist() * (B if input_pos.numel() == 1 else 1)
            logits = self.numpy_step.batch(tokens.reshape(-1).tolist(), positions, cache)
        return torch.from_numpy(logits).view(B, 1, -1)  # (B, S, vocab) as Transformer.forward returns

    def _apply(self, fn, recurse=True):
        # .to(), .cuda(), .half() ... would convert the tensors shared with the original model in place.
        raise RuntimeError("A fused model cannot be moved or cast: it shares tensors with the model it was "
                           "made from. Move or cast that model first, then fuse it: fuse(model.to(...)).")


def numpy_step_of(model: Transformer, layouts: dict[str, str]) -> NumpyDecodeStep:
    """The NumPy step of `model` fused with its matrices stored as `layouts`: what `choices` times the threads and
    the layouts on (its `build_step`)."""
    return FusedTransformer(model, layouts).numpy_step


@torch.no_grad()
def fuse(model: Transformer, pack: bool = False) -> FusedTransformer:
    """A model computing the same function as `model` with fused q/k/v and gate/up matrices.

    Shares the embedding, norms and rotary tables with `model`, and wo, w2 and the
    LM head too unless one is stored otherwise for NumPy. The fused matrices are new,
    so it takes extra memory equal to the q, k, v, gate and up matrices; float32 on a
    CPU adds a copy of each of wo, w2 and the LM head that this host's step runs
    faster stored otherwise (`choices.in_layout`: input-major, or wo with zero rows).
    Which those are is measured in the step the first time a model of this shape is
    fused on this host (a few hundred whole steps, timed), and saved (`choices`, `tuning`).
    Neither model may be moved or cast afterwards (the fused one refuses to be).

    With `pack`, float32 on a CPU, every weight is also packed for products of several rows (a batch's decode
    step, a prompt's prefill; `packing`), if that is faster on this host (`FusedTransformer.pack`): one more
    copy of every matrix. A server's model wants it; a batch-1 decode does not use it.
    """
    fused = FusedTransformer(model).eval()
    if pack:
        fused.pack()
    return fused
