"""Chapter 3's counts, by arithmetic alone (`llmperf.cost`, no measurement): one Llama-3-8B decode step's
bytes, FLOPs and intensity, whole and op by op; Llama-3-8B's latency against throughput on an H100, predicted
part by part; and the exercises' numbers.

Every count is for 2-byte weights (bf16 or fp16), the usual serving format. Memory for KV caches is a server's
share of the device's (`UTILISATION`, vLLM's default, as chapter 6 takes it), less the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import cost, hardware
from ..serving.sums import UTILISATION

LLAMA = "llama-3-8b"
GATE_ROWS = 2_000  # chapter 2's example prompt: the rows of its gate projection
OPS_CONTEXT = 1024  # tokens of context in the op-by-op table, so that attention has a cache to read
GPTFAST_WATTS = 330  # the power cap of gpt-fast's A100 run (its README; hardware.PUBLISHED["gpt-fast"].source)
OP_GROUPS = {  # the ops of `cost.decode_ops`, grouped by the weights they read
    "q/k/v projections": ("wq", "wk", "wv"),
    "o projection": ("wo",),
    "gate/up/down": ("w1", "w3", "w2"),
    "attention (KV read)": ("attention",),
    "KV write": ("kv_write",),
    "RMSNorm weights": ("norms",),
    "LM head": ("lm_head",),
}


@dataclass
class OpGroup:
    """One group of ops of a decode step: bytes and FLOPs summed over the step, and how often its first op occurs."""

    label: str
    count: int  # occurrences of the group's first op in one step (one per layer for a projection)
    bytes: int
    flops: int


@dataclass
class LlamaCounts:
    """One decode step of Llama-3-8B at batch 1, 2-byte weights, counted by `cost`: the whole step for a fresh
    sequence (context 1), chapter 2's gate projection over a prompt and over one row, and the step op by op."""

    step_bytes: int  # cost.decode_bytes(context=1).total: the weights and almost no KV cache
    weight_bytes: int  # its weights and norm weights
    norm_bytes: int
    flops_exact: int  # cost.decode_flops: the products that run, and attention
    flops_2n: int  # the rule of thumb's 2·N, the embedding table included
    intensity_2n: float  # cost.decode_intensity(flops="2n"): the widely quoted figure
    intensity_exact: float
    layers: int
    gqa_group: int  # query heads per stored key and value
    gate_rows: int
    gate_intensity_prefill: float  # cost.matmul_intensity over gate_rows rows, activations included
    gate_intensity_decode: float  # and over one row
    ops_context: int
    ops: list[OpGroup]  # the step at ops_context, by OP_GROUPS
    ops_step_bytes: int  # cost.decode_bytes(context=ops_context).total, which the groups must add up to
    ops_intensity: float  # cost.decode_intensity(context=ops_context)
    attention_intensity: float

    def group(self, label: str) -> OpGroup:
        return next(g for g in self.ops if g.label == label)

    def per_layer_mb(self, label: str) -> float:
        """MB one occurrence of the group reads (its bytes over the step's layers)."""
        return self.group(label).bytes / self.layers / 1e6

    @property
    def qkv_mb(self) -> float:
        return self.per_layer_mb("q/k/v projections")


    def numbers(self) -> dict[str, object]:
        lm_head = self.group("LM head").bytes
        return {
            "l8_gb": self.weight_bytes / 1e9, "l8_2n_gflop": self.flops_2n / 1e9, "l8_int_2n": self.intensity_2n,
            "l8_exact_gflop": self.flops_exact / 1e9, "l8_int": self.intensity_exact,
            "l8_norms_mb": self.norm_bytes / 1e6,
            "gate_S": self.gate_rows, "gate_int_prefill": self.gate_intensity_prefill,
            "gate_int_decode": self.gate_intensity_decode,
            "gate_collapse": self.gate_intensity_prefill / self.gate_intensity_decode,
            "ops_ctx": self.ops_context, "l8_layers": self.layers,
            "qkv_mb": self.qkv_mb, "qkv_params_m": self.qkv_mb / 2,  # 2 bytes per parameter
            "wo_mb": self.per_layer_mb("o projection"), "mlp_mb": self.per_layer_mb("gate/up/down"),
            "lm_head_gb": lm_head / 1e9, "lm_head_pct": 100 * lm_head / self.weight_bytes,
            "attn_int": self.attention_intensity, "gqa_group": self.gqa_group,
        }

    def table(self):
        """The step at batch 1 by the two ways of counting its FLOPs."""
        df = pd.DataFrame({
            "FLOPs counted": ["2·N (the widely quoted count)", "exact (the products that run, and attention)"],
            "bytes moved (GB)": [self.step_bytes / 1e9] * 2,
            "of which weights (GB)": [self.weight_bytes / 1e9] * 2,
            "FLOPs (GFLOP)": [self.flops_2n / 1e9, self.flops_exact / 1e9],
            "FLOP/byte": [self.intensity_2n, self.intensity_exact],
        })
        return df.style.format(precision=2).hide(axis="index")

    def gate_table(self):
        """Chapter 2's gate projection, (rows, d_model) @ (d_model, d_ff), in a prefill and in a decode step."""
        df = pd.DataFrame({
            "gate projection": [f"prefill of {self.gate_rows:,} tokens", "decode step"],
            "rows": [self.gate_rows, 1],
            "FLOP/byte": [self.gate_intensity_prefill, self.gate_intensity_decode],
        })
        return df.style.format({"rows": "{:,d}", "FLOP/byte": "{:,.2f}"}).hide(axis="index")

    def ops_table(self):
        """The step at ops_context op by op: bytes of one occurrence and of the step, share, FLOPs, intensity."""
        rows = [{"op": g.label, "per layer (MB)": g.bytes / g.count / 1e6, "step (GB)": g.bytes / 1e9,
                 "share (%)": 100 * g.bytes / self.ops_step_bytes, "GFLOP": g.flops / 1e9,
                 "FLOP/byte": g.flops / g.bytes} for g in self.ops]
        rows.append({"op": "whole step", "per layer (MB)": None, "step (GB)": self.ops_step_bytes / 1e9,
                     "share (%)": 100.0, "GFLOP": sum(g.flops for g in self.ops) / 1e9,
                     "FLOP/byte": self.ops_intensity})
        fmt = {"per layer (MB)": "{:.3f}", "step (GB)": "{:.3f}", "share (%)": "{:.1f}", "GFLOP": "{:.2f}",
               "FLOP/byte": "{:.2f}"}
        return pd.DataFrame(rows).style.format(fmt, na_rep="").hide(axis="index")

    def check(self) -> None:
        """1.07 FLOP/byte by 2·N over the bytes, exactly 1.00 without the embedding's FLOPs, q/k/v at 50.3 MB
        per layer, and op-by-op bytes that add up to the step's."""
        assert round(self.intensity_2n, 2) == 1.07, self.intensity_2n
        assert round(self.intensity_exact, 2) == 1.00, self.intensity_exact
        assert round(self.qkv_mb, 1) == 50.3 and round(self.weight_bytes / 1e9, 2) == 15.01, (
            self.qkv_mb, self.weight_bytes)
        assert sum(g.bytes for g in self.ops) == self.ops_step_bytes, (
            f"the ops add up to {sum(g.bytes for g in self.ops)} bytes, the step to {self.ops_step_bytes}")


def llama_counts(model: str = LLAMA) -> LlamaCounts:
    """Count one decode step of `model` (default Llama-3-8B) at batch 1 with 2-byte weights (see LlamaCounts)."""
    cfg = cost.get_config(model)
    fresh = cost.decode_bytes(cfg, context=1)
    ops = cost.decode_ops(cfg, context=OPS_CONTEXT)
    groups = [OpGroup(label, ops[names[0]].count, sum(ops[n].bytes for n in names), sum(ops[n].flops for n in names))
              for label, names in OP_GROUPS.items()]
    return LlamaCounts(
        step_bytes=fresh.total, weight_bytes=fresh.weights, norm_bytes=fresh.by_op["norms"],
        flops_exact=cost.decode_flops(cfg, context=1).total, flops_2n=cost.estimate_2n(cfg),
        intensity_2n=cost.decode_intensity(cfg, context=1, flops="2n"),
        intensity_exact=cost.decode_intensity(cfg, context=1),
        layers=cfg.n_layers, gqa_group=cfg.n_heads // cfg.n_kv_heads, gate_rows=GATE_ROWS,
        gate_intensity_prefill=cost.matmul_intensity(GATE_ROWS, cfg.d_model, cfg.d_ff),
        gate_intensity_decode=cost.matmul_intensity(1, cfg.d_model, cfg.d_ff),
        ops_context=OPS_CONTEXT, ops=groups, ops_step_bytes=cost.decode_bytes(cfg, OPS_CONTEXT).total,
        ops_intensity=cost.decode_intensity(cfg, OPS_CONTEXT), attention_intensity=ops["attention"].intensity)


@dataclass
class LatencyThroughput:
    """Llama-3-8B's decode step on one accelerator, predicted part by part (`hardware.roofline_time_in_parts`),
    for batch sizes from 1 up to the most users whose KV caches (`context` tokens each) fit beside the weights
    in a server's share (`utilisation`) of the memory."""

    device: str
    context: int  # tokens of context per user
    memory: float  # the accelerator's memory (bytes), as its driver reports it
    utilisation: float  # the share of it a server takes
    weight_bytes: int  # every parameter, the embedding table included: all must be resident
    max_batch: int
    batches: list[int]
    step_s: list[float]  # predicted seconds per step, one per batch

    def numbers(self) -> dict[str, object]:
        first, last = self.step_s[0], self.step_s[-1]
        return {
            "lt_ctx": self.context, "lt_max_batch": self.max_batch, "lt_mem_mib": self.memory / 2**20,
            "lt_util_pct": 100 * self.utilisation, "lt_usable_gb": self.utilisation * self.memory / 1e9,
            "lt_weights_mib": self.weight_bytes / 2**20, "lt_user_1": 1 / first, "lt_user_max": 1 / last,
            "lt_all_max": self.batches[-1] / last, "lt_user_drop_pct": 100 * (1 - first / last),
            "lt_all_gain": self.batches[-1] * first / last,
        }


def latency_throughput(model: str = LLAMA, device: str = "H100 SXM", points: int = 40) -> LatencyThroughput:
    """Predict `model`'s step on `device` (a `hardware.ACCELERATORS` name), at half the model's context window per
    user, for about `points` batch sizes spaced evenly on a log scale from 1 to the most users that fit."""
    cfg, hw = cost.get_config(model), hardware.ACCELERATORS[device]
    context = cfg.max_seq_len // 2
    weights = cost.weight_bytes(cfg, 2)
    max_batch = users_that_fit(hw, weights, cost.kv_cache_bytes(cfg, context))
    batches = [int(b) for b in np.unique(np.geomspace(1, max_batch, points).astype(int))]
    step = [hardware.roofline_time_in_parts(cost.decode_parts(cfg, context, b), hw) for b in batches]
    return LatencyThroughput(device, context, hw.memory, UTILISATION, weights, max_batch, batches, step)


def users_that_fit(hw, weights: float, per_user: float) -> int:
    """The most users whose KV caches (`per_user` bytes each) fit beside `weights` bytes in a server's share
    (`UTILISATION`) of `hw`'s memory."""
    return int((UTILISATION * hw.memory - weights) // per_user)


def middle_batch(batches) -> int:
    """The batch in the middle of a sweep, the one the chapter quotes beside batch 1 and the largest."""
    return batches[len(batches) // 2]


def gptfast_pct() -> float:
    """gpt-fast's published batch-1 rate for Llama-3.1-8B on an A100 SXM 80GB, as a percentage of the rate that
    chip's datasheet bandwidth allows (`hardware.PUBLISHED["gpt-fast"]`)."""
    llama, a100 = cost.get_config(LLAMA), hardware.ACCELERATORS["A100 SXM 80GB"]
    floor = hardware.roofline_time(cost.decode_flops(llama, 1).total, cost.decode_bytes(llama, 1).total, a100)
    return 100 * hardware.PUBLISHED["gpt-fast"].tokens_per_s * floor


def exercise_numbers(s) -> dict[str, object]:
    """The exercises' answers: Llama-3-8B's ridge batches on an H100 and an H200, the KV memory of many users,
    gpt-fast's fraction of its ceiling, and SmolLM2's predicted growth across the context sweep at the middle
    batch of the batch sweep (s: the chapter's setup)."""
    llama, h100, h200 = cost.get_config(LLAMA), hardware.ACCELERATORS["H100 SXM"], hardware.ACCELERATORS["H200 SXM"]
    ex_ctx = 1024
    one = cost.decode_bytes(llama, ex_ctx)
    assert cost.compute_bound_batch(llama, h200.ridge, context=ex_ctx) is None  # the prose: "returns None"
    weights_all = cost.weight_bytes(llama, 2)  # every parameter must be in memory, the embedding table included
    big_b = users_that_fit(h100, weights_all, one.kv)  # the most users whose caches fit
    split = hardware.roofline_time_in_parts(cost.decode_parts(llama, ex_ctx, big_b), h100)
    whole = hardware.roofline_time(cost.decode_flops(llama, ex_ctx, big_b).total,
                                   cost.decode_bytes(llama, ex_ctx, big_b).total, h100)
    users, users_ctx = 256, 4096
    kv_seq = cost.kv_cache_bytes(llama, users_ctx)
    a100, gf = hardware.ACCELERATORS["A100 SXM 80GB"], hardware.PUBLISHED["gpt-fast"]
    a100_floor = hardware.roofline_time(cost.decode_flops(llama, 1).total, cost.decode_bytes(llama, 1).total, a100)
    cfg, bpp, contexts = s.model.cfg, s.dtype.itemsize, s.sizes.decode_contexts
    b_mid = middle_batch(s.sizes.decode_batches)
    longest = {b: cost.decode_bytes(cfg, contexts[-1] + 1, b, bpp) for b in (1, b_mid)}
    shortest = {b: cost.decode_bytes(cfg, contexts[0] + 1, b, bpp) for b in (1, b_mid)}
    return {
        "ex_ctx": ex_ctx,
        "ex_b_h100": cost.compute_bound_batch(llama, h100.ridge, context=1),
        "ex_b_h200": cost.compute_bound_batch(llama, h200.ridge, context=1),
        "ex_kv_mb": one.kv / 1e6, "ex_f_gflop": cost.decode_flops(llama, ex_ctx).total / 1e9,
        "ex_att_gflop": cost.decode_flops(llama, ex_ctx).attention / 1e9,  # the part of it that reads the cache
        "ex_limit": cost.decode_flops(llama, ex_ctx).total / one.kv,
        "ex_bw_h100": cost.compute_bound_batch(llama, h100.ridge, ex_ctx, part="weights"),
        "ex_bw_h200": cost.compute_bound_batch(llama, h200.ridge, ex_ctx, part="weights"),
        "ex_att_int": cost.decode_parts(llama, ex_ctx)["attention"].intensity,
        "ex_big_b": big_b, "ex_split_ms": split * 1e3, "ex_whole_ms": whole * 1e3,
        "ex_users": users, "ex_users_ctx": users_ctx, "ex_h100_mib": h100.memory / 2**20,
        "ex_h100_mem": h100.memory / 1e9, "ex_h200_mib": h200.memory / 2**20, "ex_h200_mem": h200.memory / 1e9,
        "ex_kv256_gb": cost.kv_cache_bytes(llama, users_ctx, batch=users) / 1e9, "ex_kv_seq_gb": kv_seq / 1e9,
        "ex_w_gb": weights_all / 1e9, "ex_users_h100": users_that_fit(h100, weights_all, kv_seq),
        "ex_users_h200": users_that_fit(h200, weights_all, kv_seq), "ex_util_pct": 100 * UTILISATION,
        "ex_h100_usable": UTILISATION * h100.memory / 1e9, "ex_h200_usable": UTILISATION * h200.memory / 1e9,
        "ex_gf_tps": gf.tokens_per_s, "ex_a100_tbs": a100.bandwidth / 1e12, "ex_a100_floor_ms": a100_floor * 1e3,
        "ex_a100_tps": 1 / a100_floor, "ex_gf_pct": gptfast_pct(), "ex_gf_watts": GPTFAST_WATTS,
        "ex_ctx_pred": longest[b_mid].total / shortest[b_mid].total,
        "ex_ctx_pred_1": longest[1].total / shortest[1].total,
        "ex_ctx_kv_pct": 100 * longest[b_mid].kv / longest[b_mid].total,
    }
