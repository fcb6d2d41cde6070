"""Chapter 5's device labels: the words that name what a profile measured on this device (a GPU's kernels
or a processor's calls), and the lines that say why an experiment had nothing to measure here.

Pure Python: no torch. `claims` holds the verdicts; these are the names and notes around them.
"""

from __future__ import annotations

from ...wording import duration, times


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


def _shown(ratio: float) -> float:
    """`ratio` rounded as `_times` prints it (at most 3 significant figures), so that the words chosen from it
    agree with the number shown."""
    if ratio < 2:
        return round(ratio, 2)
    return round(ratio, 1) if ratio < 100 else float(f"{ratio:.3g}")


def _times(ratio: float) -> str:
    """A ratio rounded by `_shown`, as text: "1.51 times", "3.1 times", "540 times", "1,230 times"."""
    return times(ratio) if ratio < 100 else f"{ratio:,.0f} times"


def _bytes_time(seconds: float) -> str:
    """A bytes ÷ bandwidth time, with two significant figures below a microsecond ("0.08 µs", "0.12 µs"), so
    that a ratio to it can be checked from the printed figures."""
    return duration(seconds) if seconds >= 1e-6 else f"{seconds * 1e6:.2g} µs"


def _call_against_bytes(name: str, call: float, bytes_time: float) -> tuple[str, float]:
    """One call's profiled time against its bytes ÷ bandwidth, in words, and the ratio as printed."""
    ratio = _shown(call / bytes_time)
    said = (f"{name} call took {duration(call)} against {_bytes_time(bytes_time)} for its bytes ÷ bandwidth, "
            f"{_times(ratio)}")
    if ratio > 3:
        return f"{said}: far longer than its bytes need", ratio
    if ratio > 1.5:
        return f"{said}: longer than its bytes need", ratio
    if ratio >= 0.8:
        return f"{said}: about what its bytes need", ratio
    return (f"{said}: less than its bytes need at the probed bandwidth, so they came from the processor's "
            "caches"), ratio


def table_note(gpu: bool, norm_call: float, attention_call: float, norm_bytes_time: float,
               attention_bytes_time: float) -> str:
    """The profile table's kernels column, and the small ops' time per call (`norm_call`, `attention_call`:
    seconds per RMSNorm and per attention op) against each call's bytes ÷ the probed bandwidth
    (`norm_bytes_time`, `attention_bytes_time`)."""
    if gpu:
        return ("The kernels column counts the kernels each kind launched: views and reshapes launch none. The "
                "small kernels of the norms, attention and the rest run for microseconds each (a norm's "
                f"{norm_call * 1e6:.1f} µs), and between them the GPU waits for the next launch")
    norm, norm_ratio = _call_against_bytes("An RMSNorm", norm_call, norm_bytes_time)
    attention, attention_ratio = _call_against_bytes("an attention", attention_call, attention_bytes_time)
    text = f"The kernels column is empty: a processor launches no kernels. {norm}; {attention}"
    if max(norm_ratio, attention_ratio) > 1.5:
        return (f"{text}. The time beyond the bytes is fixed cost: on a processor each call runs several smaller "
                "ops inside (an RMSNorm squares, averages, adds, divides and casts), each dispatched in turn, and "
                "the profiler counts the call once, with everything it calls")
    return f"{text}. So neither call costs much beyond its bytes here, though each runs several smaller ops inside"


def kernels_text(gpu: bool, per_layer: int, fixed: int, llama: int) -> str:
    """The kernels a step launches (`per_layer`, `fixed` outside the layers, `llama` for Llama-3-8B's depth),
    or on a processor what takes a launch's place."""
    if gpu:
        return (f"On this GPU the ops launch {per_layer} kernels per layer and {fixed} outside the layers, "
                f"{llama:,} for Llama-3-8B: views and reshapes launch none")
    return ("On a processor there are no kernel launches, but every op is still dispatched: PyTorch checks its "
            "arguments, picks an implementation and allocates its result before any arithmetic")


def roof_threads(device_type: str, threads: int) -> str:
    """On what the probe measured this machine's roofs: on a processor, PyTorch's thread count, since a
    processor's matmul rate and read bandwidth both depend on how many threads run them."""
    if device_type == "cpu":
        return f"on {threads} PyTorch thread{'' if threads == 1 else 's'}"
    return f"on the {device_type} device"


def launch_basis(gpu: bool, kernels: int) -> str:
    """What the exercise counts as a SmolLM2 step's launches (`kernels` of them): the kernels a GPU counted,
    or elsewhere the ops that are not views, each of which launches at least one kernel on a GPU."""
    if gpu:
        return f"This GPU counted {kernels:,} kernels for a SmolLM2 step"
    return (f"Take each op that is not a view as one kernel: {kernels:,} for a SmolLM2 step, a lower bound, since "
            "some ops launch more than one")


def no_numpy_step(dtype: str, device_type: str) -> str:
    """Why the fused NumPy step was not timed: it runs only in float32 on a processor."""
    return (f"This run is {dtype} on {device_type}, where the fused model runs its step through PyTorch, so there "
            "is no NumPy step to time: the profile above already splits a PyTorch step")


def no_half_precision(device_type: str, dtype: str) -> str:
    """Why the processor's half-precision products were not measured: this run is on another device."""
    return (f"This run is on {device_type}, whose 2-byte arithmetic is native and which the chapter already "
            f"measured in {dtype}, so there is no processor to test here")
