"""Chapter 2's counts: a prefill's FLOPs by the cost model, and PyTorch's FLOP counter against that count.

- `estimates(s)`: the cost model's numbers for the chapter's worked example,
  Llama-3-8B (2·N against the exact matmuls, full against causal attention, the
  crossover length, its gate projection against an H100 SXM's ridge), and the
  shape of the setup's own model. Arithmetic only: nothing runs.
- `count_check(s)`: one plain forward pass of the setup's model (logits at every
  position) per checked length under `profiling.count_flops` (attention in
  PyTorch's math form), against `cost.prefill_flops(..., attention="full")`; and
  one at the shortest length as the model runs (its fused attention kernel,
  `is_causal`), to see which attention count FlopCounterMode gives that kernel.
- `exercise_numbers(estimates, sweep)`: the numbers of the exercises' answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from ... import cost, hardware
from ...config import get_config
from ...profiling import count_flops
from .claims import sdpa_count_text

EXAMPLE = "llama-3-8b"  # the chapter's worked example
RIDGE_DEVICE = "H100 SXM"  # the device whose ridge point the text sets the example against
PROMPTS = (2_000, 32_000)  # the example's short and long prompt (tokens)
T = 1e12


@dataclass
class CountRow:
    """The example's prefill of `seq_len` tokens by the cost model, in FLOPs (logits at every position)."""

    seq_len: int
    estimate: int  # 2·N·S, the rule of thumb
    matmul: int  # the matrix products that run (the embedding lookup does none)
    full: int  # attention, every query against every key
    causal: int  # attention, each query against the keys up to its own


@dataclass
class Estimates:
    """The cost model on the example (Llama-3-8B) and on the setup's model: what the text predicts."""

    model: str  # the example's preset
    params: int
    d_model: int
    d_ff: int
    vocab_size: int
    per_token_2n: int  # FLOPs per token by 2·N
    per_token_exact: int  # FLOPs per token of the matmuls that run
    rows: list[CountRow]  # the short prompt, then the long one
    crossover: float  # S at which attention equals the matmuls: 2·N against full attention
    crossover_exact: float  # the same with the exact matmuls against causal attention
    ridge: float  # the ridge device's FLOPs per byte
    ridge_rows: int  # rows per read at which the gate projection (d_model × d_ff) reaches the ridge
    decode_batch: int  # batch at which a decode step's weight products reach the ridge
    setup_model: str  # the setup's model (SmolLM2)
    setup_params: int
    setup_d_model: int
    setup_head_dim: int
    setup_crossover: float  # its crossover by the estimates

    def numbers(self) -> dict[str, object]:
        short, long = self.rows[0], self.rows[-1]
        return {
            "h100_ridge": self.ridge, "ridge_S": self.ridge_rows, "decode_cb": self.decode_batch,
            "l8_d": self.d_model, "l8_ff": self.d_ff, "l8_gate_m": self.d_model * self.d_ff / 1e6,
            "l8_params_b": self.params / 1e9, "l8_2n_gflop": self.per_token_2n / 1e9,
            "l8_exact_gflop": self.per_token_exact / 1e9,
            "l8_embed_gflop": 2 * self.vocab_size * self.d_model / 1e9,  # what 2·N charges the untied embedding
            "l8_2n_excess_pct": 100 * (self.per_token_2n - self.per_token_exact) / self.per_token_2n,
            "S_short": short.seq_len, "S_long": long.seq_len,
            "l8_mm_short": short.estimate / T, "l8_attn_short": short.full / T,
            "l8_mm_long": long.estimate / T, "l8_attn_long": long.full / T,
            "l8_exact_long": long.matmul / T, "l8_causal_long": long.causal / T,
            "l8_cross": self.crossover, "l8_cross_exact": self.crossover_exact,
            "l8_attn_share_short_pct": 100 * short.full / short.estimate,
            "smol_params_m": self.setup_params / 1e6, "smol_d": self.setup_d_model,
            "smol_cross": self.setup_crossover,
        }

    def table(self):
        """The example's prefill FLOPs at each prompt length, in TFLOP."""
        df = pd.DataFrame({"prompt (tokens)": [r.seq_len for r in self.rows],
                           "2·N·S (TFLOP)": [r.estimate / T for r in self.rows],
                           "exact matmuls (TFLOP)": [r.matmul / T for r in self.rows],
                           "full attention (TFLOP)": [r.full / T for r in self.rows],
                           "causal attention (TFLOP)": [r.causal / T for r in self.rows]})
        return (df.style.format("{:.1f}").format("{:,}", subset=["prompt (tokens)"]).hide(axis="index")
                .set_caption(f"{self.model}: prefill FLOPs"))

    def check(self) -> None:
        for r in self.rows:  # the estimate's 4·S²·d·L, since the example's d_q = d_model
            assert r.full == cost.estimate_attention(self.model, r.seq_len), (r.seq_len, r.full)


def estimates(s) -> Estimates:
    """The cost model's counts for the example, Llama-3-8B, and for the setup's model `s.model`."""
    llama, hw, own = get_config(EXAMPLE), hardware.ACCELERATORS[RIDGE_DEVICE], s.model.cfg
    rows = []
    for S in PROMPTS:
        full, causal = (cost.prefill_flops(llama, S, attention=form) for form in ("full", "causal"))
        rows.append(CountRow(S, cost.estimate_2n(llama, S), full.matmul, full.attention, causal.attention))
    return Estimates(
        llama.name, llama.num_params(), llama.d_model, llama.d_ff, llama.vocab_size,
        per_token_2n=cost.estimate_2n(llama), per_token_exact=sum(cost.matmul_flops(llama, 1).values()), rows=rows,
        crossover=cost.prefill_attention_crossover(llama),
        crossover_exact=cost.prefill_attention_crossover(llama, form="exact"),
        ridge=hw.ridge, ridge_rows=cost.compute_bound_rows(llama.d_model, llama.d_ff, hw.ridge),
        decode_batch=cost.compute_bound_batch(llama, hw.ridge, context=1, part="weights"),
        setup_model=own.name, setup_params=own.num_params(), setup_d_model=own.d_model, setup_head_dim=own.head_dim,
        setup_crossover=cost.prefill_attention_crossover(own))


@dataclass
class CountedRow:
    """One checked prompt length: PyTorch's count of a plain forward pass, and the cost model's two counts."""

    seq_len: int
    counted: int  # FlopCounterMode's total
    full: int  # cost.prefill_flops(cfg, S, attention="full").total
    causal: int  # the same with causal attention


@dataclass
class KernelCount:
    """FlopCounterMode on a plain forward pass as the model runs it: attention in the device's own fused kernel
    (`scaled_dot_product_attention` with `is_causal`), which the counter may charge in full, causally, or not at
    all. `attention` is the counter's total less its weight products (`aten.mm`), in FLOPs."""

    seq_len: int
    device: str
    counted: int  # FlopCounterMode's total
    attention: int  # the part of `counted` outside aten.mm, the weight products
    full: int  # the cost model's attention of the pass, the full square
    causal: int  # the same, causal pairs only


@dataclass
class FlopCheck:
    """PyTorch's FLOP counter against the cost model, on the setup's model."""

    model: str
    rows: list[CountedRow]  # attention in PyTorch's math form
    kernel: KernelCount  # attention in the device's fused kernel, at the first row's length

    def numbers(self) -> dict[str, object]:
        r, k = self.rows[-1], self.kernel
        return {"check_S": r.seq_len, "check_counted": r.counted, "check_formula": r.full,
                "check_diff": r.counted - r.full, "check_masked_gflop": (r.full - r.causal) / 1e9,
                "check_masked_pct": 100 * (r.full - r.causal) / r.full,
                "kernel_S": k.seq_len, "kernel_device": k.device.upper(), "kernel_counted": k.counted,
                "sdpa_text": sdpa_count_text(k.attention, k.full, k.causal)}

    def table(self):
        df = pd.DataFrame({"prompt (tokens)": [r.seq_len for r in self.rows],
                           "FlopCounterMode (FLOPs)": [r.counted for r in self.rows],
                           "cost, full (FLOPs)": [r.full for r in self.rows],
                           "difference (FLOPs)": [r.counted - r.full for r in self.rows],
                           "cost, causal (FLOPs)": [r.causal for r in self.rows]})
        return df.style.format("{:,}").hide(axis="index").set_caption(f"{self.model}: counted against predicted")

    def check(self) -> None:
        for r in self.rows:  # the cost model's count equals PyTorch's FLOP counter, exactly
            assert r.counted == r.full, (r.seq_len, r.counted)
        # With the fused kernel, what the counter saw outside attention is the cost model's weight products
        k, first = self.kernel, self.rows[0]  # (first.full is those products plus the full attention, k.full)
        assert k.seq_len == first.seq_len and k.counted - k.attention == first.full - k.full, k


def weight_products(counter: FlopCounterMode) -> int:
    """The FLOPs a counter saw in `aten.mm` and `aten.addmm`: the model's weight products (its projections and LM
    head), which `nn.Linear` runs as one matrix product over every row."""
    return sum(n for op, n in counter.get_flop_counts()["Global"].items() if str(op) in ("aten.mm", "aten.addmm"))


def count_check(s) -> FlopCheck:
    """Count the FLOPs of `s.model(tokens)` on random tokens (batch 1) at the sweep's shortest prompt and at the
    batch comparison's length (`s.sizes`), attention in PyTorch's math form, with the cost model's full and causal
    counts of the same pass; then once more at the shortest, attention in the device's own kernel."""
    cfg, rows = s.model.cfg, []
    lengths = (s.sizes.prefill_lengths[0], s.sizes.prefill_batch_len)
    for S in lengths:
        tokens = torch.randint(0, cfg.vocab_size, (1, S), device=s.device)
        with count_flops() as counter:  # attention in PyTorch's math form, whose matmuls the counter sees
            s.model(tokens)
        rows.append(CountedRow(S, int(counter.get_total_flops()), cost.prefill_flops(cfg, S, attention="full").total,
                               cost.prefill_flops(cfg, S, attention="causal").total))
    S = lengths[0]
    tokens = torch.randint(0, cfg.vocab_size, (1, S), device=s.device)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:  # the kernel the model picks
        s.model(tokens)
    counted = int(counter.get_total_flops())
    kernel = KernelCount(S, s.device.type, counted, counted - weight_products(counter),
                         cost.prefill_flops(cfg, S, attention="full").attention,
                         cost.prefill_flops(cfg, S, attention="causal").attention)
    return FlopCheck(cfg.name, rows, kernel)


def measured_gpu(where=None):
    """The newest committed GPU reference that probed a bfloat16 matmul on a device of the accelerator table:
    (its references.compare.Probes, its table row). What a real GPU reaches comes from a real run, never from
    this code."""
    from ...references.compare import folder, gpu_probes

    for probes in gpu_probes(where):
        row = hardware.table_row(probes.device_name)
        if row is not None and "matmul_bfloat16" in probes.values:
            return probes, row
    raise FileNotFoundError(f"No GPU reference run with a bfloat16 matmul probe is in {where or folder()}; the "
                            "exercise needs one (the repository's references/ holds one).")


def exercise_numbers(est: Estimates, sweep, where=None) -> dict[str, object]:
    """The exercises' answers: Llama-3-70B's cost per token and crossover (and each model's crossover ÷ d_model),
    the example's short prompt on an H100 SXM (causal, logits for the last position) at its datasheet peak and at
    the share of it a measured H200 reached, its gate projection's intensity, and the sweep's model at twice the
    sweep's longest prompt at the probed rate (`sweep`: a `timings.TTFTSweep`)."""
    l70, hw = get_config("llama-3-70b"), hardware.ACCELERATORS[RIDGE_DEVICE]
    probes, gpu = measured_gpu(where)
    S = est.rows[0].seq_len
    flops = cost.prefill_flops(est.model, S, attention="causal", logits_for=1).total
    efficiency = probes.values["matmul_bfloat16"] / gpu.flops
    long = 2 * sweep.lengths[-1]
    long_flops = cost.prefill_flops(sweep.model, long, attention="causal", logits_for=1)
    return {
        "l70_2n_gflop": cost.estimate_2n(l70) / 1e9, "l70_cross": cost.prefill_attention_crossover(l70),
        "l70_ratio": cost.prefill_attention_crossover(l70) / l70.d_model, "l8_ratio": est.crossover / est.d_model,
        "smol_ratio": est.setup_crossover / est.setup_d_model,
        "h100_tflop": flops / T, "h100_peak_tflops": hw.flops / T, "h100_ttft_ms": flops / hw.flops * 1e3,
        "gpu_eff_pct": 100 * efficiency, "h100_ttft_real_ms": flops / (efficiency * hw.flops) * 1e3,
        "gpu_probe_date": probes.label.rsplit(", ", 1)[-1], "gpu_probe_device": probes.device_name,
        "gpu_cores_text": ("which has the H100's tensor cores (the same datasheet peak)" if gpu.flops == hw.flops
                           else f"another GPU than the H100 ({gpu.name}), so take its fraction as a guide only"),
        "gate_intensity": cost.matmul_intensity(S, est.d_model, est.d_ff),  # (S, K) @ (K, N), the gate projection
        "ex_long_S": long, "ex_long_gflop": long_flops.total / 1e9,
        "ex_long_attn_pct": 100 * long_flops.attention / long_flops.total,
        "ex_long_ms": long_flops.total / sweep.matmul_rate * 1e3,
    }
