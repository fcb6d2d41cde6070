"""One forward pass at a chosen size, and what it costs: its time, the ops it dispatches, its FLOPs, its time
by kind of op, and the same step replayed from a CUDA Graph.

- `forward`: `forward_fn` builds a pass (prefill or decode step, any batch and
  context) once and returns a function that runs it; `time_forward` times it;
  `count_flops` counts its FLOPs with torch.utils.flop_counter;
- `ops`: `op_counts`, `op_times` (torch.profiler, by kind of op) and
  `numpy_step_times` (a stopwatch in a fused model's NumPy step);
- `graphs`: `cuda_graph_step` and `compiled_step`, one launch per step.

(The package is `profiling`, not `profile`, which is the name of a module of
Python's standard library.)
"""

from __future__ import annotations

from .forward import count_flops, forward_fn, time_forward  # noqa: F401
from .graphs import compiled_step, cuda_graph_step  # noqa: F401
from .ops import OpTime, StepProfile, numpy_step_times, op_counts, op_kind, op_times  # noqa: F401
