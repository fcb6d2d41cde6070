"""Chapter 5, the anatomy of one decode step: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`); the records'
`numbers()` call them. Pure Python: no torch.
"""

from __future__ import annotations

from ...wording import duration, speed_change, times


def fixed_costs(overhead: float, gap: float, bandwidth_time: float, gpu: bool = False) -> str:
    """What the ops' fixed costs (ops per step × one tiny op's time) explain of `gap`, the step's measured
    time minus `bandwidth_time`, its bytes ÷ bandwidth; `gpu`: the step ran on a GPU."""
    if gap <= 0:
        return ("the step ran no slower than its bytes ÷ bandwidth here, so there is no gap to explain: the "
                "probe's bandwidth was an underestimate on this run")
    said = f"{duration(overhead)} of fixed costs against a gap of {duration(gap)}"
    share = overhead / gap
    if share > 1.25:
        if gpu:
            return (f"{said}: more than the whole gap. Launches are asynchronous: the GPU runs one kernel while "
                    "the processor prepares the next, so the two overlap instead of adding up")
        return (f"{said}: more than the whole gap, so the tiny op overstates what the step's ops cost on "
                "average: many of them are views and reshapes, which move no data")
    if share >= 0.8:
        pct = round(100 * share)  # the words must agree with the number printed
        most = f"about all of it ({pct} %)" if pct >= 100 else f"nearly all of it ({pct} %)"
        if overhead >= bandwidth_time:
            return (f"{said}: {most}, and more than the {duration(bandwidth_time)} the bytes need. "
                    "This step is bound by the number of ops it dispatches more than by the bytes they move")
        return (f"{said}: {most}, though less than the {duration(bandwidth_time)} the bytes need. The "
                "bytes still set most of the step; the ops' fixed costs are what it adds to them")
    rest = ("the rest is time outside the ops and ops streaming their bytes below the probe's rate (the "
            "profile shows both)")
    if share >= 0.2:
        return f"{said}: about {100 * share:.0f} % of it; {rest}"
    return f"{said}: only {100 * share:.0f} % of it; {rest}"


def roofline_multiple(ratio: float, who: str) -> str:
    """A step's measured time ÷ its bytes ÷ bandwidth (its roofline time): how much of the step its bytes
    explain."""
    ratio = round(ratio, 1)  # the words must agree with the number printed
    said = f"{who} took {ratio:.1f} times its bytes ÷ bandwidth"
    if ratio <= 1.2:
        return f"{said}: about what its bytes allow"
    if ratio <= 2:
        return f"{said}: moving its bytes at the probed bandwidth accounts for at least half of its time"
    return f"{said}: more than half of its time goes to something other than moving its bytes"


def replayed_floor(ops: float, per_kernel: float, bandwidth_time: float) -> str:
    """A step's `ops` replayed from a CUDA Graph at `per_kernel` seconds of fixed cost each (a graph's cost per
    kernel beyond the kernel's work), against its bytes ÷ bandwidth."""
    cost = ops * per_kernel
    ratio = cost / bandwidth_time
    said = (f"at that rate its {ops:,.0f} kernels would still cost {duration(cost)} replayed, {times(ratio)} its "
            f"{duration(bandwidth_time)} of bytes")
    if ratio >= 2:
        return f"{said}: even replayed, the step stays well above its bytes"
    if ratio >= 0.5:
        return f"{said}: replayed, the fixed costs no longer dominate the step, but they still count"
    return f"{said}: replayed, the step comes close to its bytes"


def batch_ops(ops: int, batched_ops: int, batch: int) -> str:
    """A one-layer step's ops at batch 1 (`ops`) and at `batch` sequences (`batched_ops`): what a token's share
    of the fixed costs does."""
    if batched_ops == ops:
        return (f"the same {ops:,d} ops at batch 1 and at batch {batch}: the number of ops does not depend on how "
                f"many sequences a step carries, so {batch} tokens share each op's fixed cost, and a token's "
                f"share falls {batch}-fold")
    return (f"{ops:,d} ops at batch 1 against {batched_ops:,d} at batch {batch}: {batch} tokens share them, so a "
            f"token's share of the fixed costs falls {batch * ops / batched_ops:.1f}-fold")


def graph_result(device_type: str, eager: float, graph: float | None, compiled: float | None,
                 bandwidth_time: float) -> str:
    """What recording the step in a CUDA Graph (and torch.compile's reduce-overhead mode) did, or, on a
    device without CUDA, why there was nothing to measure."""
    if device_type == "mps":
        return ("This machine's GPU is Apple's (mps), which has no CUDA Graphs, so it replayed nothing. Its "
                "processor still queues a kernel for every op, as it launches one on a CUDA GPU, and PyTorch "
                "offers no graph that records them once and replays them: PyTorch's dispatch and the queueing run "
                "every time an op is called, and only calling fewer ops lowers them")
    if device_type != "cuda" or graph is None:
        return (f"This machine has no CUDA device ({device_type}), so it replayed nothing: a CUDA Graph records "
                "GPU kernel launches, and a processor launches none. Its fixed cost per op is "
                "PyTorch's dispatch, which runs every time an op is called, and only calling fewer ops "
                "lowers it")
    text = (f"Replayed from a CUDA Graph the step took {duration(graph)} against {duration(eager)} eager, "
            f"{speed_change(eager, graph, 'eager')}")
    if graph < eager:
        text += (f": the replay removed {100 * (1 - graph / eager):.0f} % of the eager step, the launches and "
                 "the Python and dispatcher work that ran before each of them")
    if compiled is not None:
        text += (f"; torch.compile in reduce-overhead mode, which also fuses small ops into fewer kernels, took "
                 f"{duration(compiled)}, {speed_change(eager, compiled, 'eager')}")
    best = min(t for t in (graph, compiled) if t is not None)
    ratio = round(best / bandwidth_time, 1)  # the words must agree with the number printed
    said = f"The fastest took {ratio:.1f} times the step's bytes ÷ bandwidth ({duration(bandwidth_time)})"
    if ratio < 0.9:
        return f"{text}. {said}: less than its bytes need at the probed bandwidth, which this step beat"
    if ratio <= 1.1:
        return f"{text}. {said}: replayed, the step runs about as fast as its bytes allow"
    return f"{text}. {said}: even replayed, each of its kernels has a fixed cost on the GPU"


def head_time_share(time_share: float, byte_share: float, head_rate: float, proj_rate: float) -> str:
    """The LM head's share of the profiled time in ops and of the step's bytes, and the rate at which it
    streamed its matrix (`head_rate`, bytes/s) against the layers' weight products (`proj_rate`), on the
    machine that ran the chapter: a sentence of its own."""
    said = (f"On this machine the LM head took {100 * time_share:.1f} % of the time spent in ops, for "
            f"{100 * byte_share:.1f} % of the bytes, and streamed its matrix at {head_rate / 1e9:,.1f} GB/s against "
            f"the projections' {proj_rate / 1e9:,.1f} GB/s")
    ratio = head_rate / proj_rate
    if abs(ratio - 1) <= 0.25:
        return f"{said}: about the same rate, so one large product reads memory no faster than many small ones"
    if ratio > 1:
        return (f"{said}: faster. One large product streams its matrix faster than many small ones, each of "
                "which pays a fixed cost")
    return f"{said}: slower, so its one large product streams its matrix less well than the layers' smaller ones"


def fused_ops(plain_ops: float, fused_ops: float, in_numpy: bool = False) -> str:
    """How many ops the fused model (llmperf.fast) calls per step against the plain one, and why. `in_numpy`:
    its step ran as NumPy code (llmperf.fast.NumpyDecodeStep, a float32 step on a CPU), which the profiler
    does not see."""
    if in_numpy:
        return (f"hands the whole step to NumPy (llmperf.fast.NumpyDecodeStep): the profiler sees only the "
                f"{fused_ops:,.0f} PyTorch ops around it, against the plain model's {plain_ops:,.0f}. The same "
                "arithmetic runs as NumPy calls, without a PyTorch op's fixed cost each (a section near the end "
                "of the chapter times them)")
    return (f"calls {fused_ops:,.0f} ops a step against the plain model's {plain_ops:,.0f}: among other "
            "things, one product for q, k and v together and one for the gate and up projections, where the "
            "plain model calls five, and one rotation for q and k together")


def _beyond(extra: float, what: str, whose: str) -> str:
    """`extra` seconds of `what` beyond `whose` bytes ÷ bandwidth, or the time by which it beat them."""
    if extra > 0:
        return f"{duration(extra)} of {what} beyond {whose} bytes ÷ bandwidth"
    return f"less the {duration(-extra)} by which {what} beat {whose} bytes ÷ bandwidth"


def numpy_step_account(*, step: float, bandwidth_time: float, weights: float, weights_bandwidth_time: float,
                       attention: float, attention_bandwidth_time: float, small: float, small_stretches: float,
                       between: float) -> str:
    """The fused NumPy step's time, millisecond by millisecond, against its bytes ÷ bandwidth. `weights`: the
    products and the LM head (`weights_bandwidth_time`: their bytes ÷ the probed bandwidth); `attention`: the
    scores and weighted sums over the cached keys and values (`attention_bandwidth_time`: the cache's bytes ÷
    bandwidth); `small`: the stretches of code that read no weights and few bytes (norms, RoPE, the cache
    write, SiLU, residual adds), timed as `small_stretches` stretches of a few NumPy calls per step (see
    `profiling.numpy_step_times`); `between`: the Python between the stretches."""
    gap = step - bandwidth_time
    slow_weights = weights - weights_bandwidth_time  # the products' time beyond their bytes ÷ bandwidth
    slow_attention = attention - attention_bandwidth_time
    rest = gap - slow_weights - slow_attention  # the small ops and Python beyond their own (few) bytes ÷ bandwidth
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
            f"their matrices at {streamed}. Attention, which reads the cached keys and values, took "
            f"{duration(attention)} against {duration(attention_bandwidth_time)} for their bytes. The code that "
            f"reads no weights took {duration(small)}: {small_stretches:.0f} timed stretches of a few NumPy calls "
            f"each, {duration(small / small_stretches)} a stretch, on vectors of a few hundred numbers whose bytes "
            f"would need microseconds in all. Python between the stretches took {duration(between)}")
    if gap <= 0:
        return f"{text}. The step ran no slower than its bytes ÷ bandwidth: the probe underestimated this run"
    return (f"{text}. So the {duration(gap)} between the step and its bytes ÷ bandwidth is {duration(rest)} of "
            f"small ops and Python, {_beyond(slow_weights, 'the products', 'their')}, and "
            f"{_beyond(slow_attention, 'attention', 'its')}")


def compiled_small_ops(numpy_code: float, compiled: float, small: float) -> str:
    """The batch-1 step with compiled products as NumPy code (`numpy_code` seconds) against compiled whole
    (`compiled`), set against `small`, the seconds the stopwatch gave the small ops and the Python between them."""
    saved = numpy_code - compiled
    text = (f"Compiled whole, one call per layer, the step took {duration(compiled)} against {duration(numpy_code)} "
            "as NumPy code with the same compiled products")
    if saved <= 0:
        return f"{text}: compiling the small ops saved nothing here"
    share = saved / small
    if share > 1:
        return (f"{text}: it saved {duration(saved)}, more than the {duration(small)} the stopwatch gave the small "
                "ops and the Python between them, so as NumPy calls they cost the step more than their own time")
    return (f"{text}: it saved {duration(saved)}, {100 * share:.0f} % of the {duration(small)} the stopwatch gave "
            "the small ops and the Python between them")


def half_precision(flags: dict[str, str], rates: dict[tuple[str, str], float], bandwidth: float,
                   nbytes: int = 512 << 20) -> str:
    """What this CPU offers for 2-byte weights (`device.cpu_half_precision`) and what the fastest one-row
    product in each dtype made of it (`hardware.measure_one_row_products`: {(dtype, kernel): bytes/s}, each
    streaming `nbytes` of weights), against float32's and against `bandwidth`, the probed read bandwidth
    (bytes/s): a product that reads its bytes about that fast is bound by memory."""
    native = [what for flag, what in flags.items() if flag != "f16c"]
    if native:
        listed = ", ".join(native[:-1]) + " and " + native[-1] if len(native) > 1 else native[0]
        offers = f"This processor offers {listed}"
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
        # seconds per weight in d over seconds per weight in float32, as printed (the words must agree with it)
        ratio = round((f32_rate / 4) / (rate / 2), 2)
        if ratio < 0.4:
            verdict = ("half the bytes bought back more than half the time, so float32's own kernel, not memory, "
                       "held float32 back")
        elif ratio <= 0.6:
            verdict = "half the bytes bought about half the time"
        elif ratio < 0.9:
            verdict = "half the bytes bought back only part of the time"
        elif ratio <= 1.1:
            verdict = "half the bytes bought nothing"
        else:
            verdict = "half the bytes cost time"
        clauses.append(f"{d} at {rate / 1e9:.1f} GB/s ({kernel}): its products would take {ratio:.2f} times "
                       f"float32's, {verdict}")
    mib = f"{nbytes / 2**20:,.0f} MiB"
    text = (f"{offers}. Streaming the same {mib} of weights one row at a time, the fastest float32 product "
            f"read {f32_rate / 1e9:.1f} GB/s ({f32_kernel}); " + "; ".join(clauses))
    rate, dtype = max((best[d][0], d) for d in ("bfloat16", "float16"))
    pct = round(100 * rate / bandwidth)  # the words must agree with the number printed
    said = (f"The faster 2-byte dtype, {dtype}, read its {mib} in {duration(nbytes / rate)}, against "
            f"{duration(nbytes / bandwidth)} at the probed {bandwidth / 1e9:.1f} GB/s: {pct} % of the bandwidth")
    if pct >= 80:
        return f"{text}. {said}, so its products are bound by memory, as the roofline says"
    return (f"{text}. {said}, so the kernel, not memory, sets the pace. It does not turn 2-byte weights into "
            "arithmetic as fast as memory delivers them, and a step in that dtype is bound by the kernel's speed, "
            "not by its bytes")


def half_precision_choice(best_ratio: float) -> str:
    """Why the chapters measure in float32 on a processor, from `best_ratio`: the faster 2-byte dtype's
    product time ÷ float32's (`HalfPrecision.best_ratio`)."""
    if best_ratio <= 0.6:
        return (f"On this processor half the bytes would pay: a 2-byte step's products would take {best_ratio:.2f} "
                "times float32's time. The chapters still measure in float32 on every processor, so that one dtype "
                "serves processors with and without fast 2-byte kernels, and so that the fused model's NumPy "
                "step, which runs only in float32, can run")
    if best_ratio < 0.9:
        return ("On this processor half the bytes would buy back only part of the time. The chapters measure "
                "in float32 on every processor: every kernel supports it, the fused model's NumPy step included")
    return ("This is why the chapters run on a processor in float32: on this one, half the bytes would not "
            "make a step faster")


def no_half_precision_choice(dtype: str) -> str:
    """Why this run's dtype is 2-byte: a GPU (or MPS) multiplies 2-byte weights natively."""
    return (f"On this device the chapters measure in {dtype}, as servers do: its products take 2-byte weights "
            "natively")


def launch_vs_bytes(ratio: float) -> str:
    """Launch time ÷ bytes ÷ bandwidth, as the words before "the ... ms the bytes need"."""
    return f"{times(ratio)} as long as" if ratio > 1 else f"{100 * ratio:.0f} % of"


def launches_by_size(small_ratio: float, large_ratio: float) -> str:
    """Launch cost ÷ bytes ÷ bandwidth for a small model's step and a large one's: whether the same per-kernel
    cost weighs less on the larger model."""
    if large_ratio < small_ratio:
        return "the same cost per kernel weighs less on the larger model, whose kernels move more bytes each"
    return "the cost per kernel weighs no less on the larger model: its kernels do not move more bytes each"
