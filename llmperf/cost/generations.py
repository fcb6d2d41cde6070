"""Whole generations, pass by pass: the naive loop (the whole sequence again every step) against the cached
one (one new token per step, reading the KV cache).

Pure Python (no torch). Both loops run one forward pass per new token and read
every weight once per pass; what differs is the arithmetic, which the naive loop
repeats for every earlier position, and the KV cache, which only the cached loop
keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ModelConfig, get_config
from .passes import OpCost, _check, _projections_and_head, attention_flops, decode_bytes, estimate_2n, kv_bytes_per_token
from .roofline import _first_reaching

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
    attention computes, and so what `profiling.count_flops` counts); a decode step's
    query scores its context. form="estimate": the source notes' conventions,
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
