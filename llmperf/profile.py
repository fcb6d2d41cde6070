"""What one decode step launches, and how to launch it all at once.

`op_counts()` runs one decode step under torch.profiler and counts the operators
it dispatches (and, on a GPU, the kernels). `cuda_graph_step()` records a decode
step into a CUDA Graph once and returns a function that replays it: every
kernel of the step is submitted to the GPU with a single launch.

A CUDA Graph replays the exact same kernels on the exact same memory, so the
step's shapes and addresses must never change. That is why the KV cache is
static (`KVCache(static=True)` makes attention read the whole buffer under a
mask) and why the new token and its position live in tensors that we overwrite
in place before each replay.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from .kv_cache import KVCache


def _decode_inputs(model, batch: int, context: int, static: bool):
    cache = KVCache(model.cfg, batch, context + 1, dtype=model.dtype, device=model.device, static=static)
    token = torch.zeros(batch, 1, dtype=torch.long, device=model.device)
    input_pos = torch.tensor([context], device=model.device)
    return cache, token, input_pos


def op_counts(model, batch: int = 1, context: int = 128) -> dict[str, Counter]:
    """Operators (and CUDA kernels, on a GPU) dispatched by one decode step, by name.

    Returns {"ops": Counter of aten operators called directly by the model (nested
    calls inside an operator are not counted again), "kernels": Counter of GPU
    kernels (empty on a CPU)}.
    """
    cache, token, input_pos = _decode_inputs(model, batch, context, static=False)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    with torch.inference_mode():
        model(token, input_pos, cache)  # warm-up: first calls allocate and pick kernels
        with profile(activities=activities) as prof:
            model(token, input_pos, cache)
    ops, kernels = Counter(), Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] += 1
        elif e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")):
            ops[e.name] += 1
    return {"ops": ops, "kernels": kernels}


def cuda_graph_step(model, batch: int = 1, context: int = 128):
    """Capture one decode step at position `context` in a CUDA Graph; return a function that replays it.

    The returned function takes no arguments and returns the logits buffer
    (batch, 1, vocab), rewritten by each replay. Requires a CUDA device.
    """
    if model.device.type != "cuda":
        raise RuntimeError(f"CUDA Graphs need a CUDA device; this model is on {model.device.type}. "
                           "Skip this measurement on other devices.")
    cache, token, input_pos = _decode_inputs(model, batch, context, static=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(stream):
        for _ in range(3):  # warm up on a side stream, as capture requires
            model(token, input_pos, cache)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph):
        logits = model(token, input_pos, cache)

    def replay():
        graph.replay()
        return logits

    return replay
