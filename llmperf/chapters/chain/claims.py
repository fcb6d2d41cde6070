"""Chapter 1, the dependency chain: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or the cost model predicted) and returns the sentence they
support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import SAME

CONTEXT_EXPLAINS = 0.5  # the context "accounts for most of" a slope's excess when its bytes predict half of it...
CONTEXT_OVERSHOOTS = 1.5  # ...and at most one and a half times it; above that it predicts more than the excess


def slope_text(slope_vs_step: float, context_growth: float, extra_positions: int) -> str:
    """What the fitted slope, `slope_vs_step` times a bare decode step, says about a step inside `generate`.

    `context_growth` is the cost model's extra bytes of the longest run's average step over the bare step's
    (a fraction: 0.01 is 1 % more), `extra_positions` how many more positions that step attends over. Above 1,
    the sentence weighs the excess against the growth, read as time only if the step were bound by its bytes;
    below 1, no cause inside `generate` can explain it.
    """
    excess = slope_vs_step - 1
    pct = 100 * abs(excess)
    positions = f"{extra_positions:,} more positions than the bare step"
    more_bytes = f"{100 * context_growth:.1f} % more bytes"
    if abs(excess) <= SAME:
        return (f"The slope matches the bare step to within {100 * SAME:.0f} %: a step inside `generate` costs what "
                "the forward pass alone does. What `generate` adds, picking the token and a context that grows by "
                f"one position per step (the longest run's average step attends over {positions}, which the cost "
                f"model puts at {more_bytes}), is too small to see")
    if excess > 0:
        head = (f"The slope is {pct:.0f} % above the bare step. A step inside `generate` does more than the bare "
                "forward pass: it picks the token and feeds it back, and its context grows by one position per step, "
                f"so the longest run's average step attends over {positions}. The cost model puts those at "
                f"{more_bytes}")
        if context_growth > CONTEXT_OVERSHOOTS * excess:
            return (f"{head}, more than enough to account for the difference: if the step were bound by its bytes, "
                    f"the context alone would predict more than the {pct:.0f} % measured. The step's time grew less "
                    "than its bytes, as it does for a step that is not bound by its bytes alone")
        if context_growth >= CONTEXT_EXPLAINS * excess:
            return (f"{head}. If the step were bound by its bytes, they would account for most of the "
                    "difference")
        return (f"{head}: even if the step were bound by its bytes, that is too little to account for the "
                "difference. The rest is work around the pass that the bare step does not do, or other work on the machine during "
                "the sweep")
    return (f"The slope is {pct:.0f} % below the bare step. Nothing `generate` adds can make a step cheaper than "
            f"the bare pass, and its context only grows (the longest run's average step attends over {positions}, "
            f"{more_bytes} by the cost model), so the difference is scatter in the measurement: a line through a "
            "few points tilts when one run is slowed, a slowed run at the shortest N flattens it, and a slowed "
            "block of bare steps raises the step it is set against")
