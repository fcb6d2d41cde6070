"""Chapter 5, the anatomy of one decode step: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`); the records'
`numbers()` call them. Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import duration, speed_change, times


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
        return (f"This machine has no CUDA device ({device_type}), so it replayed nothing: a CUDA Graph records "
                "GPU kernel launches, and a processor launches none. Its fixed cost per op is "
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


def numpy_step_account(*, step: float, bandwidth_time: float, weights: float, weights_bandwidth_time: float,
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


def half_precision(flags: dict[str, str], rates: dict[tuple[str, str], float], nbytes: int = 512 << 20) -> str:
    """What this CPU offers for 2-byte weights (`device.cpu_half_precision`) and what the fastest one-row
    product in each dtype made of it (`hardware.measure_one_row_products`: {(dtype, kernel): bytes/s}, each
    streaming `nbytes` of weights)."""
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
    text = (f"{offers}. Streaming the same {nbytes >> 20} MB of weights one row at a time, the fastest float32 product "
            f"read {f32_rate / 1e9:.1f} GB/s ({f32_kernel}); " + "; ".join(clauses))
    ratios = [(f32_rate / 4) / (best[d][0] / 2) for d in ("bfloat16", "float16")]
    if max(ratios) <= 0.6:
        return f"{text}. Here the 2-byte products are bound by memory, as the roofline says"
    return (f"{text}. Where half the bytes do not halve the time, the kernel, not memory, sets the pace: it "
            "does not turn 2-byte weights into arithmetic as fast as memory delivers them, and a step in that "
            "dtype is bound by the kernel's speed, not by its bytes")


def clock_text(gpu: bool) -> str:
    """Whose time the profile's measured bars are."""
    return "the kernels' run time on the GPU" if gpu else "each op's time on the processor"


def clock_word(gpu: bool) -> str:
    """What the profile times: a GPU's kernels, or a processor's calls."""
    return "kernels" if gpu else "calls"


def outside_label(gpu: bool) -> str:
    """The name of the profiled step's time outside every op: on a GPU waiting for launches, on a CPU the
    Python and module calls between ops."""
    return "GPU idle" if gpu else "between ops"


def outside_text(gpu: bool) -> str:
    """What the profiled step's time outside every op was spent on."""
    if gpu:
        return ("the GPU had no kernel to run, while the processor dispatched and launched the next ones (and ran "
                "the profiler)")
    return ("Python running the model's code between the ops (module calls, attribute lookups), and the "
            "profiler's own bookkeeping")


def table_note(gpu: bool, norm_call: float, attention_call: float) -> str:
    """The profile table's kernels column, and the small ops' time per call (`norm_call`, `attention_call`:
    seconds per RMSNorm and per attention op)."""
    if gpu:
        return ("The kernels column counts the kernels each kind launched: views and reshapes launch none. The "
                "small kernels of the norms, attention and the rest run for microseconds each (a norm's "
                f"{norm_call * 1e6:.1f} µs), and between them the GPU waits for the next launch")
    return ("The kernels column is empty: a processor launches no kernels. The norms and attention take far "
            f"longer than their bytes: {norm_call * 1e6:.0f} µs and {attention_call * 1e6:.0f} µs a call. On a "
            "processor each call runs several smaller ops inside (an RMSNorm squares, averages, adds, divides "
            "and casts), and the profiler counts the call once, with everything it calls")


def kernels_text(gpu: bool, per_layer: int, fixed: int, llama: int) -> str:
    """The kernels a step launches (`per_layer`, `fixed` outside the layers, `llama` for Llama-3-8B's depth),
    or on a processor what takes a launch's place."""
    if gpu:
        return (f"On this GPU the ops launch {per_layer} kernels per layer and {fixed} outside the layers, "
                f"{llama:,} for Llama-3-8B: views and reshapes launch none")
    return ("On a processor there are no kernel launches, but every op is still dispatched: PyTorch checks its "
            "arguments, picks an implementation and allocates its result before any arithmetic")


def launch_vs_bytes(ratio: float) -> str:
    """Launch time ÷ bytes ÷ bandwidth, as the words before "the ... ms the bytes need"."""
    return f"{times(ratio)} as long as" if ratio > 1 else f"{100 * ratio:.0f} % of"


def no_numpy_step(dtype: str, device_type: str) -> str:
    """Why the fused NumPy step was not timed: it runs only in float32 on a processor."""
    return (f"This run is {dtype} on {device_type}, where the fused model runs its step through PyTorch, so there "
            "is no NumPy step to time: the profile above already splits a PyTorch step")


def no_half_precision(device_type: str, dtype: str) -> str:
    """Why the processor's half-precision products were not measured: this run is on another device."""
    return (f"This run is on {device_type}, whose 2-byte arithmetic is native and which the chapter already "
            f"measured in {dtype}, so there is no processor to test here")
