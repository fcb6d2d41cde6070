"""The companions of chapter 5's shown code: the check of its written-out layer against the model's own
`TransformerBlock`, and the table of a profile the reader runs by hand.

The chapter writes one layer's decode step out op by op (norm, q/k/v, RoPE, the cache append, attention, wo,
the MLP) on the model's own weights and KV cache. `check_layer` runs the model's layer on the same input, at
the same position, against the same cache (which the written-out step has already written at that position:
the model's layer overwrites it with the same key and value), and holds the two outputs to the dtype's
rounding. `busiest_ops` turns a torch.profiler record into a small table; `quiet_stderr` keeps the
profiler's start and stop notices out of a notebook's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...profiling.ops import _quiet_stderr as quiet_stderr  # noqa: F401  (re-exported for the shown cell)

# The largest difference allowed between the written-out layer and the model's, as a fraction of the largest
# value the model's layer returns: float32 sums in another order round differently (about 1e-7 each, a few
# hundred sums deep); a 2-byte dtype rounds each result to 8 bits (bfloat16) or 11 bits (float16).
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 3e-2, torch.float16: 5e-3}


@dataclass
class LayerCheck:
    """The written-out layer's output against the model's layer's: the largest absolute difference, the
    largest value (for scale) and the tolerance, a fraction of that value."""

    difference: float
    largest: float
    tolerance: float

    @property
    def matches(self) -> bool:
        return self.difference <= self.tolerance * self.largest

    def check(self) -> None:
        # 9. The written-out layer computes what the model's layer does, to the dtype's rounding.
        assert self.matches, (self.difference, self.tolerance * self.largest)


def check_layer(model, layer_index: int, x: torch.Tensor, pos: int, cache, out: torch.Tensor) -> LayerCheck:
    """Run `model.layers[layer_index]` on `x` (B, 1, d_model), the token at position `pos`, against `cache`,
    as the model's forward pass does (`cache.begin_pass` and `cache.mask` first, then the layer with that
    position's RoPE angles), and compare its output with `out`, the written-out layer's. Raises AssertionError
    when they differ by more than the dtype's rounding."""
    input_pos = torch.tensor([pos], device=x.device)
    with torch.inference_mode():
        cache.begin_pass(input_pos, x.shape[0])
        mask = cache.mask(input_pos)  # None: one new token reads every position up to its own
        rope = model.rope_cos[input_pos], model.rope_sin[input_pos]
        expected = model.layers[layer_index](x, rope, mask, input_pos, cache)
    result = LayerCheck(float((out.float() - expected.float()).abs().max()), float(expected.float().abs().max()),
                        TOLERANCE[expected.dtype])
    result.check()
    return result


def busiest_ops(prof, n: int = 8):
    """The `n` aten ops of a torch.profiler record with the most time of their own (on a GPU, their kernels';
    on a processor, their own calls', less the ops they call), as a table: calls and microseconds."""
    import pandas as pd

    gpu = any(e.self_device_time_total > 0 for e in prof.key_averages())
    rows = [{"op": e.key, "calls": e.count,
             "own time (µs)": e.self_device_time_total if gpu else e.self_cpu_time_total}
            for e in prof.key_averages() if e.key.startswith("aten::")]
    df = pd.DataFrame(rows).sort_values("own time (µs)", ascending=False).head(n)
    return df.style.format({"calls": "{:,d}", "own time (µs)": "{:,.1f}"}).hide(axis="index")
