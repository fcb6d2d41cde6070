"""Chapter 1, the dependency chain: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from .wording import SAME, speed_change


def halved_bytes(t_float32: float, t_bfloat16: float, float32_share_of_bandwidth: float) -> str:
    """What storing the weights in bfloat16 did to a decode step, against what halving the bytes predicts.

    `float32_share_of_bandwidth` is the float32 step's bytes ÷ its time ÷ the probed read bandwidth:
    only a step near 1 was bound by the bytes, and only such a step should get about twice as fast.
    """
    ran = f"Here the bfloat16 step ran {speed_change(t_float32, t_bfloat16, 'the float32 one')}"
    speedup = t_float32 / t_bfloat16
    share = f"{100 * float32_share_of_bandwidth:.0f} %"
    if float32_share_of_bandwidth >= 0.6:  # the float32 step was bound by the bytes
        if 1.6 <= speedup <= 2.4:
            return f"{ran}, as the bytes predict: the float32 step drew {share} of the probed bandwidth"
        return (f"{ran}, though the float32 step drew {share} of the probed bandwidth: the bfloat16 kernels did "
                "not stream their half of the bytes at the same rate")
    if speedup < 1 - SAME:
        return (f"{ran}. The float32 step drew only {share} of the probed bandwidth, so the bytes did not set its "
                "time, and this processor's bfloat16 kernels cost more than the halved bytes save")
    return (f"{ran}. The float32 step drew only {share} of the probed bandwidth, so the bytes did not set its "
            "time: what changed is the work each kernel does per byte, not the number of bytes")
