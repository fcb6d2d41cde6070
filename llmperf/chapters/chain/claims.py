"""Chapter 1, the dependency chain: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or the cost model predicted) and returns the sentence they
support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import SAME

CONTEXT_EXPLAINS = 0.5  # the growing context "accounts for most of" a slope's excess when it predicts half of it


def slope_text(slope_vs_step: float, context_growth: float, extra_positions: int) -> str:
    """What the fitted slope, `slope_vs_step` times a bare decode step, says about a step inside `generate`.

    `context_growth` is the cost model's extra bytes of the longest run's average step over the bare step's
    (a fraction: 0.01 is 1 % more), `extra_positions` how many more positions that step attends over. Above 1,
    the sentence weighs the excess against the growth; below 1, no cause inside `generate` can explain it.
    """
    pct = 100 * abs(slope_vs_step - 1)
    growth = (f"{extra_positions:,} more positions than the bare step, which the cost model puts at "
              f"{100 * context_growth:.1f} % more bytes")
    if abs(slope_vs_step - 1) <= SAME:
        return (f"The slope matches the bare step to within {100 * SAME:.0f} %: a step inside `generate` costs what "
                "the forward pass alone does. What `generate` adds, picking the token and a context that grows by "
                f"one position per step (the longest run's average step attends over {growth}), is too small to see")
    if slope_vs_step > 1:
        head = (f"The slope is {pct:.0f} % above the bare step. A step inside `generate` does more than the bare "
                "forward pass: it picks the token and feeds it back, and its context grows by one position per step, "
                f"so the longest run's average step attends over {growth}")
        if context_growth >= CONTEXT_EXPLAINS * (slope_vs_step - 1):
            return f"{head}, which accounts for most of the difference"
        return (f"{head}, too little to account for the difference. The rest is work around the pass that the bare "
                "step does not do, or other work on the machine during the sweep")
    return (f"The slope is {pct:.0f} % below the bare step. Nothing `generate` adds can make a step cheaper than "
            f"the bare pass, and its context only grows (the longest run's average step attends over {growth}), "
            "so the difference is scatter in the measurement: a line through a few points tilts when one run is "
            "slowed, a slowed run at the shortest N flattens it, and a slowed block of bare steps raises the step "
            "it is set against")
