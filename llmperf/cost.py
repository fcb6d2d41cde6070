"""The cost model: FLOPs and bytes of a forward pass, op by op, by arithmetic alone.

Pure Python (no torch): every number here follows from a `ModelConfig`, a batch
size and a sequence length, so the book can predict a measurement before making
it.

What is counted
---------------
One multiply-add is 2 FLOPs. A matrix product (M, K) @ (K, N) is 2·M·K·N FLOPs.
We count matrix products only, the way `torch.utils.flop_counter` does:

- the seven projections of each layer: wq, wk, wv, wo (attention) and
  w1 (gate), w3 (up), w2 (down) (the SwiGLU MLP);
- the LM head, d_model -> vocab, once per position whose logits are computed
  (a tied head is the embedding matrix used a second time, and does FLOPs);
- attention's two matrix products: scores = q @ k^T and the weighted sum
  probs @ v, each 2·q_dim FLOPs per (query, key) pair per layer.

What is not counted: the embedding (a table lookup: no arithmetic), RMSNorm,
RoPE, softmax, SiLU, the residual adds and sampling. Together they are a few
FLOPs per element of the activations, well under 1 % of a pass.

Two ways to count the attention term of a prefill of S tokens:
- "full": every query scores every one of the S keys, 4·S²·q_dim per layer.
  This is the usual back-of-envelope form (with q_dim = d_model) and what a
  kernel that computes the whole score matrix and then masks it executes.
- "causal": query i scores keys 0..i only, 4·q_dim·S(S+1)/2 per layer: the
  work a causal kernel (FlashAttention) actually needs, about half of "full".

And two ways to count the matmuls:
- `estimate_2n`: 2·N_params FLOPs per token, the standard estimate: each
  parameter does one multiply and one add. It includes the embedding table,
  which does no FLOPs, so it overestimates an untied model (Llama-3-8B by 6.5 %).
- `matmul_flops`: the exact count of the projections and the LM head.

Bytes of a decode step (`decode_bytes`): every weight matrix once (the
embedding table excluded: a lookup reads one row; a tied LM head included, since
the head reads the whole matrix), the norm weights, the KV cache read by
attention and the new key and value written. Activations are off by default:
at batch 1 they are a few vectors of d_model values, a rounding error next to the
weights.

Arithmetic intensity of a decode step (`decode_intensity`) is FLOPs / bytes. The
weights are read once per step however many sequences share it, while FLOPs
grow with the batch, so the intensity grows about linearly in the batch size
until the KV cache (read once per sequence) takes over the bytes. `decode_ops`
pairs each op's FLOPs with its bytes, for a per-op table; `decode_parts` groups
them into the weight products and attention, which meet the roofline separately;
`compute_bound_batch` solves for the batch at which a step (or its weight
products) reaches a device's ridge point.
KV-cache sizes: `kv_bytes_per_token`, `kv_cache_bytes`; the weights' memory: `weight_bytes`.
One product's intensity: `matmul_intensity`, and the rows at which it turns
compute-bound: `compute_bound_rows`. Whole generations, naive or cached, pass by
pass: `generation_passes`, and their totals: `generation_cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import ModelConfig, get_config

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


FLOP_FORMS = ("exact", "2n")


def decode_intensity(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_param: int = 2,
                     kv_bytes_per_element: int | None = None, activations: bool = False,
                     flops: str = "exact") -> float:
    """FLOPs per byte moved by one decode step (`decode_flops` / `decode_bytes`, same arguments).

    flops="exact" counts the matmuls that run plus attention: with 2-byte weights
    that is 1 FLOP per weight byte per sequence. flops="2n" replaces the matmuls by
    the 2·N_params·batch estimate (attention still added), the widely quoted
    convention: it charges FLOPs for the embedding table, whose bytes are not
    counted, so for an untied model it comes out higher (Llama-3-8B: 1.07, not 1.00).
    """
    cfg = get_config(cfg)
    if flops not in FLOP_FORMS:
        raise ValueError(f"flops must be one of {FLOP_FORMS}, got {flops!r}.")
    f = decode_flops(cfg, context, batch)
    work = f.total if flops == "exact" else batch * estimate_2n(cfg) + f.attention
    return work / decode_bytes(cfg, context, batch, bytes_per_param, kv_bytes_per_element, activations).total


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


BOUND_PARTS = ("step", "weights")


def compute_bound_batch(cfg: "ModelConfig | str", ridge: float, context: int, bytes_per_param: int = 2,
                        kv_bytes_per_element: int | None = None, flops: str = "exact",
                        part: str = "step") -> int | None:
    """Smallest batch whose decode step reaches `ridge` FLOPs per byte, or None if no batch does.

    part="step": the whole step's intensity. Its FLOPs are batch·f (f per
    sequence) and its bytes W + batch·k (weights W once, KV cache k per
    sequence), so the intensity batch·f / (W + batch·k) rises towards f / k but
    never past it: if f / k <= ridge, the step as a whole stays below the ridge at
    any batch. Otherwise the answer is the first integer batch >= ridge·W / (f − ridge·k).
    part="weights": the weight products alone (`decode_parts`), whose intensity
    batch·f_w / W grows without limit: they reach the ridge at batch ridge·W / f_w,
    whatever the context, while attention never does.
    """
    cfg = get_config(cfg)
    if not ridge > 0:
        raise ValueError(f"ridge must be a positive number of FLOPs per byte, got {ridge!r}.")
    if flops not in FLOP_FORMS:
        raise ValueError(f"flops must be one of {FLOP_FORMS}, got {flops!r}.")
    if part not in BOUND_PARTS:
        raise ValueError(f"part must be one of {BOUND_PARTS}, got {part!r}.")
    if part == "weights":
        w = decode_parts(cfg, context, 1, bytes_per_param, kv_bytes_per_element)["weights"]
        return _first_reaching(lambda b: b * w.flops >= ridge * w.bytes, math.ceil(ridge * w.bytes / w.flops))
    one = decode_flops(cfg, context, 1)
    f = one.total if flops == "exact" else estimate_2n(cfg) + one.attention
    by = decode_bytes(cfg, context, 1, bytes_per_param, kv_bytes_per_element)
    k, w = by.kv, by.total - by.kv
    if f <= ridge * k:
        return None
    return _first_reaching(
        lambda b: decode_intensity(cfg, context, b, bytes_per_param, kv_bytes_per_element, flops=flops) >= ridge,
        math.ceil(ridge * w / (f - ridge * k)))


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


def matmul_intensity(rows: int, k: int, n: int, bytes_per_element: int = 2) -> float:
    """FLOPs per byte of one product (rows, k) @ (k, n): 2·rows·k·n FLOPs over the bytes of the input,
    the weight matrix and the output, each moved once.

    With one row it is about 1 FLOP per 2-byte weight; it grows with the rows, since
    the weight matrix is read once however many rows share it, until the
    activations' own bytes (rows·k + rows·n) catch up with the weights' k·n.
    """
    _check(rows=rows, k=k, n=n, bytes_per_element=bytes_per_element)
    return 2 * rows * k * n / (bytes_per_element * (k * n + rows * k + rows * n))


def compute_bound_rows(k: int, n: int, ridge: float, bytes_per_element: int = 2) -> int | None:
    """Fewest rows at which a (rows, k) @ (k, n) product reaches `ridge` FLOPs per byte, or None if none does.

    Solving 2·r·k·n ≥ ridge·b·(k·n + r·k + r·n) for r: r ≥ ridge·b·k·n / (2·k·n − ridge·b·(k + n)).
    The intensity never exceeds 2·k·n / (b·(k + n)), so a ridge at or above that is never reached.
    """
    _check(k=k, n=n, bytes_per_element=bytes_per_element)
    if not ridge > 0:
        raise ValueError(f"ridge must be a positive number of FLOPs per byte, got {ridge!r}.")
    b = bytes_per_element
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return _first_reaching(lambda r: matmul_intensity(r, k, n, b) >= ridge, math.ceil(ridge * b * k * n / room))


def _first_reaching(reaches, guess: int) -> int:
    """The smallest integer x >= 1 for which reaches(x) holds (it holds for every larger x too).

    `guess` is the closed-form answer; floating-point rounding may have put it one
    off, so the search steps down and up from there to the exact integer.
    """
    x = max(1, guess)
    while x > 1 and reaches(x - 1):
        x -= 1
    while not reaches(x):
        x += 1
    return x


# --- whole generations: the naive loop against the cached one ---------------------------------

GENERATION_FORMS = ("exact", "estimate")


@dataclass(frozen=True)
class GenerationCost:
    """What generating `new_tokens` after a prompt costs in all, summed over every forward pass.

    passes: forward passes run (one per new token either way).
    matmul_flops: the weight products (projections and LM head).
    attention_flops: attention's two products.
    weight_bytes: weights read, once per pass (as `decode_bytes`: embedding table excluded).
    kv_bytes: KV cache written and read (the naive loop keeps no cache: 0).
    """

    passes: int
    matmul_flops: int
    attention_flops: int
    weight_bytes: int
    kv_bytes: int

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.attention_flops


def generation_passes(cfg: "ModelConfig | str", prompt: int, new_tokens: int, cached: bool = True,
                      form: str = "exact", bytes_per_param: int = 2) -> list[dict[str, OpCost]]:
    """Every forward pass of a greedy generation of `new_tokens` after `prompt` tokens, as llmperf runs it,
    each split into the parts that meet the roofline separately ({"weights": ..., "attention": ...}, as
    `decode_parts`).

    Cached (`generate(cache=True)`): one prefill of the prompt, which yields the first
    token, then new_tokens − 1 decode steps, at contexts prompt + 1 ... prompt + new_tokens − 1.
    Naive (`generate(cache=False)`): new_tokens full passes over the sequence so far,
    prompt ... prompt + new_tokens − 1 tokens long, each keeping only its last logits.

    form="exact": the products that run. Logits for one position per pass, and
    attention over the whole score matrix of every full pass (what the "math"
    attention computes, and so what `profile.count_flops` counts); a decode step's
    query scores its context. form="estimate": the widely quoted conventions,
    2·N_params FLOPs per position through a pass (LM head at every position) and
    4·S²·d_model·L for the attention of a pass over S positions.
    Bytes: every pass reads the weights once (as `decode_bytes`: embedding table
    excluded). Attention's bytes are the KV cache read and written; the naive loop
    keeps none (it recomputes keys and values, activations this model leaves out).
    """
    cfg = get_config(cfg)
    _check(prompt=prompt, new_tokens=new_tokens, bytes_per_param=bytes_per_param)
    if form not in GENERATION_FORMS:
        raise ValueError(f"form must be one of {GENERATION_FORMS}, got {form!r}.")
    if prompt + new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt + new_tokens = {prompt + new_tokens} tokens, more than {cfg.name}'s max_seq_len "
                         f"of {cfg.max_seq_len}.")
    weights = decode_bytes(cfg, 1, 1, bytes_per_param).weights
    kv_token = kv_bytes_per_token(cfg, bytes_per_param)
    if form == "estimate":
        body, head = estimate_2n(cfg), 0  # 2·N per position already includes the head, at every position

        def attention(queries, keys):
            return 4 * queries * keys * cfg.d_model * cfg.n_layers
    else:
        body, head = _projections_and_head(cfg)

        def attention(queries, keys):
            return 2 * attention_flops(cfg, queries, keys)["attn_scores"]

    def full_pass(length):  # every position through the weights, logits for the last one
        return {"weights": OpCost("weights", body * length + head, weights, 1),
                "attention": OpCost("attention", attention(length, length), kv_token * length if cached else 0, 1)}

    if not cached:
        return [full_pass(length) for length in range(prompt, prompt + new_tokens)]
    steps = [{"weights": OpCost("weights", body + head, weights, 1),
              "attention": OpCost("attention", attention(1, context), kv_token * (context + 1), 1)}
             for context in range(prompt + 1, prompt + new_tokens)]  # each step reads its context, writes 1
    return [full_pass(prompt)] + steps  # the prefill writes the prompt's keys and values


def generation_cost(cfg: "ModelConfig | str", prompt: int, new_tokens: int, cached: bool = True,
                    form: str = "exact", bytes_per_param: int = 2) -> GenerationCost:
    """Totals of `generation_passes` (same arguments): a whole generation's FLOPs and bytes."""
    passes = generation_passes(cfg, prompt, new_tokens, cached, form, bytes_per_param)
    return GenerationCost(len(passes), sum(p["weights"].flops for p in passes),
                          sum(p["attention"].flops for p in passes), sum(p["weights"].bytes for p in passes),
                          sum(p["attention"].bytes for p in passes))


def naive_attention_crossover(cfg: "ModelConfig | str") -> int:
    """Tokens a naive loop must generate (from a one-token prompt) before its attention FLOPs, summed over
    every pass, reach its recomputed matmul FLOPs (exact forms, as `generation_passes`).

    Pass S runs body·S + head matmul FLOPs (body: the projections per position)
    and 4·q_dim·L·S² of full attention, so over passes 1..n the matmuls total
    body·n(n+1)/2 + head·n and attention 4·q_dim·L·n(n+1)(2n+1)/6: quadratic in n
    against cubic, equal near n ≈ 3·body / (8·q_dim·L). The model's max_seq_len is
    ignored: this is where the cubic term would win, not a run that fits.
    """
    cfg = get_config(cfg)
    body, head = _projections_and_head(cfg)
    a = 4 * cfg.q_dim * cfg.n_layers

    def attention_reaches(n: int) -> bool:
        return a * n * (n + 1) * (2 * n + 1) // 6 >= body * n * (n + 1) // 2 + head * n

    return _first_reaching(attention_reaches, math.ceil(3 * body / (8 * a)))
