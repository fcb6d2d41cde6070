"""Chapter 6, where the KV cache's memory goes: the sentences chosen from its measurements.

Each function takes numbers the section measured (or predicted) and returns the clause they support, with the
numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ...wording import SAME, duration, times

NEAR = 0.05  # a measured share of memory within 5 points of its predicted value is said to stay near it


def at_once(reserved: int, paged: int, predicted_reserved: int, predicted_paged: int) -> str:
    """The most requests in flight at once, reserved against paged, against the arithmetic's prediction."""
    said = f"the paged engine had {paged} requests in flight at once against the reserved one's {reserved}"
    if (reserved, paged) == (predicted_reserved, predicted_paged):
        return f"{said}: {times(paged / reserved)} as many, exactly as the arithmetic predicted"
    return (f"{said}, where the arithmetic predicted {predicted_paged} and {predicted_reserved}: the scheduler "
            "admitted differently from the model of it above")


def memory_use(reserved: float, paged: float, predicted_reserved: float, predicted_paged: float) -> str:
    """The share of the held KV memory that held keys and values over the run (measured), reserved and paged,
    against the share at each request's end (predicted); shares are fractions."""
    said = (f"over the run, keys and values filled {100 * reserved:.0f} % of the memory the reserved engine held "
            f"and {100 * paged:.0f} % of the paged one's; at each request's end the arithmetic gives "
            f"{100 * predicted_reserved:.0f} % and {100 * predicted_paged:.0f} %")
    near = abs(paged - predicted_paged)
    if reserved < predicted_reserved and near <= NEAR:
        return (f"{said}. A reservation is held whole from its request's first step, so over the run it is emptier "
                f"still than at the end; blocks are taken as positions fill them, so the paged share stays within "
                f"{max(1, round(100 * near))} point{'s' * (round(100 * near) > 1)} of its value at the end")
    return said


def burst_speed(reserved_tok_s: float, paged_tok_s: float, reserved_ttft: float, paged_ttft: float) -> str:
    """The burst's output tokens/s and median TTFT (s), paged against reserved."""
    ratio = paged_tok_s / reserved_tok_s
    if abs(ratio - 1) <= SAME:
        speed = f"the paged engine served about as many tokens/s as the reserved one ({paged_tok_s:,.0f})"
    else:
        more = "more" if ratio > 1 else "fewer"
        speed = (f"the paged engine served {times(max(ratio, 1 / ratio))} {more} tokens/s than the reserved one "
                 f"({paged_tok_s:,.0f} against {reserved_tok_s:,.0f})")
    sooner = reserved_ttft / paged_ttft
    first = f"its median request had its first token {duration(paged_ttft)} after the burst was sent"
    if abs(sooner - 1) <= SAME:
        return f"{speed}, and {first}, about as soon as on the reserved engine ({duration(reserved_ttft)})"
    which = f"{times(sooner)} sooner" if sooner > 1 else f"{times(1 / sooner)} later"
    return f"{speed}, and {first}, {which} than on the reserved engine ({duration(reserved_ttft)})"


def preempted(preemptions: int, recomputed: int, requests: int, n: int, stall: float | None, median_gap: float,
              predicted: tuple[int, int]) -> str:
    """What overcommitting cost: preemptions, positions prefilled again, and the longest gap between two tokens
    that a preempted request saw (s) against the run's median gap; `predicted`: the dry run's (preemptions,
    recomputed)."""
    check = ("as the scheduler's dry run on the lengths alone predicted" if (preemptions, recomputed) == predicted
             else f"where the dry run predicted {predicted[0]} and {predicted[1]:,}")
    if preemptions == 0:
        return f"no request was preempted ({check}): the answers never outgrew the pool at once"
    said = (f"{preemptions} preemption{'s' * (preemptions != 1)} of {requests} of the {n} requests made the engine "
            f"prefill {recomputed:,} positions again ({check})")
    if stall is None:
        return said
    ratio = stall / median_gap
    if ratio <= 1 + SAME:
        return (f"{said}; a preempted request waited no longer between two of its tokens than the run's median gap, "
                f"{duration(median_gap)}")
    return (f"{said}; a preempted request waited up to {duration(stall)} between two of its tokens, "
            f"{times(ratio)} the run's median gap of {duration(median_gap)}: a client sees a preemption as a stall")


def identical(same: int, n: int) -> str:
    """How many answers came out token for token the same with preemptions as without."""
    if same == n:
        return f"all {n} answers were the same, token for token, as in the paged run without preemption"
    return (f"{same} of the {n} answers were the same, token for token, as without preemption; the others took "
            "another token where two were nearly tied, since a prompt prefilled again is computed in another "
            "order than the decode steps that first made it")


def turns_gain(ttft_on: float, ttft_off: float, turn: int, prefilled_on: int, prefilled_off: int) -> str:
    """The last turn's median TTFT (s) with prefix caching and without, and the positions each prefilled."""
    said = (f"at turn {turn}, the prefix cache left {prefilled_on:,} positions to prefill instead of "
            f"{prefilled_off:,}")
    ratio, fewer = ttft_off / ttft_on, prefilled_off / prefilled_on
    if abs(ratio - 1) <= SAME:
        return (f"{said}, yet the median TTFT was about the same ({duration(ttft_on)} against "
                f"{duration(ttft_off)}): on this machine the prefill was not what the first token waited for")
    if ratio < 1:
        return (f"{said}, yet the median TTFT rose from {duration(ttft_off)} to {duration(ttft_on)}: the skipped "
                "prefill saved less than this run's noise")
    fell = f"{said}, and the median TTFT fell from {duration(ttft_off)} to {duration(ttft_on)}, {times(ratio)} shorter"
    if ratio < fewer * (1 - SAME):
        return (f"{fell}: less than the {times(fewer)} fewer positions, since a TTFT also holds the request's trip "
                "through the server and each pass's fixed cost, and the new positions still attend to every cached "
                "one")
    return f"{fell}, in proportion to the {times(fewer)} fewer positions or more"
