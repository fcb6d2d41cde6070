"""Chapter 4, naive against cached generation: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import SAME, duration, times


def naive_gap(measured: float, predicted: float) -> str:
    """The naive loop's time over the cached loop's, measured, against the roofline's prediction."""
    if measured < 1.1 and predicted >= 1.1:
        return (f"about as long as the cached one ({measured:.2f} times), though the roofline predicts "
                f"{predicted:.1f}. On this device a long pass cost about what a one-token step did: both sat "
                "on a floor set by the fixed cost of dispatching each of a pass's ops (chapter 5), and the "
                "naive loop's extra arithmetic hid beneath it")
    said = f"{measured:.1f} times as long as the cached one; the roofline predicts {predicted:.1f}"
    if abs(measured / predicted - 1) <= 0.25:
        return f"{said}, close to what was measured"
    if measured > predicted:
        return (f"{said}. The naive loop's full passes ran further below their compute roof than the cached "
                "loop's steps ran below their bandwidth roof, which widens the gap")
    return (f"{said}. The cached loop's one-row steps ran further below their bandwidth roof than the naive "
            "loop's full passes ran below their compute roof, which narrows the gap")


def gap_by_device(here_ratio: float, here_ridge: float, h100_ratio: float, h100_ridge: float) -> str:
    """Compare the predicted naive ÷ cached time on this machine with an H100's, by their ridge points."""
    ridges = f"this machine's ridge is {here_ridge:,.1f} FLOP/byte, the H100's {h100_ridge:,.0f}"
    if here_ratio > 1.1 * h100_ratio:
        return (f"wider here ({here_ratio:.1f}×) than on an H100 ({h100_ratio:.1f}×): {ridges}, so this machine "
                "has less arithmetic to spare for the recomputation while it waits on memory")
    if here_ratio < h100_ratio / 1.1:
        return (f"narrower here ({here_ratio:.1f}×) than on an H100 ({h100_ratio:.1f}×): {ridges}, so this "
                "machine has more arithmetic to spare for the recomputation while it waits on memory")
    return f"about as wide here ({here_ratio:.1f}×) as on an H100 ({h100_ratio:.1f}×): {ridges}"


def _per_token(gain: float) -> str:
    """What batching did to the time per token, from batch 1's ÷ the largest batch's."""
    if gain > 1 + SAME:
        return f"divided the time per token by {gain:.1f}"
    if gain >= 1 - SAME:
        return f"left the time per token about where it was (divided by {gain:.2f})"
    return f"made each token {times(1 / gain)} as costly"


def batch_gain(cached_gain: float, naive_gain: float, b_max: int, naive_compute_bound: bool) -> str:
    """What a batch of `b_max` sequences did to each loop's time per token (`*_gain`: batch 1's ÷ b_max's);
    `naive_compute_bound`: whether the roofline puts the naive step on its arithmetic at batch 1."""
    said = f"With the cache, batch {b_max} {_per_token(cached_gain)}; without it, batching {_per_token(naive_gain)}"
    if cached_gain <= 1 + SAME:
        return (f"{said}. Here even the cached step of {b_max} sequences cost about {b_max} steps of one: at these "
                "sizes something other than the shared weight reads set its time")
    if cached_gain > (1 + 2 * SAME) * naive_gain:
        if not naive_compute_bound:
            return (f"{said}. A naive step of {b_max} sequences runs every one of their tokens through the "
                    "weights again, so batching shares far less of its cost")
        if naive_gain <= 1 + SAME:
            return (f"{said}. Each naive step is bound by its arithmetic, and its arithmetic grows with the batch: "
                    f"a step of {b_max} sequences costs what {b_max} steps of one do")
        return (f"{said}. Each naive step is bound by its arithmetic, which grows with the batch: only the part "
                "of its time that does not grow was shared")
    if naive_compute_bound:
        return (f"{said}: about as much. The roofline calls the naive steps compute-bound here, yet they ran far "
                "enough above that bound that costs which do not grow with the batch still set their time; the "
                "cost model's longer sequences show where that ends")
    return (f"{said}: about as much. At these lengths the naive steps are not yet bound by their arithmetic "
            "on this device, so batching them pays too; the cost model's longer sequences show where that ends")


def dominant_waste(products_s: float, attention_s: float, stream_s: float) -> str:
    """Which of the naive loop's costs sets its time, from the seconds its weight products' arithmetic, its
    attention's arithmetic and the streaming of its weights (which the cached loop pays alike) each need."""
    said = (f"its weight products need {duration(products_s)} of arithmetic, its attention "
            f"{duration(attention_s)}, and streaming its weights {duration(stream_s)}")
    if products_s >= attention_s and products_s > (1 + SAME) * stream_s:
        return (f"the recomputed projections, by arithmetic: {said}, the same streaming the cached loop does. "
                "The excess is FLOPs, not bytes")
    if attention_s > products_s and attention_s > (1 + SAME) * stream_s:
        return (f"the recomputed attention, by arithmetic: {said}. At this length attention's FLOPs have overtaken "
                "the products'")
    return (f"neither recomputation: {said}. The passes are short enough that streaming the weights, which the "
            "cached loop does alike, bounds them, so the naive loop wastes little time here")


def gpu_cores(device: str, same_peak: bool) -> str:
    """How far a GPU reference's matmul share carries over to an H100: the same datasheet peak, or another."""
    if same_peak:
        return f"the reference run on an {device}, whose datasheet peak is the H100's"
    return f"the reference run on an {device}, another GPU than the H100, so take its share as a guide only"


def formula_side(exact: list[float], formula: list[float]) -> str:
    """Where the exact naive ÷ cached FLOPs sit against the weight-products-only formula, over the exercise's
    lengths: the LM head (once per pass in both loops) pulls the ratio down, attention pushes it up."""
    below = [e < f for e, f in zip(exact, formula)]
    if all(below):
        return ("The exact ratio sits below the formula at every length, so over these lengths the LM head weighs "
                "more than attention")
    if not any(below):
        return ("The exact ratio sits above the formula at every length, so over these lengths attention weighs "
                "more than the LM head")
    return ("The exact ratio sits below the formula at some lengths and above it at others: the LM head weighs "
            "more in short generations, attention, which grows faster, in long ones")
