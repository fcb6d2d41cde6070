"""One forward pass at a chosen size, and what it costs: its time, the ops it dispatches, its FLOPs.

Everything here takes a model and the size of a pass (batch, new tokens,
cached context) and works on the same thing: `forward_fn` builds that pass once
(a KV cache, random token ids, the positions) through `llmperf.generation`'s
prefill and decode_step, and returns a function that runs it.

- `bench_forward` times it (with `llmperf.timing`'s clock);
- `op_counts` runs one decode step under torch.profiler and counts the operators
  it dispatches (and, on a GPU, the kernels);
- `cuda_graph_step` records a decode step into a CUDA Graph once and returns a
  function that replays it: every kernel of the step submitted with one launch;
- `count_flops` counts the FLOPs of whatever runs inside it, with
  torch.utils.flop_counter.

A CUDA Graph replays the exact same kernels on the exact same memory, so the
step's shapes and addresses must never change. That is why its KV cache is
static (`KVCache(static=True)` makes attention read the whole buffer under a
mask) and why the new token and its position live in tensors allocated once.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from .generation import decode_step, new_cache, prefill
from .timing import Timing, bench


def forward_fn(model, batch: int = 1, new_tokens: int = 1, context: int = 0, all_logits: bool = False,
               static: bool = False) -> Callable[[], torch.Tensor]:
    """A function that runs one cached forward pass of `new_tokens` tokens per sequence after `context` cached ones.

    new_tokens=1 is a decode step at position `context`; context=0 is a prefill of
    `new_tokens` tokens (logits for the last position only, unless `all_logits`).
    The cache is allocated once, here, and not filled: its values do not change
    the time, only how many positions attention reads does. Token ids are random.
    Each call overwrites the same cache positions, so the function can be run
    again and again. `static=True` uses a static cache (see KVCache), the form a
    CUDA Graph replays.
    """
    if batch < 1 or new_tokens < 1 or context < 0:
        raise ValueError(f"Need batch >= 1, new_tokens >= 1 and context >= 0; got {batch}, {new_tokens}, {context}.")
    cache = new_cache(model, batch, context + new_tokens, static=static)
    tokens = torch.randint(0, model.cfg.vocab_size, (batch, new_tokens), device=model.device)
    pos = torch.tensor([context], device=model.device)  # a tensor allocated once: a CUDA Graph can replay it

    @torch.inference_mode()
    def run() -> torch.Tensor:
        if new_tokens == 1:
            return decode_step(model, tokens, pos, cache)
        return prefill(model, tokens, cache, start=context, all_logits=all_logits)

    return run


def bench_forward(model, batch: int = 1, new_tokens: int = 1, context: int = 0, all_logits: bool = False,
                  warmup: int = 2, repeat: int = 10, static: bool = False) -> Timing:
    """Time the pass `forward_fn` builds (same arguments): `repeat` runs after `warmup` untimed ones."""
    step = forward_fn(model, batch, new_tokens, context, all_logits, static)
    return bench(step, warmup=warmup, repeat=repeat, device=model.device)


def op_counts(model, batch: int = 1, context: int = 128) -> dict[str, Counter]:
    """Operators (and CUDA kernels, on a GPU) dispatched by one decode step, by name.

    Returns {"ops": Counter of aten operators called directly by the model (nested
    calls inside an operator are not counted again), "kernels": Counter of GPU
    kernels (empty on a CPU)}.
    """
    step = forward_fn(model, batch, context=context)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    step()  # warm-up: first calls allocate and pick kernels
    with _quiet_stderr(), profile(activities=activities) as prof:
        step()
    ops, kernels = Counter(), Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] += 1
        elif e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")):
            ops[e.name] += 1
    return {"ops": ops, "kernels": kernels}


@contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 for the block: the profiler's C++ side announces its start and stop there,
    two lines that would otherwise land in every notebook output that counts ops."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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

    return replay


@contextmanager
def count_flops():
    """Count the FLOPs of every PyTorch op run inside the block; yields the FlopCounterMode.

        with count_flops() as counter:
            model(tokens)
        counter.get_total_flops()

    Attention runs in PyTorch's "math" form inside the block: on a CPU the counter
    sees the fused attention kernel as 0 FLOPs, while the math form's two matrix
    products (scores and weighted sum) it counts. The math form computes the whole
    score matrix and masks it, so a causal prefill is counted as full attention.
    Runs under inference_mode. Only what goes through PyTorch is counted: a fused
    model's NumPy products (llmperf.fast) are not.
    """
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        yield counter
