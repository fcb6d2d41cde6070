"""A decode step submitted with one launch: recorded into a CUDA Graph, or through torch.compile's
"reduce-overhead" mode (which records one for you).

A CUDA Graph replays the exact same kernels on the exact same memory, so the
step's shapes and addresses must never change. That is why its KV cache is
static (`KVCache(static=True)` makes attention read the whole buffer under a
mask) and why the new token and its position live in tensors allocated once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .forward import forward_fn


def cuda_graph_step(model, batch: int = 1, context: int = 128) -> Callable[[], torch.Tensor]:
    """Capture one decode step at position `context` in a CUDA Graph; return a function that replays it.

    The returned function takes no arguments and returns the logits buffer
    (batch, vocab), rewritten by each replay. Requires a CUDA device.
    """
    if model.device.type != "cuda":
        raise RuntimeError(f"CUDA Graphs need a CUDA device; this model is on {model.device.type}. "
                           "Skip this measurement on other devices.")
    step = forward_fn(model, batch, context=context, static=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up on a side stream, as capture requires
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return logits

    # The graph reads the token, position and cache tensors at the addresses they had when it was recorded,
    # and nothing else keeps them alive: without this reference they would be freed on return, their memory
    # handed to the next allocation, and each replay would read whatever that wrote there.
    replay.step = step
    return replay


def compiled_step(model, batch: int = 1, context: int = 128, mode: str = "reduce-overhead") -> Callable[[], torch.Tensor]:
    """One decode step at position `context` through torch.compile; returns a function that runs it.

    mode="reduce-overhead" has torch.compile fuse what it can into generated
    kernels and then record the step in a CUDA Graph of its own. The KV cache is
    static and its buffers are marked as fixed addresses, so the graph may write
    into them. The first calls compile (tens of seconds): call it a few times
    before timing it. Requires a CUDA device for "reduce-overhead".
    """
    if mode == "reduce-overhead" and model.device.type != "cuda":
        raise RuntimeError(f'torch.compile(mode="reduce-overhead") records CUDA Graphs and needs a CUDA device; '
                           f"this model is on {model.device.type}. Skip this measurement on other devices.")
    compiled = torch.compile(model, mode=mode, dynamic=False)
    step = forward_fn(compiled, batch, context=context, static=True)
    for buffer in (step.cache.k, step.cache.v):
        torch._dynamo.mark_static_address(buffer)  # written in place each step: the graph must keep its address
    return step
