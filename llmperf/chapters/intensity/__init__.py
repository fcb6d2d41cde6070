"""Chapter 3, decode intensity and the roofline: its experiments, result records and sentences.

What is where:

    counts    by arithmetic alone (`llmperf.cost`): a Llama-3-8B decode step whole and op by op
              (`llama_counts` -> LlamaCounts), Llama-3-8B's latency against throughput on an H100
              (`latency_throughput` -> LatencyThroughput), the exercises' answers (`exercise_numbers`)
    roofs     this machine probed beside the table's H100 and H200 (`roofline` -> Roofs), how a probed roof
              is named with its thread count (`probed_label`), the margin a second probe must meet
              (`probe_margin`), and the setup's numbers the prose names (`setup_numbers`)
    batching  SmolLM2's step across batch sizes, counted (`batch_counts` -> BatchCounts) and timed
              (`batch_sweep` -> BatchSweep); the plain model against `fast.fuse` (`gap_to_roof` -> Gap)
    context   the KV cache against the weights (`kv_growth` -> KvGrowth), and the step timed across
              context lengths (`context_sweep` -> ContextSweep)
    long_context  one sequence at 128k tokens, whose cache outgrows the weights, and the levers that shrink
              it, priced by the cost model (`long_context` -> LongContext)
    claims    the sentences chosen from the records' numbers

Each record's `numbers()` is what the chapter glues, `table()` what it shows, `check()` what its last cell
asserts; the figures are in `llmperf.plots.intensity`.
"""

from .batching import (CUDA_GRAPHS_POST, BatchCounts, BatchSweep, Gap, batch_counts, batch_sweep, explore_view,
                       gap_to_roof, kv_equals_weights_at, launch_overhead)
from .claims import (against_roof, attention_bound, batch_against_prediction, batch_fixed_cost, batch_trade,
                     bytes_growth, context_mismatch, fused_products, fused_result, gptfast_beside, launches_vs_bytes,
                     low_precision_ridge, per_user_speed, probe_gap, small_batch_kernel, threads_note, tuned_code,
                     weights_bound)
from .context import ContextSweep, KvGrowth, context_sweep, kv_growth
from .counts import (LatencyThroughput, LlamaCounts, OpGroup, exercise_numbers, gptfast_pct, latency_throughput,
                     llama_counts, middle_batch, users_that_fit)
from .long_context import Lever, LongContext, long_context, mla_bytes_per_token
from .roofs import Roofs, probe_agreement, probe_margin, probed_label, roofline, setup_numbers

__all__ = [
    "CUDA_GRAPHS_POST", "BatchCounts", "BatchSweep", "Gap", "batch_counts", "batch_sweep", "explore_view",
    "gap_to_roof", "kv_equals_weights_at", "launch_overhead",
    "against_roof", "attention_bound", "batch_against_prediction", "batch_fixed_cost", "batch_trade",
    "bytes_growth", "context_mismatch", "fused_products", "fused_result", "gptfast_beside", "launches_vs_bytes",
    "low_precision_ridge", "per_user_speed", "probe_gap", "small_batch_kernel", "threads_note", "tuned_code",
    "weights_bound",
    "ContextSweep", "KvGrowth", "context_sweep", "kv_growth",
    "LatencyThroughput", "LlamaCounts", "OpGroup", "exercise_numbers", "gptfast_pct", "latency_throughput",
    "llama_counts", "middle_batch", "users_that_fit",
    "Lever", "LongContext", "long_context", "mla_bytes_per_token",
    "Roofs", "probe_agreement", "probe_margin", "probed_label", "roofline", "setup_numbers",
]
