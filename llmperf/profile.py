"""One forward pass at a chosen size, and what it costs: its time, the ops it dispatches, its FLOPs.

Everything here takes a model and the size of a pass (batch, new tokens,
cached context) and works on the same thing: `forward_fn` builds that pass once
(a KV cache, random token ids, the positions) through `llmperf.generation`'s
prefill and decode_step, and returns a function that runs it.

- `bench_forward` times it (with `llmperf.timing`'s clock);
- `op_counts` runs one decode step under torch.profiler and counts the operators
  it dispatches (and, on a GPU, the kernels);
- `op_times` profiles a few decode steps and splits their time by the kind of op
  (the weight products, attention, the cache write, the norms, the LM head, the
  rest), to set against the bytes the cost model gives each kind;
  `numpy_step_times` does the same with a stopwatch for a fused model's NumPy
  step (llmperf.fast), which the profiler cannot see into;
- `cuda_graph_step` records a decode step into a CUDA Graph once and returns a
  function that replays it: every kernel of the step submitted with one launch;
  `compiled_step` does the same through torch.compile(mode="reduce-overhead");
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
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.flop_counter import FlopCounterMode

from .cost import OpCost, decode_ops
from .device import synchronize
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

    run.cache = cache  # for callers that must tell a compiler the cache's buffers stay put (compiled_step)
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
    prof = _profile_steps(model, batch, context, steps=1)
    ops, kernels = Counter(), Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name != _STEP:  # not the label's GPU-side span
            kernels[e.name] += 1
        elif _is_top_level_op(e):
            ops[e.name] += 1
    return {"ops": ops, "kernels": kernels}


OP_KINDS = ("projections", "attention", "KV write", "norms", "LM head", "other")
"""The kinds of op `op_times` splits a decode step into, in the order of the cost model's `decode_ops`:
"projections" are the seven weight products of every layer (wq wk wv wo w1 w3 w2), "LM head" the product
with the vocabulary-sized matrix, "other" everything that reads no weights (embedding lookup, RoPE, SiLU,
the residual adds, the multiply by the norm gains, reshapes)."""


_KIND_OF = {"wq": "projections", "wk": "projections", "wv": "projections", "wo": "projections",
            "w1": "projections", "w3": "projections", "w2": "projections", "lm_head": "LM head",
            "attention": "attention", "kv_write": "KV write", "norms": "norms"}


def cost_by_kind(cfg, context: int, batch: int = 1, bytes_per_param: int = 2) -> dict[str, OpCost]:
    """The cost model's FLOPs and bytes of one decode step (`cost.decode_ops`, attending to `context`
    positions), summed by kind of op (`OP_KINDS`); `count` is how many of the model's ops of that kind the
    cost model counts (the seven products of a layer count as seven). "other" is given no FLOPs and no
    bytes: it reads no weights, and its activations are a few vectors of d_model values."""
    totals = {kind: OpCost(kind, 0, 0, 0) for kind in OP_KINDS}
    for name, op in decode_ops(cfg, context, batch, bytes_per_param).items():
        t = totals[_KIND_OF[name]]
        totals[t.name] = OpCost(t.name, t.flops + op.flops, t.bytes + op.bytes, t.count + op.count)
    return totals


@dataclass(frozen=True)
class OpTime:
    """One kind of op in a decode step: how many ops of that kind one step dispatches, and their time per step."""

    kind: str
    ops: float
    kernels: float  # GPU kernels those ops launched per step (0 on other devices)
    seconds: float


@dataclass(frozen=True)
class StepProfile:
    """A decode step split by kind of op (`OP_KINDS`), from torch.profiler.

    `clock` says whose time `kinds` holds: "cpu" (each op's time from its call to
    its return, the work of its nested calls included) or "gpu" (the run time of
    the kernels each op launched). `step` is the wall time of a whole step under
    the profiler, which adds a little to every op; on a CPU, `step` minus the sum
    over `kinds` is the time spent between ops (Python, module calls). On a GPU,
    `step` minus the kernels' time is when the GPU had nothing to run: waiting for
    the CPU to launch the next kernel.
    """

    clock: str
    kinds: dict[str, OpTime]
    step: float

    @property
    def in_ops(self) -> float:
        """Seconds per step spent inside the ops (CPU) or kernels (GPU) of every kind."""
        return sum(k.seconds for k in self.kinds.values())

    @property
    def ops(self) -> float:
        """Ops dispatched per step."""
        return sum(k.ops for k in self.kinds.values())

    @property
    def kernels(self) -> float:
        """GPU kernels launched per step (0 on other devices)."""
        return sum(k.kernels for k in self.kinds.values())


def op_kind(name: str, shapes, vocab_size: int) -> str:
    """The kind (`OP_KINDS`) of a top-level aten op `name` whose inputs have `shapes` (as the profiler records
    them), in a model whose vocabulary has `vocab_size` entries."""
    if name == "aten::linear":
        weight = shapes[1] if len(shapes) > 1 else []
        return "LM head" if weight and weight[0] == vocab_size else "projections"
    return {"aten::scaled_dot_product_attention": "attention", "aten::index_copy_": "KV write",
            "aten::rms_norm": "norms"}.get(name, "other")


def op_times(model, batch: int = 1, context: int = 128, steps: int = 5) -> StepProfile:
    """Profile `steps` decode steps at position `context` and split their time per step by kind of op.

    Counts only what goes through PyTorch's dispatcher: a fused model's NumPy
    products (llmperf.fast) land in the time between ops, not in "projections".
    """
    if steps < 1:
        raise ValueError(f"Need steps >= 1, got {steps}.")
    prof = _profile_steps(model, batch, context, steps, record_shapes=True)
    gpu = model.device.type == "cuda"
    count, kernels, seconds, step = Counter(), Counter(), Counter(), 0.0
    for e in prof.events():
        if e.name == _STEP and e.device_type == torch.autograd.DeviceType.CPU:
            step += e.cpu_time_total
        elif _is_top_level_op(e):
            kind = op_kind(e.name, e.input_shapes, model.cfg.vocab_size)
            count[kind] += 1
            kernels[kind] += _kernels(e)
            seconds[kind] += e.device_time_total if gpu else e.cpu_time_total
    per_step = 1e-6 / steps  # the profiler reports microseconds, summed over the steps
    kinds = {k: OpTime(k, count[k] / steps, kernels[k] / steps, seconds[k] * per_step) for k in OP_KINDS}
    return StepProfile("gpu" if gpu else "cpu", kinds, step * per_step)


def numpy_step_times(fused, context: int = 128, steps: int = 20) -> StepProfile:
    """Time `steps` NumPy decode steps of a fused float32 CPU model (`llmperf.fast.fuse`) at position
    `context`, split by kind of op (`OP_KINDS`) as `op_times` splits the plain model's.

    torch.profiler cannot see inside NumPy, so the step is run with a stopwatch: `NumpyDecodeStep` calls
    lap(kind) after each stretch of lines, and the time since the previous lap goes to that kind. `ops`
    counts the timed stretches of each kind per step (for "projections", the four products of a layer).
    `step` is the wall time of a whole step; what it holds beyond the kinds is the Python between them.
    """
    step = getattr(fused, "numpy_step", None)
    if step is None:
        raise ValueError("numpy_step_times needs a fused float32 model on a CPU (llmperf.fast.fuse(model)), whose "
                         "one-token steps run in NumPy; for any other model, profile with op_times.")
    if steps < 1:
        raise ValueError(f"Need steps >= 1, got {steps}.")
    cache = new_cache(fused, 1, context + 1)
    seconds, count, last = Counter(), Counter(), [0.0]

    def lap(kind: str) -> None:
        now = time.perf_counter()
        seconds[kind] += now - last[0]
        count[kind] += 1
        last[0] = now

    for _ in range(2):  # warm-up
        step(0, context, cache)
    token = torch.randint(0, fused.cfg.vocab_size, (1,)).item()
    total = 0.0
    for _ in range(steps):
        start = last[0] = time.perf_counter()
        step(token, context, cache, lap)
        total += time.perf_counter() - start
    kinds = {k: OpTime(k, count[k] / steps, 0, seconds[k] / steps) for k in OP_KINDS}
    return StepProfile("cpu", kinds, total / steps)


_STEP = "decode step"  # the profiler label around each step


def _profile_steps(model, batch: int, context: int, steps: int, record_shapes: bool = False):
    """torch.profiler's record of `steps` decode steps (after two untimed ones), each labelled `_STEP`."""
    step = forward_fn(model, batch, context=context)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    for _ in range(2):  # warm-up: first calls allocate and pick kernels
        step()
    with _quiet_stderr(), profile(activities=activities, record_shapes=record_shapes) as prof:
        for _ in range(steps):
            with record_function(_STEP):
                step()
            synchronize(model.device)
    return prof


def _kernels(e) -> int:
    """GPU kernels launched by the profiler event `e` and everything it called."""
    return len(e.kernels) + sum(_kernels(c) for c in e.cpu_children)


def _is_top_level_op(e) -> bool:
    """An aten operator called by the model itself, not from inside another operator."""
    return (e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::")
            and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


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
