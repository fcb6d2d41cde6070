"""Chapter 5, the anatomy of one decode step: its experiments, their records, and the sentences chosen from them.

What is where:

- `predicted`: the cost model's bytes by kind of op, for Llama-3-8B and for the
  chapter's SmolLM2 step against this machine's probe (`predict` -> `Prediction`);
  the LM head's share by vocabulary (`vocab_costs` -> `VocabCosts`); the
  exercises' numbers (`exercise_numbers`);
- `profiled`: the step split by kind of op, by torch.profiler (`profile_step` ->
  `Profile`) and, for the fused NumPy step, by a stopwatch (`time_numpy_step` ->
  `NumpyAccount`); the ops per layer and their extrapolation to any depth
  (`count_ops` -> `OpCounts`);
- `compiled`: on a processor, the fused step with its small ops compiled, against the same step as NumPy
  code (`time_compiled_step` -> `CompiledStep`);
- `timed`: whole steps without a profiler: one op's fixed cost and the plain
  against the fused step (`measure_fixed_cost` -> `FixedCost`), CUDA Graph and
  torch.compile replays (`replay_step` -> `Replay`, GPU only), sampling
  (`time_sampling` -> `Sampling`), half precision on a processor
  (`measure_half_precision` -> `HalfPrecision`); the last cell's line (`closing_line`);
- `published`: published launch-overhead measurements (SGLang, gpt-fast, NVIDIA's CUDA Graphs post),
  cited constants, and the arithmetic and words they support (`published_launches`, `launch_floor`);
- `shown`: the companions of the code the chapter shows: the check of its written-out layer against the model's
  (`check_layer` -> `LayerCheck`), the table of a profile run by hand (`busiest_ops`);
- `claims`: the verdicts, pure functions of numbers;
- `labels`: the device's labels (what a profile timed, what the time outside the ops was) and the lines
  that say why an experiment had nothing to measure on this device.

Each record's `numbers()` is what the chapter's prose glues, `table()` what it
shows, and `check()` what its last cell asserts. The notebook runs them in this
order, each taking the records it needs from the ones before.
"""

from .claims import (  # noqa: F401
    batch_ops, compiled_small_ops, fixed_costs, fused_ops, graph_result, half_precision, half_precision_choice,
    head_time_share, launch_vs_bytes, launches_by_size, no_half_precision_choice, numpy_step_account, replayed_floor,
    roofline_multiple)
from .labels import (  # noqa: F401
    clock_text, clock_word, kernels_text, launch_basis, no_half_precision, no_numpy_step, outside_label,
    outside_text, roof_threads, table_note)
from .predicted import (  # noqa: F401
    H100, HeadCost, Prediction, StepBytes, VocabCosts, exercise_numbers, predict,
    step_bytes, vocab_costs)
from .published import (  # noqa: F401
    GPTFAST_COMPILED_TPS, GPTFAST_EAGER_TPS, GRAPH_ASYNC_S, GRAPH_KERNEL_S, GRAPH_REPLAYED_S, GRAPH_SYNCED_S,
    SGLANG_EAGER_S, SGLANG_GRAPH_S, async_overhead, eager_multiple, graph_overhead, graph_share, launch_floor,
    published_launches, sync_cost)
from .shown import LayerCheck, busiest_ops, check_layer, quiet_stderr  # noqa: F401
from .profiled import (  # noqa: F401
    NumpyAccount, OpCounts, Profile, StepSplit, count_ops, profile_step, time_numpy_step)
from .compiled import CompiledStep, time_compiled_step  # noqa: F401
from .timed import (  # noqa: F401
    FixedCost, HalfPrecision, Replay, Sampling, closing_line, measure_fixed_cost, measure_half_precision,
    replay_step, time_sampling)
