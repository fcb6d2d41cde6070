"""Chapter 3's sentences, chosen from its records' numbers.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import SAME, times, speed_change


def per_user_speed(step_growth: float, b_max: int) -> str:
    """What batching did to each user's speed, from step time at b_max ÷ at batch 1."""
    if step_growth < 1 - SAME:
        return (f"rose: the step at batch {b_max} took only {times(step_growth)} as long as the step at batch 1, "
                "so even each user's tokens came faster")
    if step_growth <= 1 + SAME:
        return (f"stayed about the same: the step at batch {b_max} took {times(step_growth)} as long as "
                "at batch 1")
    return (f"fell: each user now waits {times(step_growth)} as long for every token, "
            f"{100 * (1 - 1 / step_growth):.0f} % fewer tokens per second each")


def batch_trade(step_growth: float) -> str:
    """The sentence after `per_user_speed` (same `step_growth`): what batching cost each user."""
    if step_growth <= 1 + SAME:
        return ("The machine served more users with the same weight reads, and here no user paid for it in "
                "speed; once the step grows with the batch, each user does. The next section plots that trade")
    return ("The machine served more users with the same weight reads, at the cost of every user's speed: the "
            "trade the next section plots")


FLAT = 0.1  # a prediction that grows by under 10 % over a sweep is called nearly flat


def bytes_growth(growth: float, b_max: int, kv_equals_weights_at: float) -> str:
    """How the bandwidth-bound prediction moves over the batch sweep, and why (only the KV cache grows)."""
    if growth < 1 + FLAT:
        shape = "is nearly flat"
    elif growth < 2:
        shape = f"rises by {100 * (growth - 1):.0f} %"
    else:
        shape = f"rises {growth:.1f}-fold"
    where = (f"within this sweep, from batch {kv_equals_weights_at:,.0f} on"
             if kv_equals_weights_at <= b_max else f"only at batch {kv_equals_weights_at:,.0f}, beyond this sweep")
    return (f"{shape}: from batch 1 to batch {b_max} the bytes grow {growth:.2f}-fold, all of it KV cache. "
            f"At this context SmolLM2's cache outweighs its weights {where}")


def weights_bound(batch: int, b_max: int, ridge: float) -> str:
    """Where the weight products cross this device's ridge (cost.compute_bound_batch(part="weights"))."""
    if batch <= b_max:
        return (f"The weight products cross this device's ridge ({ridge:,.1f} FLOP/byte) at batch {batch}: "
                "from there their arithmetic, not their bytes, sets their time, and the roofline line "
                "leaves the bandwidth line")
    return (f"No batch in the sweep carries the weight products past this device's ridge "
            f"({ridge:,.1f} FLOP/byte); they would cross it at batch {batch}, so here the roofline line "
            "and the bandwidth line coincide")


def attention_bound(intensity: float, ridge: float) -> str:
    """Attention's fixed intensity against the ridge: bandwidth-bound at any batch, or (on a slow CPU) not."""
    if intensity < ridge:
        return (f"Attention does {intensity:.1f} FLOP per byte of cache at any batch size, below the ridge: "
                "it stays bandwidth-bound however large the batch")
    return (f"Attention does {intensity:.1f} FLOP per byte of cache at any batch size, at or above this "
            f"device's ridge of {ridge:.2f}: here even attention is bound by arithmetic")


def small_batch_kernel(device_type: str, b2_over_b1: float) -> str:
    """What going from one row to two did to the step (the one-row kernel against the matrix kernel)."""
    if device_type == "cpu":
        lead = ("On a CPU, PyTorch gives a product of a single row by a matrix to a matrix–vector kernel, "
                "and a product of a few rows to a general matrix-product kernel. The two stream the weights at "
                "different rates, and neither need keep every core busy the way the probe's sum does")
    else:
        lead = ("On a GPU the maths library chooses a kernel by the product's shape, so one row and a few rows "
                "need not run the same kernel; what either costs depends on how fast it streams the weights")
    said = f"{lead}. Here batch 2 took {times(b2_over_b1)} as long as batch 1"
    if b2_over_b1 > 1 + 3 * SAME:
        return f"{said}: the two-row kernel streams the weights more slowly"
    if b2_over_b1 < 1 - SAME:
        return f"{said}: the one-row kernel is the slower of the two"
    return f"{said}: one more row is nearly free"


def fused_result(plain_time: float, fused_time: float, plain_pct: float, fused_pct: float) -> str:
    """The fused model against the plain one at batch 1, same bytes and FLOPs."""
    return (f"The fused model reached {fused_pct:.0f} % of the probed bandwidth against {plain_pct:.0f} % "
            f"for the plain model: a step {speed_change(plain_time, fused_time, 'the plain one')}, with the same "
            "bytes and the same FLOPs")


def low_precision_ridge(dtype: str, ridge: float, intensity: float, matmul_gflops: float) -> str:
    """This machine's ridge in a 2-byte dtype against a batch-1 step's intensity (about 1 FLOP/byte)."""
    if ridge > intensity:
        return (f"with its {dtype} matmul rate ({matmul_gflops:,.1f} GFLOP/s) its ridge is {ridge:,.1f} FLOP/byte, "
                f"so here too the step is bound by bandwidth")
    return (f"its {dtype} matrix products run at only {matmul_gflops:,.1f} GFLOP/s (this processor has no fast "
            f"{dtype} arithmetic), so its {dtype} ridge is {ridge:.2f} FLOP/byte, below the step's "
            f"{intensity:.2f}: by the probe's measure a {dtype} step would be bound by arithmetic here. "
            "One-row products use other kernels than the probe's large product, so the real step may still "
            "do better; the chapters measure in float32 on a CPU")


def against_roof(closest: float) -> str:
    """Where the measured steps sit against the roofline; `closest` is the smallest measured ÷ roofline time."""
    if closest >= 1:
        return "lies above both lines at every batch size"
    return (f"comes to {100 * closest:.0f} % of the roofline's time at its closest: a little under the line, "
            "within the probe's own error (the probe is one best run, and bandwidth drifts from run to run)")


def probe_gap(pct: float, gbs: float, probe_gbs: float) -> str:
    """How fast the batch-1 step read its bytes (`gbs`, GB/s; `pct` of the probe's `probe_gbs`) against the
    probe's sum, and what the section then looks at."""
    rates = f"at batch 1 it moved {gbs:,.1f} GB/s, {pct:.0f} % of the {probe_gbs:,.1f} GB/s the probe's sum reached"
    if pct < 100 * (1 - SAME):
        return (f"The measured step reads its bytes more slowly than the probe does: {rates}. Nothing physical "
                "stops it from going faster; the kernels do")
    if pct <= 100 * (1 + SAME):
        return (f"The measured step reads its bytes about as fast as the probe does: {rates}. Two costs that the "
                "bytes leave out are still in the step, and on other machines they open a gap")
    return (f"The measured step read its bytes faster than the probe did: {rates}. The probe is one best run of "
            "one access pattern, and here it fell short of what the memory can deliver. Two costs that the bytes "
            "leave out are still in the step")


def context_mismatch(measured: float, predicted: float, added_s: float, kv_pct: float, rest_pct: float) -> str:
    """Why the context sweep's measured TPOT growth (`measured`, longest ÷ shortest context) differs from the
    bytes model's (`predicted`). Between the two contexts the step took `added_s` seconds longer; `kv_pct` is
    the rate at which the added cache was read, and `rest_pct` the rate at which the shortest step read the rest
    of its bytes (its weights and its small cache), each as a percentage of the probed bandwidth."""
    fixed = rest_pct < 100 * (1 - 2 * SAME)
    rest = (f"At the shortest context the step read its bytes at {rest_pct:.0f} % of the probed bandwidth"
            + (": part of that time is not streaming at all but the fixed cost every op pays however few bytes it "
               "moves (chapter 5 counts them), the same at every context" if fixed else ", close to the probe"))
    if added_s <= 0:
        return (f"The step took no longer at the longest context than at the shortest, so the added cache hid "
                f"beneath the rest of the step. {rest}")
    said = f"{rest}; the added cache was read at {kv_pct:.0f} %"
    if abs(measured / predicted - 1) <= 2 * SAME:
        return f"{said}. Per byte the two cost about the same, so the measured growth is close to the bytes model's"
    if measured < predicted:
        dilute = "; the fixed costs, which do not grow with the context, dilute the cache's share of the time"
        return (f"{said}. Each byte of cache cost less time than a byte of the rest, so the measured growth "
                "falls short of the bytes model's" + (dilute if fixed else ""))
    return (f"{said}. Each byte of cache cost more time than a byte of the rest: attention streams the cache less "
            "well than the products stream the weights, so the measured growth exceeds the bytes model's")
