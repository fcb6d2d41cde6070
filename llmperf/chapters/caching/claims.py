"""Chapter 4, naive against cached generation: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations


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
