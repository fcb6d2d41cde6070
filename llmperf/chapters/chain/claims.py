"""Chapter 1, the dependency chain: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or the cost model predicted) and returns the sentence they
support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ...wording import SAME, speed_change

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


FORMULA_CLOSE = 0.10  # measured tokens per pass within 10 % of the i.i.d. model's: "close to the model"


def formula_fit(measured: float, expected: float, whole_share: float, whole_share_iid: float) -> str:
    """How the measured tokens per verify pass compare with the i.i.d. model's at the measured acceptance rate.

    `expected` is the model's tokens per pass, each pass with the draft it really had. `whole_share` is the
    share of drafted passes whose whole draft was accepted, `whole_share_iid` the share the model expects
    (the mean of alpha^m over those passes): the measurement that says whether acceptances came in runs.
    """
    ratio = measured / expected
    whole = (f"{100 * whole_share:.0f} % of the drafts were accepted whole, against the "
             f"{100 * whole_share_iid:.0f} % the model expects")
    if abs(ratio - 1) <= FORMULA_CLOSE:
        return (f"The passes yielded {measured:.2f} tokens each, within {100 * FORMULA_CLOSE:.0f} % of the "
                f"model's {expected:.2f}: at this acceptance rate the i.i.d. model describes these drafts well "
                f"({whole})")
    if ratio > 1:
        head = f"The passes yielded {measured:.2f} tokens each, more than the model's {expected:.2f}"
        if whole_share > whole_share_iid:
            return (f"{head}. Acceptances came in runs: {whole}. Where the answer copies the prompt, every "
                    "drafted token is right; where it departs from the prompt, a draft fails at once. The same "
                    "rate spread evenly over the tokens would give fewer long runs")
        return (f"{head}, though {whole}: the excess lies in drafts accepted in part, which the model's single "
                "rate does not capture")
    head = f"The passes yielded {measured:.2f} tokens each, fewer than the model's {expected:.2f}"
    if whole_share < whole_share_iid:
        return (f"{head}. Rejections were spread through the drafts rather than bunched: {whole}, so fewer "
                "drafts ran to their end than one rate for every token predicts")
    return (f"{head}, though {whole}: the shortfall lies in drafts rejected early, more often than the "
            "model's single rate predicts")


def speculation_speed(t_plain: float, t_speculative: float, tokens_per_pass: float, pass_cost: float) -> str:
    """What prompt-lookup decoding did to the wall-clock time of the same generation, and why.

    `tokens_per_pass` is what a verify pass yielded, `pass_cost` a pass's mean seconds ÷ a plain decode
    step's (drafting included): the decode part of the speed-up is about their ratio.
    """
    ran = f"Here speculative decoding ran {speed_change(t_plain, t_speculative, 'plain greedy decoding')}"
    each = (f"Each of its passes yielded {tokens_per_pass:.2f} tokens and cost {pass_cost:.2f} plain decode "
            "steps")
    speedup = t_plain / t_speculative
    if abs(speedup - 1) <= SAME:
        return f"{ran}. {each}: the verify passes spent about what the accepted drafts saved"
    if speedup > 1:
        return f"{ran}. {each}, so the accepted drafts saved more passes than verifying them cost"
    return f"{ran}. {each}: verifying cost more than the accepted drafts saved"
