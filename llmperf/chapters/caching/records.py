"""Chapter 4's result records: what each experiment measured or counted, the numbers and sentences the
chapter's prose glues from it (`numbers()`), its tables (`table()`) and its assertions (`check()`).

Every field is a plain number, string, list or dict, or a nested dataclass of
them, so `dataclasses.asdict(record)` is JSON. Times are in seconds, FLOPs and
bytes are exact counts; ratios are naive ÷ cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...book import Collapsed
from ...cost import GenerationCost
from ...fit import Fit, linear_fit
from ...hardware import Accelerator
from .claims import crossover_window, kernel_count, naive_gap, step_slopes
from .quoted import GpuShare, QuotedLoop, QuotedTable  # noqa: F401  (records of the 512 + 512 table)


@dataclass(frozen=True)
class Agreement:
    """Greedy tokens of both loops from one prompt, in float32, and the largest difference between their
    logits at any step."""

    prompt: str
    cached_ids: list[int]
    naive_ids: list[int]
    logit_gap: float  # max |cached − naive| over every step's logits
    text: str  # the cached loop's tokens, decoded

    @property
    def n_check(self) -> int:
        return len(self.cached_ids)

    @property
    def same_tokens(self) -> bool:
        return self.cached_ids == self.naive_ids

    def summary(self) -> str:
        """One line: how many tokens, whether they are identical, the logit gap, the text."""
        return (f"{self.n_check} tokens each; identical: {self.same_tokens}; largest logit difference "
                f"{self.logit_gap:.2e}; text: {self.text!r}")

    def numbers(self) -> dict[str, object]:
        return {"n_check": self.n_check, "logit_gap": self.logit_gap,
                "same_text": "the same" if self.same_tokens else "different"}

    def check(self) -> None:
        """The same tokens, and logits equal to float32 rounding."""
        assert self.same_tokens, (self.cached_ids, self.naive_ids)
        assert self.logit_gap < 1e-2, self.logit_gap


@dataclass(frozen=True)
class StepSweep:
    """One step of each loop timed at sequence lengths S: a naive step is a full pass over S tokens (last
    logits only), a cached step one token after S cached positions. Each time is the fastest of the rounds."""

    model: str
    device: str
    dtype: str
    positions: list[int]
    naive_s: list[float]
    cached_s: list[float]

    @property
    def fit_naive(self) -> Fit:
        return linear_fit(self.positions, self.naive_s)

    @property
    def fit_cached(self) -> Fit:
        return linear_fit(self.positions, self.cached_s)

    @property
    def slope_ratio(self) -> float:
        """The naive step's growth per token of sequence over the cached step's."""
        cached = self.fit_cached.slope
        return self.fit_naive.slope / cached if cached > 0 else float("inf")

    def table(self):
        df = pd.DataFrame({"S (tokens)": self.positions,
                           "naive step (ms)": [t * 1e3 for t in self.naive_s],
                           "cached step (ms)": [t * 1e3 for t in self.cached_s],
                           "naive / cached": [a / b for a, b in zip(self.naive_s, self.cached_s)]})
        shown = df.style.format({"S (tokens)": "{:,}", "naive step (ms)": "{:.1f}", "cached step (ms)": "{:.2f}",
                                 "naive / cached": "{:.1f}"}).hide(axis="index")
        return Collapsed(shown, "sweep")

    def numbers(self) -> dict[str, object]:
        return {"device": self.device, "dtype_name": self.dtype,
                "S_lo": self.positions[0], "S_hi": self.positions[-1],
                "slopes_text": step_slopes(self.fit_naive.slope * 1e6, self.fit_cached.slope * 1e6),
                "step_ratio_hi": self.naive_s[-1] / self.cached_s[-1],
                "naive_hi_ms": self.naive_s[-1] * 1e3, "cached_hi_ms": self.cached_s[-1] * 1e3}

    def check(self) -> None:
        """A naive step grows with the sequence at least 5 times as fast as a cached one."""
        assert self.slope_ratio >= 5, f"naive slope only {self.slope_ratio:.1f}x the cached slope"


@dataclass(frozen=True)
class FlopCheck:
    """PyTorch's FLOP counter over a short generation of each loop, beside `cost.generation_cost`'s count.
    Both dicts are keyed by loop, "naive" and "cached"."""

    prompt: int
    new_tokens: int
    counted: dict[str, int]  # FlopCounterMode's total
    predicted: dict[str, int]  # the cost model's

    def table(self):
        df = pd.DataFrame({"loop": list(self.counted), "FlopCounterMode (FLOPs)": list(self.counted.values()),
                           "cost model (FLOPs)": [self.predicted[loop] for loop in self.counted]})
        return df.style.format({"FlopCounterMode (FLOPs)": "{:,}", "cost model (FLOPs)": "{:,}"}).hide(axis="index")

    def numbers(self) -> dict[str, object]:
        return {"short_prompt": self.prompt, "short_n": self.new_tokens}

    def check(self) -> None:
        """The cost model counts what runs, for both loops, to the FLOP."""
        assert all(self.counted[loop] == self.predicted[loop] for loop in self.counted), (self.counted, self.predicted)


@dataclass(frozen=True)
class LoopRun:
    """One loop over a whole generation: its cost-model totals (attention as the full S×S square, what
    FlopCounterMode counts), its roofline time on this machine (pass by pass, part by part, attention as the
    kernel that ran computes it), and the fastest of its timed runs. `attention_run` and `attention_causal`:
    the generation's attention FLOPs as that kernel computes them and as causal attention needs them
    (`attention.counted_passes`)."""

    total: GenerationCost
    roofline_s: float
    measured_s: float
    attention_run: int
    attention_causal: int


@dataclass(frozen=True)
class Generation:
    """A whole generation of `new_tokens` after a random `prompt`-token prompt, by each loop, on this machine
    (`here`, as `hardware.probe` measured it)."""

    model: str
    device: str
    dtype: str
    prompt: int
    new_tokens: int
    bytes_per_param: int
    here: Accelerator
    naive: LoopRun
    cached: LoopRun

    @property
    def flop_ratio(self) -> float:
        return self.naive.total.flops / self.cached.total.flops

    @property
    def pred_ratio(self) -> float:
        return self.naive.roofline_s / self.cached.roofline_s

    @property
    def meas_ratio(self) -> float:
        return self.naive.measured_s / self.cached.measured_s

    def table(self):
        rows = [{"loop": name, "passes": r.total.passes, "matmul (GFLOP)": r.total.matmul_flops / 1e9,
                 "attention, as run (GFLOP)": r.attention_run / 1e9, "weights (GB)": r.total.weight_bytes / 1e9,
                 "KV cache (MB)": r.total.kv_bytes / 1e6, "roofline (s)": r.roofline_s, "measured (s)": r.measured_s}
                for name, r in (("naive", self.naive), ("cached", self.cached))]
        caption = f"{self.model}, {self.prompt}-token prompt, {self.new_tokens} new tokens, {self.dtype}"
        return (pd.DataFrame(rows).style.format(
            {"matmul (GFLOP)": "{:.1f}", "attention, as run (GFLOP)": "{:.2f}", "weights (GB)": "{:.2f}",
             "KV cache (MB)": "{:.1f}", "roofline (s)": "{:.2f}", "measured (s)": "{:.2f}"})
            .hide(axis="index").set_caption(caption))

    def numbers(self) -> dict[str, object]:
        return {"P": self.prompt, "n_gen": self.new_tokens, "smol_flop_ratio": self.flop_ratio,
                "smol_weights_gb": self.naive.total.weight_bytes / 1e9,
                "naive_gap_text": naive_gap(self.meas_ratio, self.pred_ratio),
                "attn_run_text": kernel_count(self.naive.attention_run, self.naive.total.attention_flops,
                                              self.naive.attention_causal),
                "meas_ratio": self.meas_ratio, "pred_ratio": self.pred_ratio}

    def check(self) -> None:
        """The naive loop does all the cached loop's work and more, so it is not faster beyond noise. (Not
        "slower": on a GPU, SmolLM2's passes of a few hundred tokens cost no more than one-token steps.)"""
        assert self.naive.measured_s > 0.9 * self.cached.measured_s, {"naive": self.naive, "cached": self.cached}


@dataclass(frozen=True)
class CrossoverCurve:
    """A naive generation's FLOPs from a one-token prompt, summed over its passes, against tokens generated
    (exact weight products; causal attention, what a fused kernel runs at these lengths; the model's context
    limit lifted), and where attention reaches the weight products: counted causal (`crossover`) and, for
    comparison, as the full S×S square (`full_crossover`, `cost.naive_attention_crossover`)."""

    model: str
    crossover: int  # attention.causal_crossover
    window: int  # the model's context window (tokens), which the curve's lengths may pass
    new_tokens: list[int]
    matmul_flops: list[int]
    attention_flops: list[int]  # causal
    full_crossover: int | None = None


CROSSOVER_NAMES = {"llama-3-8b": "l8_naive_cross", "smollm2-135m": "smol_naive_cross"}  # glue names


@dataclass(frozen=True)
class Crossovers:
    """One `CrossoverCurve` per model."""

    curves: list[CrossoverCurve]

    def numbers(self) -> dict[str, object]:
        out = {}
        for c in self.curves:
            name = CROSSOVER_NAMES.get(c.model, f"{c.model}_naive_cross")
            out[name], out[f"{name}_text"] = c.crossover, crossover_window(c.crossover, c.window)
            out[f"{name}_full"] = c.full_crossover
        return out
