"""Chapter 5's published measurements of what launching kernels costs, and of what replaying them from a CUDA
Graph or compiling the step saves: NVIDIA's introduction to CUDA Graphs, SGLang's pull request that added them,
and the PyTorch blog on gpt-fast.

Each constant is a figure from the cited source, as shared/reference/facts.md records it; `published_launches`
computes the differences and ratios the chapter glues, and the functions below choose the words from them.
Pure Python: no torch.
"""

from __future__ import annotations

from ...wording import duration, times
from .claims import launch_vs_bytes

# SGLang pull request 1401 (sglang_cudagraph_pr1401): Llama-3-8B, batch 1, Triton attention backend, median
# decode latency per token without and with CUDA Graphs.
SGLANG_EAGER_S = 9.28e-3
SGLANG_GRAPH_S = 7.06e-3
# The PyTorch blog on gpt-fast (pytorch2023gptfast): Llama-2-7B at batch 1 on an A100-80GB, eager against
# torch.compile with a static KV cache (which also fuses ops, not only removes launches), tokens/s.
GPTFAST_EAGER_TPS = 25.5
GPTFAST_COMPILED_TPS = 107.0
# NVIDIA's introduction to CUDA Graphs (gray2019cudagraphs): a chain of kernels of 2.9 µs of work each took
# 9.6 µs a kernel with a synchronisation after every launch, about 3.8 µs a kernel launched asynchronously
# (no synchronisation between launches), and 3.4 µs a kernel replayed from a graph.
GRAPH_KERNEL_S = 2.9e-6
GRAPH_SYNCED_S = 9.6e-6
GRAPH_ASYNC_S = 3.8e-6
GRAPH_REPLAYED_S = 3.4e-6


def graph_overhead() -> float:
    """Seconds a kernel costs inside a CUDA Graph beyond its own work (NVIDIA's figures): what a graph keeps."""
    return GRAPH_REPLAYED_S - GRAPH_KERNEL_S


def async_overhead() -> float:
    """Seconds a kernel costs beyond its own work when launched asynchronously, one after another (NVIDIA's
    figures): the baseline a graph improves on, and a lower bound on a short kernel's cost in eager code."""
    return GRAPH_ASYNC_S - GRAPH_KERNEL_S


def sync_cost() -> float:
    """Seconds per kernel that the synchronisation after every launch added to NVIDIA's chain: the synchronised
    cost minus the asynchronous one. It is most of the synchronised chain's time beyond the kernels' work."""
    return GRAPH_SYNCED_S - GRAPH_ASYNC_S


def published_launches() -> dict[str, object]:
    """The chapter's glued numbers and sentences for the published measurements above."""
    return {
        "sglang_eager_ms": SGLANG_EAGER_S * 1e3, "sglang_graph_ms": SGLANG_GRAPH_S * 1e3,
        "sglang_text": graph_share(SGLANG_EAGER_S, SGLANG_GRAPH_S),
        "gf_eager_tps": GPTFAST_EAGER_TPS, "gf_compiled_tps": GPTFAST_COMPILED_TPS,
        "gf_text": eager_multiple(GPTFAST_EAGER_TPS, GPTFAST_COMPILED_TPS),
        "graph_kernel_us": GRAPH_KERNEL_S * 1e6, "graph_synced_us": GRAPH_SYNCED_S * 1e6,
        "graph_async_us": GRAPH_ASYNC_S * 1e6, "graph_replayed_us": GRAPH_REPLAYED_S * 1e6,
        "graph_overhead_us": graph_overhead() * 1e6, "async_overhead_us": async_overhead() * 1e6,
        "synced_gap_us": (GRAPH_SYNCED_S - GRAPH_KERNEL_S) * 1e6, "sync_us": sync_cost() * 1e6,
        "graph_saved_us": (GRAPH_ASYNC_S - GRAPH_REPLAYED_S) * 1e6,
        "graph_saved_pct": 100 * (1 - GRAPH_REPLAYED_S / GRAPH_ASYNC_S),
    }


def launch_floor(kernels: float, bandwidth_time: float) -> str:
    """`kernels` short kernels at NVIDIA's per-kernel costs beyond their work, launched asynchronously and
    replayed from a graph, against a step's bytes ÷ bandwidth (`bandwidth_time`, seconds)."""
    launched, replayed = kernels * async_overhead(), kernels * graph_overhead()
    against = launch_vs_bytes(launched / bandwidth_time)
    return (f"at NVIDIA's {async_overhead() * 1e6:.1f} µs a kernel beyond its work, those {kernels:,.0f} kernels "
            f"launched one after another add at least {duration(launched)}, {against} the "
            f"{duration(bandwidth_time)} the bytes need on an H100; replayed from a graph, at "
            f"{graph_overhead() * 1e6:.1f} µs a kernel, {duration(replayed)}")


def graph_share(eager: float, graph: float) -> str:
    """A published eager step against the same step replayed from CUDA Graphs. The replay removed the launches
    and the Python and scheduling work before each, so what it removed is an upper bound on the launches'
    share of the eager step, not their share."""
    removed = round(100 * (1 - graph / eager), 1)  # the words must agree with the number printed
    if removed <= 0:
        return "the replay removed nothing from the eager step: on that engine and GPU the launches cost no time"
    return (f"the replay removed {removed:.1f} % of the eager step. That is the launches together with the Python "
            f"and scheduling work before each, so the launches themselves took at most {removed:.1f} %")


def eager_multiple(eager_rate: float, compiled_rate: float) -> str:
    """A published eager loop's tokens/s against the compiled step's. The compiled step is no faster than the
    roofline, so the ratio is a lower bound on the eager loop's distance from it."""
    x = compiled_rate / eager_rate
    said = f"the compiled step ran {times(x)} as fast as the eager loop"
    if x > 1:
        return (f"{said}. The compiled step is itself no faster than the roofline, so the eager loop ran at least "
                f"{times(x)} slower than its bytes allow")
    return (f"{said}: compiling gained nothing, so this measurement says nothing of the eager loop's distance "
            "from the roofline")
