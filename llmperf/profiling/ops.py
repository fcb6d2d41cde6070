"""What one decode step dispatches, and where its time goes, by kind of op (`cost.OP_KINDS`).

- `op_counts` runs one decode step under torch.profiler and counts the operators
  it dispatches (and, on a GPU, the kernels);
- `op_times` profiles a few decode steps and splits their time by the kind of op
  (the weight products, attention, the cache write, the norms, the LM head, the
  rest), to set against the bytes the cost model gives each kind;
- `numpy_step_times` does the same with a stopwatch for a fused model's NumPy
  step (llmperf.fast), which the profiler cannot see into.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..cost import KV_WRITE, LM_HEAD, OP_KINDS, PROJECTIONS
from ..device import synchronize
from ..generation import new_cache
from .forward import forward_fn


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
        return LM_HEAD if weight and weight[0] == vocab_size else PROJECTIONS
    return {"aten::scaled_dot_product_attention": "attention", "aten::index_copy_": KV_WRITE,
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
