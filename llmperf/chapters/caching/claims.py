"""Chapter 4, naive against cached generation: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ...wording import SAME, duration, times


def naive_gap(measured: float, predicted: float) -> str:
    """The naive loop's time over the cached loop's, measured, against the roofline's prediction."""
    if measured < 1.1 and predicted >= 1.1:
        return (f"about as long as the cached one ({measured:.2f} times), though the roofline predicts "
                f"{predicted:.1f}. On this device a long pass cost about what a one-token step did. One "
                "explanation is a floor that does not grow with the tokens, such as the fixed cost of "
                "dispatching each of a pass's ops (chapter 5), with the naive loop's extra arithmetic hidden "
                "beneath it. Timing one pass at a few lengths would test it: on such a floor the time stays "
                "flat as the pass grows")
    said = f"{measured:.1f} times as long as the cached one; the roofline predicts {predicted:.1f}"
    if abs(measured / predicted - 1) <= 0.25:
        return f"{said}, close to what was measured"
    if measured > predicted:
        return (f"{said}. The naive loop's full passes took further beyond their roofline time than the cached "
                "loop's steps took beyond theirs, which widens the gap")
    return (f"{said}. The cached loop's one-row steps took further beyond their roofline time than the naive "
            "loop's full passes took beyond theirs, which narrows the gap")


def step_slopes(naive_us: float, cached_us: float) -> str:
    """What one more token of sequence added to each loop's step, from the slopes fitted to their times
    (µs per token): a noisy run can leave either slope at or below zero."""
    if cached_us < naive_us and cached_us > 0:
        return (f"Each extra token of sequence added {naive_us:,.1f} µs to a naive step and {cached_us:,.3f} µs to a "
                "cached one: the cached step grows only by the cache attention reads (chapter 3), the naive step by "
                "a whole token's trip through every weight matrix")
    if cached_us < naive_us:
        return (f"Each extra token of sequence added {naive_us:,.1f} µs to a naive step; the cached step's fitted "
                f"slope, {cached_us:,.3f} µs per token, shows no growth: the cache attention reads grew too little "
                "to show beside the step's other costs")
    return (f"The fitted slopes, {naive_us:,.1f} µs per token of sequence for a naive step and {cached_us:,.3f} µs "
            "for a cached one, show the naive step growing no faster: at these lengths its passes sat on a cost "
            "that does not grow with the sequence")


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


def batch_gain(cached_gain: float, naive_gain: float, b_max: int, naive_compute_bound: bool, where: str = "") -> str:
    """What a batch of `b_max` sequences did to each loop's time per token (`*_gain`: batch 1's ÷ b_max's);
    `naive_compute_bound`: whether the roofline puts the naive step's weight products on their arithmetic at
    batch 1. Each gain is split at 1 ± SAME (cheaper, about the same, dearer), and the two are compared.
    `where`, if given, opens the sentence ("On this machine" gives "On this machine, with the cache, ...")."""
    lead = f"{where}, with the cache" if where else "With the cache"
    said = f"{lead}, batch {b_max} {_per_token(cached_gain)}; without it, batching {_per_token(naive_gain)}"
    if cached_gain < 1 - SAME:
        return (f"{said}. Here even the cached step of {b_max} sequences cost more than {b_max} steps of one: at "
                "these sizes something other than the shared weight reads set its time, and grew with the batch")
    if cached_gain <= 1 + SAME:
        return (f"{said}. Here even the cached step of {b_max} sequences cost about {b_max} steps of one: at these "
                "sizes something other than the shared weight reads set its time")
    if naive_gain > (1 + 2 * SAME) * cached_gain:
        return (f"{said}: more than with the cache, where the roofline expects the cache to gain more. Here a larger "
                "part of the naive step's time did not grow with the batch")
    if cached_gain <= (1 + 2 * SAME) * naive_gain:
        bound = ("The roofline calls the naive steps compute-bound here, yet they ran far enough above that bound "
                 "that costs which do not grow with the batch still set their time" if naive_compute_bound else
                 "At these lengths the naive steps are not yet bound by their arithmetic on this device, so "
                 "batching them pays too")
        return f"{said}: about as much. {bound}; the cost model's longer sequences show where that ends"
    if not naive_compute_bound:
        return (f"{said}. A naive step of {b_max} sequences runs every one of their tokens through the "
                "weights again, so batching shares far less of its cost")
    if naive_gain < 1 - SAME:
        return (f"{said}. Each naive step is bound by its arithmetic, and its arithmetic grows with the batch; "
                f"beyond that, a naive step of {b_max} sequences cost more than {b_max} steps of one")
    if naive_gain <= 1 + SAME:
        return (f"{said}. Each naive step is bound by its arithmetic, and its arithmetic grows with the batch: "
                f"a step of {b_max} sequences costs what {b_max} steps of one do")
    return (f"{said}. Each naive step is bound by its arithmetic, which grows with the batch: only the part "
            "of its time that does not grow was shared")


def dominant_waste(products_s: float, attention_s: float, stream_s: float, excess_s: float, cached_s: float) -> str:
    """Which of the naive loop's costs sets its time, from the seconds its weight products' arithmetic, its
    attention's arithmetic and the streaming of its weights (which the cached loop pays alike) each need; and,
    where neither arithmetic does, how much the naive loop's roofline time exceeds the cached loop's
    (`excess_s`, against the cached loop's `cached_s`)."""
    said = (f"its weight products need {duration(products_s)} of arithmetic, its attention "
            f"{duration(attention_s)}, and streaming its weights {duration(stream_s)}")
    if products_s >= attention_s and products_s > (1 + SAME) * stream_s:
        return (f"the recomputed projections, by arithmetic: {said}, the same streaming the cached loop does. "
                "The excess is FLOPs, not bytes")
    if attention_s > products_s and attention_s > (1 + SAME) * stream_s:
        return (f"the recomputed attention, by arithmetic: {said}. At this length attention's FLOPs have overtaken "
                "the products'")
    if excess_s <= SAME * cached_s:
        by = (f"exceeds the cached loop's by {duration(excess_s)}" if excess_s > 0
              else "is no longer than the cached loop's")
        return (f"neither recomputation: {said}. The passes are short enough that streaming the weights, which the "
                "cached loop does alike, bounds them, so the naive loop wastes little time here: its roofline time "
                f"{by}")
    return (f"neither recomputation alone: {said}. Summed, streaming the weights takes about as long as the "
            f"arithmetic, yet the naive loop's roofline time exceeds the cached loop's by {duration(excess_s)}: its "
            "longer passes are bound by their arithmetic, its shorter ones by the weights")


def gpu_cores(device: str, same_peak: bool) -> str:
    """The clause before a GPU reference's matmul share (what its probe, a large square product, reached), and
    how far it carries over to an H100: the same datasheet peak, or another."""
    if same_peak:
        return (f"The reference run on an {device}, a GPU with the H100's datasheet peak, shows how far below the "
                "datasheet even a large square bfloat16 product runs")
    return (f"The reference run on an {device}, another GPU than the H100 (so take its share as a guide only), "
            "shows how far below its datasheet even a large square bfloat16 product runs")


def crossover_window(crossover: int, window: int) -> str:
    """Whether the length at which attention overtakes a model's weight products in a naive generation
    (`crossover`, tokens) lies within its context window of `window` tokens: a sentence of its own."""
    if crossover > window:
        return (f"That length lies beyond the model's context window of {window:,d} tokens, so within the window "
                "the projections dominate at every length")
    return (f"That length lies within the model's context window of {window:,d} tokens, so a naive generation "
            "longer than it spends more of its arithmetic on attention than on the projections")


def formula_side(exact: list[float], formula: list[float]) -> str:
    """Where the exact naive ÷ cached FLOPs sit against the weight-products-only formula, over the exercise's
    lengths. The LM head (once per pass in both loops) pulls the ratio down; attention pushes it up only by its
    net share: the naive loop's attention adds to the numerator, the cached loop's own to the denominator."""
    below = [e < f for e, f in zip(exact, formula)]
    net = ("net attention (the naive loop's attention in the numerator, less the cached loop's own in the "
           "denominator)")
    if all(below):
        return (f"The exact ratio sits below the formula at every length, so over these lengths the LM head "
                f"weighs more than {net}")
    if not any(below):
        return (f"The exact ratio sits above the formula at every length, so over these lengths {net} weighs more "
                "than the LM head")
    return (f"The exact ratio sits below the formula at some lengths and above it at others: the LM head weighs "
            f"more in short generations, {net}, which grows faster, in long ones")


def kernel_count(tiled: int, full: int, causal: int) -> str:
    """Which attention count matches the kernel that ran a generation's full passes here: `tiled` (the pairs it
    computed, `attention.tiled_pairs` summed), against the `full` square's and the `causal` half's."""
    if tiled >= full:
        return ("At these lengths the attention that ran here computed the whole square of every pass, so the "
                "full count is the one that ran")
    return (f"The attention kernel that ran here skipped the key tiles above the diagonal: it computed "
            f"{100 * tiled / full:.0f} % of the full square's pairs, where the causal half is "
            f"{100 * causal / full:.0f} %")


CAUSAL_MARGIN = 0.15  # how far a measured causal ÷ full time may sit from the tiles' ratio and still match it


def causal_timing(lengths: list[int], measured: list[float], predicted: list[float]) -> str:
    """What telling the attention kernel `is_causal` saved at each length (`measured`: causal ÷ full time)
    against what its tiles predict (`predicted`: tiled pairs ÷ S²), within CAUSAL_MARGIN or not."""
    said = "Told is_causal, the kernel here took " + ", and ".join(
        f"{m:.2f} of the unmasked call's time at {S:,d} tokens (its tiles predict {p:.2f})"
        for S, m, p in zip(lengths, measured, predicted))
    if all(abs(m - p) <= CAUSAL_MARGIN for m, p in zip(measured, predicted)):
        return f"{said}. The tiles it skips account for the time it saved"
    if any(m > p + CAUSAL_MARGIN for m, p in zip(measured, predicted)):
        return (f"{said}. It saved less than the skipped tiles predict: part of a call's time may not go with the "
                "pairs it scores (reading q, k and v, a fixed cost per call); timing longer calls would tell")
    return (f"{said}. It saved more than the skipped tiles predict: the pairs it scores do not alone set a "
            "call's time")
