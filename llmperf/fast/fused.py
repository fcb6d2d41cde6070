"""The fused model: q/k/v and gate/up as one matrix each, sharing everything else with the plain model; a
cached float32 decode step on a CPU, of one sequence or of a batch, runs as NumPy code
(`numpy_step.NumpyDecodeStep`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..model import Attention, FeedForward, Transformer, apply_rope, attend
from . import blas, packing, tuning
from .numpy_step import NumpyDecodeStep


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


def stored(weight: torch.Tensor, way: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`weight`, (out, in), stored `way` (`tuning.WAYS`) for the NumPy step: as it is (output-major, or None:
    not for NumPy), as an (out, in) view of an (in, out) copy (input-major, `blas.input_major`), or as a view of
    the first rows of a copy with zero rows appended (`blas.threaded_gemv_rows`). Returns (the weight PyTorch
    reads, the padded copy or None)."""
    if way == "input-major":
        return blas.input_major(weight), None
    if way == "output-major, padded":
        rows = blas.threaded_gemv_rows(*weight.shape, blas.openblas_threads())
        padded = torch.cat([weight.detach(), weight.new_zeros(rows - weight.shape[0], weight.shape[1])])
        return padded[:weight.shape[0]], padded  # (out, in): a view of the padded copy, (rows, in)
    return weight, None


def sources(model: Transformer) -> dict[str, list[torch.Tensor]]:
    """Each kind of matrix the NumPy step multiplies, (out, in), one per layer (the head: one): what `stored`
    lays out."""
    return {"wqkv": [torch.cat([b.attention.wq.weight, b.attention.wk.weight, b.attention.wv.weight])
                     for b in model.layers],
            "wo": [b.attention.wo.weight for b in model.layers],
            "w13": [torch.cat([b.feed_forward.w1.weight, b.feed_forward.w3.weight]) for b in model.layers],
            "w2": [b.feed_forward.w2.weight for b in model.layers],
            "head": [model.output.weight]}


def matrices(model: Transformer) -> dict[str, tuple[int, int, bool]]:
    """{kind: (rows, cols, paddable)} of the step's matrices, read off the config (nothing is concatenated, as
    `sources` does); wo's extra outputs are cut off, so it may be padded."""
    cfg = model.cfg
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"wqkv": (q + 2 * kv, cfg.d_model, False), "wo": (cfg.d_model, q, True),
            "w13": (2 * cfg.d_ff, cfg.d_model, False), "w2": (cfg.d_model, cfg.d_ff, False),
            "head": (cfg.vocab_size, cfg.d_model, False)}


@torch.no_grad()
def measured_layouts(model: Transformer) -> dict[str, str]:
    """How to store each kind of matrix for the NumPy step on this host: kept from an earlier measurement, or
    measured now in the step itself (`tuning`'s docstring) and kept."""
    from ..generation import new_cache

    shapes = matrices(model)
    ways = tuning.kept(shapes)
    if ways is not None:
        return ways
    ways = tuning.first_guesses(shapes)
    step = FusedTransformer(model, ways).numpy_step
    cache, seconds = new_cache(model, 1, 32), {}
    for name, weights in sources(model).items():
        arrays = {way: [step_array(name, *stored(w, way)) for w in weights] for way in tuning.candidates(*shapes[name])}
        seconds[name] = tuning.time_in_step(step, lambda a, name=name: install(step, name, a), arrays, cache)
        ways[name] = min(seconds[name], key=seconds[name].get)
        install(step, name, arrays[ways[name]])
    tuning.keep(shapes, ways, seconds)
    return ways


@torch.no_grad()
def measured_threads(model: Transformer) -> int:
    """How many threads OpenBLAS runs the NumPy step's products on, on this host: kept from an earlier
    measurement, or measured now, whole batch-1 steps (the first guess's layouts) at each of
    `tuning.thread_counts`, in turns (`tuning.time_in_step`), and kept. Leaves OpenBLAS on it (for the layouts'
    measurement; the model's steps set it as they start: `NumpyDecodeStep.threads`). Returns it."""
    from ..generation import new_cache

    available, shapes = blas.available_threads(), matrices(model)
    if not blas.can_limit_threads():
        return available  # another BLAS: its products run on what it starts with
    chosen = tuning.kept_choice(tuning.THREADS, shapes, threads=available)
    counts = tuning.thread_counts(available)
    if chosen is None and len(counts) > 1:
        blas.limit_threads(available)  # the first guess's padding, as for the threads OpenBLAS starts
        step = FusedTransformer(model, tuning.first_guesses(shapes)).numpy_step
        ways = {tuning.threads_name(n): n for n in counts}
        seconds = tuning.time_in_step(step, blas.limit_threads, ways, new_cache(model, 1, 32))
        chosen = ways[min(seconds, key=seconds.get)]
        tuning.keep_choice(tuning.THREADS, shapes, chosen, seconds, threads=available)
    threads = chosen or available  # none kept, one count to try: what OpenBLAS starts
    blas.limit_threads(threads)
    return threads


@torch.no_grad()
def measured_products(fused: "FusedTransformer", packs: dict) -> str:
    """Measure how this host multiplies several rows (a 32-token prefill and a decode step of 4 sequences,
    timed together): by the weights packed once ("packed": `packs`, {layer: its packed weight}) or by PyTorch's
    own product ("plain"), in turns (`tuning.time_in_step`); keep and return the faster."""
    from ..generation import new_cache

    rows, prompt = 4, torch.arange(32)[None] % fused.cfg.vocab_size  # (1, 32)
    batch, alone = new_cache(fused, rows, 64), new_cache(fused, 1, 32)

    def work(token, pos, cache):  # a prompt's prefill and a decode step of `rows` sequences
        fused(prompt, torch.arange(32), alone, last_only=True)
        fused.numpy_step.batch([token] * rows, [pos] * rows, batch)

    def install(way):
        for layer, pack in packs.items():
            layer.packed = pack if way == "packed" else None

    seconds = tuning.time_in_step(work, install, {"plain": "plain", "packed": "packed"}, None)
    chosen = min(seconds, key=seconds.get)
    install(chosen)
    tuning.keep_choice(tuning.PRODUCTS, matrices(fused), chosen, seconds)
    return chosen


@torch.no_grad()
def measured_fewest_rows(fused: "FusedTransformer", choices=(2, 3, 4)) -> int:
    """Measure the fewest rows for a batch step's products on this host: a decode step of 2 sequences with its
    products given 2, 3 or 4 rows (`NumpyDecodeStep.product` appends zero rows), in turns
    (`tuning.time_in_step`); keep the fastest and return it (as `fewest_rows`, 1 when two rows won: no padding)."""
    from ..generation import new_cache

    step = fused.numpy_step

    def two_rows(token, pos, cache):
        step.batch([token] * 2, [pos] * 2, cache)

    def give(rows):
        step.fewest_rows = rows

    ways = {f"{r} rows": r for r in choices}
    seconds = tuning.time_in_step(two_rows, give, ways, new_cache(fused, 2, 64))
    rows = ways[min(seconds, key=seconds.get)]
    rows = 1 if rows == 2 else rows
    give(rows)
    tuning.keep_choice(tuning.FEWEST_ROWS, matrices(fused), rows, seconds)
    return rows


def step_array(name: str, weight: torch.Tensor, padded: torch.Tensor | None):
    """The NumPy view the step multiplies: (in, out) for the `h @ W` products (wqkv, w13, head), (out, in) or
    padded (rows, in) for the `W @ h` ones (wo, w2), as NumpyDecodeStep takes them."""
    array = (padded if padded is not None else weight).detach().numpy()
    return array.T if name in ("wqkv", "w13", "head") else array


def install(step: NumpyDecodeStep, name: str, arrays: list) -> None:
    """Put one kind of matrix, one array per layer (the head: one), into `step` in place of its own."""
    if name == "head":
        step.head = arrays[0]
        return
    where = {"wqkv": 1, "wo": 2, "w13": 4, "w2": 5}[name]  # NumpyDecodeStep.layers: (norm1, wqkv, wo, norm2, w13, w2)
    step.layers = [layer[:where] + (array,) + layer[where + 1:] for layer, array in zip(step.layers, arrays)]


class FusedAttention(nn.Module):
    """Attention whose q, k, v projections are one matrix, and whose q and k are rotated in one op.

    For the NumPy step, that matrix and wo are stored as `ways` says (`stored`; None: not for NumPy); wo may be
    stored with zero rows appended: `wo_padded` holds them, and `wo` is a view of its first rows, so PyTorch's
    path reads the same weights.
    """

    def __init__(self, attn: Attention, ways: dict[str, str] | None = None):
        super().__init__()
        ways = ways or {}
        self.layer_id = attn.layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = attn.n_heads, attn.n_kv_heads, attn.head_dim
        self.wqkv = linear(stored(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]), ways.get("wqkv"))[0])
        wo, self.wo_padded = stored(attn.wo.weight, ways.get("wo"))  # (d, q): shared, unless stored otherwise
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

    def __init__(self, ff: FeedForward, ways: dict[str, str] | None = None):
        super().__init__()
        ways = ways or {}
        self.w13 = linear(stored(torch.cat([ff.w1.weight, ff.w3.weight]), ways.get("w13"))[0])  # (2·d_ff, d)
        self.w2 = linear(stored(ff.w2.weight, ways.get("w2"))[0])  # shared with the plain model unless copied

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, S, 2·d_ff) -> two (B, S, d_ff)
        return self.w2(F.silu(gate) * up)


class FusedTransformer(Transformer):
    """`model` with fused layers (see `fuse` for what it shares); a cached decode step (one new token per
    sequence, of one sequence or of a batch), float32 on a CPU, runs as NumPy code (`NumpyDecodeStep`).

    It is a Transformer, built by Transformer's own constructor on the meta device
    (a skeleton that allocates nothing), whose parts are then replaced: the
    embedding, norms and rotary tables by `model`'s own, wo, w2 and the LM head by
    `model`'s or by copies laid out for NumPy as `ways` says (by default, as
    `measured_layouts` finds fastest here), and attention and the MLP by their fused
    forms. Transformer.forward runs everything but the NumPy step.
    """

    def __init__(self, model: Transformer, ways: dict[str, str] | None = None):
        with torch.device("meta"):
            super().__init__(model.cfg)
        for_numpy = model.dtype == torch.float32 and model.device.type == "cpu"  # its decode steps: NumPy
        # How each kind of matrix is stored for NumPy: given, or as this host multiplies it fastest (measured once,
        # after the thread count OpenBLAS runs them on)
        threads = None
        if not for_numpy:
            ways = None
        elif not ways:
            threads = measured_threads(model)
            ways = measured_layouts(model)
        self.tok_embeddings, self.norm = model.tok_embeddings, model.norm
        for block, plain in zip(self.layers, model.layers):
            block.attention_norm, block.ffn_norm = plain.attention_norm, plain.ffn_norm
            block.attention = FusedAttention(plain.attention, ways)
            block.feed_forward = FusedFeedForward(plain.feed_forward, ways)
        # The LM head, a copy if stored otherwise than as it is (for tied models the embedding stays as it is)
        self.output = linear(stored(model.output.weight, ways and ways["head"])[0])
        self.rope_cos, self.rope_sin = model.rope_cos, model.rope_sin
        self.numpy_step = NumpyDecodeStep(self) if for_numpy else None
        if threads is not None:
            self.numpy_step.threads = threads  # its steps run OpenBLAS on them, whatever another model set

    def linears(self) -> list[Linear]:
        """Every product's layer: each block's wqkv, wo, w13 and w2, and the LM head."""
        return [m for b in self.layers for m in (b.attention.wqkv, b.attention.wo, b.feed_forward.w13,
                                                   b.feed_forward.w2)] + [self.output]

    @torch.no_grad()
    def pack(self) -> bool:
        """Pack every weight for products of several rows (`packing`), if oneDNN is here and this host multiplies
        several rows faster so (`measured_products`: measured once, kept), and give a batch step's products the
        fewest rows this host multiplies fastest (`measured_fewest_rows`, kept too). Returns whether it packed."""
        if self.numpy_step is None or not packing.available():
            return False
        chosen = tuning.kept_choice(tuning.PRODUCTS, matrices(self))
        packs = {} if chosen == "plain" else {layer: packing.pack(layer.weight) for layer in self.linears()}
        if chosen is None:
            chosen = measured_products(self, packs)
        for layer, pack in packs.items():
            layer.packed = pack if chosen == "packed" else None
        rows = tuning.kept_choice(tuning.FEWEST_ROWS, matrices(self))
        if rows is None:
            rows = measured_fewest_rows(self)
        self.numpy_step.fewest_rows = rows
        return chosen == "packed"

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
def fuse(model: Transformer, pack: bool = False) -> FusedTransformer:
    """A model computing the same function as `model` with fused q/k/v and gate/up matrices.

    Shares the embedding, norms and rotary tables with `model`, and wo, w2 and the
    LM head too unless one is stored otherwise for NumPy. The fused matrices are new,
    so it takes extra memory equal to the q, k, v, gate and up matrices; float32 on a
    CPU adds a copy of each of wo, w2 and the LM head that this host's step runs
    faster stored otherwise (`stored`: input-major, or wo with zero rows). Which
    those are is measured in the step the first time a model of this shape is fused
    on this host, a few seconds for SmolLM2, and kept (`measured_layouts`,
    `tuning`). Neither model may be moved or cast afterwards (the fused one refuses
    to be).

    With `pack`, float32 on a CPU, every weight is also packed for products of several rows (a batch's decode
    step, a prompt's prefill; `packing`), if that is faster on this host (`FusedTransformer.pack`): one more
    copy of every matrix. A server's model wants it; a batch-1 decode does not use it.
    """
    fused = FusedTransformer(model).eval()
    if pack:
        fused.pack()
    return fused
