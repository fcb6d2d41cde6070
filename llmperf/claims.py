"""Sentences whose words depend on a measurement.

The chapters run on whatever the reader has: a laptop CPU, a GPU, a busy shared
machine. A sentence such as "the step time stays nearly flat" is true on one
and false on another, so no chapter types it. Each function here takes the
numbers a chapter measured (or predicted) and returns the clause that those
numbers support, with the numbers in it. The chapters glue the result into
their prose; the unit tests feed these functions the cost model's predictions
for an H100 at the GPU sizes, so the GPU wording is checked on a machine without
a GPU.

Pure Python: no torch. Every ratio is "new ÷ old" unless the name says otherwise.
"""

from __future__ import annotations

SAME = 0.05  # ratios within 5 % of 1 are called "about the same": below what these runs can resolve


def times(x: float) -> str:
    """A ratio as text: 2.3 -> "2.3 times", 1.04 -> "1.04 times" (two decimals below 2)."""
    return f"{x:.2f} times" if x < 2 else f"{x:.1f} times"


def trend(first: float, last: float, at_first: str, at_last: str, tol: float = 0.1) -> str:
    """How a factor moved over a sweep: "shrinks from 1.9 at batch 1 to 1.4 at batch 64", "grows ...", or
    "stays near ..." when the two are within `tol` of each other."""
    if abs(last / first - 1) <= tol:
        return f"stays near {first:.1f} ({first:.1f} {at_first}, {last:.1f} {at_last})"
    verb = "shrinks" if last < first else "grows"
    return f"{verb} from {first:.1f} {at_first} to {last:.1f} {at_last}"


def speed_change(old_time: float, new_time: float, than: str) -> str:
    """Compare two times of the same work: "1.52 times faster than X", "1.31 times slower than X" or
    "about as fast as X", where X is `than`, the thing that took `old_time`."""
    ratio = old_time / new_time
    if abs(ratio - 1) <= SAME:
        return f"about as fast as {than}"
    return f"{times(ratio)} faster than {than}" if ratio > 1 else f"{times(1 / ratio)} slower than {than}"


# --- chapter 3: the batch sweep ------------------------------------------------------------

def per_user_speed(step_growth: float, b_max: int) -> str:
    """What batching did to each user's speed, from step time at b_max ÷ at batch 1."""
    if step_growth <= 1 + SAME:
        return (f"stayed about the same: the step at batch {b_max} took {times(step_growth)} as long as "
                "at batch 1")
    return (f"fell: each user now waits {times(step_growth)} as long for every token, "
            f"{100 * (1 - 1 / step_growth):.0f} % fewer tokens per second each")


def bytes_growth(growth: float, b_max: int, kv_equals_weights_at: float) -> str:
    """How the bandwidth-bound prediction moves over the batch sweep, and why (only the KV cache grows)."""
    shape = "is nearly flat" if growth < 1.5 else "rises"
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
                "different rates, and neither need use every core the way the probe's sum does (on one host "
                "this course was tested on, the one-row kernel ran on a single core)")
    else:
        lead = ("On a GPU every product runs as kernels spread over the whole chip, one row or several; "
                "the cost is in how well each kernel streams the weights")
    if b2_over_b1 > 1 + 3 * SAME:
        return f"{lead}. Here batch 2 took {times(b2_over_b1)} as long as batch 1: the two-row kernel streams the weights more slowly"
    return f"{lead}. Here batch 2 took {times(b2_over_b1)} as long as batch 1: one more row is nearly free"


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


# --- chapter 1: a cheaper pass ---------------------------------------------------------------

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


# --- chapter 2: the prefill sweep --------------------------------------------------------------

def quadratic_part(c_ns: float, share_pct: float, s_max: int) -> str:
    """What the fitted c·S² term says, from its coefficient (ns per token²) and its share of TTFT at s_max."""
    if c_ns <= 0:
        return (f"came out at {c_ns:,.3f} ns per token², at or below zero, which no real cost can be: a run in "
                "the sweep was slowed by other work, and this fit says nothing about the quadratic term. Run the "
                "notebook again on a quieter machine")
    return f"is {share_pct:.0f} % of the fitted TTFT at {s_max:,} tokens"


def share_of_probe(achieved: float, probe: float, probe_name: str) -> str:
    """An achieved FLOP rate as a share of a probed one, honest when noise put it above 100 %."""
    pct = 100 * achieved / probe
    if pct <= 105:
        return f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached"
    return (f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached: more than the probe, "
            "which means the probe's own run was slowed by other work. Take the probe as a lower bound here")


# --- chapter 4: naive against cached -----------------------------------------------------------

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


# --- chapter 5: one decode step, op by op ------------------------------------------------------

def duration(seconds: float) -> str:
    """A time with a unit that suits it: 0.0385 -> "38.5 ms", 6.7e-05 -> "67 µs", 2.5 -> "2.50 s"."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs" if seconds >= 1e-5 else f"{seconds * 1e6:.1f} µs"


def fixed_costs(overhead: float, gap: float) -> str:
    """What the ops' fixed costs (ops per step × one tiny op's time) explain of `gap`, the step's measured
    time minus its bytes ÷ bandwidth."""
    if gap <= 0:
        return ("The step ran no slower than its bytes ÷ bandwidth here, so there is no gap to explain: the "
                "probe's bandwidth was an underestimate on this run")
    said = f"{duration(overhead)} of fixed costs against a gap of {duration(gap)}"
    share = overhead / gap
    if share > 1.25:
        return (f"{said}: more than the whole gap. On this device an op's fixed cost partly overlaps other "
                "work (a GPU runs one kernel while the processor prepares the next), so the two do not simply "
                "add up")
    if share >= 0.8:
        return (f"{said}: nearly all of it. This step is bound by the number of ops it dispatches, not by the "
                "bytes they move")
    rest = ("the rest is time outside the ops and ops streaming their bytes below the probe's rate (the "
            "profile shows both)")
    if share >= 0.2:
        return f"{said}: about {100 * share:.0f} % of it; {rest}"
    return f"{said}: only {100 * share:.0f} % of it; {rest}"


def roofline_multiple(ratio: float, who: str) -> str:
    """A step's measured time ÷ its bytes ÷ bandwidth, against the "2-3 times" widely quoted for a plain
    PyTorch loop."""
    ratio = round(ratio, 1)  # the words must agree with the number printed
    said = f"{who} took {ratio:.1f} times its bytes ÷ bandwidth"
    if ratio < 2:
        return f"{said}, less than the 2–3 times the widely quoted account expects of a plain PyTorch loop"
    if ratio <= 3:
        return f"{said}, within the 2–3 times the widely quoted account expects of a plain PyTorch loop"
    return f"{said}, more than the 2–3 times the widely quoted account expects of a plain PyTorch loop"


def graph_result(device_type: str, eager: float, graph: float | None, compiled: float | None,
                 bandwidth_time: float) -> str:
    """What recording the step in a CUDA Graph (and torch.compile's reduce-overhead mode) did, or, on a
    device without CUDA, why there was nothing to measure."""
    if device_type != "cuda" or graph is None:
        return (f"This machine has no CUDA device ({device_type}), so the cell above measured nothing: a CUDA "
                "Graph records GPU kernel launches, and a processor launches none. Its fixed cost per op is "
                "PyTorch's dispatch, which runs every time an op is called, and only calling fewer ops "
                "lowers it")
    text = (f"Replayed from a CUDA Graph the step took {duration(graph)} against {duration(eager)} eager, "
            f"{speed_change(eager, graph, 'eager')}")
    if graph < eager:
        text += f": {100 * (1 - graph / eager):.0f} % of the eager step was spent launching kernels one by one"
    if compiled is not None:
        text += (f"; torch.compile in reduce-overhead mode, which also fuses small ops into fewer kernels, took "
                 f"{duration(compiled)}, {speed_change(eager, compiled, 'eager')}")
    best = min(t for t in (graph, compiled) if t is not None)
    return (f"{text}. The fastest is still {best / bandwidth_time:.1f} times the step's bytes ÷ bandwidth "
            f"({duration(bandwidth_time)}): even replayed, each of its kernels has a fixed cost on the GPU")


def head_time_share(time_share: float, byte_share: float) -> str:
    """The LM head's share of the profiled time in ops against its share of the step's bytes."""
    said = (f"The LM head took {100 * time_share:.1f} % of the time spent in ops, for "
            f"{100 * byte_share:.1f} % of the bytes")
    ratio = time_share / byte_share
    if abs(ratio - 1) <= 0.25:
        return f"{said}: about its share, so it streams its matrix at about the rate of the other products"
    if ratio > 1:
        return f"{said}: more than its share, so its product streams its matrix more slowly than the others do"
    return (f"{said}: less than its share. One large product streams its matrix faster than many small ones, "
            "each of which pays a fixed cost")


def fused_ops(plain_ops: float, fused_ops: float, in_numpy: bool = False) -> str:
    """How many ops the fused model (llmperf.fast) calls per step against the plain one, and why. `in_numpy`:
    its step ran as NumPy code (llmperf.fast.NumpyDecodeStep, a float32 step on a CPU), which the profiler
    does not see."""
    if in_numpy:
        return (f"hands the whole step to NumPy (llmperf.fast.NumpyDecodeStep): the profiler sees only the "
                f"{fused_ops:,.0f} PyTorch ops around it, against the plain model's {plain_ops:,.0f}. The same "
                "arithmetic runs as about thirty NumPy operations per layer, without a PyTorch op's fixed cost "
                "each (the next section times them)")
    return (f"calls {fused_ops:,.0f} ops a step against the plain model's {plain_ops:,.0f}: among other "
            "things, one product for q, k and v together and one for the gate and up projections, where the "
            "plain model calls five, and one rotation for q and k together")


def numpy_step_account(step: float, bandwidth_time: float, weights: float, weights_bandwidth_time: float,
                       small: float, small_lines: float, between: float) -> str:
    """The fused NumPy step's time, millisecond by millisecond, against its bytes ÷ bandwidth. `weights`: the
    products and the LM head (`weights_bandwidth_time`: their bytes ÷ the probed bandwidth); `small`: the
    stretches of code that read no weights (norms, RoPE, the cache write, attention, SiLU, residual adds),
    `small_lines` of them per step; `between`: the Python between the timed stretches."""
    gap = step - bandwidth_time
    slow_weights = weights - weights_bandwidth_time  # the products' time beyond their bytes ÷ bandwidth
    rest = gap - slow_weights  # the small ops and Python beyond their own (few) bytes ÷ bandwidth
    rate = weights_bandwidth_time / weights  # their streaming rate as a fraction of the probe's
    if rate > 1:
        streamed = (f"{100 * rate:.0f} % of the probed bandwidth: faster than the probe reads memory, so "
                    "some weights came from the processor's caches")
    elif rate >= 0.9:
        streamed = f"{100 * rate:.0f} % of the probed bandwidth: about as fast as a plain read of memory goes"
    elif rate >= 0.7:
        streamed = f"{100 * rate:.0f} % of the probed bandwidth: most of it, not all"
    else:
        streamed = f"only {100 * rate:.0f} % of the probed bandwidth"
    text = (f"The step took {duration(step)} against {duration(bandwidth_time)} for its bytes. The weight "
            f"products and the LM head took {duration(weights)} of it ({100 * weights / step:.0f} %), streaming "
            f"their matrices at {streamed}. The code that reads no weights took {duration(small)}: "
            f"{small_lines:.0f} timed stretches of a few NumPy calls each, {duration(small / small_lines)} a "
            f"stretch, on vectors of a few hundred numbers whose bytes would need microseconds in all. Python "
            f"between the stretches took {duration(between)}")
    if gap <= 0:
        return f"{text}. The step ran no slower than its bytes ÷ bandwidth: the probe underestimated this run"
    if slow_weights <= 0:
        return (f"{text}. So the small ops and Python are the whole of the {duration(gap)} between the step "
                "and its bytes ÷ bandwidth")
    return (f"{text}. So the {duration(gap)} between the step and its bytes ÷ bandwidth is "
            f"{duration(slow_weights)} of products streaming below the probe's rate and {duration(rest)} of "
            "small ops and Python")


def half_precision(flags: dict[str, str], rates: dict[tuple[str, str], float]) -> str:
    """What this CPU offers for 2-byte weights (`device.cpu_half_precision`) and what the fastest one-row
    product in each dtype made of it (`hardware.measure_one_row_products`: {(dtype, kernel): bytes/s})."""
    native = [what for flag, what in flags.items() if flag != "f16c"]
    if native:
        offers = f"This processor offers {', '.join(native[:-1]) + ' and ' + native[-1] if len(native) > 1 else native[0]}"
    else:
        offers = ("This processor reports no native bfloat16 or float16 arithmetic"
                  + (" (only F16C's conversions to and from float32)" if "f16c" in flags else "")
                  + ": a 2-byte weight must be widened to float32 before it is multiplied")
    best = {d: max((rate, kernel) for (dtype, kernel), rate in rates.items() if dtype == d)
            for d in ("float32", "bfloat16", "float16")}
    f32_rate, f32_kernel = best["float32"]
    clauses = []
    for d in ("bfloat16", "float16"):
        rate, kernel = best[d]
        ratio = (f32_rate / 4) / (rate / 2)  # seconds per weight in d over seconds per weight in float32
        if ratio <= 0.6:
            verdict = "half the bytes bought about half the time"
        elif ratio < 0.9:
            verdict = "half the bytes bought back only part of the time"
        elif ratio <= 1.1:
            verdict = "half the bytes bought nothing"
        else:
            verdict = "half the bytes cost time"
        clauses.append(f"{d} at {rate / 1e9:.1f} GB/s ({kernel}): its products would take {ratio:.2f} times "
                       f"float32's, {verdict}")
    text = (f"{offers}. Streaming the same 512 MB of weights one row at a time, the fastest float32 product "
            f"read {f32_rate / 1e9:.1f} GB/s ({f32_kernel}); " + "; ".join(clauses))
    ratios = [(f32_rate / 4) / (best[d][0] / 2) for d in ("bfloat16", "float16")]
    if max(ratios) <= 0.6:
        return f"{text}. Here the 2-byte products are bound by memory, as the roofline says"
    return (f"{text}. Where half the bytes do not halve the time, the kernel, not memory, sets the pace: it "
            "does not turn 2-byte weights into arithmetic as fast as memory delivers them, and a step in that "
            "dtype is bound by the kernel's speed, not by its bytes")


# --- chapter 6: serving metrics ----------------------------------------------------------------

def itl_against_tpot(tpot_mean: float, itl_mean: float) -> str:
    """Mean ITL (every gap counts once) against mean TPOT (every request counts once)."""
    ratio = itl_mean / tpot_mean
    said = f"mean ITL is {duration(itl_mean)} against a mean TPOT of {duration(tpot_mean)}"
    if abs(ratio - 1) <= 0.02:
        return (f"{said}, within 2 %: in this run the long answers' gaps were about as long as the short "
                "answers', so weighing them by their length changed little")
    side, which = ("above", "longer") if ratio > 1 else ("below", "shorter")
    return (f"{said}, {100 * abs(ratio - 1):.0f} % {side} it: the long answers, which weigh more in ITL, had "
            f"{which} gaps than the short ones")


def limits_met(batches, ttft_p99, tpot_p99, ttft_limit: float, tpot_limit: float, scenario: str) -> str:
    """Which batch sizes of a sweep meet a pair of p99 latency limits (seconds), e.g. MLPerf's."""
    limits = f"MLPerf's {scenario} limits (p99 TTFT ≤ {duration(ttft_limit)}, p99 TPOT ≤ {duration(tpot_limit)})"
    ok = [b for b, t, p in zip(batches, ttft_p99, tpot_p99) if t <= ttft_limit and p <= tpot_limit]
    if not ok:
        worst = "TPOT" if min(tpot_p99) > tpot_limit else "TTFT"
        return f"no batch size in this sweep meets {limits} on this machine; {worst} alone rules every one out"
    if len(ok) == len(batches):
        return f"every batch size in this sweep, up to {batches[-1]}, meets {limits}"
    failed = [b for b in batches if b not in ok]
    return (f"{limits} hold at batch {', '.join(map(str, ok))} and fail at batch "
            f"{', '.join(map(str, failed))}")


def goodput_peak(batches, throughput, goodput) -> str:
    """Where request throughput and goodput (requests/s meeting the objectives) peak over a batch sweep."""
    if max(goodput) == 0:
        return "no request met the objectives at any batch size, so goodput is zero throughout"
    best_t = batches[max(range(len(batches)), key=lambda i: throughput[i])]
    best_g = batches[max(range(len(batches)), key=lambda i: goodput[i])]
    if best_t == best_g:
        return f"throughput and goodput both peak at batch {best_t}"
    return (f"throughput peaks at batch {best_t} but goodput at batch {best_g}: past that, batching adds "
            "requests per second that miss the objectives")


def warm_up(first: float, rest_median: float) -> str:
    """A fresh server's first TTFT against the median of the requests after it."""
    ratio = first / rest_median
    said = f"{duration(first)} against a median of {duration(rest_median)} for the rest"
    if ratio > 1.5:
        return (f"took {times(ratio)} as long: {said}. Left in, it would pull the mean up; benchmarks "
                "send a few warm-up requests first and discard them")
    return (f"was not much slower: {said}. This process had already run the model, so little was left to "
            "warm up; a freshly started server (on a GPU, one that has not yet loaded its kernels) is "
            "another matter, and benchmarks send a few warm-up requests first and discard them")


def omission(closed_sent: int, open_sent: int, expected: float, closed_worst: float, open_worst: float,
             stall: float) -> str:
    """What a closed loop hid during a stall of `stall` seconds: the requests sent while it lasted (`expected`
    at the run's rate), and the worst TTFT of the other requests in each loop."""
    sent = (f"While the long prompt waited and was prefilled ({duration(stall)}), the closed-loop clients "
            f"sent {closed_sent} request{'s' if closed_sent != 1 else ''} and the open loop {open_sent}, where "
            f"users arriving at the run's rate would have sent {expected:.1f}")
    if open_worst > 1.1 * closed_worst:
        return (f"{sent}. Leaving the long request itself out, the open loop's worst TTFT was "
                f"{duration(open_worst)}, the closed loop's {duration(closed_worst)}: requests that arrive while the "
                "server is busy (in a stall, or in a burst of arrivals) wait it out, and a closed loop never "
                "sends them")
    if closed_worst > 1.1 * open_worst:
        return (f"{sent}. Leaving the long request itself out, the closed loop's worst TTFT was the larger here, "
                f"{duration(closed_worst)} against {duration(open_worst)}: its clients all send their first "
                "requests at once, and that burst cost more than the stall did. What it hid is in the counts: "
                "the requests that would have arrived during the stall were never sent")
    return (f"{sent}. Leaving the long request itself out, the worst TTFTs came out close "
            f"({duration(open_worst)} open, {duration(closed_worst)} closed): too few arrivals fell in the "
            "stall to show in the tail this time. The gap grows with the stall and with the rate")


def percentile_spread(p50: tuple[float, float], p99: tuple[float, float]) -> str:
    """How far the median and the p99 moved across resampled reruns of one run: (low, high) of each, s."""
    w50, w99 = p50[1] - p50[0], p99[1] - p99[0]
    said = (f"the median stayed between {duration(p50[0])} and {duration(p50[1])}, the p99 between "
            f"{duration(p99[0])} and {duration(p99[1])}")
    if w99 > 1.5 * w50:
        return (f"{said}, a range {w99 / w50:.1f} times as wide. The tail of a few dozen requests rests on "
                "the one or two slowest, and moves with them")
    return (f"{said}: here the p99 was about as steady as the median, which is this run's luck. A tail of a "
            "few dozen requests rests on the one or two slowest, and usually moves with them")
