"""Chapter 3's sentences, chosen from its records' numbers.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

import math

from ...wording import SAME, times, speed_change


def per_user_speed(step_growth: float, b_max: int) -> str:
    """What batching did to each user's speed, from the step time at batch `b_max` ÷ at batch 1 (any batch of the
    sweep may stand as `b_max`: the chapter asks it of the largest and of the middle one)."""
    if step_growth < 1 - SAME:
        return (f"rose: the step at batch {b_max} took only {times(step_growth)} as long as the step at batch 1, "
                "so even each user's tokens came faster")
    if step_growth <= 1 + SAME:
        return (f"stayed about the same: the step at batch {b_max} took {times(step_growth)} as long as "
                "at batch 1")
    return (f"fell: at batch {b_max} each user waits {times(step_growth)} as long for every token as at batch 1, "
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
    first = math.ceil(kv_equals_weights_at)  # the first whole batch whose cache outweighs the weights
    where = (f"within this sweep, from batch {first:,d} on"
             if first <= b_max else f"only from batch {first:,d}, beyond this sweep")
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


def small_batch_kernel(device_type: str, batch: int, step_growth: float, roof_growth: float, gbs: tuple[float, float],
                       probe_gbs: float) -> str:
    """What going from one row to `batch` rows (the sweep's second batch) did to the whole step: its time at
    `batch` ÷ at batch 1 (`step_growth`) against the roofline's ratio (`roof_growth`: the larger batch adds a KV
    cache and its FLOPs), with the GB/s each step reached (`gbs`) beside the probe's `probe_gbs`."""
    if device_type == "cpu":
        lead = ("On a CPU, PyTorch gives a product of a single row by a matrix to a matrix–vector kernel, "
                "and a product of a few rows to a general matrix-product kernel. The two stream the weights at "
                "different rates, and neither need keep every core busy the way the probe's sum does")
    else:
        lead = ("On a GPU the maths library chooses a kernel by the product's shape, so one row and a few rows "
                "need not run the same kernel; what either costs depends on how fast it streams the weights")
    said = (f"{lead}. Here batch 1 moved {gbs[0]:,.1f} GB/s and batch {batch} {gbs[1]:,.1f} GB/s, against the "
            f"probe's {probe_gbs:,.1f} GB/s: the step at batch {batch} took {times(step_growth)} as long as at "
            f"batch 1, where the roofline expects {times(roof_growth)}")
    ratio = step_growth / roof_growth
    if ratio > 1 + 3 * SAME:
        return f"{said}. The {batch}-row kernel streams the weights more slowly"
    if ratio < 1 - SAME:
        return f"{said}. The one-row kernel is the slower of the two"
    rows = "The extra row costs about what its" if batch == 2 else f"The {batch - 1} extra rows cost about what their"
    return f"{said}. {rows} bytes and FLOPs predict"


def fused_result(plain_time: float, fused_time: float, plain_pct: float, fused_pct: float) -> str:
    """The fused model against the plain one at batch 1, same bytes and FLOPs."""
    return (f"The fused model reached {fused_pct:.0f} % of the probed bandwidth against {plain_pct:.0f} % "
            f"for the plain model: a step {speed_change(plain_time, fused_time, 'the plain one')}, with the same "
            "bytes and the same FLOPs")


def fused_products(where: str, why_not: str | None = None) -> str:
    """Where the fused model's one-token products ran on this machine (`where`: "compiled", "BLAS", or "none": no
    NumPy step here, a GPU or a 2-byte dtype), as the clause after "as NumPy code:"; `why_not`: why the compiled
    loop could not run, if it could not."""
    compiled = ("a short matrix–vector loop that Numba compiles (`llmperf.fast.kernel`), each thread "
                "streaming its own rows of the weights once")
    blas = "NumPy's BLAS, whose matrix–vector routine spreads over all cores, on weights laid out for it"
    if where == "compiled":
        return f"the products go to {compiled}, which ran the step faster here than {blas.split(',')[0]} did"
    if where == "BLAS" and why_not:
        return f"the products go to {blas} (the compiled loop of `llmperf.fast.kernel` cannot run here: {why_not})"
    if where == "BLAS":
        return (f"the products go to {blas}, which ran the step faster here than the compiled loop of "
                "`llmperf.fast.kernel` did")
    return (f"the products go to {blas}, or to {compiled}, whichever the machine runs faster in the step "
            "(measured the first time, `llmperf.fast.tuning`)")


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


def batch_fixed_cost(gap1: float, gapmax: float) -> str:
    """What the measured ÷ roofline time at batch 1 (`gap1`) and at the largest batch (`gapmax`) say about the
    time the roofline leaves out. A ratio that falls with the batch has two causes these numbers cannot tell
    apart: a cost per step that more sequences share, or products that run closer to the roof with more rows."""
    if gap1 <= 1 + 2 * SAME:
        return (f"At batch 1 the step took {gap1:.2f} times its roofline time, within 10 % of it: there no cost "
                "beyond the bytes and the FLOPs shows")
    if gapmax < (1 - SAME) * gap1:
        return ("The roofline leaves part of each step's time unexplained, and that part weighs less at the "
                "larger batch. Two causes give that fall, and these times alone do not say which: a cost per step "
                "that depends on neither the bytes nor the FLOPs (dispatching each op), which more sequences "
                "share; or matrix products that stream the weights faster when they multiply more rows at once")
    return ("Part of each step's time is a cost that the bytes and the FLOPs leave out, and here a larger batch "
            "did not share it away")


def batch_against_prediction(batch: int, measured: float, predicted: float) -> str:
    """The batch sweep against the roofline's prediction that a bigger batch costs little extra time: the step
    at `batch` ÷ at batch 1, measured and predicted (the roofline part by part)."""
    said = (f"The roofline predicts the step at batch {batch} at {times(predicted)} the step at batch 1; it "
            f"measured {times(measured)}, so tokens per second came to {batch / measured:.1f} times batch 1's, "
            f"against {batch / predicted:.1f} times predicted")
    if measured <= (1 + SAME) * predicted:
        return f"{said}: here the bigger batch cost as little extra time as the roofline says"
    if measured < batch:
        return f"{said}: the bigger batch cost more extra time than the roofline says, and still raised the throughput"
    return f"{said}: the bigger batch bought no throughput at all"


def threads_note(device_type: str, threads: int) -> str:
    """Why this machine's roof is tied to the thread count: on a CPU the probe's rates (and so its ridge) depend
    on how many threads PyTorch runs on, which each chapter chooses when it starts (`setup`)."""
    if device_type != "cpu":
        return ("This machine's roof is its accelerator's, which the host's PyTorch thread count does not "
                "change")
    plural = "thread" if threads == 1 else "threads"
    return (f"On a CPU the probe's rates, and with them the ridge, depend on how many threads PyTorch runs on: "
            f"this chapter runs on {threads} {plural}, the count `setup` found fastest when the chapter "
            "started, and a chapter that starts with another count draws another roof for the same machine")


def launches_vs_bytes(n_ops: int, launches: float) -> str:
    """The step's `n_ops` ops against the `launches` whose asynchronous launch overheads add up to the time an
    H100 takes to stream the weights. Not every op launches a kernel (a view launches none; chapter 5 counts
    the kernels), so the verdict is worded for a step in which most ops do."""
    if n_ops > launches:
        return (f"fewer than the step's {n_ops:,d} ops: if most of them launch a kernel, as chapter 5 finds on a "
                "GPU, the launches of a model as small as SmolLM2 cost more time than its bytes")
    return (f"no fewer than the step's {n_ops:,d} ops: here the bytes cost at least as much time as the "
            "launches")


DATASHEET_ROOF = "a roof a probe would put lower, raising gpt-fast's share"  # a datasheet's bandwidth is a ceiling
# that no copy of memory reaches, so a share of it understates the share of a probed roof


def tuned_code(plain_pct: float, fused_pct: float, gf_pct: float) -> str:
    """This machine's better batch-1 step (plain or fused, % of the probed bandwidth) against gpt-fast's tuned GPU
    loop (`gf_pct`: % of an A100's datasheet bandwidth). The two are shares of different roofs: gpt-fast's would
    only grow against a probed one, so only a larger share of the datasheet's says which got closer."""
    best = max(plain_pct, fused_pct)
    said = (f"Here the better step reached {best:.0f} % of this machine's probed bandwidth; gpt-fast's tuned GPU "
            f"loop reached {gf_pct:.0f} % of an A100's datasheet bandwidth, {DATASHEET_ROOF}")
    return said + _datasheet_ranking(gf_pct, best, "tuned GPU code gets")


def gptfast_beside(gf_pct: float, plain_pct: float, device: str) -> str:
    """The gpt-fast exercise's closing clause: its fraction of the A100's datasheet ceiling against the plain
    model's fraction of the probed bandwidth on this machine's `device` (its type: "cpu", "cuda", "mps"); as in
    `tuned_code`, only a larger share of the datasheet's roof ranks the two."""
    where = {"cpu": "this machine's CPU", "cuda": "this machine's GPU", "mps": "this Mac's GPU"}.get(device, device)
    said = (f"the plain model reached {plain_pct:.0f} % of the probed bandwidth on {where}, while the datasheet's "
            f"ceiling is {DATASHEET_ROOF}")
    return said + _datasheet_ranking(gf_pct, plain_pct, "the tuned GPU loop gets")


def _datasheet_ranking(gf_pct: float, here_pct: float, tuned: str) -> str:
    """The clause that ends both gpt-fast comparisons: a share of the datasheet's roof can only grow against a
    probed roof, so only a larger one (beyond SAME) ranks the tuned loop ahead; anything else ranks neither."""
    if gf_pct > (1 + SAME) * here_pct:
        return f": {tuned} closer to its roof"
    return ", so the two shares do not say which code got closer to its roof"


def probe_gap(pct: float, gbs: float, probe_gbs: float) -> str:
    """How fast the batch-1 step read its bytes (`gbs`, GB/s; `pct` of the probe's `probe_gbs`) against the
    probe's sum, and what the section then looks at."""
    rates = f"at batch 1 it moved {gbs:,.1f} GB/s, {pct:.0f} % of the {probe_gbs:,.1f} GB/s the probe's sum reached"
    if pct < 100 * (1 - SAME):
        return (f"The measured step reads its bytes more slowly than the probe does: {rates}. Nothing physical "
                "stops it from going faster; the software does")
    if pct <= 100 * (1 + SAME):
        return (f"The measured step reads its bytes about as fast as the probe does: {rates}. Two costs that the "
                "bytes leave out are still in the step, and on other machines they open a gap")
    return (f"The measured step read its bytes faster than the probe did: {rates}. The probe is one best run of "
            "one access pattern, and here it fell short of what the memory can deliver. Two costs that the bytes "
            "leave out are still in the step")


def context_mismatch(added_s: float, kv_pct: float, rest_pct: float) -> str:
    """Why the context sweep's measured TPOT growth (longest ÷ shortest context) differs from the bytes model's.
    Between the two contexts the step took `added_s` seconds longer; `kv_pct` is the rate at which the added cache
    was read, and `rest_pct` the rate at which the shortest step read all its bytes (its weights and its small
    cache), each as a percentage of the probed bandwidth. The bytes model gives both rates one value, so the
    verdict follows kv_pct ÷ rest_pct: (predicted − 1) ÷ (measured − 1) is the same ratio."""
    fixed = rest_pct < 100 * (1 - 2 * SAME)
    rest = (f"At the shortest context the step read its bytes at {rest_pct:.0f} % of the probed bandwidth"
            + (": part of that time is not streaming at all but the fixed cost every op pays however few bytes it "
               "moves (chapter 5 counts them), the same at every context" if fixed else ", close to the probe"))
    if added_s <= 0:
        return (f"The step took no longer at the longest context than at the shortest, so the added cache hid "
                f"beneath the rest of the step. {rest}")
    said = f"{rest}; the added cache was read at {kv_pct:.0f} %"
    ratio = kv_pct / rest_pct
    if 1 - 2 * SAME <= ratio <= 1 + 2 * SAME:
        return f"{said}. Per byte the two cost about the same, so the measured growth is close to the bytes model's"
    if ratio > 1 + 2 * SAME:
        dilute = "; the fixed costs, which do not grow with the context, dilute the cache's share of the time"
        return (f"{said}. Each byte of cache cost less time than a byte of the rest, so the measured growth "
                "falls short of the bytes model's" + (dilute if fixed else ""))
    return (f"{said}. Each byte of cache cost more time than a byte of the rest: attention streams the cache less "
            "well than the products stream the weights, so the measured growth exceeds the bytes model's")
