"""Chapter 5's predictions: the cost model's bytes and FLOPs of one decode step by kind of op
(`cost.cost_by_kind`), for Llama-3-8B on an H100 and for SmolLM2 on this machine (its read bandwidth and
matmul rate probed by `hardware.probe`); the LM head's share for three vocabularies; the exercises' numbers.

Nothing here times a model: `predict` probes the machine, the rest is the cost model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ... import cost, hardware
from ...cost import KIND_LABELS, LM_HEAD
from ...device import dtype_name
from ...wording import duration
from . import claims, labels
from .published import async_overhead, graph_overhead

H100 = hardware.ACCELERATORS["H100 SXM"]
VOCAB_MODELS = ("llama-3-8b", "mistral-7b", "smollm2-135m")


@dataclass
class StepBytes:
    """The cost model's decode step of `model` at batch 1, attending to `context` positions, with
    `bytes_per_param`-byte weights, by kind of op (`cost.OP_KINDS`)."""

    model: str
    context: int
    bytes_per_param: int
    kinds: dict[str, cost.OpCost]  # by kind: its FLOPs, bytes, and how many of the model's ops it counts

    @property
    def total(self) -> int:
        """Bytes of the whole step."""
        return sum(k.bytes for k in self.kinds.values())

    @property
    def head_share(self) -> float:
        """The LM head's share of the step's bytes."""
        return self.kinds[LM_HEAD].bytes / self.total

    @property
    def max_intensity(self) -> float:
        """The highest FLOPs per byte of any kind."""
        return max(k.intensity for k in self.kinds.values())


def step_bytes(cfg, context: int, bytes_per_param: int = 2, batch: int = 1) -> StepBytes:
    """`cost.cost_by_kind` of one decode step of `cfg` (a ModelConfig or a preset name), as a record."""
    cfg = cost.get_config(cfg)
    kinds = cost.cost_by_kind(cfg, context, batch=batch, bytes_per_param=bytes_per_param)  # plain ints
    return StepBytes(cfg.name, context, bytes_per_param, kinds)


@dataclass
class Prediction:
    """The bytes of one decode step by kind of op: Llama-3-8B on a fresh sequence in a 2-byte format (against
    an H100's datasheet), and SmolLM2 after `context` cached tokens in the chapter's dtype (against this
    machine, probed). `*_decode_bytes` are `cost.decode_bytes`' totals, which the kinds must add up to."""

    device: str  # device type
    dtype: str
    context: int  # cached tokens before the step the chapter takes apart
    bandwidth: float  # this machine's probed read bandwidth, bytes/s
    ridge: float  # this machine's probed matmul FLOP/s in `dtype` ÷ `bandwidth`
    llama: StepBytes
    smol: StepBytes
    llama_decode_bytes: int
    smol_decode_bytes: int
    llama_embedding_row: int  # bytes of one row of Llama-3-8B's embedding table, 2-byte weights
    threads: int = 0  # PyTorch's thread count when the probe ran: a processor's roofs depend on it
    h100_bandwidth: float = H100.bandwidth
    h100_ridge: float = H100.ridge

    @property
    def bandwidth_time(self) -> float:
        """SmolLM2's step at the probed bandwidth, seconds."""
        return self.smol.total / self.bandwidth

    @property
    def llama_h100_time(self) -> float:
        """Llama-3-8B's step at an H100's bandwidth, seconds: its floor."""
        return self.llama.total / self.h100_bandwidth

    def smol_summary(self) -> str:
        """SmolLM2's step in one line: its bytes and their time at the probed bandwidth."""
        return (f"SmolLM2, {self.dtype}, step after {self.context} tokens: {self.smol.total / 1e6:,.1f} MB, "
                f"{self.bandwidth_time * 1e3:.3f} ms at {self.bandwidth / 1e9:,.1f} GB/s")

    def numbers(self) -> dict[str, object]:
        return {
            "device": self.device, "dtype_name": self.dtype, "ctx": self.context, "read_gbps": self.bandwidth / 1e9,
            "l8_step_gb": self.llama.total / 1e9, "l8_head_gb": self.llama.kinds[LM_HEAD].bytes / 1e9,
            "l8_head_pct": 100 * self.llama.head_share, "l8_h100_ms": self.llama_h100_time * 1e3,
            "l8_max_intensity": self.llama.max_intensity, "h100_ridge": self.h100_ridge,
            "emb_row_bytes": self.llama_embedding_row,
            "bw_time": duration(self.bandwidth_time), "smol_max_intensity": self.smol.max_intensity,
            "here_ridge": self.ridge, "roof_threads": labels.roof_threads(self.device, self.threads),
        }

    def table(self):
        """Llama-3-8B's step by kind of op: GB, share, FLOP/byte and time at an H100's bandwidth."""
        import pandas as pd

        rows = [{"kind": KIND_LABELS[k], "GB": op.bytes / 1e9, "share (%)": 100 * op.bytes / self.llama.total,
                 "FLOP/byte": op.intensity, "H100 time (ms)": op.bytes / self.h100_bandwidth * 1e3}
                for k, op in self.llama.kinds.items()]
        rows.append({"kind": "whole step", "GB": self.llama.total / 1e9,
                     "H100 time (ms)": self.llama_h100_time * 1e3})
        return (pd.DataFrame(rows).style.format({"GB": "{:.3f}", "share (%)": "{:.1f}", "FLOP/byte": "{:.2f}",
                                                  "H100 time (ms)": "{:.3f}"}, na_rep="")
                .hide(axis="index"))

    def check(self) -> None:
        # 1. The bytes by kind of op add up to the cost model's step, for both models.
        assert self.smol.total == self.smol_decode_bytes, (self.smol.total, self.smol_decode_bytes)
        assert self.llama.total == self.llama_decode_bytes, (self.llama.total, self.llama_decode_bytes)
        # 4. The LM head is 7.0 % of a Llama-3-8B step's bytes (its vocabulary's 128,256 rows of 4,096 weights).
        assert round(100 * self.llama.head_share, 1) == 7.0, 100 * self.llama.head_share
        # 5. Every kind of op is bandwidth-bound: Llama-3-8B's far below an H100's ridge, and SmolLM2's in this
        #    dtype below this machine's ridge, as measured.
        assert self.llama.max_intensity < self.h100_ridge / 10, self.llama.max_intensity
        assert self.smol.max_intensity < self.ridge, (self.smol.max_intensity, self.ridge)


def predict(s, machine: hardware.Accelerator | None = None) -> Prediction:
    """The cost model's bytes by kind for Llama-3-8B (a fresh sequence, 2-byte weights) and for the chapter's
    SmolLM2 step (after `s.sizes.decode_context` cached tokens, in `s.dtype`), with this machine's read
    bandwidth and ridge from `hardware.probe` (or from `machine`, an Accelerator already measured), and
    PyTorch's thread count now, the one the probe ran on."""
    import torch

    machine = machine or hardware.probe(s.device, s.dtype)
    ctx, bpp = s.sizes.decode_context, s.dtype.itemsize
    llama = cost.get_config("llama-3-8b")
    return Prediction(
        device=s.device.type, dtype=dtype_name(s.dtype), context=ctx, bandwidth=float(machine.bandwidth),
        ridge=float(machine.ridge),
        llama=step_bytes(llama, 1),  # a fresh sequence: the weights, and almost no KV cache
        smol=step_bytes(s.model.cfg, ctx + 1, bpp),  # the step at position ctx attends to ctx + 1 positions
        llama_decode_bytes=int(cost.decode_bytes(llama, 1).total),
        smol_decode_bytes=int(cost.decode_bytes(s.model.cfg, ctx + 1, bytes_per_param=bpp).total),
        llama_embedding_row=llama.d_model * 2, threads=torch.get_num_threads())


@dataclass
class HeadCost:
    """One model's LM head against its whole decode step (a fresh sequence, 2-byte weights)."""

    model: str
    vocab: int
    d_model: int
    params: int  # every parameter (a tied matrix once)
    head_bytes: int
    step_bytes: int

    @property
    def head_params(self) -> int:
        return self.vocab * self.d_model

    @property
    def share(self) -> float:
        """The head's share of the step's bytes."""
        return self.head_bytes / self.step_bytes


@dataclass
class VocabCosts:
    """The LM head's cost for each model of `VOCAB_MODELS`, from the cost model."""

    heads: dict[str, HeadCost]

    def numbers(self) -> dict[str, object]:
        mistral, smol = self.heads["mistral-7b"], self.heads["smollm2-135m"]
        return {"mistral_vocab": mistral.vocab, "mistral_head_pct": 100 * mistral.share,
                "smol_head_m": smol.head_params / 1e6, "smol_params_m": smol.params / 1e6,
                "smol_head_pct": 100 * smol.share}

    def table(self):
        import pandas as pd

        df = pd.DataFrame([{"model": h.model, "vocab": h.vocab, "d_model": h.d_model,
                            "head params (M)": h.head_params / 1e6, "of all params (%)": 100 * h.head_params / h.params,
                            "head (GB)": h.head_bytes / 1e9, "of step (%)": 100 * h.share,
                            "embedding row (B)": 2 * h.d_model} for h in self.heads.values()])
        return df.style.format({"vocab": "{:,}", "d_model": "{:,}", "head params (M)": "{:.1f}",
                                "of all params (%)": "{:.1f}", "head (GB)": "{:.3f}", "of step (%)": "{:.1f}",
                                "embedding row (B)": "{:,}"}).hide(axis="index")


def vocab_costs(models=VOCAB_MODELS) -> VocabCosts:
    """Each model's LM head against its decode step: 2-byte weights, a fresh sequence."""
    heads = {}
    for name in models:
        c = cost.get_config(name)
        step = step_bytes(c, 1)
        heads[name] = HeadCost(name, c.vocab_size, c.d_model, int(cost.weight_bytes(c, 1)),  # 1 byte/param: count
                               step.kinds[LM_HEAD].bytes, step.total)
    return VocabCosts(heads)


def exercise_numbers(cfg, counts, batch: int = 64) -> dict[str, object]:
    """The exercises' answers: Llama-3-8B with twice its vocabulary; SmolLM2's step (`cfg`, 2-byte weights,
    after `counts.context` tokens) and Llama-3-8B's, their bytes on an H100 against their kernel launches
    (`counts.launches`, an `OpCounts` extrapolated to each depth: kernels where it ran on a GPU, ops that are
    not views elsewhere) at NVIDIA's cost per kernel beyond its work, launched asynchronously
    (`published.async_overhead`) and replayed from a CUDA Graph (`published.graph_overhead`); Llama-3-8B's LM
    head at `batch`; the one-layer step's ops at batch 1 and at `counts.batch`."""
    context = counts.context
    kernels_smol, kernels_llama = counts.launches(cfg.n_layers), counts.launches(counts.llama_layers)
    llama = cost.get_config("llama-3-8b")
    l8 = step_bytes(llama, 1)
    big = step_bytes(llama.with_(vocab_size=2 * llama.vocab_size), 1)
    smol_time = step_bytes(cfg, context + 1).total / H100.bandwidth
    l8_time = l8.total / H100.bandwidth
    smol_x = kernels_smol * async_overhead() / smol_time
    l8_x = kernels_llama * async_overhead() / l8_time
    head_intensity = l8.kinds[LM_HEAD].intensity
    return {
        "ex_vocab": 2 * llama.vocab_size, "ex_vocab_pct": 100 * big.head_share,
        "ex_vocab_ms": big.total / H100.bandwidth * 1e3,
        "ex_smol_mb": smol_time * H100.bandwidth / 1e6, "ex_smol_bw_us": smol_time * 1e6,
        "ex_launch_basis": labels.launch_basis(counts.gpu, kernels_smol),
        "ex_smol_launch_us": kernels_smol * async_overhead() * 1e6,
        "ex_smol_vs": claims.launch_vs_bytes(smol_x),
        "ex_replayed_text": claims.replayed_floor(kernels_smol, graph_overhead(), smol_time),
        "ex_l8_kernels": kernels_llama, "ex_l8_launch_ms": kernels_llama * async_overhead() * 1e3,
        "ex_l8_vs": claims.launch_vs_bytes(l8_x), "ex_depth_text": claims.launches_by_size(smol_x, l8_x),
        "ex_batch": batch, "ex_batch_intensity": step_bytes(llama, 1, batch=batch).kinds[LM_HEAD].intensity,
        "ex_batch_cross": math.ceil(H100.ridge / head_intensity),
        "ex_ops_batch": counts.batch, "ex_ops_1layer": counts.by_depth["1"]["ops"],
        "ex_batch_ops_text": claims.batch_ops(counts.by_depth["1"]["ops"], counts.batched_ops, counts.batch),
    }
