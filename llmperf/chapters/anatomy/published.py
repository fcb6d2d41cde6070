"""Chapter 5's published measurements of launch overhead, against the source notes' two figures: "over 20 %"
of a step spent launching kernels and a plain PyTorch loop "2–3× slower than the roofline".

Each constant is a figure from the cited source, as shared/reference/facts.md records it; `published_launches`
computes the shares and ratios the chapter glues, and the two functions below choose the words from them.
Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import times

# SGLang pull request 1401 (sglang_cudagraph_pr1401): Llama-3-8B, batch 1, Triton attention backend, median
# decode latency per token without and with CUDA Graphs.
SGLANG_EAGER_S = 9.28e-3
SGLANG_GRAPH_S = 7.06e-3
# The PyTorch blog on gpt-fast (pytorch2023gptfast): Llama-2-7B at batch 1 on an A100-80GB, eager against
# torch.compile with a static KV cache (which also fuses ops, not only removes launches), tokens/s.
GPTFAST_EAGER_TPS = 25.5
GPTFAST_COMPILED_TPS = 107.0
# NVIDIA's introduction to CUDA Graphs (gray2019cudagraphs): a 2.9 µs kernel took 9.6 µs a launch with a
# synchronisation after each, and 3.4 µs inside a graph.
GRAPH_KERNEL_S = 2.9e-6
GRAPH_SYNCED_S = 9.6e-6
GRAPH_REPLAYED_S = 3.4e-6


def graph_overhead() -> float:
    """Seconds a kernel costs inside a CUDA Graph beyond its own work (NVIDIA's figures)."""
    return GRAPH_REPLAYED_S - GRAPH_KERNEL_S


def published_launches() -> dict[str, object]:
    """The chapter's glued numbers and sentences for the published measurements above."""
    return {
        "sglang_eager_ms": SGLANG_EAGER_S * 1e3, "sglang_graph_ms": SGLANG_GRAPH_S * 1e3,
        "sglang_text": graph_share(SGLANG_EAGER_S, SGLANG_GRAPH_S),
        "gf_eager_tps": GPTFAST_EAGER_TPS, "gf_compiled_tps": GPTFAST_COMPILED_TPS,
        "gf_text": eager_multiple(GPTFAST_EAGER_TPS, GPTFAST_COMPILED_TPS),
        "graph_kernel_us": GRAPH_KERNEL_S * 1e6, "graph_synced_us": GRAPH_SYNCED_S * 1e6,
        "graph_replayed_us": GRAPH_REPLAYED_S * 1e6, "graph_overhead_us": graph_overhead() * 1e6,
    }


def graph_share(eager: float, graph: float) -> str:
    """A published eager step against the same step replayed from CUDA Graphs, against the source notes'
    "over 20 %" of a step spent launching. The replay removed the launches and the Python and scheduling work
    before each, so what it removed is an upper bound on the launches' share: it can refute "over 20 %", never
    prove it."""
    removed = round(100 * (1 - graph / eager), 1)  # the words must agree with the number printed
    said = (f"the replay removed {removed:.1f} % of the eager step. That is the launches together with the Python "
            f"and scheduling work before each, so the launches took at most {removed:.1f} %")
    if removed > 20:
        return (f"{said}: consistent with, not proof of, the source notes' \"over 20 %\", since the launches' own "
                "share is not measured")
    return (f"{said}: not over 20 %, so on that engine and GPU this refutes the source notes' \"over 20 %\"")


def eager_multiple(eager_rate: float, compiled_rate: float) -> str:
    """A published eager loop's tokens/s against the compiled step's, against the source notes' "2-3×
    slower than the roofline". The compiled step is no faster than the roofline, so the ratio is a lower bound
    on the eager loop's distance from it."""
    x = compiled_rate / eager_rate
    said = f"the compiled step ran {times(x)} as fast as the eager loop"
    if x > 3:
        return (f"{said}. The compiled step is itself no faster than the roofline, so the eager loop was at "
                "least that many times slower than the roofline: more than the source notes' 2–3 times")
    if x >= 2:
        return (f"{said}. The compiled step is itself no faster than the roofline, so the eager loop was at "
                "least that many times slower than the roofline, as the source notes' 2–3 times says")
    return (f"{said}: less than 2 times, so this measurement alone does not show the source notes' 2–3 times "
            "against the roofline")


