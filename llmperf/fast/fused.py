"""The fused model: q/k/v and gate/up as one matrix each, sharing everything else with the plain model; a
cached float32 decode step on a CPU, of one sequence or of a batch, runs as NumPy code
(`numpy_step.NumpyDecodeStep`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..model import Attention, FeedForward, Transformer, apply_rope, attend
from . import blas, tuning
from .numpy_step import NumpyDecodeStep


def linear(weight: torch.Tensor) -> nn.Linear:
    """An nn.Linear (no bias) whose weight is `weight` itself, (out, in), not a copy."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
    return layer


def stored(name: str, weight: torch.Tensor, for_numpy: bool, paddable: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`weight`, (out, in), stored as the NumPy step multiplies it fastest on this host (`tuning.choose`, which
    measures it here once): as it is (output-major), as an (out, in) view of an (in, out) copy (input-major,
    `blas.input_major`), or, if `paddable`, as a view of the first rows of a copy with zero rows appended
    (`blas.threaded_gemv_rows`). Returns (the weight PyTorch reads, the padded copy or None). Without
    `for_numpy`, the weight as it is."""
    if not for_numpy:
        return weight, None
    way = tuning.choose(name, *weight.shape, paddable)
    if way == "input-major":
        return blas.input_major(weight, True), None
    if way == "output-major, padded":
        rows = blas.threaded_gemv_rows(*weight.shape, blas.openblas_threads())
        padded = torch.cat([weight.detach(), weight.new_zeros(rows - weight.shape[0], weight.shape[1])])
        return padded[:weight.shape[0]], padded  # (out, in): a view of the padded copy, (rows, in)
    return weight, None


class FusedAttention(nn.Module):
    """Attention whose q, k, v projections are one matrix, and whose q and k are rotated in one op.

    For the NumPy step (`for_numpy`), that matrix and wo are stored as this host multiplies them fastest
    (`stored`); wo may be stored with zero rows appended: `wo_padded` holds them, and `wo` is a view of its first
    rows, so PyTorch's path reads the same weights.
    """

    def __init__(self, attn: Attention, for_numpy: bool = False):
        super().__init__()
        self.layer_id = attn.layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = linear(stored("wqkv", torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]), for_numpy)[0])
        wo, self.wo_padded = stored("wo", attn.wo.weight, for_numpy, paddable=True)  # (d, q): may be shared
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

    def __init__(self, ff: FeedForward, for_numpy: bool = False):
        super().__init__()
        self.w13 = linear(stored("w13", torch.cat([ff.w1.weight, ff.w3.weight]), for_numpy)[0])  # (2·d_ff, d)
        self.w2 = linear(stored("w2", ff.w2.weight, for_numpy)[0])  # shared with the plain model unless copied

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, S, 2·d_ff) -> two (B, S, d_ff)
        return self.w2(F.silu(gate) * up)


class FusedTransformer(Transformer):
    """`model` with fused layers (see `fuse` for what it shares); a cached decode step (one new token per
    sequence, of one sequence or of a batch), float32 on a CPU, runs as NumPy code (`NumpyDecodeStep`).

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
        # for_numpy: the LM head as this host multiplies it fastest, a copy if not as it is (for tied models the
        # embedding stays as it is)
        self.output = linear(stored("head", model.output.weight, for_numpy)[0])
        self.rope_cos, self.rope_sin = model.rope_cos, model.rope_sin
        self.numpy_step = NumpyDecodeStep(self) if for_numpy else None

    def runs_in_numpy(self, tokens: torch.Tensor, input_pos, cache) -> bool:
        """Is this pass one for `numpy_step`? One cached token per sequence (a decode step, of one sequence or
        of a batch), float32 on a CPU, no autograd (NumPy would drop the gradient) and no autocast (NumPy would
        ignore it)."""
        return (self.numpy_step is not None and tokens.dim() == 2 and tokens.shape[1] == 1 and cache is not None
                and input_pos is not None and input_pos.numel() in (1, tokens.shape[0])
                and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache=None, last_only: bool = False) -> torch.Tensor:
        if not self.runs_in_numpy(tokens, input_pos, cache):
            return super().forward(tokens, input_pos, cache, last_only)
        B = tokens.shape[0]
        cache.window(input_pos if input_pos.dim() == 2 else input_pos.reshape(-1), B)  # they fit, as model.py checks
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


@torch.no_grad()
def fuse(model: Transformer) -> FusedTransformer:
    """A model computing the same function as `model` with fused q/k/v and gate/up matrices.

    Shares the embedding, norms and rotary tables with `model`, and wo, w2 and the
    LM head too unless `model` is float32 on a CPU. The fused matrices are new, so it
    takes extra memory equal to the q, k, v, gate and up matrices; float32 on a CPU
    adds a copy of each of wo, w2 and the LM head that this host multiplies faster
    stored otherwise (`stored`: input-major, or wo with zero rows), measured here the
    first time (`tuning`). Neither model may be moved or cast afterwards (the fused one refuses to be).
    """
    return FusedTransformer(model).eval()
