"""Each chapter's key results: the few numbers and series it shows for this machine beside every reference.

One function per chapter takes that chapter's result records, live from a run,
and returns a flat dict of plain numbers, text and lists: the same function
makes the "this machine" column in the notebook and the `results` a reference
file stores. Units are in the names (`_ms`, `_per_s`, `_pct`). `ROWS` says which
of them a chapter's comparison table shows, with a label and a unit; `SERIES`
which pairs of lists its figures draw.

A later llmperf may add a result here. A reference written before that lacks it,
and the chapter shows "not in this reference" in its place: a result is never
renamed, only added (or its meaning would silently change under old files).
"""

from __future__ import annotations

from typing import NamedTuple



def _ms(values) -> list[float]:
    return [v * 1e3 for v in values]


def chain(ingredients, line) -> dict:
    """Chapter 1: TTFT and one decode step, and generate()'s time against N with its fitted line."""
    return {"prompt_tokens": ingredients.prompt_len, "ttft_ms": ingredients.ttft * 1e3,
            "step_ms": ingredients.t_step * 1e3, "slope_ms": line.slope * 1e3, "intercept_ms": line.intercept * 1e3,
            "new_tokens": list(line.Ns), "e2e_ms": _ms(line.e2e)}


def prefill(sweep) -> dict:
    """Chapter 2: the TTFT sweep, on the model it ran (SmolLM2 on a CPU, a larger preset on a big GPU)."""
    return {"ttft_model": sweep.model, "ttft_lengths": list(sweep.lengths), "ttft_ms": _ms(sweep.ttft),
            "ttft_longest_ms": sweep.ttft[-1] * 1e3, "matmul_tflops": sweep.matmul_rate / 1e12,
            "achieved_longest_pct": 100 * sweep.achieved[-1] / sweep.matmul_rate}


def intensity(roofs, sweep, by_context) -> dict:
    """Chapter 3: the batch sweep, the context sweep, and the probed roof with the sweep's measured points."""
    return {"roof_flops": roofs.here.flops, "roof_bandwidth": roofs.here.bandwidth, "roof_dtype": roofs.dtype,
            "batches": list(sweep.batches), "batch_step_ms": _ms(sweep.step_s), "batch_tok_per_s": sweep.tokens_per_s,
            "step_growth": sweep.step_s[-1] / sweep.step_s[0],
            "tok_per_s_gain": sweep.tokens_per_s[-1] / sweep.tokens_per_s[0],
            "point_intensity": sweep.intensity, "point_flops": [f / t for f, t in zip(sweep.nflops, sweep.step_s)],
            "contexts": list(by_context.contexts), "context_tpot_ms": _ms(by_context.tpot_s),
            "context_growth": by_context.measured_growth[-1], "context_ratio": by_context.context_ratio}


def caching(sweep, generation) -> dict:
    """Chapter 4: one step of each loop against the sequence length, and a whole generation by each."""
    return {"positions": list(sweep.positions), "naive_step_ms": _ms(sweep.naive_s),
            "cached_step_ms": _ms(sweep.cached_s), "slope_ratio": sweep.slope_ratio,
            "generation": f"{generation.prompt} + {generation.new_tokens} tokens",
            "naive_s": generation.naive.measured_s, "cached_s": generation.cached.measured_s,
            "naive_over_cached": generation.meas_ratio}


def anatomy(profile, fixed, replay) -> dict:
    """Chapter 5: the step's ops and kernels, its fixed cost, and eager against CUDA Graph and torch.compile
    (None where the device has no CUDA)."""
    graph = replay.graph
    return {"ops_per_step": profile.ops, "kernels_per_step": profile.kernels or None,
            "plain_step_ms": fixed.plain * 1e3, "fused_step_ms": fixed.fused * 1e3, "op_us": fixed.op * 1e6,
            "fixed_share_pct": 100 * min(1.0, fixed.plain_ops * fixed.op / fixed.plain),
            "bytes_ms": fixed.bandwidth_time * 1e3,
            "eager_ms": None if graph is None else replay.eager * 1e3, "graph_ms": None if graph is None else graph * 1e3,
            "compiled_ms": None if replay.compiled is None else replay.compiled * 1e3,
            "launch_removed_pct": None if graph is None else 100 * (1 - graph / replay.eager)}


def serving(sweep) -> dict:
    """Chapter 6: the exchange rate, the server's tokens/s and each user's, by max batch size."""
    return {"serve_batches": list(sweep.batches), "serve_tok_per_s": list(sweep.tok_s),
            "serve_per_user": list(sweep.per_user), "serve_gain": sweep.tok_s[-1] / sweep.tok_s[0]}


RESULTS = {"chain": chain, "prefill": prefill, "intensity": intensity, "caching": caching, "anatomy": anatomy,
           "serving": serving}



class Row(NamedTuple):
    """One row of a chapter's comparison table: result `key`, shown as `fmt.format(value * scale)`; for a
    list, its first or last element (`pick`). `speed` says how two machines' values of it compare where it means
    the same on both (a probed rate, one step, tokens/s, each at its machine's own sizes): "time" (less is
    faster) or "rate" (more is faster); None for a count, a share, or a result whose work grows with the
    device's sizes (the longest prompt's TTFT, a whole generation)."""

    key: str
    label: str
    unit: str
    fmt: str = "{}"
    pick: str | None = None
    scale: float = 1.0
    speed: str | None = None
    box: bool = False  # one of the chapter's headline results, in the box beside the GPU references

    @property
    def heading(self) -> str:
        """The row's name in a table: its label, and its unit in brackets."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


# chapter -> the rows of its comparison table
ROWS: dict[str, list[Row]] = {
    "chain": [
        Row("prompt_tokens", "prompt", "tokens", "{:,.0f}"),
        Row("ttft_ms", "TTFT", "ms", "{:,.2f}", speed="time", box=True),
        Row("step_ms", "one decode step", "ms", "{:,.2f}", speed="time", box=True),
        Row("slope_ms", "fitted slope of E2E against N", "ms/token", "{:,.2f}", speed="time"),
        Row("intercept_ms", "fitted intercept", "ms", "{:,.1f}"),
    ],
    "prefill": [
        Row("ttft_model", "model timed", "", "{}", box=True),
        Row("ttft_lengths", "longest prompt", "tokens", "{:,.0f}", pick="last"),
        Row("ttft_longest_ms", "TTFT at the longest prompt", "ms", "{:,.1f}", box=True),
        Row("matmul_tflops", "probed matmul rate", "TFLOP/s", "{:,.3g}", speed="rate", box=True),
        Row("achieved_longest_pct", "longest prompt's share of that rate", "%", "{:.0f}"),
    ],
    "intensity": [
        Row("roof_bandwidth", "probed read bandwidth", "GB/s", "{:,.0f}", scale=1e-9, speed="rate", box=True),
        Row("roof_flops", "probed matmul rate", "GFLOP/s", "{:,.0f}", scale=1e-9, speed="rate"),
        Row("roof_dtype", "dtype of the probe and the sweeps", "", "{}"),
        Row("batches", "largest batch", "sequences", "{:,.0f}", pick="last"),
        Row("batch_step_ms", "step at batch 1", "ms", "{:,.2f}", pick="first", speed="time", box=True),
        Row("step_growth", "step at the largest batch ÷ at batch 1", "×", "{:.2f}"),
        Row("tok_per_s_gain", "tokens/s at the largest batch ÷ at batch 1", "×", "{:.1f}", box=True),
        Row("context_ratio", "longest context ÷ shortest", "×", "{:.0f}"),
        Row("context_growth", "TPOT at the longest ÷ at the shortest", "×", "{:.2f}"),
    ],
    "caching": [
        Row("generation", "whole generation", "", "{}", box=True),
        Row("naive_s", "naive loop", "s", "{:,.2f}"),
        Row("cached_s", "cached loop", "s", "{:,.3f}"),
        Row("naive_over_cached", "naive ÷ cached", "×", "{:.1f}", box=True),
        Row("slope_ratio", "naive step's growth per token ÷ cached step's", "×", "{:,.0f}"),
    ],
    "anatomy": [
        Row("ops_per_step", "ops per decode step", "", "{:,.0f}"),
        Row("kernels_per_step", "GPU kernels per decode step", "", "{:,.0f}"),
        Row("op_us", "one tiny op", "µs", "{:.1f}", speed="time", box=True),
        Row("plain_step_ms", "plain step", "ms", "{:.2f}", box=True),
        Row("fixed_share_pct", "of it, the ops' fixed cost", "%", "{:.0f}"),
        Row("fused_step_ms", "fused step", "ms", "{:.2f}"),
        Row("bytes_ms", "its bytes at the probed bandwidth", "ms", "{:.2f}"),
        Row("eager_ms", "eager step (static cache)", "ms", "{:.2f}", box=True),
        Row("graph_ms", "replayed from a CUDA Graph", "ms", "{:.2f}", box=True),
        Row("compiled_ms", "torch.compile, reduce-overhead", "ms", "{:.2f}"),
        Row("launch_removed_pct", "of the eager step the graph removed", "%", "{:.0f}"),
    ],
    "serving": [
        Row("serve_batches", "largest max batch", "requests", "{:,.0f}", pick="last", box=True),
        Row("serve_tok_per_s", "server tokens/s at batch 1", "tokens/s", "{:,.1f}", pick="first", speed="rate", box=True),
        Row("serve_tok_per_s", "server tokens/s at the largest batch", "tokens/s", "{:,.1f}", pick="last"),
        Row("serve_per_user", "each user's tokens/s at batch 1", "tokens/s", "{:,.1f}", pick="first", speed="rate"),
        Row("serve_per_user", "each user's tokens/s at the largest batch", "tokens/s", "{:,.1f}", pick="last"),
        Row("serve_gain", "server tokens/s, largest batch ÷ batch 1", "×", "{:.1f}", box=True),
    ],
}

# chapter -> figure -> (x result, y result[, a result its label names]): what a reference adds to each figure
SERIES: dict[str, dict[str, tuple[str, ...]]] = {
    "chain": {"latency_line": ("new_tokens", "e2e_ms")},
    "prefill": {"ttft": ("ttft_lengths", "ttft_ms", "ttft_model")},
    "intensity": {"batch_sweep": ("batches", "batch_tok_per_s"), "context_sweep": ("contexts", "context_tpot_ms"),
                  "roofline": ("point_intensity", "point_flops")},
    "caching": {"step_times_naive": ("positions", "naive_step_ms"), "step_times_cached": ("positions", "cached_step_ms")},
    "anatomy": {},
    "serving": {"exchange_rate": ("serve_per_user", "serve_tok_per_s")},
}
