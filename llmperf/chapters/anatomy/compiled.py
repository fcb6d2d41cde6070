"""Chapter 5's last experiment on a processor: the fused step's small ops compiled away.

`time_compiled_step` builds the fused model with every product in the compiled kernel (`llmperf.fast.kernel`, its
rows per pass as measured here) and times its batch-1 step two ways, in turns, after the stopwatch's cached
tokens: as NumPy code (`NumpyDecodeStep.numpy_code`: those products, and the small ops between them as NumPy
calls) and compiled whole (`llmperf.fast.compiled_step`: one Numba call per layer). The products are the same, so
the difference is what the small ops and the Python between them cost as NumPy code. It also compares the two
steps' logits. Where the step is not float32 on a processor, or Numba cannot compile here, it says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...device import dtype_name
from ...fast import choices, compiled_step, tuning
from ...fast.fused import numpy_step_of
from ...fast.numpy_step import MATRICES
from ...generation import new_cache
from ...timing import time_in_turns
from . import claims, labels
from .profiled import SMALL_KINDS, NumpyAccount

WHOLE, NUMPY = "compiled whole", "NumPy code"


@dataclass(frozen=True)
class CompiledStep:
    """Median seconds of the batch-1 step with compiled products as NumPy code (`numpy_code`) and compiled whole
    (`compiled`); `small`: the seconds the stopwatch gave the small ops and the Python between them
    (`NumpyAccount`); the largest difference between the two steps' logits, and the largest logit (`scale`).
    `skipped` says why nothing was timed."""

    numpy_code: float = 0.0
    compiled: float = 0.0
    small: float = 0.0
    difference: float = 0.0
    scale: float = 0.0
    skipped: str | None = None

    def numbers(self) -> dict[str, object]:
        if self.skipped:
            return {"compiled_text": self.skipped}
        return {"compiled_text": claims.compiled_small_ops(self.numpy_code, self.compiled, self.small)}

    def table(self):
        """The two steps' times, and the small ops' time by the stopwatch; or why nothing was timed."""
        import pandas as pd

        if self.skipped:
            return pd.DataFrame({"not measured": [self.skipped]}).style.hide(axis="index")
        rows = [{"step": f"{NUMPY}, compiled products", "time (ms)": self.numpy_code * 1e3},
                {"step": WHOLE, "time (ms)": self.compiled * 1e3},
                {"step": "saved", "time (ms)": (self.numpy_code - self.compiled) * 1e3},
                {"step": "small ops and Python, by the stopwatch", "time (ms)": self.small * 1e3}]
        return pd.DataFrame(rows).style.format({"time (ms)": "{:.2f}"}).hide(axis="index")

    def check(self) -> None:
        # 10. On a processor, the step compiled whole computes what the NumPy code does: the same logits, to
        #     float32 rounding over every layer.
        if self.skipped:
            return
        assert self.difference <= 1e-4 * max(1.0, self.scale), (self.difference, self.scale)


def time_compiled_step(s, account: NumpyAccount) -> CompiledStep:
    """Time 3 × `s.sizes.repeat` rounds of the two steps (`CompiledStep`) of `s.model` fused on the compiled
    kernel, in turns, at the stopwatch's position, and compare their logits; or say why not."""
    if s.device.type != "cpu" or s.dtype != torch.float32:
        return CompiledStep(skipped=labels.no_numpy_step(dtype_name(s.dtype), s.device.type))
    if compiled_step.why_not() is not None:
        return CompiledStep(skipped=compiled_step.why_not())
    step = numpy_step_of(s.model, dict.fromkeys(MATRICES, tuning.COMPILED))
    step.at_once = choices.measured_at_once(s.model, numpy_step_of)  # the kernel's rows per pass, as fuse runs it
    ctx, token = s.sizes.decode_context, 0
    caches = [new_cache(s.model, 1, ctx + 1) for _ in range(2)]
    ways = {WHOLE: lambda: step(token, ctx, caches[0]), NUMPY: lambda: step.numpy_code(token, ctx, caches[1])}
    times = time_in_turns(ways, rounds=3 * s.sizes.repeat, warmup=2)
    whole, numpy = step(token, ctx, caches[0]), step.numpy_code(token, ctx, caches[1])
    small = account.seconds_of(SMALL_KINDS)
    return CompiledStep(numpy_code=float(times[NUMPY].median), compiled=float(times[WHOLE].median),
                        small=float(small + account.outside), difference=float(np.abs(whole - numpy).max()),
                        scale=float(np.abs(numpy).max()))
