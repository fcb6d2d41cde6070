"""Chapter 1, the dependency chain: generating N tokens takes about TTFT + (N − 1)·t_step.

A primer on the KV cache, arithmetic only: `kv_primer`, what the cache holds per token (`KVPrimer`). Then
four experiments, each returning a record that holds every number the chapter
shows, the sentences chosen from them, and the check its last cell asserts:

- `show_chain`: a few decode steps by hand, each fed the token the step before
  it produced (`ChainLinks`);
- `measure_ingredients`: TTFT and one decode step, apart (`Ingredients`); then
  `measure_latency_line`: whole generations of N tokens for several N, fitted
  with a line and set against TTFT + (N − 1)·t_step (`LatencyLine`);
- `measure_same_flops`: a prefill of N tokens against a decode of N tokens, the
  same matmul FLOPs by the cost model's count (`SameFlops`);
- `measure_ways_out`: one pass each of the three ways out, a cheaper pass
  (the other dtype), more per pass (a batch) and more than one token per pass
  (`WaysOut`);
- `measure_speculation`: prompt-lookup speculative decoding against plain
  greedy decoding of the same tokens, and the i.i.d. model of acceptance
  (`SpeculationRun`).

The page's own greedy loop is checked against the package by `check_loop`
(`LoopCheck`); `timed_greedy` times the same loop as `generation.stream` runs
it. `tensor_parallel` is the two-GPU exercise's arithmetic (`TensorParallel`).

Times are the fastest of several runs (other work on a machine can only add
time to a run), taken in turns (`timing.time_in_turns`) so that a burst of
other work cannot cover every run of one thing.

Where each lives: `kv` (the primer), `loop` (the greedy loop and its check), `latency` (the chain, the
ingredients, the latency line, the same FLOPs), `ways_out` (the three ways out, their sentence, the exercises'
numbers), `speculation` (prompt lookup measured), `parallel` (tensor parallelism's arithmetic), `claims` (the
sentences chosen from the latency line's and the speculation's numbers).
"""

from __future__ import annotations

from .latency import (MIN_DECODE_OVER_PREFILL, MIN_R2, SLOPE_TOLERANCE, ChainLinks, Ingredients,  # noqa: F401
                      LatencyLine, SameFlops, measure_ingredients, measure_latency_line, measure_same_flops,
                      explore_view, show_chain)
from .claims import formula_fit, slope_text, speculation_speed  # noqa: F401
from .loop import LOOP_MARGIN, LoopCheck, check_loop, timed_greedy  # noqa: F401
from .parallel import ALLREDUCE_LATENCY, H100_NVLINK_ONE_WAY, TensorParallel, tensor_parallel  # noqa: F401
from .speculation import (COPY_TASK, SPEC_K, SPEC_NGRAM, SPEC_TOKENS, SpeculationRun,  # noqa: F401
                          measure_speculation)
from .kv import KVPrimer, KVRow, kv_primer  # noqa: F401
from ..setup import float32_model  # noqa: F401
from .ways_out import WaysOut, exercise_numbers, halved_bytes, measure_ways_out  # noqa: F401
