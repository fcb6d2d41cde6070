"""FLOPs and bytes of one forward pass, op by op: a prefill of S tokens, a decode step of a batch.

Pure Python (no torch). What is counted is set out in `llmperf.cost`'s docstring:
matrix products only for FLOPs (the way `torch.utils.flop_counter` counts); for a
decode step's bytes, every weight matrix once (the embedding table excluded, a
tied LM head included), the norm weights, the KV cache read and the new key and
value written, activations only when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ModelConfig, get_config

ATTENTION_FORMS = ("causal", "full")


def linear_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int, int]]:
    """Every weight matrix used as a matmul: name -> (in_features, out_features, how many in the model)."""
    L = cfg.n_layers
    return {
        "wq": (cfg.d_model, cfg.q_dim, L),
        "wk": (cfg.d_model, cfg.kv_dim, L),
        "wv": (cfg.d_model, cfg.kv_dim, L),
        "wo": (cfg.q_dim, cfg.d_model, L),
        "w1": (cfg.d_model, cfg.d_ff, L),
        "w3": (cfg.d_model, cfg.d_ff, L),
        "w2": (cfg.d_ff, cfg.d_model, L),
        "lm_head": (cfg.d_model, cfg.vocab_size, 1),
    }


@dataclass(frozen=True)
class Tally:
    """A count (FLOPs or bytes) of one pass, by op name, and its total."""

    by_op: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def part(self, *names: str) -> int:
        """The count of the named ops together (an op this pass lacks counts 0)."""
        return sum(self.by_op.get(name, 0) for name in names)


class Flops(Tally):
    """FLOPs of one pass, by op. `matmul` is the projections + LM head, `attention` the two score products."""

    @property
    def attention(self) -> int:
        """Attention's two products, q·kᵀ and probs·v: they grow with the context."""
        return self.part("attn_scores", "attn_values")

    @property
    def matmul(self) -> int:
        """The weight products (projections and LM head): they grow with the tokens, not the context."""
        return self.total - self.attention


def matmul_flops(cfg: ModelConfig, tokens: int, logits_for: int | None = None) -> dict[str, int]:
    """Exact FLOPs of the projections and LM head for `tokens` positions, by weight name.

    `logits_for` is how many positions go through the LM head (default: all of
    them, as in a plain forward pass; a generation loop only needs the last one).
    """
    out = {}
    for name, (n_in, n_out, count) in linear_shapes(cfg).items():
        rows = tokens if name != "lm_head" or logits_for is None else logits_for
        out[name] = 2 * rows * n_in * n_out * count
    return out


def _projections_and_head(cfg: ModelConfig) -> tuple[int, int]:
    """Matmul FLOPs of one position: through the projections of every layer, and through the LM head."""
    per_position = matmul_flops(cfg, 1)
    head = per_position.pop("lm_head")
    return sum(per_position.values()), head


def attention_flops(cfg: ModelConfig, n_queries: int, n_keys: int, batch: int = 1,
                    causal: bool = False) -> dict[str, int]:
    """FLOPs of q @ k^T and probs @ v across all layers.

    Not causal: every one of the n_queries scores all n_keys keys.
    Causal: the queries are the last n_queries of n_keys positions, and query i
    scores only the keys up to its own position.
    """
    if causal:
        first = n_keys - n_queries + 1  # keys seen by the first query
        pairs = (first + n_keys) * n_queries // 2  # sum of first..n_keys
    else:
        pairs = n_queries * n_keys
    per_product = 2 * batch * pairs * cfg.q_dim * cfg.n_layers
    return {"attn_scores": per_product, "attn_values": per_product}


def prefill_flops(cfg: "ModelConfig | str", seq_len: int, batch: int = 1, attention: str = "causal",
                  logits_for: int | None = None) -> Flops:
    """FLOPs of a forward pass over a prompt of `seq_len` tokens for `batch` sequences.

    `attention` is "causal" (the work causal attention needs) or "full" (the S×S
    score matrix, what the back-of-envelope estimate and an explicit masked attention compute).
    By default logits are computed at every position, as a plain `model(tokens)` does.
    """
    cfg = get_config(cfg)
    _check(seq_len=seq_len, batch=batch)
    if attention not in ATTENTION_FORMS:
        raise ValueError(f"attention must be one of {ATTENTION_FORMS}, got {attention!r}.")
    by_op = {k: batch * v for k, v in matmul_flops(cfg, seq_len, logits_for).items()}
    by_op.update(attention_flops(cfg, seq_len, seq_len, batch, causal=attention == "causal"))
    return Flops(by_op)


def decode_flops(cfg: "ModelConfig | str", context: int, batch: int = 1) -> Flops:
    """FLOPs of one decode step: one new token per sequence attending to `context` cached positions.

    `context` counts the new token itself (the query scores `context` keys).
    """
    cfg = get_config(cfg)
    _check(context=context, batch=batch)
    by_op = {k: batch * v for k, v in matmul_flops(cfg, 1).items()}
    by_op.update(attention_flops(cfg, 1, context, batch))
    return Flops(by_op)


def estimate_2n(cfg: "ModelConfig | str", tokens: int = 1) -> int:
    """The standard estimate 2·N_params·tokens (embedding included, attention excluded)."""
    return 2 * get_config(cfg).num_params() * tokens


def estimate_attention(cfg: "ModelConfig | str", seq_len: int) -> int:
    """The back-of-envelope attention term of a prefill: 4·S²·d_model per layer, all layers.

    It is `attention_flops` for full (not causal) attention with q_dim = d_model,
    which holds for Llama-3 but not for every model (SmolLM2-1.7B's is equal too;
    a model whose heads are wider or narrower than d_model / n_heads differs).
    """
    cfg = get_config(cfg)
    return 4 * seq_len**2 * cfg.d_model * cfg.n_layers


def prefill_attention_crossover(cfg: "ModelConfig | str", form: str = "estimate") -> float:
    """Prompt length S at which a prefill's attention FLOPs equal its matmul FLOPs.

    form="estimate": the back-of-envelope forms, 2·N·S for the matmuls and full attention
    4·S²·d·L. Solving 4·S²·d·L = 2·N·S gives S = N / (2·d·L): about 30,600
    tokens for Llama-3-8B.
    form="exact": the exact matmul count (m FLOPs per token, LM head excluded:
    a prefill needs logits for the last position only) against causal attention
    2·q_dim·L·S·(S+1). Equal at S = m / (2·q_dim·L) - 1: later, since causal
    attention does half the work and m leaves out the embedding.
    """
    cfg = get_config(cfg)
    if form == "estimate":
        return cfg.num_params() / (2 * cfg.d_model * cfg.n_layers)
    if form == "exact":
        per_token, _ = _projections_and_head(cfg)
        return per_token / (2 * cfg.q_dim * cfg.n_layers) - 1
    raise ValueError(f'form must be "estimate" or "exact", got {form!r}.')


def _check(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")


class Bytes(Tally):
    """Bytes moved by one pass, by item: weight matrices by name, "norms", "kv_read", "kv_write", "activations"."""

    @property
    def kv(self) -> int:
        """The KV cache read by attention and the new key and value written."""
        return self.part("kv_read", "kv_write")

    @property
    def weights(self) -> int:
        """Weight matrices and norm weights: everything but the KV cache and the activations."""
        return self.total - self.kv - self.part("activations")


def decode_bytes(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_param: int = 2,
                 kv_bytes_per_element: int | None = None, activations: bool = False) -> Bytes:
    """Bytes one decode step moves for `batch` sequences at `context` positions (the new one included).

    Weights are read once per step whatever the batch size: that is why batching
    is cheap. The KV cache is read once per sequence. bytes_per_param is 2 for
    bf16/fp16, 4 for float32; the KV cache uses the same unless told otherwise.
    """
    cfg = get_config(cfg)
    _check(context=context, batch=batch, bytes_per_param=bytes_per_param)
    kv_elem = kv_bytes_per_element or bytes_per_param
    by_op = {name: n_in * n_out * count * bytes_per_param for name, (n_in, n_out, count) in linear_shapes(cfg).items()}
    by_op["norms"] = cfg.d_model * (2 * cfg.n_layers + 1) * bytes_per_param
    by_op["kv_read"] = batch * kv_bytes_per_token(cfg, kv_elem) * context
    by_op["kv_write"] = batch * kv_bytes_per_token(cfg, kv_elem)
    if activations:  # each matmul's input and output vectors, per sequence
        by_op["activations"] = batch * bytes_per_param * sum(
            (n_in + n_out) * count for n_in, n_out, count in linear_shapes(cfg).values())
    return Bytes(by_op)


@dataclass(frozen=True)
class OpCost:
    """One op of a decode step, summed over the `count` places it occurs (e.g. every layer)."""

    name: str
    flops: int
    bytes: int
    count: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte (0 for an op that only moves data, or moves none)."""
        return self.flops / self.bytes if self.bytes else 0.0


def decode_ops(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_param: int = 2,
               kv_bytes_per_element: int | None = None, activations: bool = False) -> dict[str, OpCost]:
    """Each op of one decode step with its FLOPs and bytes, summed over the model.

    Ops: the projections wq, wk, wv, wo, w1 (gate), w3 (up), w2 (down) and the
    lm_head (weights read, matmul FLOPs, and with `activations` their input and
    output vectors); "attention" (the two score products, reading the KV cache);
    "kv_write" (the new key and value: bytes, no FLOPs); "norms" (the RMSNorm
    weights: bytes; their few FLOPs are not counted, as everywhere in this module).
    The FLOPs add up to `decode_flops(...).total` and the bytes to `decode_bytes(...).total`.
    """
    cfg = get_config(cfg)
    f = decode_flops(cfg, context, batch).by_op
    b = decode_bytes(cfg, context, batch, bytes_per_param, kv_bytes_per_element).by_op
    ops = {}
    for name, (n_in, n_out, count) in linear_shapes(cfg).items():
        act = batch * bytes_per_param * (n_in + n_out) * count if activations else 0
        ops[name] = OpCost(name, f[name], b[name] + act, count)
    L = cfg.n_layers
    ops["attention"] = OpCost("attention", f["attn_scores"] + f["attn_values"], b["kv_read"], L)
    ops["kv_write"] = OpCost("kv_write", 0, b["kv_write"], L)
    ops["norms"] = OpCost("norms", 0, b["norms"], 2 * L + 1)
    return ops


def decode_parts(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_param: int = 2,
                 kv_bytes_per_element: int | None = None) -> dict[str, OpCost]:
    """One decode step as the two parts that meet the roofline separately.

    "weights": the weight products (projections and LM head) with the weight and
    norm bytes. Their FLOPs grow with the batch, their bytes do not, so past some
    batch they turn compute-bound.
    "attention": attention's two products with the KV cache they read and write.
    Both grow with the batch, so their intensity is fixed (about
    n_heads / n_kv_heads FLOPs per 2-byte element) and stays below any GPU's ridge.
    Timing the parts one after the other, each at max(FLOPs / peak, bytes /
    bandwidth), is a tighter bound than applying the roofline to their sum, which
    lets one part's idle compute hide the other's (`hardware.roofline_time_by_part`).
    """
    ops = decode_ops(cfg, context, batch, bytes_per_param, kv_bytes_per_element)
    attention = [ops["attention"], ops["kv_write"]]
    weights = [op for name, op in ops.items() if name not in ("attention", "kv_write")]
    return {name: OpCost(name, sum(o.flops for o in part), sum(o.bytes for o in part), 1)
            for name, part in (("weights", weights), ("attention", attention))}


def kv_bytes_per_token(cfg: "ModelConfig | str", bytes_per_element: int = 2) -> int:
    """Bytes of KV cache one token occupies: a key and a value vector (kv_dim each) in every layer.

    The default of 2 bytes per element is bf16/fp16, the usual serving dtype.
    """
    cfg = get_config(cfg)
    return 2 * cfg.n_layers * cfg.kv_dim * bytes_per_element


def kv_cache_bytes(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_element: int = 2) -> int:
    """Bytes of KV cache held by `batch` sequences of `context` tokens each (per sequence with batch=1)."""
    _check(context=context, batch=batch, bytes_per_element=bytes_per_element)
    return batch * context * kv_bytes_per_token(cfg, bytes_per_element)


def weight_bytes(cfg: "ModelConfig | str", bytes_per_param: int) -> int:
    """Bytes of every parameter stored at `bytes_per_param` bytes each (a tied matrix counted once):
    the memory the weights take, not what a step reads (see `decode_bytes`)."""
    return get_config(cfg).num_params() * bytes_per_param

# --- the kinds of op a step is split into --------------------------------------------------------

PROJECTIONS, ATTENTION, KV_WRITE, NORMS, LM_HEAD, OTHER = "projections", "attention", "kv_write", "norms", "lm_head", "other"
OP_KINDS = (PROJECTIONS, ATTENTION, KV_WRITE, NORMS, LM_HEAD, OTHER)
"""The kinds of op a decode step is split into, wherever it is split: the cost model's bytes (`cost_by_kind`),
torch.profiler's time (`profile.op_times`) and the NumPy step's stopwatch (`fast.NumpyDecodeStep`'s laps).
"projections" are the seven weight products of every layer (wq wk wv wo w1 w3 w2), "lm_head" the product
with the vocabulary-sized matrix (the model's `output`), "other" everything that reads no weights (embedding
lookup, RoPE, SiLU, the residual adds, the multiply by the norm gains, reshapes)."""

KIND_LABELS = {PROJECTIONS: "projections", ATTENTION: "attention", KV_WRITE: "KV write", NORMS: "norms",
               LM_HEAD: "LM head", OTHER: "other"}
"""How a table or figure names each kind for a reader."""

_KIND_OF = {"wq": PROJECTIONS, "wk": PROJECTIONS, "wv": PROJECTIONS, "wo": PROJECTIONS, "w1": PROJECTIONS,
            "w3": PROJECTIONS, "w2": PROJECTIONS, "lm_head": LM_HEAD, "attention": ATTENTION, "kv_write": KV_WRITE,
            "norms": NORMS}


def cost_by_kind(cfg, context: int, batch: int = 1, bytes_per_param: int = 2) -> dict[str, OpCost]:
    """The cost model's FLOPs and bytes of one decode step (`decode_ops`, attending to `context` positions),
    summed by kind of op (`OP_KINDS`); `count` is how many of the model's ops of that kind the cost model
    counts (the seven products of a layer count as seven). "other" is given no FLOPs and no bytes: it reads
    no weights, and its activations are a few vectors of d_model values."""
    totals = {kind: OpCost(kind, 0, 0, 0) for kind in OP_KINDS}
    for name, op in decode_ops(cfg, context, batch, bytes_per_param).items():
        t = totals[_KIND_OF[name]]
        totals[t.name] = OpCost(t.name, t.flops + op.flops, t.bytes + op.bytes, t.count + op.count)
    return totals
